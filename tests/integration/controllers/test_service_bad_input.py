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

from tests.helpers.services import (
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
from tests.helpers.world import World, open_world
from trio_ccm.testing import lb_name, make_service, wait_for
from trio_ccm.testing.harness import Write

WINDOW_S = 1000.0  # past upstream's backoff to its 300 s cap (0, 5, 15 ... 915 s): a retry shows
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
        bad = world.api.create(make_service("bad", annotations=annotations, **spec))
        good = world.api.create(make_service("good"))
        async with world.running(*SERVICE_LB):
            started = trio.current_time()
            with trio.fail_after(1):
                await wait_converged(world, ["good"], NODES, poll_s=0.01)
            # An absence of retries: it takes the whole window to show.
            await trio.sleep_until(started + WINDOW_S)
            warnings = await warnings_for(world, "bad")
        assert world.cloud.load_balancer(lb_name(bad)) is None
        assert world.service("bad").get("status", {}).get("loadBalancer", {}) == {}
        assert unconverged(world, ["good"], NODES) == []
        assert [(c.time - started, c.status) for c in puts_for(world, good)] == [(0.0, 201)]
        # The good Service's finalizer and ingress, at once.
        assert [w.at - started for w in world.transport.service_writes("good")] == [0.0, 0.0]
    assert len(warnings) == 1
    assert warnings[0]["count"] == 1
    assert problem in warnings[0]["message"]
    assert warnings[0]["message"].startswith("Error syncing load balancer: ")
    assert warnings[0]["message"].endswith("fix the Service, it is retried when it changes")
    assert warnings[0]["type"] == "Warning"
    # The provider refuses an IPv6-only Service before asking; the cloud refuses the rest,
    # once, at once.
    attempts = [(c.time - started, c.status) for c in puts_for(world, bad)]
    assert attempts == ([] if "ipFamilies" in spec else [(0.0, 400)])


async def test_an_unparsable_source_range_annotation_costs_no_cloud_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A source-range annotation that is no CIDR gets one Warning naming the annotation
    and the fix and no cloud call until the Service changes; fixed, it gets its load
    balancer at once."""
    async with open_world() as world:
        register_nodes(world)
        world.api.create(make_service("bad", annotations={SOURCE_RANGES: "10.0.0.0/8,office"}))
        async with world.running(*SERVICE_LB):
            # An absence of calls: it takes the whole window to show.
            await trio.sleep(WINDOW_S)
            assert world.cloud.calls_by("loadbalancers") == []
            assert world.transport.service_writes("bad") == []
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
                await wait_converged(world, ["bad"], NODES, poll_s=0.01)
            lb = world.cloud.load_balancer(lb_name(world.service("bad")))
            assert lb is not None
            assert lb.source_ranges == ("10.0.0.0/8",)
        # The moment it was fixed: the finalizer, the load balancer, the ingress.
        status = "/api/v1/namespaces/default/services/bad/status"
        assert world.transport.service_writes("bad") == [
            Write(fixed_at, "PATCH", status),
            Write(fixed_at, "PATCH", status),
        ]
        assert [c.time for c in world.cloud.calls_by("loadbalancers")] == [fixed_at]


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


def _done(world: World, name: str, change: str) -> bool:
    if change == "fixed":
        return not unconverged(world, [name], NODES)
    return not world.service_exists(name)


@pytest.mark.parametrize("change", ["fixed", "deleted"])
async def test_a_refused_service_that_changes_is_acted_on_at_once(
    autojump_clock: trio.testing.MockClock, change: str
) -> None:
    """A refused Service that is fixed (or deleted) later gets its load balancer (or is
    gone, its finalizer removed) at once; until then the cloud was asked once."""
    async with open_world() as world:
        register_nodes(world)
        created = world.api.create(make_service("bad", ports=MIXED_PORTS))
        async with world.running(*SERVICE_LB):
            started = trio.current_time()
            await trio.sleep_until(started + 320)
            assert [c.time - started for c in puts_for(world, created)] == [0.0]
            changed_at = trio.current_time()
            await _change(world, "bad", change)
            with trio.fail_after(RETRY_CAP_S + 10):
                await wait_for(lambda: _done(world, "bad", change))
        # Acted on the moment it changed: fixed, one more (good) ensure; deleted, a look for
        # the load balancer it never had, then the finalizer's removal.
        lb_calls = world.cloud.calls_by("loadbalancers")[1:]
        status = [w.at for w in world.transport.service_writes("bad") if w.at >= changed_at]
        if change == "fixed":
            assert [(c.time, c.method, c.status) for c in lb_calls] == [
                (changed_at, "PutLoadBalancer", 201)
            ]
            assert status == [changed_at]  # the ingress
        else:
            assert [(c.time, c.method) for c in lb_calls] == [(changed_at, "GetLoadBalancer")]
            assert status == [changed_at]  # the finalizer
