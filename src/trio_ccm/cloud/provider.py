"""What a cloud provider implements: the protocols, the values they exchange, the errors.

This mirrors k8s.io/cloud-provider in its InstancesV2 flavour, in Python: snake_case names
of the upstream methods, all async, read-only views of Nodes and Services passed in.

A provider object has a `name` (its provider-ID scheme), an `initialize()` called once each
time this replica becomes leader (before any controller starts), and three optional
capabilities, each `None` when the cloud does not offer it (the controllers that need it
are then skipped with a log line):

- `instances` (`Instances`): instance metadata, existence and shutdown, per Node. A
  provider may also offer `BulkInstances.instances_metadata`, which answers for many Nodes
  in one cloud call; trio-ccm then coalesces concurrent per-Node lookups and serves the
  periodic address sync and lifecycle check from one bulk call per period. And it may offer
  `InstanceChangeFeed` (the instances changed since a cursor): the periodic address sync
  then compares only the Nodes whose instance changed (or that changed themselves), instead
  of every Node every period.
- `load_balancers` (`LoadBalancers`): one cloud load balancer per Service. It may also
  offer `LoadBalancerInventory` (list the load balancers made for this cluster, delete one
  by what the list said), which the service controller's sweep for leaked load balancers
  uses.
- `routes` (`Routes`): pod-network routes per Node.

A provider may also implement `ClusterIdentityAware` (`use_cluster_identity`): trio-ccm then
reads the UID of the `kube-system` Namespace once and hands it over before `initialize()`,
so that the provider can tell this cluster's cloud resources from another's that runs with
the same `--cluster-name`. A provider without it is never asked and nothing is read.

Upstream's v1 `Instances` and `Zones` are folded into `instance_metadata` (as InstancesV2
does); `Clusters` is used by no controller upstream and is left out.

Errors: `InstanceNotFoundError` (the instance is gone), `InvalidProviderIDError` (the
Node's provider ID is not this cloud's), `ServiceRefused` (this cloud cannot serve the
Service as written), `ImplementedElsewhere` (another controller owns this load balancer),
`RetryAfter(delay_s)` (retry after exactly this, e.g. a load balancer still provisioning),
`ThrottledError` (the cloud refused the call for its rate; the shared budget slows down).
Any other exception is retried with exponential backoff.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol, runtime_checkable

import msgspec

# Public here; one class each with the kube cache's (trio_ccm.base.values says why).
from trio_ccm.base.values import (
    LoadBalancerIngress,
    NodeAddress,  # public here (one class with the kube cache's)
    PortStatus,
)
from trio_ccm.errors import CcmError, RetryAfter

__all__ = [
    "ADDRESS_TYPES",
    "BulkInstances",
    "CloudProvider",
    "ClusterIdentityAware",
    "ImplementedElsewhere",
    "InstanceChangeFeed",
    "InstanceChanges",
    "InstanceMetadata",
    "InstanceNotFoundError",
    "Instances",
    "InvalidProviderIDError",
    "LoadBalancerIngress",
    "LoadBalancerInventory",
    "LoadBalancerStatus",
    "LoadBalancers",
    "NodeAddress",
    "NodeInfo",
    "OwnedLoadBalancer",
    "PortStatus",
    "RetryAfter",
    "Route",
    "Routes",
    "ServiceInfo",
    "ServicePort",
    "ServiceRefused",
    "StaleCursorError",
    "ThrottledError",
    "default_load_balancer_name",
]

ADDRESS_TYPES = ("Hostname", "InternalIP", "ExternalIP", "InternalDNS", "ExternalDNS")
"""The Node address types Kubernetes knows (core/v1 NodeAddressType)."""


# -- errors ------------------------------------------------------------------------------
class InstanceNotFoundError(CcmError):
    """The cloud has no instance for this Node (it was terminated or never existed).

    Raise it from `instance_metadata` (the Node stays tainted and is retried) or from
    `instance_exists`, which should rather return False: an error is never read as "gone".
    """


class InvalidProviderIDError(CcmError):
    """The Node's provider ID is malformed, or belongs to another cloud: no lookup can find
    its instance.

    Raise it from `instance_metadata`, `instance_exists` or `instance_shutdown` before any
    cloud call. trio-ccm then gives the Node one Warning Event (`InvalidProviderID`), leaves
    it uninitialised and never deletes it; it looks again only when the Node changes.
    """


class StaleCursorError(CcmError):
    """The cloud cannot say what changed since this cursor: it is too old, from before a
    restart of the cloud's change log, or not one the cloud gave out.

    Raise it from `InstanceChangeFeed.instances_changed_since`. trio-ccm then compares every
    Node once (a full pass, with a new cursor taken first), so no change is lost.
    """


class ServiceRefused(CcmError):  # noqa: N818 - a verdict, like ImplementedElsewhere
    """This cloud cannot serve the Service as written (say an IP family or a protocol it
    has no load balancers for). The message names the field and the fix.

    Raise it from `ensure_load_balancer` before creating anything. trio-ccm turns it into
    one Warning Event and one log line, no traceback, and asks again only when the Service
    changes.
    """


class ImplementedElsewhere(CcmError):  # noqa: N818 - upstream's name
    """Another controller owns this Service's load balancer (upstream's
    `cloudprovider.ImplementedElsewhere`).

    Raise it from `ensure_load_balancer` or `update_load_balancer`: the service-lb-controller
    logs `service.implemented-elsewhere`, writes no status and no Event, and asks again only
    when the Service (or, for updates, the set of Nodes) changes. The cleanup finalizer is
    still added, so deleting the Service still calls `ensure_load_balancer_deleted`: never
    raise it from there, so that load balancers made earlier are torn down.
    """


class ThrottledError(CcmError):
    """The cloud refused the call because of its rate limits (HTTP 429, RequestLimitExceeded).

    The shared budget halves the rate of the method's family (recovering it gradually) and,
    when the cloud said `retry_after_s`, lets no call of that family start before then;
    the object is retried with its usual exponential backoff.
    """

    def __init__(self, message: str = "", *, retry_after_s: float | None = None) -> None:
        super().__init__(message or "the cloud throttled the call")
        self.retry_after_s = retry_after_s


class OutcomeUnknownError(CcmError):
    """A mutating cloud call was sent but its outcome is unknown: it timed out, lost its
    connection after the request was written, or got a 5xx after sending. The cloud may still
    apply it, later than any retry. Providers raise it (``from`` the transport error) instead
    of a plain failure so that controllers stop trusting their record of what is applied;
    a failure before sending (connect error) or a 4xx is a clean failure, not this.

    `late_landing_s` is how long after the call's start the provider knows the cloud may
    still apply it (its timeout plus the cloud's queueing margin), when it knows.
    """

    def __init__(self, message: str = "", *, late_landing_s: float | None = None) -> None:
        super().__init__(message or "the cloud call was sent; its outcome is unknown")
        self.late_landing_s = late_landing_s


# -- values ------------------------------------------------------------------------------
# NodeInfo (and NodeAddress, trio_ccm.base.values) are kept for every Node (the
# service-lb-controller's views, a bulk lookup's arguments): frozen msgspec Structs with
# gc=False (they hold no cycles), so 100,000 of them neither carry a garbage-collector
# header nor make each full collection walk them. Built, compared, hashed and read like
# frozen dataclasses; `msgspec.structs.replace` copies one with changes.
class NodeInfo(msgspec.Struct, frozen=True, gc=False):
    """A read-only view of a Node, as providers see it."""

    name: str
    uid: str = ""
    provider_id: str = ""
    labels: Mapping[str, str] = msgspec.field(default_factory=dict)
    annotations: Mapping[str, str] = msgspec.field(default_factory=dict)
    addresses: tuple[NodeAddress, ...] = ()
    pod_cidrs: tuple[str, ...] = ()
    ready: bool | None = None
    """The Ready condition: True, False, or None when Unknown or absent."""


@dataclass(frozen=True, slots=True)
class InstanceMetadata:
    """What the cloud knows about a Node's instance (upstream's InstanceMetadata).

    `provider_id` lands in `spec.providerID` if the Node has none; `instance_type`, `zone`
    and `region` become the well-known labels; `node_addresses` becomes
    `status.addresses`; `additional_labels` are applied at initialisation only, except keys
    in a Kubernetes namespace and keys the Node already has. `shutdown` is ours: a bulk
    listing says whether the instance is stopped, so the lifecycle check needs no
    per-Node call.
    """

    provider_id: str = ""
    instance_type: str = ""
    node_addresses: tuple[NodeAddress, ...] = ()
    zone: str = ""
    region: str = ""
    additional_labels: Mapping[str, str] = field(default_factory=dict)
    shutdown: bool = False


@dataclass(frozen=True, slots=True)
class InstanceChanges:
    """What `InstanceChangeFeed.instances_changed_since` answers.

    `changed` holds the metadata of every instance whose metadata changed after the cursor
    asked from, keyed by provider ID, spelled as `instance_metadata` spells it (and as
    trio-ccm writes it into `spec.providerID`). It may hold instances that did not change
    (a feed may over-report, never under-report); instances that are gone need not be in
    it (the lifecycle controller finds those). `cursor` is where this answer ends: trio-ccm
    asks from it next time, and never reads it.
    """

    cursor: str
    changed: Mapping[str, InstanceMetadata] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ServicePort:
    name: str
    protocol: str
    port: int
    node_port: int = 0
    app_protocol: str | None = None


@dataclass(frozen=True, slots=True)
class ServiceInfo:
    """A read-only view of a Service of type LoadBalancer."""

    namespace: str
    name: str
    uid: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    ports: tuple[ServicePort, ...] = ()
    external_traffic_policy: str = "Cluster"
    health_check_node_port: int = 0
    load_balancer_class: str | None = None
    load_balancer_ip: str = ""
    load_balancer_source_ranges: tuple[str, ...] = ()
    session_affinity: str = "None"
    ip_families: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class LoadBalancerStatus:
    """What `ensure_load_balancer` made: the Service's `status.loadBalancer.ingress`, and
    `annotations` the provider wants on the Service (OCCM writes back
    `loadbalancer.openstack.org/load-balancer-id`, so that the Service keeps its load
    balancer). The service-lb-controller sets each one whose value differs, with one merge
    patch of `metadata.annotations`, as leader only; it never removes an annotation. A
    provider that sets none gets no extra write.

    `warnings`: changes the provider did not make while it keeps serving the load balancer
    as it is (say a type AWS cannot change), each a message naming the field and the fix.
    Each becomes a Warning Event (`SyncLoadBalancerFailed`) on every ensure that is not a
    quiet re-verification; otherwise the call is a success (status written, and later Node
    changes go to `update_load_balancer`)."""

    ingress: tuple[LoadBalancerIngress, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Route:
    """A pod-network route: traffic for `destination_cidr` goes to `target_node`.

    `name` is the provider's (ignored on create); `blackhole` marks a route whose target
    is gone; `target_node_addresses` is filled only when the provider set
    `Routes.enable_node_addresses`.
    """

    target_node: str
    destination_cidr: str
    name: str = ""
    blackhole: bool = False
    target_node_addresses: tuple[NodeAddress, ...] = ()


# -- capabilities ------------------------------------------------------------------------
@runtime_checkable
class Instances(Protocol):
    async def instance_metadata(self, node: NodeInfo) -> InstanceMetadata | None:
        """Metadata of the Node's instance; look it up by provider ID first, then by name.

        None means "nothing to say": the Node stays tainted and is asked again later.
        """
        ...

    async def instance_exists(self, node: NodeInfo) -> bool:
        """False only when the instance is gone for good: its Node is then deleted.

        Stopped instances exist. When unsure, raise: errors never delete a Node.
        """
        ...

    async def instance_shutdown(self, node: NodeInfo) -> bool:
        """True when the instance exists but is stopped (its Node gets the shutdown taint)."""
        ...


@runtime_checkable
class BulkInstances(Protocol):
    async def instances_metadata(self, nodes: Sequence[NodeInfo]) -> Mapping[str, InstanceMetadata]:
        """Metadata for many Nodes in one cloud call, keyed by Node name.

        A Node missing from the answer has no instance. trio-ccm asks `instance_exists`
        before deleting such a Node, so a bulk listing that misses an instance (eventual
        consistency) never deletes a Node on its own.
        """
        ...


@runtime_checkable
class InstanceChangeFeed(Protocol):
    """Optional, beside `Instances`: what changed in the cloud's instances since a cursor.

    A cloud that keeps a change log (a revision per instance, a `changes-since` filter)
    implements it on its `instances`; the periodic address sync then asks only what changed
    since its last pass. Without it, every pass looks up every Node (in bulk calls when the
    provider offers `BulkInstances`), as before: the feed is never required.
    """

    async def instances_cursor(self) -> str:
        """The cloud's position now: `instances_changed_since` with it reports every change
        made after this call started. trio-ccm takes one before a pass over every Node."""
        ...

    async def instances_changed_since(self, cursor: str) -> InstanceChanges:
        """The instances changed after `cursor` (from `instances_cursor` or an earlier
        answer), and the cursor to ask from next time.

        Raise `StaleCursorError` when the cloud cannot answer from `cursor`; any error is
        safe: trio-ccm then compares every Node once and takes a new cursor.
        """
        ...


@runtime_checkable
class LoadBalancers(Protocol):
    async def get_load_balancer(
        self, cluster: str, service: ServiceInfo
    ) -> LoadBalancerStatus | None:
        """The status of the Service's load balancer, or None when there is none."""
        ...

    def load_balancer_name(self, cluster: str, service: ServiceInfo) -> str: ...

    async def ensure_load_balancer(
        self, cluster: str, service: ServiceInfo, nodes: Sequence[NodeInfo]
    ) -> LoadBalancerStatus:
        """Create or update the load balancer to match the Service and balance to `nodes`."""
        ...

    async def update_load_balancer(
        self, cluster: str, service: ServiceInfo, nodes: Sequence[NodeInfo]
    ) -> None:
        """Change only the backends to `nodes`."""
        ...

    async def ensure_load_balancer_deleted(self, cluster: str, service: ServiceInfo) -> None:
        """Delete the load balancer; succeed when there is none (idempotent)."""
        ...


