"""service-lb-controller's feeders: what reaches the per-Service actors, and when.

- **Admission** (`admit`, the `KeyedActors` hook): a Service change becomes a message for
  its actor, or is dropped (not ours); a provisioned Service first seen after a restart goes
  to the pacer instead; a change by the owner cuts a backoff short.
- **The pacer** (`feed_deferred`): deferred Services, re-verified one per verify interval
  (the drift check queues every ensured load balancer there every 30 minutes).
- **The node set moved** (`node_set_moved`, from `StableNodes`): every load balancer this
  term knows of gets the new set, in one pass the node tracker waits for before the next.
- **Late-landing checks** (`recheck`, from `Rechecks`): a load balancer whose earlier call's
  outcome was unknown is ensured again once that call can no longer land.

`LbFeeds` holds the term's records; `service_lb._LbTerm` adds the reconcile.
"""

from __future__ import annotations

from collections import OrderedDict

import trio

from trio_ccm.actors.controller import ControllerContext
from trio_ccm.actors.keyed import KeyedActors, Message, Reverify
from trio_ccm.actors.lb_metrics import NodeSyncLatency, ServiceMetrics
from trio_ccm.actors.lb_rules import Record, fingerprint, has_finalizer, wants_load_balancer
from trio_ccm.actors.passes import Wake
from trio_ccm.actors.rechecks import Rechecks
from trio_ccm.actors.stable_nodes import Backends, StableNodes
from trio_ccm.cloud.provider import LoadBalancers
from trio_ccm.kube.informer import Changed, Gone, Update
from trio_ccm.kube.objects import Service
from trio_ccm.logs import get_logger

__all__ = ["LbFeeds"]

log = get_logger("trio_ccm.actors.service_lb")


class LbFeeds:
    """One term's records and feeders; see the module docstring."""

    def __init__(self, ctx: ControllerContext, lbs: LoadBalancers, metrics: ServiceMetrics):
        self.ctx = ctx
        self.lbs = lbs
        self.metrics = metrics
        self.cluster = ctx.settings.cluster_name
        self.records: dict[str, Record] = {}
        self.actors: KeyedActors[str, Message[Service]] | None = None
        self.deferred: OrderedDict[str, None] = OrderedDict()  # to re-verify gently, in order
        self.deferred_added = Wake()
        self.nodes = StableNodes(ctx.nodes)
        self.node_sync = NodeSyncLatency(metrics)
        self.rechecks: Rechecks[str] = Rechecks()
        # Forgotten while a call may still land: the Service as last handled, and until when.
        self.orphans: dict[str, tuple[Service, float]] = {}

    def record(self, key: str) -> Record:
        found = self.records.get(key)
        if found is None:
            found = self.records[key] = Record()
        return found

    def forget(self, key: str) -> None:
        """The one way a Service leaves this term's bookkeeping. A call for it whose outcome
        is unknown may still land (and make a load balancer nobody wants): its late-landing
        check stays, with the Service as last handled (`orphans`)."""
        record = self.records.pop(key, None)
        self.deferred.pop(key, None)
        self.node_sync.done(key)
        until = record.unknown_until if record is not None else None
        if (
            record is not None
            and record.handled is not None
            and until is not None
            and until > trio.current_time()
        ):
            self.orphans[key] = (record.handled, until)
            self.rechecks.at(key, until)
        # An orphan's check from an earlier record stays: its call may land all the same.

    def send(self, key: str, message: Message[Service]) -> None:
        """Hand a message to the Service's actor (a Changed overtaking a Reverify on its way
        stays a Reverify)."""
        record = self.records.get(key)
        if isinstance(message, Changed) and record is not None and record.reverify:
            message = Reverify(message.obj)
        if self.actors is not None:
            self.actors.send(key, message)

    # -- which Services, and when --------------------------------------------------------
    def admit(self, key: str, update: Update[Service]) -> Message[Service] | None:
        """What the actors get of a Service change; provisioned ones first seen go to the
        pacer instead (a restart re-verifies them gently)."""
        record = self.records.get(key)
        if isinstance(update, Gone):
            self.deferred.pop(key, None)
            if record is None or record.handled is None:
                self.forget(key)
                return None
            self.expedite_if_changed(key, record, None)
            return update
        service = update.obj
        if record is None:
            if not (wants_load_balancer(service) or has_finalizer(service)):
                return None
            record = self.record(key)
        if not record.routed:
            record.routed = True
            if self.looks_provisioned(service):
                self.defer(key)
                return None
        self.deferred.pop(key, None)
        self.expedite_if_changed(key, record, service)
        return Reverify(service) if record.reverify else update

    def expedite_if_changed(self, key: str, record: Record, service: Service | None) -> None:
        """A Service backing off after a failure is retried at once when its owner changed
        what it asks for (fixed it, deleted it, or no longer wants a load balancer), as
        upstream's queue does; our own status and finalizer writes do not count."""
        intent = (
            ()
            if service is None
            else (
                fingerprint(service),
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
            and has_finalizer(service)
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
        self.reverify(key)
        if self.deferred:
            self.deferred_added.set()

    def reverify(self, key: str) -> None:
        service = self.ctx.services.get(key)
        if service is not None:
            self.record(key).reverify = True
            self.send(key, Reverify(service))

    def recheck(self, key: str) -> None:
        """A call whose outcome was unknown can no longer land: ensure the load balancer
        once more, so that a late landing over a later success is overwritten; or, for a
        Service forgotten meanwhile that wants none, delete what a late landing made."""
        log.info("service.late-landing-check", service=key)
        orphan = self.orphans.pop(key, None)
        service = self.ctx.services.get(key)
        if orphan is not None and (service is None or not wants_load_balancer(service)):
            handled, until = orphan
            record = self.record(key)
            record.handled, record.orphaned = handled, True
            record.unknown_until = max(record.unknown_until or until, until)
            self.send(key, Gone(handled))
            return
        self.reverify(key)

    async def check_drift(self) -> None:
        """Queue every load balancer ensured this term for a gentle re-verification."""
        for key in sorted(k for k, r in self.records.items() if r.synced is not None):
            self.deferred[key] = None
        if self.deferred:
            self.deferred_added.set()

    def node_set_moved(self, backends: Backends) -> NodeSyncLatency | None:
        """Push the new node set to every load balancer this term knows of: ensured ones,
        those waiting for their gentle re-verification after a restart, and those whose last
        ensure or update failed (their retry must end with these Nodes). Returns the pass,
        for the node tracker to wait on (None: no load balancer to tell)."""
        keys = {
            key
            for key in [*self.records, *self.deferred]
            if (service := self.ctx.services.get(key)) is not None and wants_load_balancer(service)
        }
        log.info("service.node-set-changed", nodes=len(backends.infos), load_balancers=len(keys))
        if not keys:
            return None
        taken = self.node_sync.start(set(keys))
        for key in sorted(keys):
            service = self.ctx.services.get(key)
            if service is not None:
                self.deferred.pop(key, None)
                self.send(key, Changed(service))
        return taken
