"""`serve()`: the root of a trio-ccm replica (DESIGN §4).

```
serve()                          root nursery
 ├─ http server :10258            health, metrics, debug (bound before task_status.started)
 ├─ event recorders               one per source component
 ├─ informers                     warm on every replica, so a takeover starts from a full cache
 ├─ leader election               campaigns; `leading` is observable
 └─ while leading: cancel scope
      ├─ cloud.initialize()
      └─ each enabled controller ─ per-object actors
```

- **Lease lost**: the controllers' scope is cancelled at once (no grace: another replica may
  take over at the lease duration), then the replica campaigns again in the same process;
  with `--exit-on-lost-lease`, `LeaseLostError` escapes instead (the CLI exits 1).
- **Graceful shutdown** (`Serving.shut_down()`, which the CLI calls on SIGTERM/SIGINT):
  per-object actors get `GRACE_S` to finish the step they are in, the controllers stop, the
  Lease is released (empty holder: the next replica takes over at its next retry), queued
  Events are written, and `serve` returns.
- **Cancelled by the embedding program**: controllers stop at once; the Lease is still
  released, shielded under a deadline.
- **A controller that raises** takes the process down (its exception escapes `serve`), after
  the Lease is released.

No global state: metrics go to the registry passed in (a fresh one by default), and nothing
here touches signals, logging configuration or the process.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import random
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Final

import httpx
import prometheus_client
import structlog
import trio

from trio_ccm.actors.builtin import BUILTIN_CONTROLLERS
from trio_ccm.actors.context import Controller, ControllerContext, InformerName
from trio_ccm.actors.keyed import KeyedActors
from trio_ccm.cloud.batching import MetadataBatcher
from trio_ccm.cloud.budget import CloudBudget, Rate
from trio_ccm.cloud.provider import CloudProvider, bulk_instances
from trio_ccm.errors import ConfigError
from trio_ccm.http import Check, Endpoints, serve_http
from trio_ccm.kube.client import KubeClient, open_kube_client
from trio_ccm.kube.config import ConnectionConfig, load_config
from trio_ccm.kube.events import EventRecorder, utc_now
from trio_ccm.kube.informer import Informer
from trio_ccm.kube.leader import Clock, LeaderElector, default_identity
from trio_ccm.kube.objects import NODES, SERVICES, Node, Service
from trio_ccm.kube.wellknown import CONTROLLER_ALIASES
from trio_ccm.metrics import ClientMetrics, LeaderMetrics
from trio_ccm.settings import Settings

__all__ = ["GRACE_S", "Serving", "serve"]

log = structlog.get_logger("trio_ccm.supervisor")

GRACE_S: Final = 10.0
"""How long per-object actors may finish their current step at a graceful shutdown."""
INFORMER_STALE_SLACK_S: Final = 60.0
"""/readyz fails when a cache has heard nothing (event, bookmark, list) for this long past
the informer's own inactivity timeout: its watch is stuck and re-watching does not help."""
_MANAGER: Final = "cloud-controller-manager"


@dataclass(eq=False)
class Serving:
    """A running replica, as reported through `task_status`: its port and its state."""

    http_port: int | None
    identity: str
    elector: LeaderElector | None
    endpoints: Endpoints | None = None
    """The health checks and views the HTTP server serves (also when it is disabled)."""
    _shutdown: trio.Event = field(default_factory=trio.Event)
    _leading: bool = False
    _leading_changed: trio.Event = field(default_factory=trio.Event)
    _running: dict[str, ControllerContext] = field(default_factory=dict)
    _starts: int = 0

    # -- control ---------------------------------------------------------------------
    def shut_down(self) -> None:
        """Ask for a graceful shutdown: drain, release the Lease, return from serve()."""
        self._shutdown.set()

    # -- observation -----------------------------------------------------------------
    @property
    def leading(self) -> bool:
        """Whether the controllers are running (this replica leads, or does not elect)."""
        return self._leading

    @property
    def controllers(self) -> list[str]:
        """The controllers running now."""
        return list(self._running)

    @property
    def leadership_starts(self) -> int:
        """How many times the controllers have been started (once per term of leadership)."""
        return self._starts

    async def wait_leading(self, leading: bool = True) -> None:
        """Return once the controllers are running (or, with False, stopped)."""
        while self._leading is not leading:
            await self._leading_changed.wait()
        await trio.lowlevel.checkpoint()

    def _set_leading(self, leading: bool) -> None:
        self._leading = leading
        self._leading_changed.set()
        self._leading_changed = trio.Event()

    def debug_actors(self) -> dict[str, object]:
        """The /debug/actors tree: controllers, their actor managers and per-object actors."""
        tree: dict[str, object] = {}
        for name, ctx in self._running.items():
            managers: dict[str, object] = {}
            for manager in ctx.managers:
                managers[manager.name] = _manager_tree(manager)
            tree[name] = {"alive": True, "managers": managers}
        return {"leading": self._leading, "identity": self.identity, "controllers": tree}


