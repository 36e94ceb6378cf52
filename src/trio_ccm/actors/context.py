"""What a controller is given, and how one is declared: the contract for built-in controllers
and for extra ones supplied by an embedding program or contributed by the cloud provider.

A controller is an async function `run(ctx: ControllerContext) -> None` that runs until
cancelled. The supervisor calls it only while this replica leads, inside a cancel scope that
is cancelled the moment the Lease is lost (or at shutdown), with everything it needs on `ctx`:
the kube client (its own QPS bucket and user agent), the shared Node and Service caches, the
cloud (every call through the shared budget), an Event recorder, the settings and the metrics
registry. Per-object work goes through `ctx.keyed(...)`, so it appears in /debug/actors and is
given the grace period at a graceful shutdown.

An exception escaping `run` is fatal for the process (better restarted than half-alive):
catch per-object failures inside, as `KeyedActors` does.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, TypeVar

import prometheus_client
import trio

from trio_ccm.actors.backoff import Backoff
from trio_ccm.actors.keyed import Handler, KeyedActors
from trio_ccm.cloud.provider import CloudProvider
from trio_ccm.kube.client import KubeClient
from trio_ccm.kube.events import EventRecorder, utc_now
from trio_ccm.kube.informer import Informer
from trio_ccm.kube.objects import Node, Service

if TYPE_CHECKING:
    from trio_ccm.cloud.batching import MetadataBatcher
    from trio_ccm.settings import Settings

__all__ = ["Controller", "ControllerContext", "InformerName"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
T = TypeVar("T")

InformerName = Literal["nodes", "services"]


@dataclass(frozen=True)
class Controller:
    """A controller the supervisor can run: its name (as in `--controllers`) and its body.

    `informers` names the caches it reads; the supervisor runs only the caches some enabled
    controller needs (so RBAC can be least-privilege). `requires(cloud, settings)` says why
    the cloud or the flags rule it out (e.g. "the cloud has no load balancers",
    "--configure-cloud-routes=false"), or None; such a controller is skipped with a
    warning, as upstream does. It may raise ConfigError for flags the controller cannot
    run with (the process then exits 2 naming the flag, as upstream's start errors do).
    `client_name` is the user-agent suffix of its kube client (upstream's per-controller
    client identity).
    """

    name: str
    run: Callable[[ControllerContext], Awaitable[None]]
    informers: frozenset[InformerName] = frozenset()
    requires: Callable[[CloudProvider, Settings], str | None] = lambda _cloud, _settings: None
    disabled_by_default: bool = False
    client_name: str = ""
    event_component: str = ""


@dataclass(eq=False)
class ControllerContext:
    """Everything one controller run is given; see the module docstring."""

    name: str
    settings: Settings
    kube: KubeClient
    nodes: Informer[Node]
    services: Informer[Service]
    cloud: CloudProvider
    events: EventRecorder
    registry: prometheus_client.CollectorRegistry
    batcher: MetadataBatcher | None = None
    now: Callable[[], dt.datetime] = utc_now
    state: dict[str, object] = field(default_factory=dict)
    """Kept across terms of leadership (one dict per controller per serve()): metrics etc."""
    managers: list[KeyedActors[object, object]] = field(default_factory=list)

    def once(self, key: str, make: Callable[[], T]) -> T:
        """`make()` the first time this controller asks for `key` in this serve(), else the
        same object (collectors can be registered only once per registry)."""
        if key not in self.state:
            self.state[key] = make()
        return self.state[key]  # type: ignore[return-value]  # stored by this method only

    def keyed(
        self,
        handler: Handler[K, V],
        *,
        limiter: trio.CapacityLimiter,
        backoff: Backoff,
        name: str = "",
        idle_timeout_s: float = 30.0,
    ) -> KeyedActors[K, V]:
        """A per-key actor manager registered with the supervisor (debug view, drain)."""
        actors: KeyedActors[K, V] = KeyedActors(
            name or self.name,
            handler,
            limiter=limiter,
            backoff=backoff,
            idle_timeout_s=idle_timeout_s,
        )
        self.managers.append(actors)  # type: ignore[arg-type]  # registered for stats/grace only
        return actors
