"""service-lb-controller's rules (`actors/lb_rules.py`) and the stable-node predicate, as
tables: each row a Service (or Node) and the decision expected."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from trio_ccm.actors.lb_rules import (
    Step,
    Synced,
    family_mismatch,
    fingerprint,
    plan,
    problems,
    wants_load_balancer,
)
from trio_ccm.actors.stable_nodes import node_set, stable_node
from trio_ccm.cloud import LoadBalancerIngress, NodeInfo
from trio_ccm.kube.objects import Node, Service
from trio_ccm.kube.wellknown import FINALIZER_LB_CLEANUP
from trio_ccm.testing.factories import make_node, make_service

NODES_A = node_set((NodeInfo("a", provider_id="sim://a"),))
NODES_AB = node_set((NodeInfo("a", provider_id="sim://a"), NodeInfo("b", provider_id="sim://b")))
INGRESS = (LoadBalancerIngress(ip="192.0.2.10"),)


def service(
    *,
    finalizer: bool = True,
    deleting: bool = False,
    ingress: tuple[LoadBalancerIngress, ...] = INGRESS,
    uid: str = "u1",
    **spec: Any,
) -> Service:
    body = make_service("web", **spec)
    body["metadata"]["uid"] = uid
    if finalizer:
        body["metadata"]["finalizers"] = [FINALIZER_LB_CLEANUP]
    if deleting:
        body["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    body["status"] = {"loadBalancer": {"ingress": [msgspec.to_builtins(i) for i in ingress]}}
    return msgspec.convert(body, Service, from_attributes=False)


def synced(svc: Service, nodes: bytes = NODES_A) -> Synced:
    return Synced(svc.metadata.uid, fingerprint(svc), nodes, svc.status.load_balancer.ingress)


WEB = service()


@pytest.mark.parametrize(
    ("svc", "record", "kwargs", "expected"),
    [
        pytest.param(
            service(type="ClusterIP", finalizer=False), None, {}, Step("forget"), id="not-ours"
        ),
        pytest.param(service(type="ClusterIP"), None, {}, Step("clean-up"), id="finalizer-left"),
        pytest.param(service(deleting=True), synced(WEB), {}, Step("clean-up"), id="deleting"),
        pytest.param(
            service(finalizer=False, loadBalancerClass="other"),
            synced(WEB),
            {},
            Step("clean-up"),
            id="class-set-after-ensure",
        ),
        pytest.param(
            service(ports=[]),
            None,
            {},
            Step("refuse", "spec.ports is empty: a load balancer needs at least one port"),
            id="no-ports",
        ),
        pytest.param(
            service(ports=[]),
            None,
            {"invalid": fingerprint(service(ports=[]))},
            Step("skip", "refused already: waits for a change of the Service"),
            id="refused-already",
        ),
        pytest.param(WEB, None, {}, Step("ensure"), id="first-sight"),
        pytest.param(WEB, synced(WEB), {}, Step("skip", "up to date"), id="up-to-date"),
        pytest.param(WEB, synced(WEB), {"nodes": NODES_AB}, Step("update-hosts"), id="nodes-moved"),
        pytest.param(
            WEB, synced(WEB), {"force": True}, Step("ensure", quiet=True), id="reverify-quiet"
        ),
        pytest.param(
            service(ports=[{"port": 81, "protocol": "TCP"}]),
            synced(WEB),
            {},
            Step("ensure"),
            id="spec-changed",
        ),
        pytest.param(
            service(ingress=()), synced(WEB), {}, Step("ensure"), id="status-lost-by-someone"
        ),
        pytest.param(
            service(finalizer=False), synced(WEB), {}, Step("ensure"), id="finalizer-removed"
        ),
        pytest.param(WEB, synced(WEB), {"unknown": True}, Step("ensure"), id="unknown-no-shortcut"),
        pytest.param(
            WEB,
            synced(WEB),
            {"unknown": True, "nodes": NODES_AB},
            Step("ensure"),
            id="unknown-no-update-shortcut",
        ),
        pytest.param(
            WEB,
            synced(WEB),
            {"unknown": True, "force": True},
            Step("ensure", quiet=True),
            id="unknown-late-landing-check",
        ),
    ],
)
def test_plan(svc: Service, record: Synced | None, kwargs: dict[str, Any], expected: Step) -> None:
    """`plan` decides one step from the record, the Service and the node set."""
    args: dict[str, Any] = {"invalid": None, "unknown": False, "nodes": NODES_A, "force": False}
    args.update(kwargs)
    assert plan(svc, synced=record, **args) == expected


@pytest.mark.parametrize(
    ("changed", "same"),
    [
        pytest.param(service(ports=[{"port": 81, "protocol": "TCP"}]), False, id="port"),
        pytest.param(service(loadBalancerSourceRanges=["10.0.0.0/8"]), False, id="ranges"),
        pytest.param(service(externalTrafficPolicy="Local"), False, id="traffic-policy"),
        pytest.param(service(uid="u2"), False, id="recreated"),
        pytest.param(service(ingress=()), True, id="status-is-not-spec"),
        pytest.param(service(finalizer=False), True, id="finalizer-is-not-spec"),
    ],
)
def test_fingerprint(changed: Service, same: bool) -> None:
    """The fingerprint changes with what upstream's needsUpdate compares, not with our writes."""
    assert (fingerprint(changed) == fingerprint(WEB)) is same


