"""msgspec Structs for the fields controllers read, and the resources they live at.

Decoded objects drop every field not declared here, so they are never written back with
PUT: writes are patches built from plain JSON (`patches.py`). Structs are frozen and
`gc=False` (they hold no cycles), which keeps a large cache cheap for the garbage collector.

Nodes are cached by the thousand, so `Node` keeps less: only the conditions the CCM reads
(Ready, NetworkUnavailable; type, status and reason), only the annotations it reads, and
the strings that repeat from Node to Node (condition and address types, label values,
taint keys) interned, so each is held once. Read a Node with `KubeClient.get` for more.
"""

from __future__ import annotations

import sys
from collections.abc import ItemsView, Iterable, Iterator, KeysView, Mapping, ValuesView
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

import msgspec
from msgspec.structs import force_setattr

from trio_ccm.base.values import LoadBalancerIngress, NodeAddress
from trio_ccm.kube.wellknown import (
    ANNOTATION_PROVIDED_NODE_IP,
    CONDITION_NETWORK_UNAVAILABLE,
    CONDITION_READY,
)

T = TypeVar("T")


class _Base(msgspec.Struct, frozen=True, gc=False, rename="camel", omit_defaults=True):
    pass


class OwnerReference(_Base, frozen=True, gc=False):
    api_version: str = ""
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool = False


class ObjectMeta(_Base, frozen=True, gc=False):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    generation: int = 0
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    labels: Mapping[str, str] = {}
    annotations: Mapping[str, str] = {}
    finalizers: tuple[str, ...] = ()
    owner_references: tuple[OwnerReference, ...] = ()


def resource_version_number(rv: str) -> int | None:
    """A resourceVersion as a number, for ordering versions of one object; None when it is
    not one (resourceVersions are opaque: etcd's are integers, other stores may differ)."""
    return int(rv) if rv.isdigit() else None


class Object(_Base, frozen=True, gc=False):
    """Any object: just its metadata (what informers need to key and version it)."""

    metadata: ObjectMeta = ObjectMeta()

    @property
    def key(self) -> str:
        """upstream's MetaNamespaceKeyFunc: "namespace/name", or "name" when cluster-scoped."""
        meta = self.metadata
        return f"{meta.namespace}/{meta.name}" if meta.namespace else meta.name


def share_unchanged(old: msgspec.Struct, new: msgspec.Struct) -> None:
    """Make a freshly decoded `new` hold `old`'s objects wherever they are equal, in place
    (`new` must not be shared yet): a field equal in both is set to `old`'s value, and a
    nested struct of the same type that differs is shared from the inside.

    An informer replaces an object with each new version of it; a Node's status update
    changes a condition's heartbeat time and the resourceVersion, nothing else it caches.
    Shared this way, the new version costs the few structs that differ, and every view
    that holds the old version's labels or addresses still holds what the cache holds.
    """
    if type(old) is not type(new):
        return
    for name in new.__struct_fields__:
        before, after = getattr(old, name), getattr(new, name)
        if before is after:
            continue
        if before == after:
            force_setattr(new, name, before)
        elif isinstance(after, msgspec.Struct):
            share_unchanged(before, after)


# -- Node --------------------------------------------------------------------------------
NODE_ANNOTATIONS_KEPT: Final = frozenset({ANNOTATION_PROVIDED_NODE_IP})
NODE_CONDITIONS_KEPT: Final = frozenset({CONDITION_READY, CONDITION_NETWORK_UNAVAILABLE})
_intern = sys.intern


_SHARED_KEY_SETS_MAX: Final = 4096


