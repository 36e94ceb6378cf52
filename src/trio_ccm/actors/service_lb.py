"""service-lb-controller: a cloud load balancer for every Service of type LoadBalancer.

Contract:
- **Which Services**: `spec.type: LoadBalancer` without `spec.loadBalancerClass`. One that
  no longer wants a load balancer (or is being deleted) and still carries the finalizer
  `service.kubernetes.io/load-balancer-cleanup` has its load balancer deleted, then its
  status cleared, then the finalizer removed.
- **The finalizer is added before any cloud call** that could create something, so a load
  balancer never exists without a finalizer that makes sure it is deleted.
- **Writes** go to `services/status` (finalizers too, as upstream): JSON patches guarded by
  the finalizers seen; the status only when the ingress changes.
- **Backends** are the Nodes passing upstream's predicates (not being deleted, not excluded
  by label, not `ToBeDeletedByClusterAutoscaler`). A node-set change is pushed to every
  load balancer once it settles; what a load balancer holds is recorded only after the
  cloud said yes.
- **Retries**: one actor per Service; `RetryAfter(d)` exactly, other errors 5 s → 300 s;
  a change by the Service's owner cuts a backoff short. A bad Service gets one Warning and
  no cloud call until it changes. One Service's errors never hold up another.
- **Leaked load balancers** (when the provider offers a `LoadBalancerInventory`): every
  `--load-balancer-sweep-period`, from the term's start, the load balancers the provider
  made for this cluster are compared with the Services: one whose Service is gone, was
  recreated (another name for the same namespace/name), or no longer wants one and has no
  finalizer left is reported (a warning and `service_controller_leaked_load_balancers`);
  with `--delete-leaked-load-balancers` it is deleted once it has stayed leaked for
  `--leaked-load-balancer-grace`. Never while the Service cache is not synced.
- State lives in one `_Record` per Service for the term, dropped by `_Term.forget`.

Upstream's rules kept and what trio-ccm does better: docs/controllers.md.
"""

from __future__ import annotations

import dataclasses
import hashlib
import ipaddress
import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Final

import prometheus_client
import trio

from trio_ccm.actors.backoff import SERVICE_RETRY_BASE_S, SERVICE_RETRY_CAP_S, Backoff
from trio_ccm.actors.controller import Controller, ControllerContext, ControllerSetup
from trio_ccm.actors.keyed import KeyedActors, Message, Reverify
from trio_ccm.actors.passes import Wake, serve_passes
from trio_ccm.actors.views import has_taint, node_info, service_info, service_ref
from trio_ccm.cloud.budget import DEFAULT_RATES
from trio_ccm.cloud.provider import (
    CloudProvider,
    ImplementedElsewhere,
    LoadBalancerInventory,
    LoadBalancers,
    LoadBalancerStatus,
    NodeInfo,
    OwnedLoadBalancer,
    ServiceRefused,
    inventory,
)
from trio_ccm.errors import CcmError
from trio_ccm.govalues import parse_bool
from trio_ccm.kube.client import NotFoundError
from trio_ccm.kube.informer import Changed, Gone, Update
from trio_ccm.kube.objects import (
    SERVICES,
    LoadBalancerIngress,
    Node,
    PortStatus,
    Service,
)
from trio_ccm.kube.patches import (
    JSONValue,
    Patch,
    add_finalizer,
    remove_finalizer,
    set_load_balancer_status,
)
from trio_ccm.kube.wellknown import (
    ANNOTATION_LB_SOURCE_RANGES,
    COMPONENT_SERVICE,
    FINALIZER_LB_CLEANUP,
    LABEL_EXCLUDE_FROM_LB,
    REASON_DELETE_LB_FAILED,
    REASON_DELETED_LB,
    REASON_DELETING_LB,
    REASON_ENSURED_LB,
    REASON_ENSURING_LB,
    REASON_SYNC_LB_FAILED,
    REASON_UNAVAILABLE_LB,
    REASON_UPDATE_LB_FAILED,
    REASON_UPDATED_LB,
    SERVICE_LB_CONTROLLER,
    TAINT_TO_BE_DELETED_BY_CA,
)
from trio_ccm.logs import get_logger
from trio_ccm.mailbox import Mailbox, MailboxReader
from trio_ccm.pacing import Paced
from trio_ccm.settings import Settings

__all__ = ["ServiceLbController", "ServiceMetrics", "stable_node", "wants_load_balancer"]

log = get_logger("trio_ccm.actors.service_lb")

