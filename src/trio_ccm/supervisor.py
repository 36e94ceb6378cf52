"""`serve()`: the root of a trio-ccm replica (DESIGN §4).

```
serve()                          root nursery
 ├─ http server :10258            health, metrics, debug (bound before task_status.started)
 ├─ event recorders               one per source component
 ├─ informers                     warm on every replica, so a takeover starts from a full cache
 ├─ cloud probe                   once: does the cloud answer? (said at start, also by standbys)
 ├─ leader election               campaigns; renews while leading, also while draining
 └─ while leading: a term         GracefulCancelScope
      ├─ the cluster's identity       once, for a provider that wants it (ClusterIdentityAware)
      ├─ cloud.initialize()
      └─ each enabled controller ─ per-object actors
```

Invariants:

- **A leader never acts past its Lease.** The controllers run only inside a term, and a
  term exists only while the elector holds the Lease. Every cloud call also checks, just
  before it leaves, that the Lease is still held by this replica's own clock
  (`LeaderElector.holds`), which catches a process frozen past its renew deadline. Losing
  the Lease (the renew deadline passed, or another holder seen) ends the term at once: the
  elector's `on_lost` hook cancels the term with no grace before anything else happens,
  so not even a call shielded for a graceful drain goes on. Then the replica campaigns
  again in the same process; with `--exit-on-lost-lease`, `LeaseLostError` escapes
  instead (the CLI exits 1).
- **Graceful shutdown** (`Serving.shut_down()`, which the CLI calls on the first
  SIGTERM/SIGINT): the term is cancelled with `GRACE_S` of grace (per-object handler calls
  in flight may finish their step; nothing new starts) while the elector **keeps renewing**.
  Once every controller has stopped, the term ends and the elector releases the Lease
  (empty holder: the next replica takes over at once). If a renewal fails meanwhile, the
  drain is cut at the renew deadline like any loss. Then queued Events are written (at most
  `EVENTS_DRAIN_S`) and `serve` returns.
- **Forced shutdown** (`Serving.shut_down(force=True)`, the CLI's second signal): the term
  is cancelled with no grace and no Events drained, and the Lease is **left to expire**, not
  released: the cut calls may have requests already on the wire, which the cloud can still
  apply after a release would have let the next replica in (a chaos run on moto saw one
  arrive 1 ms after such a release). The next replica takes over once the Lease expires.
- **Cancelled by the embedding program**: everything stops; the Lease is still released,
  shielded under a deadline. (Calls already granted a grace by `shut_down()` keep it.)
- **A controller that raises** takes the process down (its exception escapes `serve`), after
  the Lease is released.

No global state: metrics go to the registry passed in (a fresh one by default), and nothing
here touches signals, logging configuration or the process.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import random
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from typing import Final

import httpx
import prometheus_client
import structlog
import trio

from trio_ccm.actors.builtin import BUILTIN_CONTROLLERS
from trio_ccm.actors.controller import Controller, ControllerContext, ControllerSetup
from trio_ccm.actors.keyed import GracefulCancelScope, KeyedActors
from trio_ccm.base.observable import AsyncValue
from trio_ccm.cloud.batching import MetadataBatcher
from trio_ccm.cloud.budget import CloudBudget, Rate
from trio_ccm.cloud.provider import CloudProvider, ClusterIdentityAware, bulk_instances
from trio_ccm.errors import ConfigError, NotLeadingError
from trio_ccm.health import Check, Endpoints, serve_http
from trio_ccm.kube.client import KubeClient, open_kube_client
from trio_ccm.kube.config import ConnectionConfig, load_config
from trio_ccm.kube.errors import KubeError
from trio_ccm.kube.events import EventRecorder, utc_now
from trio_ccm.kube.informer import Informer
from trio_ccm.kube.leader import Clock, LeaderElector, default_identity
from trio_ccm.kube.metrics import ClientMetrics, LeaderMetrics
from trio_ccm.kube.objects import NAMESPACES, NODES, SERVICES, Node, Object, Service
from trio_ccm.kube.wellknown import CONTROLLER_ALIASES
from trio_ccm.logs import get_logger
from trio_ccm.settings import Settings

__all__ = ["GRACE_S", "Serving", "resolve_controllers", "serve"]

log = get_logger("trio_ccm.supervisor")

GRACE_S: Final = 10.0
"""How long per-object actors may finish their current step at a graceful shutdown."""
EVENTS_DRAIN_S: Final = 5.0
"""How long queued Events may take to be written at a graceful shutdown."""
INFORMER_STALE_SLACK_S: Final = 60.0
"""/readyz fails when a cache has heard nothing (event, bookmark, list) for this long past
the informer's own inactivity timeout: its watch is stuck and re-watching does not help."""
NODE_WATCH_REST_S: Final = 0.1
"""Once the Node watch has caught up, it rests this long before reading on: kubelets'
heartbeats (333 a second at 100,000 Nodes) are then read in batches of what came meanwhile,
not one wake-up each (most of the steady CPU; docs/benchmarks.md, "Steady CPU, fifth
pass"). A Node's change reaches the controllers at most this much later."""
LOOKUP_SPACING_S: Final = 0.5
"""Per-Node cloud lookups start a bulk call at most this often (a lone lookup waits only
--cloud-batch-window): a wave's lookups gather into one call each 0.5 s instead of one per
four to six Nodes (cloud/batching.py; docs/benchmarks.md, the seventh pass). The Node actors
that looked up wait for a write slot far longer than that in a wave."""
CLOUD_PROBE_S: Final = 10.0
"""How long the start-up probe of the cloud (`check()`) may take before it is reported."""
_MANAGER: Final = "cloud-controller-manager"
CLUSTER_IDENTITY_READ_S: Final = 30.0
"""How long reading the kube-system Namespace (the cluster's identity) may take."""
IDENTITY_NAMESPACE: Final = "kube-system"


