"""Bad Services: ones Kubernetes accepts but no load balancer can be built for.

The simulated cloud refuses, like real clouds, what the API server lets through (see
docs/sim-cloud.md, "LoadBalancer"): SCTP, TCP and UDP on one port number, a description
over 255 characters, IPv6 source ranges, more than 20 of them, host bits set; its provider
refuses IPv6-only Services before asking. Each such Service is refused (`ServiceRefused`):
one Warning naming the problem, no load balancer, and no retry until the Service changes,
while a good Service created beside it is served at once. What the controller can tell
by itself (a source-range annotation that is no CIDR) costs no cloud call at all.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from tests.faults.test_service_faults import (
    DESCRIPTION,
    FINALIZER,
    NODES,
    RETRY_CAP_S,
    SERVICE_LB,
    SOURCE_RANGES,
    register_nodes,
    unconverged,
    wait_converged,
)
from tests.integration.controllers.conftest import (
    World,
    lb_name,
    lb_service,
    open_world,
    running,
)

WINDOW_S = 1000.0  # attempts at ~0, 5, 15, 35, 75, 155, 315, 615, 915 s: nine
MIXED_PORTS = [
    {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
    {"name": "dns-udp", "port": 53, "protocol": "UDP"},
]

REFUSED = [
    pytest.param(
        {"ports": [{"name": "sctp", "port": 80, "protocol": "SCTP"}]},
        {},
        "protocol 'SCTP' is not one of TCP, UDP",
        id="sctp",
    ),
    pytest.param({"ports": MIXED_PORTS}, {}, "port 53 appears twice", id="tcp-and-udp-on-one-port"),
    pytest.param(
        {},
        {DESCRIPTION: "x" * 256},
        "the description is 256 characters; at most 255 are allowed",
        id="oversize-annotation",
    ),
    pytest.param(
        {"loadBalancerSourceRanges": ["2001:db8::/32"]},
        {},
        "source range 2001:db8::/32 is IPv6",
        id="ipv6-source-range",
    ),
    pytest.param(
        {"loadBalancerSourceRanges": [f"10.{i}.0.0/16" for i in range(21)]},
        {},
        "21 source ranges; at most 20 are allowed",
        id="21-source-ranges",
    ),
    pytest.param(
        {"loadBalancerSourceRanges": ["10.0.0.1/8"]},
        {},
        "10.0.0.1/8 has host bits set",
        id="host-bits-set",
    ),
    pytest.param(
        {},
        {SOURCE_RANGES: "192.0.2.0/24, 10.0.0.1/8"},
        "10.0.0.1/8 has host bits set",
        id="host-bits-set-in-the-annotation",
    ),
    pytest.param(
        {"ipFamilies": ["IPv6"], "ipFamilyPolicy": "SingleStack"},
        {},
        "spec.ipFamilies ['IPv6']: the sim cloud's load balancers are IPv4 only",
        id="ipv6-only",
    ),
]


def puts_for(world: World, created: dict[str, Any]) -> list[Any]:
    target = f"kubernetes/{lb_name(created)}"
    return [c for c in world.cloud.calls_by("PutLoadBalancer") if c.target == target]


async def warnings_for(world: World, name: str) -> list[dict[str, Any]]:
    return [
        e
        for e in await world.events("SyncLoadBalancerFailed")
        if e["involvedObject"]["name"] == name
    ]


@pytest.mark.parametrize(("spec", "annotations", "problem"), REFUSED)
async def test_a_service_the_cloud_refuses_is_refused_once_beside_a_good_one(
    autojump_clock: trio.testing.MockClock,
    spec: dict[str, Any],
    annotations: dict[str, str],
    problem: str,
) -> None:
    """A Service the cloud refuses gets one SyncLoadBalancerFailed Warning naming the
    problem, no load balancer, and no retry until it changes (at most one cloud call);
    a good Service created with it has its load balancer and status at once."""
    async with open_world() as world:
        register_nodes(world)
        bad = world.api.create(lb_service("bad", annotations=annotations, **spec))
        good = world.api.create(lb_service("good"))
        async with running(world, SERVICE_LB):
            started = trio.current_time()
            with trio.fail_after(1):
                done = await wait_converged(world, ["good"], NODES, step_s=0.01)
            assert done - started <= 0.01
            await trio.sleep_until(started + WINDOW_S)
            warnings = await warnings_for(world, "bad")
        assert world.cloud.load_balancer(lb_name(bad)) is None
        assert world.service("bad").get("status", {}).get("loadBalancer", {}) == {}
        assert unconverged(world, ["good"], NODES) == []
        assert len(puts_for(world, good)) == 1
    assert len(warnings) == 1
    assert warnings[0]["count"] == 1
    assert problem in warnings[0]["message"]
    assert warnings[0]["message"].startswith("Error syncing load balancer: ")
    assert warnings[0]["message"].endswith("fix the Service, it is retried when it changes")
    assert warnings[0]["type"] == "Warning"
    attempts = puts_for(world, bad)
    assert [(c.time - started, c.status) for c in attempts] in ([], [(0.0, 400)])


async def test_an_unparsable_source_range_annotation_costs_no_cloud_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A source-range annotation that is no CIDR gets one Warning naming the annotation
    and the fix and no cloud call until the Service changes; fixed, it gets its load
    balancer at once."""
    async with open_world() as world:
        register_nodes(world)
        world.api.create(lb_service("bad", annotations={SOURCE_RANGES: "10.0.0.0/8,office"}))
        async with running(world, SERVICE_LB):
            await trio.sleep(WINDOW_S)
            sweeps = world.cloud.calls_by("ListLoadBalancers")
            assert world.cloud.calls_by("loadbalancers") == sweeps  # none about the Service
            (warning,) = await warnings_for(world, "bad")
            assert warning["count"] == 1
            assert SOURCE_RANGES in warning["message"]
            assert "'office' is not a CIDR" in warning["message"]
            assert FINALIZER not in world.service("bad")["metadata"].get("finalizers", [])
            fixed_at = trio.current_time()
            response = await world.http.patch(
                "/api/v1/namespaces/default/services/bad",
                json={"metadata": {"annotations": {SOURCE_RANGES: "10.0.0.0/8"}}},
                headers={"content-type": "application/merge-patch+json"},
            )
            response.raise_for_status()
            with trio.fail_after(1):
                done = await wait_converged(world, ["bad"], NODES, step_s=0.01)
            assert done - fixed_at <= 0.01
            lb = world.cloud.load_balancer(lb_name(world.service("bad")))
            assert lb is not None
            assert lb.source_ranges == ("10.0.0.0/8",)


