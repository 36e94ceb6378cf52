"""node_route.plan, the route controller's rules as a table: the Nodes, the listed routes
and the cluster CIDRs in; the deletes, the creates and each Node's route state out."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import Any

import msgspec
import pytest

from trio_ccm.actors.node_route import Network, plan
from trio_ccm.cloud.provider import NodeAddress, Route
from trio_ccm.kube.objects import Node
from trio_ccm.testing import make_node

CLUSTERS: tuple[Network, ...] = (
    ipaddress.ip_network("10.244.0.0/16"),
    ipaddress.ip_network("fd00:10:244::/56"),
)
A1 = NodeAddress(type="InternalIP", address="192.0.2.1")
A2 = NodeAddress(type="InternalIP", address="192.0.2.2")


def node(name: str, *cidrs: str, addresses: Sequence[NodeAddress] = (A1,)) -> Node:
    body: dict[str, Any] = make_node(
        name,
        uninitialized=False,
        pod_cidrs=cidrs,
        addresses=[{"type": a.type, "address": a.address} for a in addresses],
    )
    return msgspec.convert(body, Node)


def route(target: str, cidr: str, **fields: Any) -> Route:
    return Route(target_node=target, destination_cidr=cidr, **fields)


@pytest.mark.parametrize(
    ("nodes", "routes", "aware", "deletes", "creates", "state"),
    [
        pytest.param(
            [node("a", "10.244.1.0/24")], [], False,
            set(), {("a", "10.244.1.0/24")}, {"a": True},
            id="new-node-gets-a-route",
        ),
        pytest.param(
            [node("a", "10.244.1.0/24")], [route("a", "10.244.1.0/24")], False,
            set(), set(), {"a": False},
            id="routed-node-is-kept",
        ),
        pytest.param(
            [node("a", "fd00:10:244:1::/64")], [route("a", "fd00:10:244:1:0:0:0:0/64")], False,
            set(), set(), {"a": False},
            id="same-network-written-differently-is-kept",
        ),
        pytest.param(
            [node("a", "10.244.1.0/24")], [route("a", "10.244.1.0/24", blackhole=True)], False,
            {("a", "10.244.1.0/24")}, {("a", "10.244.1.0/24")}, {"a": True},
            id="blackhole-is-deleted-and-replaced",
        ),
        pytest.param(
            [], [route("gone", "10.244.9.0/24")], False,
            {("gone", "10.244.9.0/24")}, set(), {"gone": True},
            id="route-of-a-gone-node-is-deleted",
        ),
        pytest.param(
            [], [route("other", "172.16.0.0/24")], False,
            set(), set(), {"other": True},
            id="route-outside-cluster-cidr-is-never-deleted",
        ),
        pytest.param(
            [], [route("other", "not-a-cidr")], False,
            set(), set(), {"other": True},
            id="unparsable-route-is-left-alone",
        ),
        pytest.param(
            [node("a", "10.244.1.0/24", addresses=[A2])],
            [route("a", "10.244.1.0/24", target_node_addresses=(A1,))], True,
            {("a", "10.244.1.0/24")}, {("a", "10.244.1.0/24")}, {"a": True},
            id="address-aware-moved-address-replaces-route",
        ),
        pytest.param(
            [node("a", "10.244.1.0/24", addresses=[A2])],
            [route("a", "10.244.1.0/24", target_node_addresses=(A1,))], False,
            set(), set(), {"a": False},
            id="address-blind-ignores-addresses",
        ),
        pytest.param(
            [node("a")], [], False,
            set(), set(), {"a": None},
            id="node-without-pod-cidr-has-no-condition",
        ),
        pytest.param(
            [node("a", "10.244.1.0/24", "fd00:10:244:1::/64")],
            [route("a", "10.244.1.0/24")], False,
            set(), {("a", "fd00:10:244:1::/64")}, {"a": True},
            id="dual-stack-half-routed-is-unavailable",
        ),
        pytest.param(
            [node("a", "10.244.1.0/24")],
            [route("a", "10.244.1.0/24"), route("a", "10.244.7.0/24")], False,
            {("a", "10.244.7.0/24")}, set(), {"a": False},
            id="stale-extra-route-of-a-node-is-deleted",
        ),
    ],
)  # fmt: skip
def test_plan(
    nodes: list[Node],
    routes: list[Route],
    aware: bool,
    deletes: set[tuple[str, str]],
    creates: set[tuple[str, str]],
    state: dict[str, bool | None],
) -> None:
    """Each case's deletes, creates and per-Node NetworkUnavailable (True: some pod CIDR
    lacks its route; None: no condition to write) follow the module's contract."""
    result = plan(nodes, routes, CLUSTERS, address_aware=aware)
    assert {(r.target_node, r.destination_cidr) for r in result.deletes} == deletes
    assert {(c.node.metadata.name, c.cidr_key) for c in result.creates} == creates
    assert {name: result.unavailable(name) for name in state} == state