@pytest.mark.parametrize(
    ("svc", "expected"),
    [
        pytest.param(WEB, [], id="fine"),
        pytest.param(
            service(ports=[]),
            ["spec.ports is empty: a load balancer needs at least one port"],
            id="no-ports",
        ),
        pytest.param(
            service(loadBalancerSourceRanges=["10.0.0.0/8", "bogus"]),
            ["spec.loadBalancerSourceRanges: 'bogus' is not a CIDR (e.g. 203.0.113.0/24)"],
            id="bad-range",
        ),
        pytest.param(
            msgspec.structs.replace(
                WEB,
                metadata=msgspec.structs.replace(
                    WEB.metadata,
                    annotations={"service.beta.kubernetes.io/load-balancer-source-ranges": "x"},
                ),
            ),
            [
                "annotation service.beta.kubernetes.io/load-balancer-source-ranges: 'x' is not "
                "a CIDR (e.g. 203.0.113.0/24)"
            ],
            id="bad-annotation",
        ),
    ],
)
def test_problems(svc: Service, expected: list[str]) -> None:
    """What makes a load balancer impossible is named with where it is and the fix."""
    assert problems(svc) == expected


@pytest.mark.parametrize(
    ("families", "ingress", "refused"),
    [
        pytest.param([], (LoadBalancerIngress(ip="192.0.2.1"),), False, id="no-families"),
        pytest.param(["IPv4"], (LoadBalancerIngress(ip="192.0.2.1"),), False, id="v4-v4"),
        pytest.param(["IPv6"], (LoadBalancerIngress(ip="192.0.2.1"),), True, id="v6-got-v4"),
        pytest.param(
            ["IPv6"],
            (LoadBalancerIngress(ip="192.0.2.1"), LoadBalancerIngress(ip="2001:db8::1")),
            False,
            id="dual-answer",
        ),
        pytest.param(["IPv6"], (LoadBalancerIngress(hostname="lb"),), False, id="hostname"),
    ],
)
def test_family_mismatch(
    families: list[str], ingress: tuple[LoadBalancerIngress, ...], refused: bool
) -> None:
    """An ingress of only families the Service does not ask for is refused, with the fix."""
    reason = family_mismatch(service(ipFamilies=families), ingress)
    assert bool(reason) is refused
    if refused:
        assert "add one it can to spec.ipFamilies" in reason


def test_wants_load_balancer() -> None:
    """A LoadBalancer Service without a class is ours; with a class or another type it is not."""
    assert wants_load_balancer(WEB)
    assert not wants_load_balancer(service(loadBalancerClass="other"))
    assert not wants_load_balancer(service(type="NodePort"))


def node(*, deleting: bool = False, **kwargs: Any) -> Node:
    body = make_node("n1", uninitialized=False, **kwargs)
    if deleting:
        body["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return msgspec.convert(body, Node, from_attributes=False)


EXCLUDE = "node.kubernetes.io/exclude-from-external-load-balancers"


@pytest.mark.parametrize(
    ("subject", "stable"),
    [
        pytest.param(node(), True, id="plain"),
        pytest.param(node(ready="False"), True, id="not-ready-still-a-backend"),
        pytest.param(node(deleting=True), False, id="deleting"),
        pytest.param(node(labels={EXCLUDE: ""}), False, id="excluded-empty"),
        pytest.param(node(labels={EXCLUDE: "true"}), False, id="excluded-true"),
        pytest.param(node(labels={EXCLUDE: "false"}), True, id="excluded-false"),
        pytest.param(node(labels={EXCLUDE: "F"}), True, id="excluded-go-false"),
        pytest.param(node(labels={EXCLUDE: "garbage"}), False, id="excluded-garbage"),
        pytest.param(
            node(taints=[{"key": "ToBeDeletedByClusterAutoscaler", "effect": "NoSchedule"}]),
            False,
            id="autoscaler-deleting",
        ),
    ],
)
def test_stable_node(subject: Node, stable: bool) -> None:
    """Upstream's stable-node predicates decide which Nodes are load balancer backends."""
    assert stable_node(subject) is stable


def test_node_set_is_provider_id_sensitive_and_order_blind() -> None:
    """The node-set digest changes with a provider ID, and equal sets give equal digests in
    any order."""
    a = NodeInfo("a", provider_id="sim://a")
    b = NodeInfo("b", provider_id="sim://b")
    assert node_set((a,)) == NODES_A
    assert node_set((b, a)) == NODES_AB
    assert node_set((NodeInfo("a", provider_id="sim://other"),)) != NODES_A
    assert node_set(()) != NODES_A
    assert node_set((a, b)) != node_set((NodeInfo("a", provider_id="sim://b"), b))