async def _change(world: World, name: str, change: str) -> None:
    path = f"/api/v1/namespaces/default/services/{name}"
    if change == "fixed":
        response = await world.http.patch(
            path,
            json={"spec": {"ports": MIXED_PORTS[:1]}},
            headers={"content-type": "application/merge-patch+json"},
        )
    else:
        response = await world.http.delete(path)
    response.raise_for_status()


async def _done(world: World, name: str, change: str) -> bool:
    if change == "fixed":
        return not unconverged(world, [name], NODES)
    response = await world.http.get(f"/api/v1/namespaces/default/services/{name}")
    return response.status_code == 404


@pytest.mark.parametrize("change", ["fixed", "deleted"])
async def test_a_refused_service_that_changes_is_acted_on_at_once(
    autojump_clock: trio.testing.MockClock, change: str
) -> None:
    """A refused Service that is fixed (or deleted) later gets its load balancer (or is
    gone, its finalizer removed) at once; until then the cloud was asked once."""
    async with open_world() as world:
        register_nodes(world)
        created = world.api.create(lb_service("bad", ports=MIXED_PORTS))
        async with running(world, SERVICE_LB):
            started = trio.current_time()
            await trio.sleep_until(started + 320)
            assert len(puts_for(world, created)) == 1
            changed_at = trio.current_time()
            await _change(world, "bad", change)
            with trio.move_on_after(RETRY_CAP_S + 10):
                while not await _done(world, "bad", change):  # noqa: ASYNC110 - polling the world
                    await trio.sleep(0.1)
            took = trio.current_time() - changed_at
    assert took <= 1.0, f"the {change} Service waited {took:.1f} s for its backoff"