@dataclass(frozen=True, slots=True)
class OwnedLoadBalancer:
    """A load balancer the provider made for this cluster, and the Service it was made for
    (`uid` when the cloud keeps it; the controller also compares names). `address` is the
    hostname or IP it serves at, when the provider knows it: the sweep then also reports a
    load balancer the live Service's status no longer names (one left behind by a change
    the cloud made as a second load balancer of the same name)."""

    name: str
    namespace: str
    service: str
    uid: str = ""
    address: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.service}"


@runtime_checkable
class LoadBalancerInventory(Protocol):
    """Optional, beside `LoadBalancers`: what the sweep for leaked load balancers needs."""

    async def list_load_balancers(self, cluster: str) -> Sequence[OwnedLoadBalancer]:
        """Every load balancer this provider made for `cluster` (tagged, named, or kept so
        that it can tell), whatever state its Service is in."""
        ...

    async def delete_leaked_load_balancer(self, cluster: str, lb: OwnedLoadBalancer) -> None:
        """Delete a load balancer `list_load_balancers` returned, with everything the
        provider made for it; succeed when it is gone already."""
        ...


@runtime_checkable
class Routes(Protocol):
    @property
    def enable_node_addresses(self) -> bool:
        """Whether routes carry their target's addresses (`Route.target_node_addresses`)."""
        ...

    async def list_routes(self, cluster: str) -> Sequence[Route]: ...

    async def create_route(self, cluster: str, name_hint: str, route: Route) -> None:
        """Create `route`; `name_hint` is the target Node's UID."""
        ...

    async def delete_route(self, cluster: str, route: Route) -> None:
        """Delete a route as `list_routes` returned it."""
        ...


