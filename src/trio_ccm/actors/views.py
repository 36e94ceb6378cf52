"""Read-only views of cached objects for providers (`NodeInfo`), and Event references."""

from __future__ import annotations

from trio_ccm.cloud.provider import NodeAddress, NodeInfo, ServiceInfo, ServicePort
from trio_ccm.kube.events import ObjectRef
from trio_ccm.kube.objects import NODES, SERVICES, Node, Resource, Service
from trio_ccm.kube.patches import JSONValue, encode
from trio_ccm.kube.wellknown import CONDITION_READY


def node_info(node: Node) -> NodeInfo:
    """What a provider is shown of a Node."""
    ready = node.status.condition(CONDITION_READY)
    return NodeInfo(
        name=node.metadata.name,
        uid=node.metadata.uid,
        provider_id=node.spec.provider_id,
        # The cached Node's own dicts, not copies (one per Node adds up at 100,000 Nodes);
        # providers get them as read-only Mappings.
        labels=node.metadata.labels,
        annotations=node.metadata.annotations,
        addresses=node_addresses(node),
        pod_cidrs=node.spec.pod_cidrs or ((node.spec.pod_cidr,) if node.spec.pod_cidr else ()),
        ready=None if ready is None or ready.status == "Unknown" else ready.status == "True",
    )


def node_addresses(node: Node) -> tuple[NodeAddress, ...]:
    """The Node's status.addresses as providers' values, in order."""
    return node.status.addresses  # the cached Node's own (one NodeAddress class for both)


def _ref(obj: Node | Service, resource: Resource) -> ObjectRef:
    """An Event's involvedObject: apiVersion, kind, namespace, name, uid (no
    resourceVersion, so repeats about one object aggregate)."""
    meta = obj.metadata
    return ObjectRef(resource.kind, meta.name, meta.namespace, meta.uid, resource.api_version)


def node_ref(node: Node) -> ObjectRef:
    """An Event's involvedObject for a Node."""
    return _ref(node, NODES)


def has_taint(node: Node, key: str) -> bool:
    taints = node.spec.taints
    if not taints:  # most Nodes: asked of every Node by periodic passes, so no generator
        return False
    return any(t.key == key for t in taints)


def taints_json(node: Node) -> list[dict[str, JSONValue]]:
    """The Node's taints as the API server returns them (for guarded JSON patches), as
    their Struct encodes them."""
    return [encode(taint) for taint in node.spec.taints]


def service_info(service: Service) -> ServiceInfo:
    """What a provider is shown of a Service."""
    meta, spec = service.metadata, service.spec
    return ServiceInfo(
        namespace=meta.namespace,
        name=meta.name,
        uid=meta.uid,
        labels=dict(meta.labels),
        annotations=dict(meta.annotations),
        ports=tuple(
            ServicePort(p.name, p.protocol, p.port, p.node_port, p.app_protocol) for p in spec.ports
        ),
        external_traffic_policy=spec.external_traffic_policy or "Cluster",
        health_check_node_port=spec.health_check_node_port,
        load_balancer_class=spec.load_balancer_class,
        load_balancer_ip=spec.load_balancer_ip,
        load_balancer_source_ranges=tuple(spec.load_balancer_source_ranges),
        session_affinity=spec.session_affinity or "None",
        ip_families=tuple(spec.ip_families),
    )


def service_ref(service: Service) -> ObjectRef:
    """An Event's involvedObject for a Service."""
    return _ref(service, SERVICES)
