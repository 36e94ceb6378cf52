"""node-route-controller against the emulator and the simulated cloud (both in-process)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from tests.helpers.world import REPLICA, ProviderDouble, World, moments, open_world
from trio_ccm.cloud.provider import NodeAddress, Route, Routes
from trio_ccm.testing import wait_for
from trio_ccm.testing.harness import Write

CLUSTER = "kubernetes"
NODES_STATUS = "/api/v1/nodes/{}/status"
DUAL = "10.244.0.0/16,fd00:10:244::/56"


QUIET_S = 2.0
"""Past the 1 s minimum spacing of passes: a pass our own writes caused would show by then."""
FAST_CLOUD = "--cloud-api-rate=routes=10000:10000"  # a budget that does not bind


def route_flags(cluster_cidr: str = "10.244.0.0/16", *flags: str) -> tuple[str, ...]:
    return ("--controllers=route", f"--cluster-cidr={cluster_cidr}", *flags)


def add_node(
    world: World,
    name: str,
    cidrs: Sequence[str] = (),
    *,
    instance: bool = True,
    addresses: list[dict[str, str]] | None = None,
) -> None:
    """An initialised Node with these pod CIDRs (and, unless told not to, its instance)."""
    if instance:
        world.cloud.add_instance(name)
    world.register(name, taints=[], pod_cidrs=cidrs, addresses=addresses)


async def patch_node(
    world: World, name: str, body: dict[str, Any], *, status: bool = False
) -> None:
    path = NODES_STATUS.format(name) if status else f"/api/v1/nodes/{name}"
    response = await world.http.patch(
        path, json=body, headers={"content-type": "application/merge-patch+json"}
    )
    response.raise_for_status()


async def cloud_route(world: World, name: str, target: str, cidr: str) -> None:
    """A route made by someone else, straight through the sim cloud's API."""
    async with httpx.AsyncClient(transport=world.cloud.transport(), base_url="http://sim") as sim:
        response = await sim.post(
            f"/v1/clusters/{CLUSTER}/routes",
            json={"name": name, "targetNode": target, "destinationCIDR": cidr},
        )
        response.raise_for_status()


def table(world: World) -> list[tuple[str, str]]:
    return sorted((r.target_node, r.destination_cidr) for r in world.cloud.routes(CLUSTER))


def times(world: World, method: str) -> list[float]:
    return [c.time for c in world.cloud.calls_by(method, replica=REPLICA)]


def network(world: World, name: str) -> tuple[str, str, str] | None:
    for condition in world.node(name)["status"].get("conditions", []):
        if condition["type"] == "NetworkUnavailable":
            return condition["status"], condition["reason"], condition["message"]
    return None


def status_writes(world: World, name: str) -> list[float]:
    """When the Node's status was written."""
    path = NODES_STATUS.format(name)
    return [w.at for w in world.transport.writes if w == Write(w.at, "PATCH", path)]


ROUTE_CREATED = ("False", "RouteCreated", "RouteController created a route")
NO_ROUTE_CREATED = ("True", "NoRouteCreated", "RouteController failed to create a route")


# -- third-party-like providers (wrapping the sim provider) ---------------------------------
class PerFamilyNames:
    """Routes named per IP family: what a provider supporting dual stack must do, since the
    name hint (the Node's UID) is the same for both of a Node's CIDRs."""

    enable_node_addresses = False

    def __init__(self, inner: Routes) -> None:
        self.inner = inner

    async def list_routes(self, cluster: str) -> Sequence[Route]:
        return await self.inner.list_routes(cluster)

    async def create_route(self, cluster: str, name_hint: str, route: Route) -> None:
        family = "v6" if ":" in route.destination_cidr else "v4"
        await self.inner.create_route(cluster, f"{name_hint}-{family}", route)

    async def delete_route(self, cluster: str, route: Route) -> None:
        await self.inner.delete_route(cluster, route)


