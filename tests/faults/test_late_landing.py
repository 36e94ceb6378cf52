"""A cloud write that times out has an unknown outcome (issue 27): the simulated cloud holds
it past the client's timeout and applies it late, after the retry's success. The CCM must
not trust its record while the first call can still land, and must look again once it can
no longer land.

Everything runs in virtual time (MockClock): the emulator and the simulated cloud in-process,
the CCM through the public harness. The sim provider's timeout is 10 s; the late fault holds
the first write for 20 s, so the provider says it may land until 10 + 20 + 1 = 31 s after
it started (`holdSeconds` from the cloud's admin API, plus its margin).
"""

from __future__ import annotations

import httpx
import trio
import trio.testing

from tests.helpers.world import open_world
from trio_ccm.cloud.sim import SimProvider
from trio_ccm.testing import make_service, register_node, run_ccm, wait_for
from trio_ccm.testing.factories import lb_name
from trio_ccm_testbed.cloud import SimCloud

TIMEOUT_S = 10.0  # the sim provider's default per-call timeout
HOLD_S = 20.0  # the late fault: twice the timeout
LATE_S = TIMEOUT_S + HOLD_S + 1.0  # the provider's late_landing_s


def backends(cloud: SimCloud, name: str) -> tuple[str, ...]:
    found = cloud.load_balancer(name)
    return () if found is None else tuple(sorted(found.nodes))


async def test_a_backend_update_landing_after_the_retry_is_overwritten(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The first SetLoadBalancerBackends (node-c gone) is held 20 s; it times out, node-b goes
    too, and the retry's ensure sets [node-a]. The held update then lands ([node-a, node-b]).
    The node set's next pass (node-b gone), after the first pass and its pause, ensures it
    once more (its record is not trusted while the held call may land); the load balancer is
    ensured again once that call could no longer land, and holds [node-a] from then on."""
    async with open_world() as world:
        api, cloud, http = world.api, world.cloud, world.http
        for name in ("node-a", "node-b", "node-c"):
            cloud.add_instance(name)
            register_node(api, name, uninitialized=False)
        service = api.create(make_service("web"))
        provider = SimProvider(url="http://sim", replica="ccm", transport=cloud.transport())
        name = lb_name(service)
        with trio.fail_after(600):
            async with run_ccm(api, provider, "--controllers=service-lb-controller"):
                await wait_for(lambda: backends(cloud, name) == ("node-a", "node-b", "node-c"))
                late = cloud.faults.late("SetLoadBalancerBackends", delay_s=HOLD_S, count=1)
                (await http.delete("/api/v1/nodes/node-c")).raise_for_status()
                await wait_for(lambda: late.fired == 1)
                sent = trio.current_time()
                (await http.delete("/api/v1/nodes/node-b")).raise_for_status()
                # The timeout, a 5 s backoff, then the retry (a full ensure) succeeds.
                await wait_for(lambda: len(cloud.calls_by(method="PutLoadBalancer")) == 2)
                retried = trio.current_time()
                assert sent + TIMEOUT_S < retried < sent + HOLD_S
                assert backends(cloud, name) == ("node-a",)
                await trio.sleep_until(sent + HOLD_S + 0.5)
                assert backends(cloud, name) == ("node-a", "node-b")  # the late landing
                assert cloud.faults.landed_late == 1
                await trio.sleep_until(sent + LATE_S + 2)
                assert backends(cloud, name) == ("node-a",)
                ensures = cloud.calls_by(method="PutLoadBalancer")
                assert len(ensures) == 4
                assert sent + HOLD_S < ensures[2].time < sent + LATE_S
                assert sent + LATE_S <= ensures[-1].time < sent + LATE_S + 1
        await provider.aclose()


async def test_a_route_create_landing_after_the_node_went_is_deleted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The first CreateRoute for node-x is held 20 s and times out; the next pass (node-y's
    arrival) creates it again, successfully; node-x goes and its route is deleted. The held
    create then lands, a route to a Node that no longer exists; a pass once that call could
    no longer land deletes it (the periodic pass is 5 minutes away)."""
    async with open_world() as world:
        cloud, http = world.cloud, world.http
        cloud.add_instance("node-x")
        cloud.add_instance("node-y")
        late = cloud.faults.late("CreateRoute", delay_s=HOLD_S, count=1)

        def routes_to(node: str) -> list[str]:
            return [r.destination_cidr for r in cloud.routes() if r.target_node == node]

        with trio.fail_after(600):
            async with world.running(
                "--controllers=route",
                "--cluster-cidr=10.244.0.0/16",
                "--route-reconciliation-period=5m",
            ):
                world.register("node-x", taints=[], pod_cidrs=["10.244.1.0/24"])
                await wait_for(lambda: late.fired == 1)
                sent = trio.current_time()
                await trio.sleep_until(sent + TIMEOUT_S + 1)  # timed out: outcome unknown
                world.register("node-y", taints=[], pod_cidrs=["10.244.2.0/24"])
                await wait_for(lambda: routes_to("node-x") == ["10.244.1.0/24"])
                assert trio.current_time() < sent + HOLD_S  # the retry's success
                (await http.delete("/api/v1/nodes/node-x")).raise_for_status()
                await wait_for(lambda: routes_to("node-x") == [])
                await trio.sleep_until(sent + HOLD_S + 0.5)
                assert routes_to("node-x") == ["10.244.1.0/24"]  # the late landing
                assert cloud.faults.landed_late == 1
                await wait_for(lambda: routes_to("node-x") == [])
                assert trio.current_time() <= sent + LATE_S + 2
                assert routes_to("node-y") == ["10.244.2.0/24"]


async def test_the_admin_api_says_how_long_the_cloud_holds_requests() -> None:
    """`holdSeconds` in the settings is the longest delay of a late rule (0 without one)."""
    cloud = SimCloud(seed=1)
    async with httpx.AsyncClient(transport=cloud.transport(), base_url="http://sim") as sim:
        assert (await sim.get("/_sim/settings")).json()["holdSeconds"] == 0
        added = await sim.post(
            "/_sim/faults/late", json={"method": "loadbalancers", "delaySeconds": 25}
        )
        assert added.status_code == 201
        assert added.json()["kind"] == "late"
        assert (await sim.get("/_sim/settings")).json()["holdSeconds"] == 25
