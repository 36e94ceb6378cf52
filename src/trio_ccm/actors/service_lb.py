"""service-lb-controller: a cloud load balancer for every Service of type LoadBalancer.

Contract:
- **Which Services**: `spec.type: LoadBalancer` without `spec.loadBalancerClass`. One that
  no longer wants a load balancer (or is being deleted) and still carries the finalizer
  `service.kubernetes.io/load-balancer-cleanup` has its load balancer deleted, then its
  status cleared, then the finalizer removed.
- **The finalizer is added before any cloud call** that could create something, so a load
  balancer never exists without a finalizer that makes sure it is deleted.
- **Writes** go to `services/status` (finalizers too, as upstream): JSON patches guarded by
  the finalizers seen; the status only when the ingress changes. Annotations a provider
  asks for (`LoadBalancerStatus.annotations`) go to the Service itself, one merge patch
  and only when a value differs.
- **Backends** are the Nodes passing upstream's predicates (not being deleted, not excluded
  by label, not `ToBeDeletedByClusterAutoscaler`). A node-set change is pushed to every
  load balancer once it settles, one pass at a time (`stable_nodes.py`: the newest set is
  always pushed in the end); what a load balancer holds is recorded only after the cloud
  said yes.
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
- State lives in one `_Record` per Service for the term, dropped by `_LbTerm.forget`.

Upstream's rules kept and what trio-ccm does better: docs/controllers.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import re
from collections.abc import Mapping
from functools import partial
from typing import Final

import trio

from trio_ccm.actors.backoff import (
    SERVICE_RETRY_BASE_S,
    SERVICE_RETRY_CAP_S,
    Backoff,
    retry_after_s,
)
from trio_ccm.actors.controller import Controller, ControllerContext, ControllerSetup, info, warn
from trio_ccm.actors.keyed import Message, Reverify
from trio_ccm.actors.lb_feeds import LbFeeds
from trio_ccm.actors.lb_metrics import ServiceMetrics
from trio_ccm.actors.lb_rules import (
    Record,
    Step,
    Synced,
    family_mismatch,
    fingerprint,
    has_finalizer,
    node_names,
    plan,
    wants_load_balancer,
)
from trio_ccm.actors.lb_sweep import LeakSweep
from trio_ccm.actors.passes import serve_passes
from trio_ccm.actors.rechecks import UNKNOWN_OUTCOMES, late_landing_s, outcome_unknown
from trio_ccm.actors.stable_nodes import Backends
from trio_ccm.actors.views import service_info
from trio_ccm.cloud.budget import DEFAULT_RATES
from trio_ccm.cloud.provider import ImplementedElsewhere, ServiceRefused, inventory
from trio_ccm.errors import CcmError
from trio_ccm.kube.errors import NotFoundError
from trio_ccm.kube.informer import Gone
from trio_ccm.kube.objects import SERVICES, Service
from trio_ccm.kube.patches import (
    Patch,
    add_finalizer,
    remove_finalizer,
    set_annotations,
    set_load_balancer_status,
)
from trio_ccm.kube.wellknown import (
    COMPONENT_SERVICE,
    FINALIZER_LB_CLEANUP,
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
)
from trio_ccm.logs import get_logger

__all__ = ["ServiceLbController", "ServiceMetrics", "wants_load_balancer"]

log = get_logger("trio_ccm.actors.service_lb")
_NUMBERS = re.compile(r"\d+(?:\.\d+)?")  # "looking again in 1.4 s" says the same as in 2.8 s

MIN_CONCURRENCY: Final = 100
VERIFY_SHARE: Final = 0.5  # of the load-balancer family's rate, for re-verification
DRIFT_CHECK_PERIOD_S: Final = 1800.0


class ServiceLbController(Controller):
    """service-lb-controller; see the module docstring."""

    name = SERVICE_LB_CONTROLLER
    informers = frozenset({"services", "nodes"})
    client_name = "service-controller"
    event_component = COMPONENT_SERVICE
    capability = "load_balancers"

    def __init__(self, setup: ControllerSetup) -> None:
        super().__init__(setup)
        self.metrics = ServiceMetrics(setup.registry)
        rates = {family: (qps, burst) for family, qps, burst in setup.settings.cloud_rates}
        qps = rates.get("load_balancers", (DEFAULT_RATES["load_balancers"].qps, 0))[0]
        self.verify_interval_s = 1.0 / (qps * VERIFY_SHARE)

    async def run(self, ctx: ControllerContext) -> None:
        """The per-Service actors (fed through `admit`), the node tracker, the pacer, the
        late-landing checks, the drift check and the sweep."""
        lbs = ctx.cloud.load_balancers
        assert lbs is not None  # the capability is checked before a term starts
        term = _LbTerm(ctx, lbs, self.metrics)
        await term.nodes.load()
        term.actors = ctx.keyed(
            term.sync,
            limiter=trio.CapacityLimiter(
                max(ctx.settings.concurrent_service_syncs, MIN_CONCURRENCY)
            ),
            backoff=Backoff(SERVICE_RETRY_BASE_S, SERVICE_RETRY_CAP_S),
            on_error=term.failed,
        )
        async with (
            ctx.services.subscription() as services,
            ctx.nodes.subscription() as nodes,
            trio.open_nursery() as nursery,
        ):
            nursery.start_soon(partial(term.actors.serve, services, admit=term.admit))
            nursery.start_soon(term.nodes.serve, nodes, term.node_set_moved)
            nursery.start_soon(term.rechecks.serve, term.recheck)
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
                sweep = LeakSweep(
                    services=ctx.services,
                    lbs=lbs,
                    inventory=found,
                    settings=ctx.settings,
                    keeps=lambda s: wants_load_balancer(s) or has_finalizer(s),
                    leaked=self.metrics.leaked,
                    deleted=self.metrics.leaks_deleted,
                )
                nursery.start_soon(
                    partial(
                        serve_passes,
                        sweep.sweep,
                        name=f"{ctx.name}/sweep",
                        period_s=ctx.settings.load_balancer_sweep_period_s,
                    )
                )


class _LbTerm(LbFeeds):
    """One term of leadership: the feeders (`LbFeeds`) and the reconcile of one Service."""

    def failed(self, key: str, exc: Exception) -> None:
        """A sync raised (the actors retry it): the Events upstream gives for it."""
        record = self.records.get(key)
        service = record.handled if record is not None else None
        if record is None or service is None:
            return
        if record.failing == "delete":
            warn(
                self.ctx,
                service,
                reason=REASON_DELETE_LB_FAILED,
                message=f"Error deleting load balancer: {exc}",
            )
        if not record.gone:
            waited = record.waiting
            record.waiting = _NUMBERS.sub("#", str(exc)) if retry_after_s(exc) is not None else ""
            if waited and record.waiting == waited:  # still waiting, as told: a log line
                log.info("service.still-waiting", service=key, reason=str(exc))
                self.node_sync.done(key, failed=True)
                return
            prefix = "" if record.failing in ("", "delete") else f"{record.failing}: "
            warn(
                self.ctx,
                service,
                reason=REASON_SYNC_LB_FAILED,
                message=f"Error syncing load balancer: {prefix}{exc}",
            )
            self.node_sync.done(key, failed=True)

    def unknown(self, key: str, record: Record, started: float, exc: Exception) -> None:
        """A mutating call's outcome is unknown: trust no record until it can no longer land."""
        until = started + late_landing_s(exc)
        record.unknown_until = max(record.unknown_until or until, until)
        log.warning("service.outcome-unknown", service=key, may_land_until=until, error=str(exc))

    def landed(self, key: str, record: Record) -> None:
        """A call succeeded: after an unknown outcome, look again once it can no longer land."""
        until = record.unknown_until
        if until is None:
            return
        if trio.current_time() >= until:
            record.unknown_until = None
        else:
            self.rechecks.at(key, until)

    # -- one Service ---------------------------------------------------------------------
    async def sync(self, key: str, message: Message[Service]) -> str | None:
        """One Service: its load balancer, finalizer and status. Returns the
        resourceVersion of our last write (so the actors skip its stale echoes)."""
        record = self.record(key)
        record.failing, record.gone = "", isinstance(message, Gone)
        if isinstance(message, Gone):
            if record.handled is not None and (record.synced is not None or record.orphaned):
                await self.delete_load_balancer(key, record, record.handled)
            self.forget(key)
            return None
        service = message.obj
        force = isinstance(message, Reverify)
        if force:
            record.reverify = False
        old = record.handled
        if old is not None and old.metadata.uid != service.metadata.uid:
            log.info(
                "service.recreated", service=key, old_uid=old.metadata.uid, uid=service.metadata.uid
            )
            await self.delete_load_balancer(key, record, old)
            record.synced = None
        record.handled = service
        backends = await self.nodes.current()
        step = plan(
            service,
            synced=record.synced,
            invalid=record.invalid,
            unknown=record.unknown_until is not None,
            nodes=backends.node_set,
            force=force,
        )
        written = await self.carry_out(key, record, service, backends, step)
        record.waiting = ""
        self.node_sync.done(key)
        return written

    async def carry_out(
        self, key: str, record: Record, service: Service, backends: Backends, step: Step
    ) -> str | None:
        """Do what `plan` decided."""
        if step.action == "forget":
            self.forget(key)
            return None
        if step.action == "clean-up":
            return await self.clean_up(key, record, service)
        if step.action == "refuse":
            self.refuse(key, record, service, step.reason)
            return None
        if step.action == "skip":
            return None
        record.invalid = None
        if step.action == "update-hosts":
            assert record.synced is not None
            return await self.update_hosts(key, record, service, backends, record.synced)
        return await self.ensure(key, record, service, backends, quiet=step.quiet)

    def refuse(self, key: str, record: Record, service: Service, reason: str) -> None:
        """A Service no load balancer can be made for as written (our checks, or the
        provider's ServiceRefused): one Warning, one log line, no retry until it changes."""
        record.invalid = fingerprint(service)
        warn(
            self.ctx,
            service,
            reason=REASON_SYNC_LB_FAILED,
            message=f"Error syncing load balancer: {reason}; fix the Service, it is retried "
            "when it changes",
        )
        log.warning("service.refused", service=key, reason=reason)

    async def delete_load_balancer(self, key: str, record: Record, service: Service) -> None:
        """Upstream's processLoadBalancerDelete (Services without the finalizer)."""
        info(self.ctx, service, reason=REASON_DELETING_LB, message="Deleting load balancer")
        record.failing = "delete"  # a failure: DeleteLoadBalancerFailed (`failed`)
        started = trio.current_time()
        try:
            await self.lbs.ensure_load_balancer_deleted(self.cluster, service_info(service))
        except UNKNOWN_OUTCOMES as exc:
            self.unknown(key, record, started, exc)
            raise
        record.failing = ""
        info(self.ctx, service, reason=REASON_DELETED_LB, message="Deleted load balancer")
        log.info("service.load-balancer-deleted", service=key, uid=service.metadata.uid)

    async def ensure(
        self, key: str, record: Record, service: Service, backends: Backends, *, quiet: bool
    ) -> str | None:
        """Upstream's ensure branch; `quiet` (a re-verification) skips the Normal Events
        unless the status changes."""
        written: str | None = None
        if not quiet:
            info(self.ctx, service, reason=REASON_ENSURING_LB, message="Ensuring load balancer")
        if not has_finalizer(service):
            written = await self.patch_status(
                key, add_finalizer(service.metadata.finalizers, FINALIZER_LB_CLEANUP)
            )
            log.info("service.finalizer-added", service=key)
        if not backends.infos:
            warn(
                self.ctx,
                service,
                reason=REASON_UNAVAILABLE_LB,
                message="There are no available nodes for LoadBalancer",
            )
        view = service_info(service)
        started = trio.current_time()
        try:
            status = await self.lbs.ensure_load_balancer(self.cluster, view, backends.infos)
        except ServiceRefused as exc:
            self.refuse(key, record, service, str(exc))
            return written
        except ImplementedElsewhere:
            log.info("service.implemented-elsewhere", service=key)
            record.synced = Synced(
                service.metadata.uid,
                fingerprint(service),
                backends.node_set,
                service.status.load_balancer.ingress,
            )
            return written
        except UNKNOWN_OUTCOMES as exc:
            self.unknown(key, record, started, exc)
            raise
        self.landed(key, record)
        if status is None:
            raise CcmError("service status returned by EnsureLoadBalancer is nil")
        ingress = tuple(status.ingress)  # the Service status's own type
        mismatch = family_mismatch(service, ingress)
        if mismatch:
            self.refuse(key, record, service, mismatch)
            return written
        changed = ingress != service.status.load_balancer.ingress
        if changed or not quiet:
            info(self.ctx, service, reason=REASON_ENSURED_LB, message="Ensured load balancer")
            for warning in status.warnings:  # served, but not all of the Service as written
                warn(self.ctx, service, reason=REASON_SYNC_LB_FAILED, message=warning)
                log.warning("service.change-not-made", service=key, reason=warning)
        if changed:
            written = await self.patch_status(key, set_load_balancer_status(ingress))
            log.info(
                "service.status-updated", service=key, ingress=[i.ip or i.hostname for i in ingress]
            )
        # After the status: a refused annotation write (RBAC) leaves the Service served.
        annotated = await self.annotate(key, service, status.annotations)
        if annotated is not None:
            # The last write: its echo is no change of the Service, as the fingerprint
            # recorded below is the annotated Service's.
            service, written = annotated, annotated.metadata.resource_version
        record.handled = service
        record.synced = Synced(
            service.metadata.uid, fingerprint(service), backends.node_set, ingress
        )
        log.info(
            "service.load-balancer-ensured", service=key, nodes=len(backends.infos), quiet=quiet
        )
        return written

    async def update_hosts(
        self, key: str, record: Record, service: Service, backends: Backends, previous: Synced
    ) -> str | None:
        """Only the backends changed: `update_load_balancer`; recorded after success."""
        view = service_info(service)
        self.metrics.sync_total.inc()
        started = trio.current_time()
        missing = False
        try:
            await self.lbs.update_load_balancer(self.cluster, view, backends.infos)
        except ImplementedElsewhere:
            # A no-op for the provider, and no Event (upstream).
            record.synced = dataclasses.replace(previous, nodes=backends.node_set)
            return None
        except Exception as exc:  # whatever the provider raised: is the load balancer there?
            record.synced = None  # a retry is a full ensure
            if outcome_unknown(exc):
                self.unknown(key, record, started, exc)
            if await self.lbs.get_load_balancer(self.cluster, view) is not None:
                warn(
                    self.ctx,
                    service,
                    reason=REASON_UPDATE_LB_FAILED,
                    message="Error updating load balancer with new hosts "
                    f"{node_names(backends.infos)} [node names limited, total number of "
                    f"nodes: {len(backends.infos)}], "
                    f"error: {exc}",
                )
                raise
            missing = True
        finally:
            self.metrics.update_latency.observe(trio.current_time() - started)
        if missing:
            # Gone from the cloud (drift): build it again rather than report success.
            log.warning("service.load-balancer-missing", service=key)
            return await self.ensure(key, record, service, backends, quiet=False)
        self.landed(key, record)
        record.synced = dataclasses.replace(previous, nodes=backends.node_set)
        if backends.infos:
            info(
                self.ctx,
                service,
                reason=REASON_UPDATED_LB,
                message="Updated load balancer with new hosts",
            )
        else:
            warn(
                self.ctx,
                service,
                reason=REASON_UNAVAILABLE_LB,
                message="There are no available nodes for LoadBalancer",
            )
        log.info("service.hosts-updated", service=key, nodes=len(backends.infos))
        return None

    async def clean_up(self, key: str, record: Record, service: Service) -> str | None:
        """Upstream's delete branch: the load balancer, then the finalizer, then the status."""
        view = service_info(service)
        record.failing = "failed to check if load balancer exists before cleanup"
        exists = await self.lbs.get_load_balancer(self.cluster, view) is not None
        if exists:
            info(self.ctx, service, reason=REASON_DELETING_LB, message="Deleting load balancer")
            record.failing = "failed to delete load balancer"
            started = trio.current_time()
            try:
                with contextlib.suppress(ImplementedElsewhere):
                    await self.lbs.ensure_load_balancer_deleted(self.cluster, view)
            except UNKNOWN_OUTCOMES as exc:
                self.unknown(key, record, started, exc)
                raise
        record.failing = ""
        record.synced = None
        # The status first, then the finalizer (upstream does it the other way round): a
        # crash or failure in between is retried while the finalizer is still there,
        # instead of leaving a Service that no longer wants a load balancer advertising an
        # address the cloud may give to another.
        written: str | None = None
        try:
            if service.status.load_balancer.ingress:
                written = await self.patch_status(key, set_load_balancer_status(()))
            if has_finalizer(service):
                written = await self.patch_status(
                    key, remove_finalizer(service.metadata.finalizers, FINALIZER_LB_CLEANUP)
                )
        except NotFoundError:
            pass  # gone already (a finalizer removed by someone else)
        info(self.ctx, service, reason=REASON_DELETED_LB, message="Deleted load balancer")
        self.forget(key)
        log.info("service.load-balancer-cleaned-up", service=key, existed=exists)
        return written

    async def annotate(
        self, key: str, service: Service, wanted: Mapping[str, str]
    ) -> Service | None:
        """Set the annotations the provider asked for (`LoadBalancerStatus.annotations`)
        that the Service lacks or holds another value of: one merge patch of the Service
        itself, through the term's fenced client. Returns the Service written (None: no
        write was needed)."""
        have = service.metadata.annotations
        differ = {k: v for k, v in wanted.items() if have.get(k) != v}
        if not differ:
            return None
        namespace, name = key.split("/", 1)
        written = await self.ctx.kube.patch(
            SERVICES, name, set_annotations(differ), namespace=namespace, type=Service
        )
        log.info("service.annotated", service=key, annotations=sorted(differ))
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