def resolve_controllers(
    settings: Settings,
    builtin: Sequence[type[Controller]],
    extra: Sequence[type[Controller]],
) -> list[type[Controller]]:
    """The enabled controllers, in declaration order; ConfigError for unknown, unnamed or
    duplicate names."""
    everything: dict[str, type[Controller]] = {}
    for controller in [*builtin, *extra]:
        if not (isinstance(controller, type) and issubclass(controller, Controller)):
            raise ConfigError(
                f"extra controller {controller!r} is not a Controller subclass; subclass "
                "trio_ccm.Controller and pass the class (see docs/embedding.md)"
            )
        if not controller.name:
            raise ConfigError(
                f"controller class {controller.__qualname__} has no name; set the class "
                'attribute name = "my-controller" (its --controllers name)'
            )
        if controller.name in everything or controller.name in CONTROLLER_ALIASES:
            raise ConfigError(
                f"controller {controller.name!r} is declared twice (or shadows an alias); "
                "give the extra controller another name"
            )
        everything[controller.name] = controller
    disabled = [c.name for c in everything.values() if c.disabled_by_default]
    enabled = settings.enabled_controllers(
        list(everything), aliases=CONTROLLER_ALIASES, disabled_by_default=disabled
    )
    return [everything[name] for name in enabled]


class Serving:
    """A running replica, as reported through `task_status`: its port and its state."""

    def __init__(self, replica: _Replica) -> None:
        self._replica = replica

    # -- control ---------------------------------------------------------------------
    def shut_down(self, *, force: bool = False) -> None:
        """Ask for a shutdown: graceful (drain while renewing, release the Lease, return
        from serve()), or with `force` at once (no grace, no Event drain)."""
        self._replica.shut_down(force=force)

    # -- observation -----------------------------------------------------------------
    @property
    def http_port(self) -> int | None:
        return self._replica.http_port

    @property
    def identity(self) -> str:
        return self._replica.identity

    @property
    def elector(self) -> LeaderElector | None:
        return self._replica.elector

    @property
    def endpoints(self) -> Endpoints:
        """The health checks and views the HTTP server serves (also when it is disabled)."""
        return self._replica.endpoints

    @property
    def leading(self) -> bool:
        """Whether the controllers are running (this replica leads, or does not elect)."""
        return self._replica.acting.value

    @property
    def controllers(self) -> list[str]:
        """The controllers running now."""
        return list(self._replica.running)

    @property
    def leadership_starts(self) -> int:
        """How many times the controllers have been started (once per term of leadership)."""
        return self._replica.starts

    async def wait_leading(self, leading: bool = True) -> None:
        """Return once the controllers are running (or, with False, stopped)."""
        await self._replica.acting.wait_value(leading)

    def debug_actors(self) -> dict[str, object]:
        """The /debug/actors tree: controllers, their actor managers and per-object actors."""
        return self._replica.debug_actors()