MIN_CONCURRENCY: Final = 100
NODE_SYNC_COALESCE_S: Final = 1.0  # quiet time that ends a node-set change ...
NODE_SYNC_MAX_WAIT_S: Final = 10.0  # ... unless it keeps changing for this long
VERIFY_SHARE: Final = 0.5  # of the load-balancer family's rate, for re-verification
DRIFT_CHECK_PERIOD_S: Final = 1800.0
_NODE_NAMES_LIMIT: Final = 20
_LATENCY_BUCKETS: Final = tuple(2.0**k for k in range(15))  # 1 s .. 16384 s, as upstream

NodeSet = bytes
"""The backends as the controller compares them: a digest of the (Node name, provider ID)
pairs in name order (16 bytes, where a set of the pairs took 160 bytes per Node)."""


# -- upstream's predicates ---------------------------------------------------------------
def wants_load_balancer(service: Service) -> bool:
    return service.spec.type == "LoadBalancer" and service.spec.load_balancer_class is None


def _has_finalizer(service: Service) -> bool:
    return FINALIZER_LB_CLEANUP in service.metadata.finalizers


def stable_node(node: Node) -> bool:
    """Whether a Node is a backend of load balancers (upstream's stable node set)."""
    if node.metadata.deletion_timestamp:
        return False
    excluded = node.metadata.labels.get(LABEL_EXCLUDE_FROM_LB)
    # Go's strconv.ParseBool, as upstream: the label is ignored only for a false value.
    if excluded is not None and parse_bool(excluded) is not False:
        return False
    return not has_taint(node, TAINT_TO_BE_DELETED_BY_CA)


def _fingerprint(service: Service) -> tuple[object, ...]:
    """What upstream's needsUpdate compares: a change of any of these re-ensures."""
    spec = service.spec
    return (
        service.metadata.uid,
        spec.type,
        spec.load_balancer_class,
        tuple(spec.load_balancer_source_ranges),
        tuple(
            (p.name, p.protocol, p.port, p.node_port, p.target_port, p.app_protocol)
            for p in spec.ports
        ),
        spec.session_affinity,
        repr(spec.session_affinity_config),
        spec.load_balancer_ip,
        tuple(spec.external_ips),
        tuple(sorted(service.metadata.annotations.items())),
        spec.external_traffic_policy,
        spec.health_check_node_port,
        len(spec.ip_families),
    )


def _problems(service: Service) -> list[str]:
    """What makes any load balancer impossible, with the fix (no cloud call is made)."""
    problems = []
    if not service.spec.ports:
        problems.append("spec.ports is empty: a load balancer needs at least one port")
    ranges = list(service.spec.load_balancer_source_ranges)
    where = "spec.loadBalancerSourceRanges"
    if not ranges and service.metadata.annotations.get(ANNOTATION_LB_SOURCE_RANGES, "").strip():
        where = f"annotation {ANNOTATION_LB_SOURCE_RANGES}"
        ranges = service.metadata.annotations[ANNOTATION_LB_SOURCE_RANGES].split(",")
    for value in ranges:
        try:
            ipaddress.ip_network(value.strip(), strict=False)
        except ValueError:
            problems.append(f"{where}: {value.strip()!r} is not a CIDR (e.g. 203.0.113.0/24)")
    return problems


def _family_mismatch(service: Service, ingress: Sequence[LoadBalancerIngress]) -> str:
    """Why the provider's ingress cannot be the Service's ("" when it can): its addresses
    are all of IP families the Service does not ask for."""
    wanted = set(service.spec.ip_families)
    families = set()
    for entry in ingress:
        try:
            families.add(f"IPv{ipaddress.ip_address(entry.ip).version}" if entry.ip else "")
        except ValueError:
            families.add("")
    families.discard("")
    if not wanted or not families or families & wanted:
        return ""
    return (
        f"the cloud gave {', '.join(sorted(families))} addresses "
        f"({', '.join(e.ip for e in ingress if e.ip)}) but spec.ipFamilies asks for "
        f"{', '.join(service.spec.ip_families)}; the status is not written: the provider cannot "
        "serve this IP family, add one it can to spec.ipFamilies"
    )


def _ingress(status: LoadBalancerStatus) -> tuple[LoadBalancerIngress, ...]:
    """The provider's answer as the Service status holds it."""
    return tuple(
        LoadBalancerIngress(
            ip=i.ip,
            hostname=i.hostname,
            ip_mode=i.ip_mode,
            ports=tuple(PortStatus(p.port, p.protocol, p.error) for p in i.ports),
        )
        for i in status.ingress
    )


def _ingress_json(ingress: Sequence[LoadBalancerIngress]) -> list[dict[str, JSONValue]]:
    found: list[dict[str, JSONValue]] = []
    for entry in ingress:
        body: dict[str, JSONValue] = {}
        if entry.ip:
            body["ip"] = entry.ip
        if entry.hostname:
            body["hostname"] = entry.hostname
        if entry.ip_mode:
            body["ipMode"] = entry.ip_mode
        if entry.ports:
            ports: list[JSONValue] = []
            for port in entry.ports:
                item: dict[str, JSONValue] = {"port": port.port, "protocol": port.protocol}
                if port.error is not None:
                    item["error"] = port.error
                ports.append(item)
            body["ports"] = ports
        found.append(body)
    return found


