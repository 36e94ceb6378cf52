"""Read-only views of cached objects for providers (`NodeInfo`), and Event references."""

from __future__ import annotations

from trio_ccm.cloud.provider import NodeAddress, NodeInfo
from trio_ccm.kube.events import ObjectRef
from trio_ccm.kube.objects import NODES, Node
from trio_ccm.kube.patches import JSONValue
from trio_ccm.kube.wellknown import CONDITION_READY


def node_info(node: Node) -> NodeInfo:
    """What a provider is shown of a Node."""
    ready = node.status.condition(CONDITION_READY)
    return NodeInfo(
        name=node.metadata.name,
        uid=node.metadata.uid,
        provider_id=node.spec.provider_id,
        labels=dict(node.metadata.labels),
        annotations=dict(node.metadata.annotations),
        addresses=node_addresses(node),
        pod_cidrs=node.spec.pod_cidrs or ((node.spec.pod_cidr,) if node.spec.pod_cidr else ()),
        ready=None if ready is None or ready.status == "Unknown" else ready.status == "True",
    )


def node_addresses(node: Node) -> tuple[NodeAddress, ...]:
    """The Node's status.addresses as providers' values, in order."""
    return tuple(NodeAddress(a.type, a.address) for a in node.status.addresses)


def node_ref(node: Node) -> ObjectRef:
    """An Event's involvedObject for a Node (upstream: apiVersion v1, kind Node, name, uid)."""
    meta = node.metadata
    return ObjectRef(NODES.kind, meta.name, "", meta.uid, NODES.api_version)


def has_taint(node: Node, key: str) -> bool:
    return any(t.key == key for t in node.spec.taints)


def taints_json(node: Node) -> list[dict[str, JSONValue]]:
    """The Node's taints as the API server returns them (for guarded JSON patches)."""
    taints: list[dict[str, JSONValue]] = []
    for taint in node.spec.taints:
        body: dict[str, JSONValue] = {"key": taint.key, "effect": taint.effect}
        if taint.value:
            body["value"] = taint.value
        if taint.time_added:
            body["timeAdded"] = taint.time_added
        taints.append(body)
    return taints