class AddressAware:
    """Routes that carry their target's addresses (enable_node_addresses), remembered by
    the provider; `ops` records each call's start and end."""

    enable_node_addresses = True

    def __init__(self, inner: Routes) -> None:
        self.inner = inner
        self.addresses: dict[str, tuple[NodeAddress, ...]] = {}
        self.ops: list[tuple[str, str, tuple[str, ...]]] = []

    async def list_routes(self, cluster: str) -> Sequence[Route]:
        return [
            replace(r, target_node_addresses=self.addresses.get(r.destination_cidr, ()))
            for r in await self.inner.list_routes(cluster)
        ]

    async def create_route(self, cluster: str, name_hint: str, route: Route) -> None:
        ips = tuple(a.address for a in route.target_node_addresses)
        self.ops.append(("create", route.destination_cidr, ips))
        await self.inner.create_route(cluster, name_hint, route)
        self.addresses[route.destination_cidr] = route.target_node_addresses
        self.ops.append(("created", route.destination_cidr, ips))

    async def delete_route(self, cluster: str, route: Route) -> None:
        self.ops.append(("delete", route.destination_cidr, ()))
        await self.inner.delete_route(cluster, route)
        self.addresses.pop(route.destination_cidr, None)
        self.ops.append(("deleted", route.destination_cidr, ()))


# -- tests ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("cluster_cidr", "cidrs", "per_family_names"),
    [
        pytest.param("10.244.0.0/16", ["10.244.1.0/24"], False, id="single-stack"),
        pytest.param(DUAL, ["10.244.1.0/24", "fd00:10:244:1::/64"], True, id="dual-stack"),
        pytest.param(
            DUAL,
            ["10.244.1.0/24", "fd00:10:244:1::/64"],
            False,
            id="dual-stack-sim-names",
        ),
    ],
)
async def test_a_route_per_pod_cidr(
    autojump_clock: trio.testing.MockClock,
    cluster_cidr: str,
    cidrs: list[str],
    per_family_names: bool,
) -> None:
    """Each pod CIDR of each Node gets a route to it in the first pass (one ListRoutes),
    and the Nodes get NetworkUnavailable=False; a Node without pod CIDRs gets nothing."""
    async with open_world() as world:
        add_node(world, "node-a", cidrs)
        add_node(world, "node-b", ["10.244.2.0/24"])
        add_node(world, "node-c")

        def wrap(provider: Any) -> Any:
            return ProviderDouble(provider, routes=PerFamilyNames(provider.routes))

        with trio.fail_after(60):
            async with world.running(
                *route_flags(cluster_cidr), wrap=wrap if per_family_names else None
            ):
                await wait_for(lambda: network(world, "node-b") == ROUTE_CREATED)
                await wait_for(lambda: network(world, "node-a") == ROUTE_CREATED, poll_s=1)
                await trio.sleep_until(QUIET_S)
        assert table(world) == sorted(
            [("node-a", cidr) for cidr in cidrs] + [("node-b", "10.244.2.0/24")]
        )
        assert times(world, "ListRoutes") == [0.0]
        assert times(world, "CreateRoute") == [0.0] * (len(cidrs) + 1)
        assert network(world, "node-a") == network(world, "node-b") == ROUTE_CREATED
        assert status_writes(world, "node-a") == status_writes(world, "node-b") == [0.0]
        assert network(world, "node-c") is None
        assert await world.events("FailedToCreateRoute") == []


@pytest.mark.parametrize(
    ("cluster_cidr", "target", "cidr", "deleted"),
    [
        pytest.param("10.244.0.0/16", "node-a", "10.244.9.0/24", True, id="cidr-not-on-node"),
        pytest.param("10.244.0.0/16", "node-gone", "10.244.8.0/24", True, id="unknown-node"),
        pytest.param("10.244.0.0/16", "node-gone", "192.168.5.0/24", False, id="outside"),
        pytest.param("10.244.0.0/16", "node-a", "192.168.6.0/24", False, id="outside-known-node"),
        pytest.param("10.244.0.0/16", "node-gone", "fd00:1::/64", False, id="other-family"),
        pytest.param(DUAL, "node-gone", "fd00:10:244:5::/64", True, id="second-cluster-cidr"),
        pytest.param("10.255.0.0/16", "node-gone", "10.240.0.0/12", True, id="last-ip-inside"),
        pytest.param("10.244.0.0/16", "node-gone", "10.0.0.0/8", False, id="contains-cluster"),
    ],
)
async def test_only_stale_routes_inside_the_cluster_cidr_are_deleted(
    autojump_clock: trio.testing.MockClock,
    cluster_cidr: str,
    target: str,
    cidr: str,
    deleted: bool,
) -> None:
    """A route nobody wants is deleted when its first or last address is inside a
    --cluster-cidr, and left alone otherwise; the wanted route is kept."""
    async with open_world() as world:
        add_node(world, "node-a", ["10.244.1.0/24"] if "10.244" in cluster_cidr else [])
        await cloud_route(world, "other", target, cidr)
        with trio.fail_after(60):
            async with world.running(*route_flags(cluster_cidr)):
                await trio.sleep_until(QUIET_S)
        assert ((target, cidr) in table(world)) is not deleted
        assert times(world, "ListRoutes") == [0.0]
        assert times(world, "DeleteRoute") == ([0.0] if deleted else [])