class NodeLabels(msgspec.Struct, frozen=True, gc=False):
    """A cached Node's labels (or kept annotations): a read-only Mapping whose values are a
    tuple and whose keys, with their positions, are shared by every Node that has the same
    label keys. 32 bytes plus the values' tuple, against about 460 for a dict of the eleven
    labels a kubelet sets (46 MB at 100,000 Nodes). Build with `NodeLabels.of(mapping)`."""

    positions: dict[str, int]
    """Key -> position in `texts`; shared: never mutate."""
    texts: tuple[str, ...]
    """The values, in the order of `positions` (not `values`: that is Mapping's method)."""

    @classmethod
    def of(cls, labels: Mapping[str, str], *, own: str = "") -> NodeLabels:
        """`labels`, compacted. Values are interned (they repeat from Node to Node), except
        those equal to `own` (the Node's name, as in `kubernetes.io/hostname`), which are
        `own` itself: a string found in one Node only would only grow the intern table."""
        # Looked up as decoded (a tuple of equal strings hashes and compares the same):
        # only a key set seen for the first time has its keys interned.
        keys = tuple(labels)
        index = _SHARED_KEY_SETS.get(keys)
        if index is None:
            keys = tuple(_intern(k) for k in keys)
            index = {key: i for i, key in enumerate(keys)}
            if len(_SHARED_KEY_SETS) < _SHARED_KEY_SETS_MAX:  # a bound, if keys vary per Node
                _SHARED_KEY_SETS[keys] = index
        return cls(index, tuple([own if v == own else _intern(v) for v in labels.values()]))

    def __getitem__(self, key: str) -> str:
        return self.texts[self.positions[key]]

    def get(self, key: str, default: str | None = None) -> str | None:
        i = self.positions.get(key)
        return default if i is None else self.texts[i]

    def __contains__(self, key: object) -> bool:
        return key in self.positions

    def __iter__(self) -> Iterator[str]:
        return iter(self.positions)

    def __len__(self) -> int:
        return len(self.texts)

    def keys(self) -> KeysView[str]:
        return KeysView(self)

    def items(self) -> ItemsView[str, str]:
        return ItemsView(self)

    def values(self) -> ValuesView[str]:
        return ValuesView(self)

    def _pairs(self) -> dict[str, str]:
        return dict(zip(self.positions, self.texts, strict=True))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, NodeLabels):
            if other.positions is self.positions:
                return self.texts == other.texts
            return self._pairs() == other._pairs()
        if isinstance(other, Mapping):
            return self._pairs() == dict(other.items())
        return NotImplemented

    def __repr__(self) -> str:
        return repr(self._pairs())


Mapping.register(NodeLabels)
# Key sets seen, shared by the Nodes that have them (a cache, as sys.intern's table is: the
# same for every cache and client in the process, and never changes what a Node reads).
_SHARED_KEY_SETS: dict[tuple[str, ...], dict[str, int]] = {}
_NO_LABELS: Final = NodeLabels({}, ())


def node_labels(labels: Mapping[str, str] | None, name: str) -> NodeLabels:
    """A Node's labels as cached: compacted, the value equal to its `name` shared (the
    hostname label); none, the one empty NodeLabels."""
    return NodeLabels.of(labels, own=name) if labels else _NO_LABELS


def node_labels_against(labels: Mapping[str, str] | None, name: str, was: NodeLabels) -> NodeLabels:
    """`node_labels(labels, name)` built against the cached `was` (a new version of the
    same Node's labels): `was` itself when equal; when the keys are `was`'s, in its order
    (a value changed, the usual change), `was`'s own strings wherever a value is as before,
    so only a changed value is interned. Equal to `node_labels(labels, name)` either way."""
    if not labels:
        return was if was is _NO_LABELS else _NO_LABELS
    keys = tuple(labels)
    if _SHARED_KEY_SETS.get(keys) is was.positions:  # the same keys in the same order
        texts = tuple(labels.values())
        before = was.texts
        if texts == before:
            return was
        return NodeLabels(
            was.positions,
            tuple(
                [
                    old if old == new else name if new == name else _intern(new)
                    for old, new in zip(before, texts, strict=True)
                ]
            ),
        )
    fresh = NodeLabels.of(labels, own=name)
    return was if fresh == was else fresh


