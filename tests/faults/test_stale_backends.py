"""Node-set changes reach every load balancer, also one whose last backend update failed
while the Nodes kept changing (issue: a deleted Node stayed a backend until the drift check).

Everything runs in virtual time (MockClock): the emulator and the simulated cloud in-process,
the CCM through the public harness.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import trio
import trio.testing

from trio_ccm.cloud.sim import SimProvider
from trio_ccm.testing import (
    ApiServer,
    SimCloud,
    make_service,
    register_node,
    run_ccm,
    virtual_now,
    wait_for,
)
from trio_ccm.testing.factories import lb_name
from trio_ccm_testbed.cloud.faults import FaultRule

RETRY_BASE_S = 5.0  # the service controller's first backoff


@asynccontextmanager
async def world() -> AsyncIterator[tuple[ApiServer, SimCloud, httpx.AsyncClient]]:
    api = ApiServer(seed=1, now=virtual_now())
    cloud = SimCloud(seed=1)
    async with httpx.AsyncClient(transport=api.transport(), base_url="http://emulator") as http:
        yield api, cloud, http


def backends(cloud: SimCloud, name: str) -> tuple[str, ...]:
    found = cloud.load_balancer(name)
    return () if found is None else tuple(sorted(found.nodes))


async def test_a_failed_update_ends_with_the_newest_nodes_not_the_ones_it_started_with(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The repro: one SetLoadBalancerBackends fails, PutLoadBalancer is slow (8 s, under
    the sim provider's 10 s timeout), and a Node is deleted while the retry's full ensure
    is in flight. Within one backoff of the
    faults clearing, the load balancer holds exactly the Nodes that exist."""
    async with world() as (api, cloud, http):
        for name in ("node-a", "node-b", "node-c"):
            cloud.add_instance(name)
            register_node(api, name, uninitialized=False)
        service = api.create(make_service("web"))
        provider = SimProvider(url="http://sim", replica="ccm", transport=cloud.transport())
        with trio.fail_after(600):
            async with run_ccm(api, provider, "--controllers=service-lb-controller"):
                name = lb_name(service)
                await wait_for(lambda: backends(cloud, name) == ("node-a", "node-b", "node-c"))
                failing = cloud.faults.error("SetLoadBalancerBackends", status=500, count=1)
                slow = cloud.faults.latency("PutLoadBalancer", fixed_s=8.0)
                (await http.delete("/api/v1/nodes/node-c")).raise_for_status()
                # The push fails; the retry (a full ensure) starts within the backoff and
                # takes 8 s. Mid-way, another Node goes.
                await wait_for(lambda: failing.fired > 0)
                failed_at = trio.current_time()
                await trio.sleep(RETRY_BASE_S + 2)
                deleted_b = trio.current_time()
                (await http.delete("/api/v1/nodes/node-b")).raise_for_status()
                await trio.sleep(8)  # the slow ensure (started before node-b went) has ended
                retries = [
                    c for c in cloud.calls_by(method="PutLoadBalancer") if c.time > failed_at
                ]
                assert len(retries) == 1
                assert retries[0].time < deleted_b < retries[0].time + 8  # in flight then
                cloud.faults.remove(slow)
                cleared = trio.current_time()
                await wait_for(lambda: backends(cloud, name) == ("node-a",))
                assert trio.current_time() - cleared <= RETRY_BASE_S
        await provider.aclose()


async def test_under_mixed_faults_every_load_balancer_ends_with_the_existing_nodes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Half the load-balancer calls fail, calls are throttled and slow, and Nodes come and
    go for a minute; once the faults clear, every load balancer converges on exactly the
    Nodes that exist (before the retry backoff's cap)."""
    async with world() as (api, cloud, http):
        for i in range(6):
            cloud.add_instance(f"node-{i}")
            register_node(api, f"node-{i}", uninitialized=False)
        services = [api.create(make_service(f"web-{i}")) for i in range(8)]
        names = [lb_name(s) for s in services]
        provider = SimProvider(url="http://sim", replica="ccm", transport=cloud.transport())
        with trio.fail_after(3600):
            async with run_ccm(api, provider, "--controllers=service-lb-controller"):
                every = ("node-0", "node-1", "node-2", "node-3", "node-4", "node-5")
                await wait_for(lambda: all(backends(cloud, n) == every for n in names))
                rules: list[FaultRule] = [
                    cloud.faults.error("loadbalancers", status=500, probability=0.5),
                    cloud.faults.throttle("loadbalancers", rate_per_s=2, burst=4),
                    cloud.faults.latency("loadbalancers", fixed_s=0.5, jitter_s=2.0),
                ]
                for step, name in enumerate(["node-1", "node-3", "node-5"]):
                    (await http.delete(f"/api/v1/nodes/{name}")).raise_for_status()
                    register_node(api, f"node-new-{step}", uninitialized=False)
                    await trio.sleep(20)
                for rule in rules:
                    cloud.faults.remove(rule)
                cleared = trio.current_time()
                wanted = ("node-0", "node-2", "node-4", "node-new-0", "node-new-1", "node-new-2")
                await wait_for(lambda: all(backends(cloud, n) == wanted for n in names))
                assert trio.current_time() - cleared < 300
        await provider.aclose()