async def test_a_blackhole_route_a_node_still_wants_is_replaced_in_the_same_pass(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A route whose target instance is gone (the sim lists it as a blackhole) is deleted
    and then created again in one pass, and the Node's condition says it was created."""
    async with open_world() as world:
        add_node(world, "node-a", ["10.244.1.0/24"])
        with trio.fail_after(60):
            async with world.running(*route_flags()):
                await wait_for(lambda: network(world, "node-a") == ROUTE_CREATED, poll_s=1)
                (instance,) = world.cloud.instances()
                world.cloud.terminate(instance.id)
                assert [r.blackhole for r in world.cloud.routes(CLUSTER)] == [True]
                await wait_for(lambda: len(times(world, "CreateRoute")) == 2, poll_s=1)
                await trio.sleep(1)  # the pass's condition write, if any
        calls = [(c.time, c.method) for c in world.cloud.calls_by("routes", replica=REPLICA)]
        assert calls == [
            (0.0, "ListRoutes"),
            (0.0, "CreateRoute"),
            (10.0, "ListRoutes"),
            (10.0, "DeleteRoute"),
            (10.0, "CreateRoute"),
        ]
        assert table(world) == [("node-a", "10.244.1.0/24")]
        assert network(world, "node-a") == ROUTE_CREATED
        assert status_writes(world, "node-a") == [0.0]  # the condition held throughout


async def test_a_removed_node_loses_its_route_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Deleting a Node triggers a pass right away (not at the next period) that deletes
    its route and leaves the other Nodes' routes alone."""
    async with open_world() as world:
        add_node(world, "node-a", ["10.244.1.0/24"])
        add_node(world, "node-b", ["10.244.2.0/24"])
        with trio.fail_after(60):
            async with world.running(*route_flags()):
                await trio.sleep_until(3)
                (await world.http.delete("/api/v1/nodes/node-b")).raise_for_status()
                await wait_for(lambda: table(world) == [("node-a", "10.244.1.0/24")])
        assert times(world, "ListRoutes") == [0.0, 3.0]
        assert times(world, "DeleteRoute") == [3.0]


@pytest.mark.parametrize(
    ("cidrs", "foreign_route", "expected"),
    [
        pytest.param(["10.244.1.0/24"], None, ROUTE_CREATED, id="routed"),
        pytest.param([], "10.244.9.0/24", NO_ROUTE_CREATED, id="stale-route-no-pod-cidr"),
        pytest.param([], "192.168.9.0/24", NO_ROUTE_CREATED, id="foreign-route-no-pod-cidr"),
        pytest.param([], None, None, id="neither"),
    ],
)
async def test_network_unavailable_is_written_once(
    autojump_clock: trio.testing.MockClock,
    cidrs: list[str],
    foreign_route: str | None,
    expected: tuple[str, str, str] | None,
) -> None:
    """NetworkUnavailable (upstream's reasons and messages) is written in the first pass and
    not again in the next ones while it holds; a Node with routes to it but no pod CIDRs
    is unavailable; one with neither gets no condition."""
    async with open_world() as world:
        add_node(world, "node-a", cidrs)
        if foreign_route:
            await cloud_route(world, "someone-elses", "node-a", foreign_route)
        with trio.fail_after(60):
            async with world.running(*route_flags()):
                await wait_for(lambda: len(times(world, "ListRoutes")) == 3, poll_s=1)
                await trio.sleep(1)  # the third pass's work
        assert times(world, "ListRoutes") == [0.0, 10.0, 20.0]
        assert network(world, "node-a") == expected
        assert status_writes(world, "node-a") == ([] if expected is None else [0.0])
        if expected is not None:
            (condition,) = [
                c
                for c in world.node("node-a")["status"]["conditions"]
                if c["type"] == "NetworkUnavailable"
            ]
            assert condition["lastTransitionTime"] == condition["lastHeartbeatTime"]
            assert condition["lastTransitionTime"] == "2026-11-21T10:00:00Z"
        sync_total = world.registry.get_sample_value("route_controller_route_sync_total")
        assert sync_total == 3


async def test_a_failed_create_is_reported_and_retried(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A failed CreateRoute records FailedToCreateRoute on the Node (upstream's message) and
    sets NetworkUnavailable=True; the next period creates the route and sets it False."""
    async with open_world() as world:
        add_node(world, "node-a", ["10.244.1.0/24"])
        uid = world.node("node-a")["metadata"]["uid"]
        world.cloud.faults.error("CreateRoute", status=500, count=1)
        with trio.fail_after(60):
            async with world.running(*route_flags()):
                await wait_for(lambda: network(world, "node-a") == NO_ROUTE_CREATED)
                assert table(world) == []
                await wait_for(lambda: network(world, "node-a") == ROUTE_CREATED, poll_s=1)
        assert table(world) == [("node-a", "10.244.1.0/24")]
        assert times(world, "CreateRoute") == [0.0, 10.0]
        assert status_writes(world, "node-a") == [0.0, 10.0]
        # The Warning, recorded by the failing pass.
        assert [w.at for w in world.transport.writes if w.path.endswith("/events")] == [0.0]
        (event,) = await world.events("FailedToCreateRoute")
        assert event["type"] == "Warning"
        assert event["source"]["component"] == "route_controller"
        assert event["involvedObject"]["name"] == "node-a"
        assert event["involvedObject"]["uid"] == uid
        assert re.fullmatch(
            rf"Could not create route {uid} 10\.244\.1\.0/24 for node node-a after 0s: "
            r"sim cloud CreateRoute .*: 500 .*",
            event["message"],
        )


async def test_a_failed_listing_is_retried_at_the_next_period(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """When ListRoutes fails the pass does nothing else (no route, no condition), and the
    next period's pass does the work."""
    async with open_world() as world:
        add_node(world, "node-a", ["10.244.1.0/24"])
        world.cloud.faults.error("ListRoutes", status=503, count=1)
        with trio.fail_after(60):
            async with world.running(*route_flags()):
                await wait_for(lambda: len(times(world, "ListRoutes")) == 1)
                await trio.sleep(QUIET_S)
                assert (table(world), network(world, "node-a")) == ([], None)
                await wait_for(lambda: network(world, "node-a") == ROUTE_CREATED, poll_s=1)
        assert times(world, "ListRoutes") == [0.0, 10.0]
        assert times(world, "CreateRoute") == [10.0]
        assert table(world) == [("node-a", "10.244.1.0/24")]
        assert world.transport.writes == [Write(10.0, "PATCH", NODES_STATUS.format("node-a"))]


async def test_a_pod_cidr_change_triggers_a_pass_and_heartbeats_do_not(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A Node given pod CIDRs at t=3 has its route at t=3 (not at the 10 s period); the
    period then counts from that pass; status writes that change neither pod CIDRs nor
    addresses (a Ready heartbeat) trigger nothing."""
    async with open_world() as world:
        add_node(world, "node-a")
        with trio.fail_after(60):
            async with world.running(*route_flags()):
                await trio.sleep_until(3)
                await patch_node(
                    world,
                    "node-a",
                    {"spec": {"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24"]}},
                )
                await wait_for(lambda: table(world) == [("node-a", "10.244.1.0/24")])
                await trio.sleep_until(5)
                await world.set_ready("node-a", "True")
                # A pass for the heartbeat would come at t=5; the next is the period's.
                await wait_for(lambda: len(times(world, "ListRoutes")) == 3, poll_s=1)
        assert times(world, "ListRoutes") == [0.0, 3.0, 13.0]
        assert times(world, "CreateRoute") == [3.0]
        assert network(world, "node-a") == ROUTE_CREATED


async def test_a_wave_of_node_changes_costs_a_pass_per_second(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """500 Nodes registered over 5 s (one every 10 ms) cause one pass per second while the
    wave lasts, plus one for the last changes, and every Node gets its route."""
    async with open_world() as world:
        fast = route_flags(
            "10.244.0.0/16", FAST_CLOUD, "--kube-api-qps=10000", "--kube-api-burst=10000"
        )
        with trio.fail_after(120):
            async with world.running(*fast):
                await trio.sleep_until(1)
                for i in range(500):
                    add_node(world, f"node-{i:03}", [f"10.244.{i // 250}.{i % 250}/32"])
                    await trio.sleep(0.01)
                await wait_for(lambda: len(table(world)) == 500)
                assert times(world, "CreateRoute")[-1] == 6.0
                await trio.sleep_until(6 + QUIET_S)
        assert times(world, "ListRoutes") == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
        assert all(network(world, f"node-{i:03}") == ROUTE_CREATED for i in range(500))


async def test_changed_addresses_replace_the_route_delete_first(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """With an address-aware provider, a Node whose address set changed has its route
    deleted and then created with the new addresses (after the delete has finished); a
    mere reordering of the same addresses changes nothing."""
    first = [{"type": "InternalIP", "address": "10.0.0.5"}, {"type": "Hostname", "address": "a"}]
    routes: list[AddressAware] = []

    def wrap(provider: Any) -> Any:
        routes.append(AddressAware(provider.routes))
        return ProviderDouble(provider, routes=routes[0])

    async with open_world() as world:
        add_node(world, "node-a", ["10.244.1.0/24"], addresses=first)
        world.cloud.faults.latency("DeleteRoute", fixed_s=0.5)
        with trio.fail_after(60):
            async with world.running(*route_flags(), wrap=wrap):
                await trio.sleep_until(3)
                await patch_node(
                    world, "node-a", {"status": {"addresses": first[::-1]}}, status=True
                )
                await trio.sleep_until(5)
                assert [op for op, _, _ in routes[0].ops] == ["create", "created"]
                second = [{"type": "InternalIP", "address": "10.0.0.6"}, first[1]]
                await patch_node(world, "node-a", {"status": {"addresses": second}}, status=True)
                await wait_for(lambda: len(routes[0].ops) == 6)
        cidr = "10.244.1.0/24"
        assert routes[0].ops == [
            ("create", cidr, ("10.0.0.5", "a")),
            ("created", cidr, ("10.0.0.5", "a")),
            ("delete", cidr, ()),
            ("deleted", cidr, ()),
            ("create", cidr, ("10.0.0.6", "a")),
            ("created", cidr, ("10.0.0.6", "a")),
        ]
        assert times(world, "ListRoutes") == [0.0, 3.0, 5.0]
        assert times(world, "DeleteRoute") == [5.0]
        assert times(world, "CreateRoute") == [0.0, 5.5]
        assert table(world) == [("node-a", cidr)]
        assert network(world, "node-a") == ROUTE_CREATED


@pytest.mark.parametrize(
    ("old_cidr", "create_at"),
    [
        pytest.param("10.244.1.0/24", 0.5, id="same-destination-waits"),
        pytest.param("10.244.9.0/24", 0.0, id="other-destination-does-not"),
    ],
)
async def test_a_create_waits_only_for_deletes_it_could_collide_with(
    autojump_clock: trio.testing.MockClock, old_cidr: str, create_at: float
) -> None:
    """A pod CIDR still routed to a Node that is gone (its instance still runs, so the
    route is no blackhole) is freed before it is routed to its new Node; a create for
    another destination does not wait for that slow delete."""
    async with open_world() as world:
        world.cloud.add_instance("node-old")
        await cloud_route(world, "old", "node-old", old_cidr)
        add_node(world, "node-a", ["10.244.1.0/24"])
        world.cloud.faults.latency("DeleteRoute", fixed_s=0.5)
        with trio.fail_after(60):
            async with world.running(*route_flags()):
                await wait_for(lambda: network(world, "node-a") == ROUTE_CREATED, poll_s=1)
        assert times(world, "DeleteRoute") == [0.0]
        assert times(world, "CreateRoute") == [create_at]
        assert table(world) == [("node-a", "10.244.1.0/24")]
        assert network(world, "node-a") == ROUTE_CREATED


async def test_at_most_200_route_operations_at_once(autojump_clock: trio.testing.MockClock) -> None:
    """250 Nodes needing routes, each CreateRoute taking 1 s, a budget that does not bind:
    200 creates go out at once (upstream's maxConcurrentRouteOperations), the other 50 as
    slots free up, 1 s later."""
    async with open_world() as world:
        for i in range(250):
            add_node(world, f"node-{i:03}", [f"10.244.{i}.0/24"], instance=False)
        world.cloud.faults.latency("CreateRoute", fixed_s=1.0)
        with trio.fail_after(60):
            async with world.running(*route_flags("10.244.0.0/16", FAST_CLOUD)):
                await wait_for(lambda: len(world.cloud.routes()) == 250)
        starts = moments(times(world, "CreateRoute"))
        assert starts == [0.0] * 200 + [1.0] * 50