def kept_annotations(annotations: Mapping[str, str] | None) -> NodeLabels:
    """A Node's annotations as cached: only those we read (`NODE_ANNOTATIONS_KEPT`)."""
    kept = (
        {k: v for k, v in annotations.items() if k in NODE_ANNOTATIONS_KEPT} if annotations else {}
    )
    return NodeLabels.of(kept) if kept else _NO_LABELS


class NodeMeta(ObjectMeta, frozen=True, gc=False):
    """ObjectMeta of a cached Node: labels as a compact NodeLabels with interned strings, and
    only the annotations we read."""

    def __post_init__(self) -> None:
        if isinstance(self.labels, NodeLabels) and isinstance(self.annotations, NodeLabels):
            return  # built from parts already compacted (`kube/versions.py`)
        # The name usually repeats as the hostname label (and a Hostname address: `Node`).
        force_setattr(self, "labels", node_labels(self.labels, self.name))
        force_setattr(self, "annotations", kept_annotations(self.annotations))


class Taint(_Base, frozen=True, gc=False):
    key: str = ""
    value: str = ""
    effect: str = ""
    time_added: str | None = None

    def __post_init__(self) -> None:
        force_setattr(self, "key", _intern(self.key))
        force_setattr(self, "effect", _intern(self.effect))


class NodeSpec(_Base, frozen=True, gc=False):
    provider_id: str = msgspec.field(default="", name="providerID")
    pod_cidr: str = msgspec.field(default="", name="podCIDR")
    pod_cidrs: tuple[str, ...] = msgspec.field(default=(), name="podCIDRs")
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False

    def __post_init__(self) -> None:
        if self.pod_cidrs and self.pod_cidr == self.pod_cidrs[0]:  # one string for both
            force_setattr(self, "pod_cidr", self.pod_cidrs[0])


class Condition(_Base, frozen=True, gc=False):
    """A condition; only what controllers compare (no heartbeat times)."""

    type: str = ""
    status: str = ""
    reason: str = ""
    message: str = ""


class NodeCondition(_Base, frozen=True, gc=False):
    """A Node condition as cached: what the CCM compares (status and reason, no message).
    Its strings are interned by `NodeStatus`, for the conditions it keeps only."""

    type: str = ""
    status: str = ""
    reason: str = ""


def kept_conditions(conditions: Iterable[NodeCondition]) -> tuple[NodeCondition, ...]:
    """A Node's conditions as cached: only those we read (`NODE_CONDITIONS_KEPT`)."""
    return tuple([c for c in conditions if c.type in NODE_CONDITIONS_KEPT])


class NodeStatus(_Base, frozen=True, gc=False):
    addresses: tuple[NodeAddress, ...] = ()
    conditions: tuple[NodeCondition, ...] = ()

    def __post_init__(self) -> None:
        kept = kept_conditions(self.conditions)
        for condition in kept:  # a few values, repeated by every Node
            force_setattr(condition, "type", _intern(condition.type))
            force_setattr(condition, "status", _intern(condition.status))
            force_setattr(condition, "reason", _intern(condition.reason))
        if len(kept) != len(self.conditions):
            force_setattr(self, "conditions", kept)

    def condition(self, kind: str) -> NodeCondition | None:
        return next((c for c in self.conditions if c.type == kind), None)


class Node(Object, frozen=True, gc=False):
    metadata: NodeMeta = NodeMeta()
    spec: NodeSpec = NodeSpec()
    status: NodeStatus = NodeStatus()

    def __post_init__(self) -> None:
        name = self.metadata.name
        for address in self.status.addresses:  # a Hostname address is usually the name
            if address.address == name:
                force_setattr(address, "address", name)


# -- Service -----------------------------------------------------------------------------
class ServicePort(_Base, frozen=True, gc=False):
    name: str = ""
    protocol: str = "TCP"
    port: int = 0
    target_port: int | str | None = None
    node_port: int = 0
    app_protocol: str | None = None


class LoadBalancerStatus(_Base, frozen=True, gc=False):
    ingress: tuple[LoadBalancerIngress, ...] = ()


