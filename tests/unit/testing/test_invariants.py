"""The chaos run's invariants, read from what the API lists and `/_sim/state` shows: each
kind of problem is found, and a converged cluster has none."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from trio_ccm.cloud.provider import ServiceInfo, default_load_balancer_name
from trio_ccm_testbed.chaos import PROBLEM_KINDS, find_problems

FINALIZER = "service.kubernetes.io/load-balancer-cleanup"
TAINT = "node.cloudprovider.kubernetes.io/uninitialized"


def _node(name: str, cidr: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"podCIDRs": [cidr], "taints": []}}


def _service(name: str, uid: str, ranges: list[str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "type": "LoadBalancer",
        "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080}],
    }
    if ranges is not None:
        spec["loadBalancerSourceRanges"] = ranges
    return {
        "metadata": {"name": name, "namespace": "default", "uid": uid, "finalizers": [FINALIZER]},
        "spec": spec,
        "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.1"}]}},
    }


def _lb(service: dict[str, Any], nodes: list[str], ranges: list[str]) -> dict[str, Any]:
    meta = service["metadata"]
    info = ServiceInfo(namespace=meta["namespace"], name=meta["name"], uid=meta["uid"])
    return {
        "name": default_load_balancer_name(info),
        "service": f"{meta['namespace']}/{meta['name']}",
        "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080}],
        "nodes": nodes,
        "sourceRanges": ranges,
        "ingress": [{"ip": "203.0.113.1"}],
    }


def _world() -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    nodes = [_node("n1", "10.244.1.0/24"), _node("n2", "10.244.2.0/24")]
    web = _service("web", "u1", ranges=["10.1.0.0/16"])
    api = _service("api", "u2")
    cloud = {
        "loadBalancers": [
            _lb(web, ["n1", "n2"], ["10.1.0.0/16"]),
            _lb(api, ["n2", "n1"], ["0.0.0.0/0"]),
        ],
        "routes": [
            {"targetNode": "n1", "destinationCIDR": "10.244.1.0/24", "blackhole": False},
            {"targetNode": "n2", "destinationCIDR": "10.244.2.0/24", "blackhole": False},
        ],
    }
    return nodes, [web, api], cloud


World = tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]


def _recreated(w: World) -> None:
    w[1][0]["metadata"]["uid"] = "u9"  # web deleted and made again: a new load balancer due
    w[2]["loadBalancers"].append(_lb(w[1][0], ["n1", "n2"], ["10.1.0.0/16"]))


def _forgotten(w: World) -> None:
    w[1].pop(1)


def _ranges(w: World) -> None:
    w[1][0]["spec"]["loadBalancerSourceRanges"] = ["10.2.0.0/16"]


def _stranded(w: World) -> None:
    w[1][1]["spec"]["type"] = "ClusterIP"
    w[1][1]["status"] = {}
    w[2]["loadBalancers"].pop(1)


def _untainted(w: World) -> None:
    w[0][0]["spec"]["taints"] = [{"key": TAINT, "effect": "NoSchedule"}]


def _node_gone(w: World) -> None:
    w[0].pop(1)


@pytest.mark.parametrize(
    ("change", "kinds"),
    [
        pytest.param(lambda w: None, [], id="converged"),
        pytest.param(_recreated, ["duplicate"], id="old-lb-of-a-recreated-service"),
        pytest.param(_forgotten, ["leaked"], id="lb-of-a-deleted-service"),
        pytest.param(lambda w: w[2]["loadBalancers"].pop(0), ["missing"], id="no-lb"),
        pytest.param(_ranges, ["source-ranges"], id="stale-source-ranges"),
        pytest.param(
            lambda w: w[2]["loadBalancers"][0]["ports"][0].update(port=81), ["ports"], id="ports"
        ),
        pytest.param(_stranded, ["finalizer-stranded"], id="finalizer-left"),
        pytest.param(_untainted, ["node-uninitialised"], id="node-tainted"),
        pytest.param(_node_gone, ["backends", "backends", "route-stale"], id="node-deleted"),
        pytest.param(lambda w: w[2]["routes"].pop(0), ["route-missing"], id="route-missing"),
    ],
)
def test_each_broken_invariant_is_found_by_kind(
    change: Callable[[World], object], kinds: list[str]
) -> None:
    """A converged world has no problem; each change breaks exactly the invariants named."""
    world = copy.deepcopy(_world())
    change(world)
    found = find_problems(*world)
    assert sorted(p.kind for p in found) == sorted(kinds)
    assert all(p.kind in PROBLEM_KINDS for p in found)