def _manager_tree(manager: KeyedActors[object, object]) -> dict[str, object]:
    actors: dict[str, object] = {}
    for key in list(manager):
        one = manager.actor_statistics(key)
        if one is not None:
            actors[str(key)] = dataclasses.asdict(one)
    return {"statistics": dataclasses.asdict(manager.statistics()), "actors": actors}


def resolve_controllers(
    settings: Settings, builtin: Sequence[Controller], extra: Sequence[Controller]
) -> list[Controller]:
    """The enabled controllers, in declaration order; ConfigError for unknown or duplicate names."""
    everything: dict[str, Controller] = {}
    for controller in [*builtin, *extra]:
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


async def serve(
    settings: Settings,
    cloud: CloudProvider,
    *,
    controllers: Sequence[Controller] = (),
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

    `controllers` are extra controllers (see `trio_ccm.actors.context.Controller`), enabled
    by name through `--controllers` like the built-in ones, as are those the cloud provider
    contributes through a `controllers` attribute. `connection` defaults to
    `--kubeconfig`/`--master` (else in-cluster); `transport` is the kube clients' httpx
    transport seam. `task_status.started(Serving)` once the HTTP server is bound and every
    background task is started (caches may still be filling: see /readyz).
    """
    contributed: Sequence[Controller] = getattr(cloud, "controllers", ()) or ()
    enabled = resolve_controllers(settings, BUILTIN_CONTROLLERS, [*controllers, *contributed])
    runnable: list[Controller] = []
    for controller in enabled:
        reason = controller.requires(cloud, settings)
        if reason is None:
            runnable.append(controller)
        else:
            log.warning("controller.skipped", controller=controller.name, reason=reason)
    if connection is None:
        connection = await trio.to_thread.run_sync(
            lambda: load_config(kubeconfig=settings.kubeconfig, master=settings.master)
        )
    registry = registry if registry is not None else prometheus_client.CollectorRegistry()
    budget = CloudBudget(
        {family: Rate(qps, burst) for family, qps, burst in settings.cloud_rates} or None,
        registry=registry,
    )
    cloud = budget.wrap(cloud)
    bulk = bulk_instances(cloud.instances) if cloud.instances is not None else None
    batcher = (
        MetadataBatcher(
            bulk, window_s=settings.cloud_batch_window_s, max_batch=settings.cloud_batch_size
        )
        if bulk is not None
        else None
    )
    states: dict[str, dict[str, object]] = {}
    rng = rng if rng is not None else random.Random()  # noqa: S311 - jitter, not secrets
    identity = identity or default_identity()
    client_metrics = ClientMetrics(registry)
    running = prometheus_client.Gauge(
        "running_managed_controllers",
        "Indicates where instances of a controller are currently running",
        ["name", "manager"],
        registry=registry,
    )

    async with AsyncExitStack() as stack:

        async def client(name: str) -> KubeClient:
            return await stack.enter_async_context(
                open_kube_client(
                    connection,
                    qps=settings.kube_api_qps,
                    burst=settings.kube_api_burst,
                    component=name,
                    metrics=client_metrics,
                    transport=transport,
                )
            )

        shared = await client("shared-informers")
        informers = _informers(settings, shared, runnable, rng)
        recorders: dict[str, EventRecorder] = {}
        clients: dict[str, KubeClient] = {}
        for controller in runnable:
            # One client (QPS bucket) per controller, under its upstream identity: as
            # upstream's ClientBuilder, which builds a clientset per controller even when
            # two share an identity (cloud-node, lifecycle and IPAM are "node-controller").
            clients[controller.name] = await client(controller.client_name or controller.name)
            component = controller.event_component or controller.name
            if component not in recorders:
                # Events have their own client (QPS bucket): a wave of Synced Events does not
                # slow the Node writes down.
                events_client = await client(f"{component}-events")
                recorders[component] = EventRecorder(events_client, component=component, now=now)
        elector: LeaderElector | None = None
        if settings.leader_elect:
            lease_client = await client("leader-election")
            recorders[_MANAGER] = EventRecorder(lease_client, component=_MANAGER, now=now)
            elector = LeaderElector(
                lease_client,
                identity=identity,
                namespace=settings.leader_elect_resource_namespace,
                name=settings.leader_elect_resource_name,
                lease_duration_s=settings.leader_elect_lease_duration_s,
                renew_deadline_s=settings.leader_elect_renew_deadline_s,
                retry_period_s=settings.leader_elect_retry_period_s,
                clock=clock,
                now=now,
                recorder=recorders[_MANAGER],
                metrics=LeaderMetrics(registry),
                rng=rng,
            )
        serving = Serving(None, identity, elector)
        # Caches no enabled controller reads stay empty and unserved.
        # (Not `or`: an Informer is falsy while its cache is empty.)
        node_informer = (
            Informer(shared, NODES, Node) if informers.nodes is None else informers.nodes
        )
        service_informer = (
            Informer(shared, SERVICES, Service)
            if informers.services is None
            else informers.services
        )

        async def run_controller(controller: Controller) -> None:
            ctx = ControllerContext(
                name=controller.name,
                settings=settings,
                kube=clients[controller.name],
                nodes=node_informer,
                services=service_informer,
                cloud=cloud,
                events=recorders[controller.event_component or controller.name],
                registry=registry,
                batcher=batcher,
                now=now,
                state=states.setdefault(controller.name, {}),
            )
            serving._running[controller.name] = ctx
            running.labels(controller.name, _MANAGER).set(1)
            log.info("controller.started", controller=controller.name)
            try:
                await controller.run(ctx)
            finally:
                del serving._running[controller.name]
                running.labels(controller.name, _MANAGER).set(0)
            log.info("controller.finished", controller=controller.name)

        async def body() -> None:
            """The controllers, while leading (or always, without election)."""
            async with trio.open_nursery() as nursery:
                try:
                    await cloud.initialize()
                    for _kind, informer in informers.items():
                        await informer.wait_synced()
                    serving._starts += 1
                    serving._set_leading(True)
                    for i, controller in enumerate(runnable):
                        if i and settings.controller_start_interval_s:
                            await trio.sleep(settings.controller_start_interval_s)
                        nursery.start_soon(run_controller, controller, name=controller.name)
                    await trio.sleep_forever()
                finally:
                    serving._set_leading(False)

        campaign_done = trio.Event()

        async def campaign(*, task_status: trio.TaskStatus[trio.CancelScope]) -> None:
            try:
                with trio.CancelScope() as scope:
                    task_status.started(scope)
                    if elector is None:
                        await body()
                    else:
                        await elector.lead(body, exit_on_lost_lease=settings.exit_on_lost_lease)
            finally:
                campaign_done.set()

        def grant_grace() -> None:
            for ctx in serving._running.values():
                for manager in ctx.managers:
                    manager.grace_s = GRACE_S

        endpoints = Endpoints(
            livez=[_ping(), *_election_checks(elector)],
            readyz=[
                _ping(),
                *_election_checks(elector),
                Check("informer-sync", lambda: _informers_problem(informers)),
                Check("controllers", lambda: _controllers_problem(serving, runnable)),
            ],
            healthz=[
                *_election_checks(elector),
                *(_controller_ping(serving, c.name) for c in runnable),
            ],
            registry=registry,
            configz=settings.configz,
            debug_actors=serving.debug_actors,
        )
        serving.endpoints = endpoints

        async with trio.open_nursery() as root:
            if settings.secure_port:
                serving.http_port = await root.start(
                    lambda task_status: serve_http(
                        endpoints,
                        bind_address=settings.bind_address,
                        port=settings.secure_port,
                        tls_cert_file=settings.tls_cert_file or None,
                        tls_private_key_file=settings.tls_private_key_file or None,
                        plain_http=settings.plain_http,
                        task_status=task_status,
                    )
                )
            for component, recorder in recorders.items():
                root.start_soon(recorder.serve, name=f"events/{component}")
            for kind, informer in informers.items():
                root.start_soon(informer.serve, name=f"informer/{kind}")
            campaign_scope: trio.CancelScope = await root.start(campaign)
            log.info(
                "ccm.started",
                identity=identity,
                controllers=[c.name for c in runnable],
                leader_elect=settings.leader_elect,
                http_port=serving.http_port,
            )
            task_status.started(serving)
            # The campaign never ends by itself: it is cancelled here, or raises (a controller
            # crashed, or the Lease was lost with --exit-on-lost-lease) through `root`.
            await serving._shutdown.wait()
            log.info("ccm.shutting-down", identity=identity, grace_s=GRACE_S)
            grant_grace()
            campaign_scope.cancel()
            with trio.move_on_after(GRACE_S + 5):  # grace, then the Lease release's deadline
                await campaign_done.wait()
            with trio.move_on_after(5):
                for recorder in recorders.values():
                    await recorder.drain()
            root.cancel_scope.cancel()
    log.info("ccm.stopped", identity=identity)


@dataclass(frozen=True)
class _Caches:
    """The informers some enabled controller reads (None: not needed, not run)."""

    nodes: Informer[Node] | None
    services: Informer[Service] | None

    def items(self) -> list[tuple[str, Informer[Node] | Informer[Service]]]:
        pairs: list[tuple[str, Informer[Node] | Informer[Service]]] = []
        if self.nodes is not None:
            pairs.append(("nodes", self.nodes))
        if self.services is not None:
            pairs.append(("services", self.services))
        return pairs


def _informers(
    settings: Settings, client: KubeClient, controllers: Sequence[Controller], rng: random.Random
) -> _Caches:
    """The caches the enabled controllers read; resync every min-resync-period x [1, 2)."""
    wanted: set[InformerName] = set()
    for controller in controllers:
        wanted |= controller.informers
    resync = settings.min_resync_period_s * (1.0 + rng.random())
    return _Caches(
        Informer(client, NODES, Node, resync_period_s=resync, rng=rng)
        if "nodes" in wanted
        else None,
        Informer(client, SERVICES, Service, resync_period_s=resync, rng=rng)
        if "services" in wanted
        else None,
    )


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


def _controller_ping(serving: Serving, name: str) -> Check:
    """Upstream registers an always-passing check per started controller."""

    def probe() -> str | None:
        if serving.leading and name not in serving._running:
            return f"controller {name} is not running although this replica leads"
        return None

    return Check(name, probe)


def _informers_problem(caches: _Caches) -> str | None:
    now = trio.current_time()
    for kind, informer in caches.items():
        if not informer.synced:
            return f"the {kind} cache has not finished its first list"
        quiet = now - informer.last_activity
        if quiet > informer.inactivity_s + INFORMER_STALE_SLACK_S:
            return f"the {kind} cache has heard nothing from the API server for {quiet:.0f} s"
    return None


def _controllers_problem(serving: Serving, runnable: Sequence[Controller]) -> str | None:
    if not serving.leading:
        return None
    missing = [c.name for c in runnable if c.name not in serving._running]
    return f"controllers not running: {', '.join(missing)}" if missing else None