class ServiceSpec(_Base, frozen=True, gc=False):
    type: str = "ClusterIP"
    ports: tuple[ServicePort, ...] = ()
    selector: dict[str, str] = {}
    cluster_ip: str = msgspec.field(default="", name="clusterIP")
    cluster_ips: tuple[str, ...] = msgspec.field(default=(), name="clusterIPs")
    external_ips: tuple[str, ...] = msgspec.field(default=(), name="externalIPs")
    external_traffic_policy: str = ""
    internal_traffic_policy: str = ""
    health_check_node_port: int = 0
    load_balancer_class: str | None = None
    load_balancer_ip: str = msgspec.field(default="", name="loadBalancerIP")
    load_balancer_source_ranges: tuple[str, ...] = ()
    allocate_load_balancer_node_ports: bool | None = None
    session_affinity: str = ""
    # {"clientIP": {"timeoutSeconds": N}}: compared, never interpreted.
    session_affinity_config: dict[str, dict[str, int]] | None = None
    ip_families: tuple[str, ...] = ()
    ip_family_policy: str = ""


class ServiceStatus(_Base, frozen=True, gc=False):
    load_balancer: LoadBalancerStatus = LoadBalancerStatus()
    conditions: tuple[Condition, ...] = ()


class Service(Object, frozen=True, gc=False):
    spec: ServiceSpec = ServiceSpec()
    status: ServiceStatus = ServiceStatus()


# -- Lease -------------------------------------------------------------------------------
class LeaseSpec(_Base, frozen=True, gc=False):
    holder_identity: str | None = None
    lease_duration_seconds: int | None = None
    acquire_time: str | None = None
    renew_time: str | None = None
    lease_transitions: int | None = None


class Lease(Object, frozen=True, gc=False):
    spec: LeaseSpec = LeaseSpec()


# -- Event -------------------------------------------------------------------------------
class ObjectReference(_Base, frozen=True, gc=False):
    kind: str = ""
    namespace: str = ""
    name: str = ""
    uid: str = ""
    api_version: str = ""
    resource_version: str = ""
    field_path: str = ""


class EventSource(_Base, frozen=True, gc=False):
    component: str = ""
    host: str = ""


class Event(Object, frozen=True, gc=False):
    involved_object: ObjectReference = ObjectReference()
    reason: str = ""
    message: str = ""
    type: str = ""
    count: int = 0
    first_timestamp: str | None = None
    last_timestamp: str | None = None
    source: EventSource = EventSource()
    reporting_component: str = ""
    reporting_instance: str = ""


# -- envelopes ---------------------------------------------------------------------------
class ListMeta(_Base, frozen=True, gc=False):
    resource_version: str = ""
    continue_: str = msgspec.field(default="", name="continue")
    remaining_item_count: int | None = None


class ObjectList(_Base, Generic[T], frozen=True, gc=False):
    metadata: ListMeta = ListMeta()
    items: tuple[T, ...] = ()


class WatchEvent(msgspec.Struct, frozen=True, gc=False):
    """One line of a watch stream; `object` is decoded later, by type."""

    type: str
    object: msgspec.Raw


class Watched(msgspec.Struct, Generic[T], frozen=True, gc=False):
    """One line of a watch stream with its object decoded as `T` (`KubeClient.watch_as`)."""

    type: str
    object: T


class StatusDetails(_Base, frozen=True, gc=False):
    name: str = ""
    group: str = ""
    kind: str = ""
    retry_after_seconds: int = 0
    causes: tuple[dict[str, str], ...] = ()


class Status(_Base, frozen=True, gc=False):
    """A `Status` body: what the API server answers for errors."""

    status: str = ""
    message: str = ""
    reason: str = ""
    code: int = 0
    details: StatusDetails | None = None
    metadata: dict[str, str] = {}


# -- resources ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Resource:
    """Where a kind lives in the API."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str = "", name: str = "", subresource: str = "") -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        return base


NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
SERVICES = Resource("", "v1", "services", "Service", namespaced=True)
EVENTS = Resource("", "v1", "events", "Event", namespaced=True)
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap", namespaced=True)
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease", namespaced=True)