class _Replica:
    """One replica's object graph and its tasks; `serve()` builds and runs it."""

    def __init__(
        self,
        settings: Settings,
        cloud: CloudProvider,
        *,
        controllers: Sequence[type[Controller]],
        registry: prometheus_client.CollectorRegistry,
        identity: str,
        now: Callable[[], dt.datetime],
        rng: random.Random,
    ) -> None:
        self.settings = settings
        self.registry = registry
        self.identity = identity
        self.now = now
        self.rng = rng
        contributed: Sequence[type[Controller]] = getattr(cloud, "controllers", ()) or ()
        enabled = resolve_controllers(settings, BUILTIN_CONTROLLERS, [*controllers, *contributed])
        runnable: list[type[Controller]] = []
        for controller in enabled:
            reason = controller.requires(cloud, settings)
            if reason is None:
                runnable.append(controller)
            else:
                log.warning("controller.skipped", controller=controller.name, reason=reason)
        budget = CloudBudget(
            {family: Rate(qps, burst) for family, qps, burst in settings.cloud_rates} or None,
            registry=registry,
            guard=self.check_leading,
        )
        self.provider = cloud  # unwrapped: the start-up probe is no action (no Lease needed)
        self.cloud = budget.wrap(cloud)
        bulk = bulk_instances(self.cloud.instances) if self.cloud.instances is not None else None
        self.batcher = (
            MetadataBatcher(
                bulk,
                window_s=settings.cloud_batch_window_s,
                max_batch=settings.cloud_batch_size,
                spacing_s=LOOKUP_SPACING_S,
            )
            if bulk is not None
            else None
        )
        setup = ControllerSetup(settings=settings, registry=registry)
        self.controllers = [controller(setup) for controller in runnable]
        self.client_metrics = ClientMetrics(registry)
        self.running_gauge = prometheus_client.Gauge(
            "running_managed_controllers",
            "Indicates where instances of a controller are currently running",
            ["name", "manager"],
            registry=registry,
        )
        # Built by open():
        self.clients: dict[str, KubeClient] = {}
        self.shared_client: KubeClient | None = None
        self.recorders: dict[str, EventRecorder] = {}
        self.elector: LeaderElector | None = None
        self.nodes: Informer[Node]
        self.services: Informer[Service]
        self.informers: dict[str, Informer[Node] | Informer[Service]] = {}
        self.endpoints = self.health_endpoints()
        self.http_port: int | None = None
        # State:
        self.acting: AsyncValue[bool] = AsyncValue(False)
        """Whether the controllers are running."""
        self.running: dict[str, ControllerContext] = {}
        self.starts = 0
        self.term: GracefulCancelScope | None = None
        self.stopping = False
        self.forced = False
        self.stop_requested = trio.Event()
        self.campaign_scope = trio.CancelScope()
        self.campaign_done = trio.Event()
        self.cluster_identity = ""
        """The kube-system Namespace UID, once read ("": not read yet, or not wanted)."""

    # -- building ----------------------------------------------------------------------
    @asynccontextmanager
    async def open(
        self,
        connection: ConnectionConfig,
        transport: httpx.AsyncBaseTransport | None,
        clock: Clock | None,
    ) -> AsyncIterator[None]:
        """The kube clients (one per controller, as upstream's ClientBuilder), the Event
        recorders, the caches and the elector; clients are closed on exit."""
        async with AsyncExitStack() as stack:

            async def client(name: str) -> KubeClient:
                return await stack.enter_async_context(
                    open_kube_client(
                        connection,
                        qps=self.settings.kube_api_qps,
                        burst=self.settings.kube_api_burst,
                        component=name,
                        metrics=self.client_metrics,
                        transport=transport,
                    )
                )

            shared = self.shared_client = await client("shared-informers")
            resync = self.settings.min_resync_period_s * (1.0 + self.rng.random())
            self.nodes = Informer(
                shared,
                NODES,
                Node,
                resync_period_s=resync,
                rng=self.rng,
                watch_rest_s=NODE_WATCH_REST_S,
            )
            self.services = Informer(
                shared, SERVICES, Service, resync_period_s=resync, rng=self.rng
            )
            # Only the caches some enabled controller reads are served (least-privilege
            # RBAC); the others stay empty.
            wanted = set().union(*(c.informers for c in self.controllers))
            if "nodes" in wanted:
                self.informers["nodes"] = self.nodes
            if "services" in wanted:
                self.informers["services"] = self.services
            for controller in self.controllers:
                # One client (QPS bucket) per controller, under its upstream identity, even
                # when two share one (cloud-node, lifecycle and IPAM are "node-controller").
                self.clients[controller.name] = await client(
                    controller.client_name or controller.name
                )
                component = controller.event_component or controller.name
                if component not in self.recorders:
                    # Events have their own client (QPS bucket): a wave of Synced Events
                    # does not slow the Node writes down.
                    self.recorders[component] = EventRecorder(
                        await client(f"{component}-events"), component=component, now=self.now
                    )
            if self.settings.leader_elect:
                lease_client = await client("leader-election")
                self.recorders[_MANAGER] = EventRecorder(
                    lease_client, component=_MANAGER, now=self.now
                )
                self.elector = LeaderElector(
                    lease_client,
                    identity=self.identity,
                    namespace=self.settings.leader_elect_resource_namespace,
                    name=self.settings.leader_elect_resource_name,
                    lease_duration_s=self.settings.leader_elect_lease_duration_s,
                    renew_deadline_s=self.settings.leader_elect_renew_deadline_s,
                    retry_period_s=self.settings.leader_elect_retry_period_s,
                    clock=clock,
                    now=self.now,
                    recorder=self.recorders[_MANAGER],
                    metrics=LeaderMetrics(self.registry),
                    rng=self.rng,
                )
            self.endpoints = self.health_endpoints()
            yield

    # -- running -----------------------------------------------------------------------
    async def probe_cloud(self) -> None:
        """Every replica, standby or not, asks the cloud once at start whether it answers,
        through the provider's optional read-only `check()`: a standby whose cloud URL is
        dead says so now (an error line naming the cloud and the fix), not only when it
        leads. It never stops the replica: the term's `initialize()` decides that."""
        check = getattr(self.provider, "check", None)
        if check is None:
            return
        name = self.provider.name
        try:
            with trio.fail_after(CLOUD_PROBE_S):
                await check()
        except trio.TooSlowError:
            error = f"no answer within {CLOUD_PROBE_S:g} s"
        # A boundary that must survive anything: the probe is advice, whatever the
        # provider raises is reported and this replica carries on.
        except Exception as exc:
            error = str(exc) or type(exc).__name__
        else:
            log.debug("cloud.reachable", provider=name)
            return
        log.error(
            "cloud.unreachable",
            provider=name,
            error=error,
            fix="check the cloud config's endpoint and credentials: this replica cannot act "
            "on the cloud when it leads",
        )

    async def serve(self, task_status: trio.TaskStatus[Serving]) -> None:
        async with trio.open_nursery() as root:
            if self.settings.secure_port:
                self.http_port = await root.start(self.serve_http)
            for component, recorder in self.recorders.items():
                root.start_soon(recorder.serve, name=f"events/{component}")
            for kind, informer in self.informers.items():
                root.start_soon(informer.serve, name=f"informer/{kind}")
            root.start_soon(self.probe_cloud, name="cloud-probe")
            root.start_soon(self.campaign, name="campaign")
            log.info(
                "ccm.started",
                identity=self.identity,
                controllers=[c.name for c in self.controllers],
                leader_elect=self.settings.leader_elect,
                http_port=self.http_port,
            )
            task_status.started(Serving(self))
            # The campaign never ends by itself: it ends after a shutdown request, or
            # raises (a controller crashed, or --exit-on-lost-lease) through `root`.
            await self.stop_requested.wait()
            if not self.forced:
                # The term drains while the Lease is renewed, then the Lease is released.
                with trio.move_on_after(GRACE_S + self.settings.leader_elect_renew_deadline_s):
                    await self.campaign_done.wait()
                with trio.move_on_after(EVENTS_DRAIN_S):
                    for recorder in self.recorders.values():
                        await recorder.drain()
            root.cancel_scope.cancel()
        log.info("ccm.stopped", identity=self.identity)

    async def serve_http(self, task_status: trio.TaskStatus[int]) -> None:
        settings = self.settings
        await serve_http(
            self.endpoints,
            bind_address=settings.bind_address,
            port=settings.secure_port,
            tls_cert_file=settings.tls_cert_file or None,
            tls_private_key_file=settings.tls_private_key_file or None,
            plain_http=settings.plain_http,
            task_status=task_status,
        )

    async def campaign(self) -> None:
        """Lead (each time the Lease is won) until a shutdown; see the module docstring."""
        try:
            with self.campaign_scope:
                if self.elector is None:
                    await self.lead_term()
                else:
                    await self.elector.lead(
                        self.lead_term,
                        exit_on_lost_lease=self.settings.exit_on_lost_lease,
                        on_lost=self.lost,
                    )
        finally:
            self.campaign_done.set()

    async def lead_term(self) -> None:
        """One term of leadership: the controllers, until the term is cancelled."""
        if self.stopping:
            return  # won the Lease while shutting down: release it at once
        term = self.term = GracefulCancelScope()
        try:
            with term.scope:
                await self.hand_cluster_identity()
                await self.cloud.initialize()
                for _kind, informer in self.informers.items():
                    await informer.wait_synced()
                self.starts += 1
                async with trio.open_nursery() as nursery:
                    for i, controller in enumerate(self.controllers):
                        if i and self.settings.controller_start_interval_s:
                            await trio.sleep(self.settings.controller_start_interval_s)
                        await nursery.start(
                            partial(self.run_controller, controller, term), name=controller.name
                        )
                    self.acting.value = True
                    await trio.sleep_forever()
        finally:
            self.acting.value = False
            self.term = None

    async def hand_cluster_identity(self) -> None:
        """For a provider that wants it (`ClusterIdentityAware`), the UID of the kube-system
        Namespace, read once; a failure is logged with its fix, the provider is left as it
        was built, and the next term reads again (`ClusterIdentityAware` says why)."""
        provider = self.provider
        if not isinstance(provider, ClusterIdentityAware) or self.cluster_identity:
            return
        assert self.shared_client is not None  # built by open()
        error, uid = "", ""
        with trio.move_on_after(CLUSTER_IDENTITY_READ_S) as scope:
            try:
                namespace = await self.shared_client.get(
                    NAMESPACES, IDENTITY_NAMESPACE, type=Object
                )
            except KubeError as exc:
                error = str(exc) or type(exc).__name__
            else:
                uid = namespace.metadata.uid
                error = "" if uid else "the Namespace has no metadata.uid"
        if scope.cancelled_caught:
            error = f"no answer within {CLUSTER_IDENTITY_READ_S:g} s"
        if error:
            log.error(
                "cluster-identity.unknown",
                provider=provider.name,
                error=error,
                effect="the provider runs without the cluster's identity this term (for "
                "openstack: load balancers are found by name alone, as OCCM does)",
                fix=f"grant get on namespaces/{IDENTITY_NAMESPACE} "
                "(deploy/rbac-openstack.yaml); it is read again when this replica next leads",
            )
            return
        self.cluster_identity = uid
        provider.use_cluster_identity(uid)
        log.info("cluster-identity.known", provider=provider.name, identity=uid)

    async def run_controller(
        self,
        controller: Controller,
        term: GracefulCancelScope,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        ctx = ControllerContext(
            name=controller.name,
            settings=self.settings,
            kube=self.clients[controller.name],
            nodes=self.nodes,
            services=self.services,
            cloud=self.cloud,
            events=self.recorders[controller.event_component or controller.name],
            batcher=self.batcher,
            now=self.now,
            graceful=term,
        )
        self.running[controller.name] = ctx
        self.running_gauge.labels(controller.name, _MANAGER).set(1)
        # Every line logged in this task and the tasks it starts (its actors, its passes,
        # its cloud calls) carries the controller's name.
        structlog.contextvars.bind_contextvars(controller=controller.name)
        log.info("controller.started")
        task_status.started()
        try:
            await controller.run(ctx)
        finally:
            del self.running[controller.name]
            self.running_gauge.labels(controller.name, _MANAGER).set(0)
        log.info("controller.finished")

    def check_leading(self) -> None:
        """Asked before every cloud call: this replica still holds its Lease by its own
        clock. Cancelling the term on loss stops every call, but a process frozen past its
        renew deadline may run a controller task before the elector's; this catches it."""
        if self.elector is not None and not self.elector.holds():
            raise NotLeadingError(
                f"replica {self.identity}: the Lease is no longer held (last renewed more "
                f"than {self.elector.renew_deadline_s:g} s ago); the cloud call is not made"
            )

    def lost(self) -> None:
        """The elector lost the Lease: stop acting this instant (no grace, even while
        draining); when shutting down, do not campaign again."""
        if self.term is not None:
            self.term.cancel(0.0)
        if self.stopping:
            self.campaign_scope.cancel()

    def shut_down(self, *, force: bool) -> None:
        if force:
            self.forced = True
            if self.elector is not None:
                # Requests of the calls cut here may still be on their way: let the Lease
                # expire rather than hand it over before they can have landed.
                self.elector.release_on_cancel = False
            if self.term is not None:
                self.term.cancel(0.0)
            self.campaign_scope.cancel()
        elif not self.stopping:
            log.info("ccm.shutting-down", identity=self.identity, grace_s=GRACE_S)
            if self.term is not None:
                self.term.cancel(GRACE_S)  # the elector renews until the term has ended
            elif self.elector is None or not self.elector.leading.value:
                self.campaign_scope.cancel()  # nothing to drain, no Lease to release
        self.stopping = True
        self.stop_requested.set()

    # -- introspection -----------------------------------------------------------------
    def debug_actors(self) -> dict[str, object]:
        tree: dict[str, object] = {}
        for name, ctx in self.running.items():
            managers = {manager.name: _manager_tree(manager) for manager in ctx.managers}
            tree[name] = {"alive": True, "managers": managers}
        return {"leading": self.acting.value, "identity": self.identity, "controllers": tree}

    def health_endpoints(self) -> Endpoints:
        election = _election_checks(self.elector)
        return Endpoints(
            livez=[_ping(), *election],
            readyz=[
                _ping(),
                *election,
                Check("informer-sync", self.informers_problem),
                Check("controllers", self.controllers_problem),
            ],
            healthz=[*election, *(self.controller_ping(c.name) for c in self.controllers)],
            registry=self.registry,
            configz=self.settings.configz,
            debug_actors=self.debug_actors,
        )

    def informers_problem(self) -> str | None:
        now = trio.current_time()
        for kind, informer in self.informers.items():
            if not informer.synced:
                return f"the {kind} cache has not finished its first list"
            quiet = now - informer.last_activity
            if quiet > informer.inactivity_s + INFORMER_STALE_SLACK_S:
                return f"the {kind} cache has heard nothing from the API server for {quiet:.0f} s"
        return None

    def controllers_problem(self) -> str | None:
        if not self.acting.value:
            return None
        missing = [c.name for c in self.controllers if c.name not in self.running]
        return f"controllers not running: {', '.join(missing)}" if missing else None

    def controller_ping(self, name: str) -> Check:
        """Upstream registers an always-passing check per started controller."""

        def probe() -> str | None:
            if self.acting.value and name not in self.running:
                return f"controller {name} is not running although this replica leads"
            return None

        return Check(name, probe)


async def serve(
    settings: Settings,
    cloud: CloudProvider,
    *,
    controllers: Sequence[type[Controller]] = (),
    connection: ConnectionConfig | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    registry: prometheus_client.CollectorRegistry | None = None,
    identity: str | None = None,
    clock: Clock | None = None,
    now: Callable[[], dt.datetime] = utc_now,
    rng: random.Random | None = None,
    task_status: trio.TaskStatus[Serving] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run one trio-ccm replica until shut down (returns) or cancelled; see the module docstring.

    `controllers` are extra controller classes (see `trio_ccm.actors.controller`), enabled
    by name through `--controllers` like the built-in ones, as are those the cloud provider
    contributes through a `controllers` attribute. `connection` defaults to
    `--kubeconfig`/`--master` (else in-cluster); `transport` is the kube clients' httpx
    transport seam. `task_status.started(Serving)` once the HTTP server is bound and every
    background task is started (caches may still be filling: see /readyz).
    """
    replica = _Replica(
        settings,
        cloud,
        controllers=controllers,
        registry=registry if registry is not None else prometheus_client.CollectorRegistry(),
        identity=identity or default_identity(),
        now=now,
        rng=rng if rng is not None else random.Random(),  # noqa: S311 - jitter, not secrets
    )
    if connection is None:
        connection = await trio.to_thread.run_sync(
            lambda: load_config(kubeconfig=settings.kubeconfig, master=settings.master)
        )
    async with replica.open(connection, transport, clock):
        await replica.serve(task_status)


def _manager_tree(manager: KeyedActors[object, object]) -> dict[str, object]:
    actors: dict[str, object] = {}
    for key in list(manager):
        one = manager.actor_statistics(key)
        if one is not None:
            actors[str(key)] = dataclasses.asdict(one)
    return {"statistics": dataclasses.asdict(manager.statistics()), "actors": actors}


# -- health checks ---------------------------------------------------------------------
def _ping() -> Check:
    return Check("ping", lambda: None)


def _election_checks(elector: LeaderElector | None) -> list[Check]:
    if elector is None:
        return []

    def probe() -> str | None:
        if elector.healthy():
            return None
        return (
            f"leading, but the Lease was last renewed more than "
            f"{elector.lease_duration_s:g} s + 20 s ago"
        )

    return [Check("leaderElection", probe)]