def _names(nodes: Sequence[NodeInfo]) -> str:
    """Upstream's node list in messages: at most 20 names, then how many more."""
    names = [n.name for n in nodes[:_NODE_NAMES_LIMIT]]
    more = len(nodes) - len(names)
    return "[" + " ".join(names) + (f" <{more} more>" if more else "") + "]"


class ServiceMetrics:
    """Upstream's service controller metrics (created once per registry)."""

    def __init__(self, registry: prometheus_client.CollectorRegistry) -> None:
        self.sync_total = prometheus_client.Counter(
            "service_controller_loadbalancer_sync",
            "A metric counting the amount of times any load balancer has been configured, as "
            "an effect of service/node changes on the cluster",
            registry=registry,
        )
        self.nodesync_errors = prometheus_client.Counter(
            "service_controller_nodesync_error",
            "A metric counting the amount of times any load balancer has been configured and "
            "errored, as an effect of node changes on the cluster",
            registry=registry,
        )
        self.nodesync_latency = prometheus_client.Histogram(
            "service_controller_nodesync_latency_seconds",
            "A metric measuring the latency for nodesync which updates loadbalancer hosts on "
            "cluster node updates.",
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.update_latency = prometheus_client.Histogram(
            "service_controller_update_loadbalancer_host_latency_seconds",
            "A metric measuring the latency for updating each load balancer hosts.",
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.leaked = prometheus_client.Gauge(
            "service_controller_leaked_load_balancers",
            "Load balancers the provider made for this cluster whose Service is gone, was "
            "recreated or no longer wants one, at the last sweep.",
            registry=registry,
        )
        self.leaks_deleted = prometheus_client.Counter(
            "service_controller_leaked_load_balancers_deleted",
            "Leaked load balancers deleted by the sweep (--delete-leaked-load-balancers).",
            registry=registry,
        )


@dataclass(frozen=True, slots=True)
class _Synced:
    """What the cloud was last told, successfully, for one Service (this term only)."""

    uid: str
    fingerprint: tuple[object, ...]
    nodes: NodeSet
    ingress: tuple[LoadBalancerIngress, ...]


@dataclass(frozen=True, slots=True)
class _Backends:
    """The stable Nodes as load balancers get them: their set and the providers' views, by
    name (computed once per change of the Nodes, not once per load balancer). No `Node`s:
    a heartbeat replaces the cached Node, and holding the old one would keep two copies."""

    node_set: NodeSet
    infos: tuple[NodeInfo, ...]


class _NodeSyncPass:
    """One push of a new node set: the Services still to be updated, for the latency metric."""

    def __init__(self, keys: set[str]) -> None:
        self.started = trio.current_time()
        self.pending = keys


@dataclass(slots=True)
class _Record:
    """What this term knows of one Service; `_Term.forget` drops it (and its place in the
    re-verification queue and the node-sync pass)."""

    handled: Service | None = None
    """The Service as last handled (upstream's cache): deleting its load balancer needs it."""
    synced: _Synced | None = None
    invalid: tuple[object, ...] | None = None
    """The fingerprint a Warning was given for: no cloud call until it changes."""
    intent: tuple[object, ...] | None = None
    """What the owner last asked for (the router's: a change expedites a retry)."""
    routed: bool = False
    """The router has handed it on: only a first sighting may be deferred after a restart."""
    reverify: bool = False
    """A Reverify is on its way: a Changed that overtakes it is upgraded, not lost."""


class ServiceLbController(Controller):
    """service-lb-controller; see the module docstring."""

    name = SERVICE_LB_CONTROLLER
    informers = frozenset({"services", "nodes"})
    client_name = "service-controller"
    event_component = COMPONENT_SERVICE

    @classmethod
    def requires(cls, cloud: CloudProvider, settings: Settings) -> str | None:
        if cloud.load_balancers is None:
            return "the cloud provider has no load balancers"
        return None

    def __init__(self, setup: ControllerSetup) -> None:
        super().__init__(setup)
        self.metrics = ServiceMetrics(setup.registry)
        rates = {family: (qps, burst) for family, qps, burst in setup.settings.cloud_rates}
        qps = rates.get("load_balancers", (DEFAULT_RATES["load_balancers"].qps, 0))[0]
        self.verify_interval_s = 1.0 / (qps * VERIFY_SHARE)

    async def run(self, ctx: ControllerContext) -> None:
        """The router, the per-Service actors, the node watcher, the pacer, the drift check."""
        lbs = ctx.cloud.load_balancers
        assert lbs is not None  # requires() said so
        term = _Term(ctx, lbs, self.metrics)
        await term.load_views()
        term.actors = ctx.keyed(
            term.sync,
            limiter=trio.CapacityLimiter(
                max(ctx.settings.concurrent_service_syncs, MIN_CONCURRENCY)
            ),
            backoff=Backoff(SERVICE_RETRY_BASE_S, SERVICE_RETRY_CAP_S),
        )
        async with (
            ctx.services.subscription() as services,
            ctx.nodes.subscription() as nodes,
            trio.open_nursery() as nursery,
        ):
            nursery.start_soon(term.route, services)
            nursery.start_soon(term.actors.serve, term.inbox)
            nursery.start_soon(term.watch_nodes, nodes)
            # Deferred Services go to the actors one per verify interval, at the gentle rate.
            nursery.start_soon(
                partial(
                    serve_passes,
                    term.feed_deferred,
                    name=f"{ctx.name}/verify",
                    period_s=math.inf,
                    wake=term.deferred_added,
                    min_spacing_s=self.verify_interval_s,
                )
            )
            nursery.start_soon(
                partial(
                    serve_passes,
                    term.check_drift,
                    name=f"{ctx.name}/drift",
                    period_s=DRIFT_CHECK_PERIOD_S,
                )
            )
            found = inventory(lbs)
            if found is not None and ctx.settings.load_balancer_sweep_period_s > 0:
                sweep = _Sweep(term, found)
                nursery.start_soon(
                    partial(
                        serve_passes,
                        sweep.sweep,
                        name=f"{ctx.name}/sweep",
                        period_s=ctx.settings.load_balancer_sweep_period_s,
                    )
                )


class _Term:
    """One term of leadership: one `_Record` per Service, the actors and their feeders."""

    def __init__(self, ctx: ControllerContext, lbs: LoadBalancers, metrics: ServiceMetrics):
        self.ctx = ctx
        self.lbs = lbs
        self.metrics = metrics
        self.cluster = ctx.settings.cluster_name
        self.records: dict[str, _Record] = {}
        self.inbox: Mailbox[str, Message[Service]] = Mailbox()
        self.actors: KeyedActors[str, Message[Service]] | None = None
        self.deferred: OrderedDict[str, None] = OrderedDict()  # to re-verify gently, in order
        self.deferred_added = Wake()
        self.node_pass: _NodeSyncPass | None = None
        self.infos: dict[str, NodeInfo] = {}  # stable Node -> its view, kept by `_noted`
        self.views_stale = False  # a stable Node's view changed since `backends` was built
        self.backends = _Backends(self.node_set(()), ())  # `load_views` reads the Nodes

    def record(self, key: str) -> _Record:
        found = self.records.get(key)
        if found is None:
            found = self.records[key] = _Record()
        return found

    def forget(self, key: str) -> None:
        """The one way a Service leaves this term's bookkeeping."""
        self.records.pop(key, None)
        self.deferred.pop(key, None)
        self.node_pass_done(key)

    def send(self, key: str, message: Message[Service]) -> None:
        """Hand a message to the Service's actor (a Changed overtaking a Reverify on its way
        stays a Reverify)."""
        record = self.records.get(key)
        if isinstance(message, Changed) and record is not None and record.reverify:
            message = Reverify(message.obj)
        self.inbox.put(key, message)

    # -- which Services, and when --------------------------------------------------------
    async def route(self, mailbox: MailboxReader[str, Update[Service]]) -> None:
        """Hand Service changes to the actors; provisioned ones first seen go to the pacer."""
        async for key, update in mailbox:
            if isinstance(update, Gone):
                record = self.records.get(key)
                self.deferred.pop(key, None)
                if record is not None and record.handled is not None:
                    self.send(key, update)
                    self.expedite_if_changed(key, record, None)
                else:
                    self.forget(key)
                continue
            service = update.obj
            record = self.records.get(key)
            if record is None:
                if not (wants_load_balancer(service) or _has_finalizer(service)):
                    continue
                record = self.record(key)
            if not record.routed:
                record.routed = True
                if self.looks_provisioned(service):
                    self.defer(key)
                    continue
            self.deferred.pop(key, None)
            self.send(key, update)
            self.expedite_if_changed(key, record, service)

    def expedite_if_changed(self, key: str, record: _Record, service: Service | None) -> None:
        """A Service backing off after a failure is retried at once when its owner changed
        what it asks for (fixed it, deleted it, or no longer wants a load balancer), as
        upstream's queue does; our own status and finalizer writes do not count."""
        intent = (
            ()
            if service is None
            else (
                _fingerprint(service),
                bool(service.metadata.deletion_timestamp),
                wants_load_balancer(service),
            )
        )
        previous, record.intent = record.intent, intent
        changed = previous is not None and previous != intent
        if changed and self.actors is not None and self.actors.expedite(key):
            log.info("service.retry-expedited", service=key, reason="the Service changed")

    @staticmethod
    def looks_provisioned(service: Service) -> bool:
        return (
            wants_load_balancer(service)
            and _has_finalizer(service)
            and not service.metadata.deletion_timestamp
            and bool(service.status.load_balancer.ingress)
        )

    def defer(self, key: str) -> None:
        self.deferred[key] = None
        self.deferred_added.set()

    async def feed_deferred(self) -> None:
        """One deferred Service to its actor (a Reverify); the pacer runs this once per
        verify interval while any are left."""
        if not self.deferred:
            return
        key, _ = self.deferred.popitem(last=False)
        service = self.ctx.services.get(key)
        if service is not None:
            self.record(key).reverify = True
            self.inbox.put(key, Reverify(service))
        if self.deferred:
            self.deferred_added.set()

    async def check_drift(self) -> None:
        """Queue every load balancer ensured this term for a gentle re-verification."""
        for key in sorted(k for k, r in self.records.items() if r.synced is not None):
            self.deferred[key] = None
        if self.deferred:
            self.deferred_added.set()

    async def watch_nodes(self, mailbox: Mailbox[str, Update[Node]]) -> None:
        """Push a changed node set to every load balancer, once the changes have settled:
        no change of the set for NODE_SYNC_COALESCE_S, or NODE_SYNC_MAX_WAIT_S after the
        first. Readiness, heartbeats and labels other than the exclusion label are no
        change (upstream's predicates).

        The views (`self.infos`, one per stable Node) are kept as the Nodes change, one
        Node per notification (heartbeats are none: the informer does not deliver them);
        the set is compared, and the views sorted, only once a change has settled."""
        current = self.backends.node_set
        paced = Paced()  # a subscription starts with every Node: 100,000 of them, say
        while True:
            key, _ = await mailbox.get()
            moved = self._noted(key)
            while len(mailbox):  # already in the cache too: part of the set as it is now
                key, _ = mailbox.get_nowait()
                moved = self._noted(key) or moved
                await paced.step()
            if not moved:
                continue
            give_up_at = trio.current_time() + NODE_SYNC_MAX_WAIT_S
            while trio.current_time() < give_up_at:
                await trio.sleep(NODE_SYNC_COALESCE_S)
                moved = False
                while len(mailbox):
                    key, _ = mailbox.get_nowait()
                    moved = self._noted(key) or moved
                    await paced.step()
                if not moved:
                    break
            backends = await self.refresh_backends()
            if backends.node_set == current:
                continue
            current = backends.node_set
            # Every load balancer this term knows of: ensured ones, those waiting for their
            # gentle re-verification after a restart, and those whose last ensure or update
            # failed (their retry must end with these Nodes, not the ones it started with).
            keys = {
                key
                for key in [*self.records, *self.deferred]
                if (service := self.ctx.services.get(key)) is not None
                and wants_load_balancer(service)
            }
            log.info(
                "service.node-set-changed",
                nodes=len(backends.infos),
                load_balancers=len(keys),
            )
            self.node_pass = _NodeSyncPass(set(keys)) if keys else None
            for key in sorted(keys):
                service = self.ctx.services.get(key)
                if service is not None:
                    self.deferred.pop(key, None)
                    self.send(key, Changed(service))

    def _noted(self, name: str) -> bool:
        """Bring Node `name`'s view in `self.infos` up to date; whether the node set (its
        names and provider IDs) changed. A change of a view alone (addresses, labels,
        readiness) only marks the backends stale: re-sorted when a load balancer next
        needs them."""
        node = self.ctx.nodes.get(name)
        if node is None or not stable_node(node):
            if self.infos.pop(name, None) is None:
                return False
            self.views_stale = True
            return True
        view = node_info(node)
        cached = self.infos.get(name)
        if cached == view:
            return False
        self.infos[name] = view
        self.views_stale = True
        return cached is None or cached.provider_id != view.provider_id

    async def current_backends(self) -> _Backends:
        """The backends, their views rebuilt first if a Node's view changed meanwhile."""
        if self.views_stale:
            await self.refresh_backends()
        return self.backends

    @staticmethod
    def node_set(infos: Sequence[NodeInfo]) -> NodeSet:
        """The digest of the (name, provider ID) pairs of `infos` (sorted by name)."""
        digest = hashlib.blake2b(digest_size=16)
        for info in infos:
            digest.update(f"{info.name}\t{info.provider_id}\n".encode())
        return digest.digest()

    async def load_views(self) -> None:
        """A term's first views: every stable Node in the cache (paced: at 100,000 Nodes
        this is a second of work, which must not hold up other tasks)."""
        paced = Paced()
        for node in self.ctx.nodes.items():  # a copy: the cache may change as we yield
            await paced.step()
            if stable_node(node):
                self.infos[node.metadata.name] = node_info(node)
        await self.refresh_backends()

    async def refresh_backends(self) -> _Backends:
        """The backends from the views `_noted` keeps (every change of a Node's view
        reaches it: the informer delivers all but bare resourceVersion moves)."""
        views = tuple(view for _, view in sorted(self.infos.items()))
        await trio.lowlevel.checkpoint()
        self.views_stale = False
        self.backends = _Backends(self.node_set(views), views)
        return self.backends

    def node_pass_done(self, key: str, *, failed: bool = False) -> None:
        current = self.node_pass
        if current is None or key not in current.pending:
            return
        current.pending.discard(key)
        if failed:
            self.metrics.nodesync_errors.inc()
        if not current.pending:
            self.metrics.nodesync_latency.observe(trio.current_time() - current.started)
            self.node_pass = None

    # -- one Service ---------------------------------------------------------------------
    async def sync(self, key: str, message: Message[Service]) -> str | None:
        """One Service: its load balancer, finalizer and status. Returns the
        resourceVersion of our last write (so the actors skip its stale echoes)."""
        if isinstance(message, Gone):
            await self.process_deletion(key)
            return None
        service = message.obj
        force = isinstance(message, Reverify)
        record = self.record(key)
        if force:
            record.reverify = False
        old = record.handled
        if old is not None and old.metadata.uid != service.metadata.uid:
            log.info(
                "service.recreated",
                service=key,
                old_uid=old.metadata.uid,
                uid=service.metadata.uid,
            )
            await self.delete_load_balancer(key, old)
            record.synced = None
        record.handled = service
        try:
            written = await self.sync_load_balancer(key, record, service, force=force)
        except Exception as exc:
            self.ctx.events.warning(
                service_ref(service), REASON_SYNC_LB_FAILED, f"Error syncing load balancer: {exc}"
            )
            self.node_pass_done(key, failed=True)
            raise
        self.node_pass_done(key)
        return written

    async def process_deletion(self, key: str) -> None:
        """A Service gone without our finalizer: delete its load balancer if we knew it."""
        record = self.records.get(key)
        if record is not None and record.handled is not None and record.synced is not None:
            await self.delete_load_balancer(key, record.handled)
        self.forget(key)

    def refuse(self, key: str, record: _Record, service: Service, reason: str) -> None:
        """A Service no load balancer can be made for as written (our checks, or the
        provider's ServiceRefused): one Warning, one log line, no retry until it changes."""
        record.invalid = _fingerprint(service)
        self.ctx.events.warning(
            service_ref(service),
            REASON_SYNC_LB_FAILED,
            f"Error syncing load balancer: {reason}; fix the Service, it is retried when it "
            "changes",
        )
        log.warning("service.refused", service=key, reason=reason)

    async def delete_load_balancer(self, key: str, service: Service) -> None:
        """Upstream's processLoadBalancerDelete (Services without the finalizer)."""
        ref = service_ref(service)
        self.ctx.events.normal(ref, REASON_DELETING_LB, "Deleting load balancer")
        try:
            await self.lbs.ensure_load_balancer_deleted(self.cluster, service_info(service))
        except Exception as exc:
            self.ctx.events.warning(
                ref, REASON_DELETE_LB_FAILED, f"Error deleting load balancer: {exc}"
            )
            raise
        self.ctx.events.normal(ref, REASON_DELETED_LB, "Deleted load balancer")
        log.info("service.load-balancer-deleted", service=key, uid=service.metadata.uid)

    async def sync_load_balancer(
        self, key: str, record: _Record, service: Service, *, force: bool
    ) -> str | None:
        deleting = bool(service.metadata.deletion_timestamp)
        if not wants_load_balancer(service) or deleting:
            if _has_finalizer(service) or record.synced is not None:
                return await self.clean_up(key, service)
            self.forget(key)
            return None
        fingerprint = _fingerprint(service)
        if record.invalid == fingerprint:
            return None  # warned already; waits for a change of the Service
        problems = _problems(service)
        if problems:
            self.refuse(key, record, service, "; ".join(problems))
            return None
        record.invalid = None
        backends = await self.current_backends()
        previous = record.synced
        unchanged = (
            previous is not None
            and previous.fingerprint == fingerprint
            and previous.ingress == service.status.load_balancer.ingress
            and _has_finalizer(service)
        )
        if unchanged and not force:
            assert previous is not None
            if previous.nodes != backends.node_set:
                return await self.update_hosts(key, record, service, backends, previous)
            return None
        return await self.ensure(key, record, service, backends, quiet=force and unchanged)

    async def ensure(
        self,
        key: str,
        record: _Record,
        service: Service,
        backends: _Backends,
        *,
        quiet: bool,
    ) -> str | None:
        """Upstream's ensure branch; `quiet` (a re-verification) skips the Normal Events
        unless the status changes."""
        ref = service_ref(service)
        written: str | None = None
        if not quiet:
            self.ctx.events.normal(ref, REASON_ENSURING_LB, "Ensuring load balancer")
        if not _has_finalizer(service):
            written = await self.patch_status(
                key, add_finalizer(service.metadata.finalizers, FINALIZER_LB_CLEANUP)
            )
            log.info("service.finalizer-added", service=key)
        if not backends.infos:
            self.ctx.events.warning(
                ref, REASON_UNAVAILABLE_LB, "There are no available nodes for LoadBalancer"
            )
        info = service_info(service)
        try:
            status = await self.lbs.ensure_load_balancer(self.cluster, info, backends.infos)
        except ServiceRefused as exc:
            self.refuse(key, record, service, str(exc))
            return written
        except ImplementedElsewhere:
            log.info("service.implemented-elsewhere", service=key)
            record.synced = _Synced(
                service.metadata.uid,
                _fingerprint(service),
                backends.node_set,
                service.status.load_balancer.ingress,
            )
            return written
        if status is None:
            raise CcmError("service status returned by EnsureLoadBalancer is nil")
        ingress = _ingress(status)
        mismatch = _family_mismatch(service, ingress)
        if mismatch:
            self.refuse(key, record, service, mismatch)
            return written
        changed = ingress != service.status.load_balancer.ingress
        if changed or not quiet:
            self.ctx.events.normal(ref, REASON_ENSURED_LB, "Ensured load balancer")
        if changed:
            written = await self.patch_status(key, set_load_balancer_status(_ingress_json(ingress)))
            log.info(
                "service.status-updated",
                service=key,
                ingress=[i.ip or i.hostname for i in ingress],
            )
        record.synced = _Synced(
            service.metadata.uid, _fingerprint(service), backends.node_set, ingress
        )
        log.info(
            "service.load-balancer-ensured", service=key, nodes=len(backends.infos), quiet=quiet
        )
        self.push_if_moved(key, backends)
        return written

    async def update_hosts(
        self,
        key: str,
        record: _Record,
        service: Service,
        backends: _Backends,
        previous: _Synced,
    ) -> str | None:
        """Only the backends changed: `update_load_balancer`; recorded after success."""
        ref = service_ref(service)
        info = service_info(service)
        self.metrics.sync_total.inc()
        started = trio.current_time()
        missing = False
        try:
            await self.lbs.update_load_balancer(self.cluster, info, backends.infos)
        except ImplementedElsewhere:
            # A no-op for the provider, and no Event (upstream).
            record.synced = dataclasses.replace(previous, nodes=backends.node_set)
            return None
        except Exception as exc:
            record.synced = None  # a retry is a full ensure
            if await self.lbs.get_load_balancer(self.cluster, info) is not None:
                self.ctx.events.warning(
                    ref,
                    REASON_UPDATE_LB_FAILED,
                    f"Error updating load balancer with new hosts {_names(backends.infos)} [node "
                    f"names limited, total number of nodes: {len(backends.infos)}], error: {exc}",
                )
                raise
            missing = True
        finally:
            self.metrics.update_latency.observe(trio.current_time() - started)
        if missing:
            # Gone from the cloud (drift): build it again rather than report success.
            log.warning("service.load-balancer-missing", service=key)
            return await self.ensure(key, record, service, backends, quiet=False)
        record.synced = dataclasses.replace(previous, nodes=backends.node_set)
        if backends.infos:
            self.ctx.events.normal(ref, REASON_UPDATED_LB, "Updated load balancer with new hosts")
        else:
            self.ctx.events.warning(
                ref, REASON_UNAVAILABLE_LB, "There are no available nodes for LoadBalancer"
            )
        log.info("service.hosts-updated", service=key, nodes=len(backends.infos))
        self.push_if_moved(key, backends)
        return None

    def push_if_moved(self, key: str, backends: _Backends) -> None:
        """The Nodes changed while the cloud was being told `backends`: go again, so the
        load balancer ends with the newest set rather than the one this call started with."""
        if self.backends.node_set == backends.node_set:
            return
        service = self.ctx.services.get(key)
        if service is not None:
            log.info("service.node-set-moved", service=key, nodes=len(self.backends.infos))
            self.send(key, Changed(service))

    async def clean_up(self, key: str, service: Service) -> str | None:
        """Upstream's delete branch: the load balancer, then the finalizer, then the status."""
        ref = service_ref(service)
        info = service_info(service)
        try:
            exists = await self.lbs.get_load_balancer(self.cluster, info) is not None
        except Exception as exc:
            raise CcmError(
                f"failed to check if load balancer exists before cleanup: {exc}"
            ) from exc
        if exists:
            self.ctx.events.normal(ref, REASON_DELETING_LB, "Deleting load balancer")
            try:
                await self.lbs.ensure_load_balancer_deleted(self.cluster, info)
            except ImplementedElsewhere:
                pass
            except Exception as exc:
                raise CcmError(f"failed to delete load balancer: {exc}") from exc
        self.record(key).synced = None
        # The status first, then the finalizer (upstream does it the other way round): a
        # crash or failure in between is retried while the finalizer is still there,
        # instead of leaving a Service that no longer wants a load balancer advertising an
        # address the cloud may give to another.
        written: str | None = None
        try:
            if service.status.load_balancer.ingress:
                written = await self.patch_status(key, set_load_balancer_status(()))
            if _has_finalizer(service):
                written = await self.patch_status(
                    key, remove_finalizer(service.metadata.finalizers, FINALIZER_LB_CLEANUP)
                )
        except NotFoundError:
            pass  # gone already (a finalizer removed by someone else)
        self.ctx.events.normal(ref, REASON_DELETED_LB, "Deleted load balancer")
        self.forget(key)
        log.info("service.load-balancer-cleaned-up", service=key, existed=exists)
        return written

    async def patch_status(self, key: str, patch: Patch) -> str | None:
        """Write to services/status; returns the resourceVersion written."""
        if patch.empty:
            return None
        namespace, name = key.split("/", 1)
        written = await self.ctx.kube.patch(
            SERVICES, name, patch, namespace=namespace, subresource="status"
        )
        return written.metadata.resource_version


class _Sweep:
    """The sweep for leaked load balancers (one term): what was seen leaked, and since when."""

    def __init__(self, term: _Term, inventory: LoadBalancerInventory) -> None:
        self.term = term
        self.inventory = inventory
        self.since: dict[str, float] = {}  # load balancer name -> first seen leaked

    async def sweep(self) -> None:
        term, ctx = self.term, self.term.ctx
        if not ctx.services.synced:
            log.info("service.sweep-skipped", reason="the Service cache is not synced")
            return
        owned = await self.inventory.list_load_balancers(term.cluster)
        now = trio.current_time()
        leaks = {lb.name: (lb, why) for lb in owned if (why := self.leaked_because(lb))}
        self.since = {name: self.since.get(name, now) for name in leaks}
        term.metrics.leaked.set(len(leaks))
        settings = ctx.settings
        for name, (lb, why) in sorted(leaks.items()):
            age = now - self.since[name]
            if age == 0:
                log.warning(
                    "service.load-balancer-leaked",
                    load_balancer=name,
                    service=lb.key,
                    reason=why,
                    fix="deleted after --leaked-load-balancer-grace"
                    if settings.delete_leaked_load_balancers
                    else "delete it, or run with --delete-leaked-load-balancers",
                )
            if (
                settings.delete_leaked_load_balancers
                and age >= settings.leaked_load_balancer_grace_s
            ):
                await self.delete(lb, why)

    def leaked_because(self, lb: OwnedLoadBalancer) -> str:
        """Why `lb` serves no Service any more ("" when it does, or may soon)."""
        service = self.term.ctx.services.get(lb.key)
        if service is None:
            return "its Service no longer exists"
        if lb.uid and lb.uid != service.metadata.uid:
            return f"its Service was recreated (uid {service.metadata.uid}, not {lb.uid})"
        name = self.term.lbs.load_balancer_name(self.term.cluster, service_info(service))
        if name != lb.name:
            return f"its Service was recreated (its load balancer is now {name})"
        if not wants_load_balancer(service) and not _has_finalizer(service):
            return "its Service no longer wants a load balancer and has no finalizer"
        held = {i.hostname or i.ip for i in service.status.load_balancer.ingress}
        if lb.address and held and lb.address not in held:
            return f"its Service now points at {', '.join(sorted(held))}, not at it ({lb.address})"
        return ""

    async def delete(self, lb: OwnedLoadBalancer, why: str) -> None:
        try:
            await self.inventory.delete_leaked_load_balancer(self.term.cluster, lb)
        except Exception as exc:  # one leak's failure is its own: the next sweep tries again
            log.warning(
                "service.leak-delete-failed", load_balancer=lb.name, service=lb.key, error=str(exc)
            )
            return
        self.since.pop(lb.name, None)
        self.term.metrics.leaks_deleted.inc()
        log.info(
            "service.leaked-load-balancer-deleted",
            load_balancer=lb.name,
            service=lb.key,
            reason=why,
        )