@runtime_checkable
class CloudProvider(Protocol):
    """A cloud: its provider-ID scheme, its start-up hook and its capabilities.

    The members are read-only, so a provider may hold them as plain attributes
    (`self.instances = MyInstances()`, `routes = None`) or as properties, and still
    type-check as a CloudProvider.
    """

    @property
    def name(self) -> str: ...

    @property
    def instances(self) -> Instances | None: ...

    @property
    def load_balancers(self) -> LoadBalancers | None: ...

    @property
    def routes(self) -> Routes | None: ...

    async def initialize(self) -> None:
        """Called each time this replica becomes leader, before the controllers start."""
        ...


@runtime_checkable
class ClusterIdentityAware(Protocol):
    """Optional, on the provider object: it wants the cluster's identity.

    The identity is the UID of the `kube-system` Namespace: it lives as long as the
    cluster, and two clusters never share it, whatever their `--cluster-name`. trio-ccm
    reads it once (with `get` on that Namespace, granted by `deploy/rbac-openstack.yaml`)
    and calls `use_cluster_identity` before `initialize()` of the first term it leads. When
    it cannot be read (no RBAC grant, the API failing), an error is logged naming the fix,
    the method is not called, the provider goes on as it was built (typically as upstream
    does, with no identity) and the read is tried again at the start of the next term.
    """

    def use_cluster_identity(self, identity: str) -> None:
        """Take `identity` (the kube-system Namespace UID) as this cluster's, from now on."""
        ...


MAX_LOAD_BALANCER_NAME: Final = 32


def default_load_balancer_name(service: ServiceInfo) -> str:
    """Upstream's `cloudprovider.DefaultLoadBalancerName`: "a" + the Service's UID without
    dashes, at most 32 characters (a leading letter for GCE, 32 bytes for AWS). Providers
    that name load balancers this way adopt the ones the Go CCM made."""
    return ("a" + service.uid.replace("-", ""))[:MAX_LOAD_BALANCER_NAME]


def inventory(lbs: LoadBalancers) -> LoadBalancerInventory | None:
    """The provider's load-balancer inventory, when its `load_balancers` offers one."""
    return lbs if isinstance(lbs, LoadBalancerInventory) else None


def bulk_instances(instances: Instances) -> BulkInstances | None:
    """The provider's bulk lookup, when its `instances` also implements BulkInstances."""
    return instances if isinstance(instances, BulkInstances) else None


def change_feed(instances: Instances) -> InstanceChangeFeed | None:
    """The provider's change feed, when its `instances` also implements InstanceChangeFeed."""
    return instances if isinstance(instances, InstanceChangeFeed) else None
