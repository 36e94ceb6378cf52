"""The shape of every controller, built-in or extra: a class built once per `serve()`,
whose `run(ctx)` is called once per term of leadership.

- **Declaration** (class attributes): `name` (as in `--controllers`), `informers` (the
  caches it reads; the supervisor runs only the caches some enabled controller needs, so
  RBAC can be least-privilege), `client_name` (the user-agent suffix of its own kube client
  and QPS bucket: upstream's per-controller client identity), `event_component` (the source
  of its Events), `disabled_by_default` (left out of `*`), `capability` (the provider
  capability it needs: `instances`, `load_balancers` or `routes`; stated once, checked by
  the base `requires`). `requires(cloud, settings)`
  returns why the cloud or the flags rule it out (it is then skipped with a warning, as
  upstream does) or None, and may raise ConfigError for flags it cannot run with.
- **Construction**, once per `serve()`, with a `ControllerSetup` (settings, metrics
  registry): the controller builds its metrics here (collectors register once per
  registry) and holds its per-key records, one record type per controller with one way to
  forget a key.
- **`run(ctx)`**, once per term of leadership, inside a scope that is cancelled the moment
  the Lease is lost (at once) or at a graceful shutdown (per-object handler calls in flight
  then get a grace period). `ctx` carries the term's collaborators: the kube client, the
  shared caches, the cloud (every call through the shared budget), the Event recorder,
  and `keyed(...)` for per-object actors (listed in /debug/actors, given the grace).
  An exception escaping `run` is fatal for the process (better restarted than
  half-alive): per-object failures are caught by `KeyedActors`, pass failures by
  `serve_passes`.
"""

from __future__ import annotations

import abc
import datetime as dt
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Literal, TypeVar

import prometheus_client
import trio

from trio_ccm.actors.backoff import Backoff
from trio_ccm.actors.keyed import GracefulCancelScope, Handler, KeyedActors
from trio_ccm.actors.views import node_ref, service_ref
from trio_ccm.cloud.provider import CloudProvider
from trio_ccm.kube.client import KubeClient
from trio_ccm.kube.events import NORMAL, WARNING, EventRecorder, utc_now
from trio_ccm.kube.informer import Informer
from trio_ccm.kube.objects import Node, Service

if TYPE_CHECKING:
    from trio_ccm.cloud.batching import MetadataBatcher
    from trio_ccm.settings import Settings

__all__ = ["Controller", "ControllerContext", "ControllerSetup", "InformerName", "info", "warn"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

InformerName = Literal["nodes", "services"]
Capability = Literal["instances", "load_balancers", "routes"]


@dataclass(frozen=True)
class ControllerSetup:
    """What a controller is built with, once per `serve()`."""

    settings: Settings
    registry: prometheus_client.CollectorRegistry


class Controller(abc.ABC):
    """Subclass it, set the class attributes, implement `run`; see the module docstring."""

    name: ClassVar[str] = ""
    informers: ClassVar[frozenset[InformerName]] = frozenset()
    client_name: ClassVar[str] = ""
    event_component: ClassVar[str] = ""
    disabled_by_default: ClassVar[bool] = False
    capability: ClassVar[Capability | None] = None

    @classmethod
    def requires(cls, cloud: CloudProvider, settings: Settings) -> str | None:
        """Why the cloud or the flags rule this controller out, or None (it runs). The base
        checks `capability`; an override adds its own conditions to `super().requires`."""
        del settings
        if cls.capability is not None and getattr(cloud, cls.capability) is None:
            return f"the cloud provider has no {cls.capability.replace('_', ' ')}"
        return None

    def __init__(self, setup: ControllerSetup) -> None:
        self.settings = setup.settings

    @abc.abstractmethod
    async def run(self, ctx: ControllerContext) -> None:
        """One term of leadership: run until cancelled."""


@dataclass(eq=False)
class ControllerContext:
    """One controller's collaborators for one term of leadership."""

    name: str
    settings: Settings
    kube: KubeClient
    nodes: Informer[Node]
    services: Informer[Service]
    cloud: CloudProvider
    events: EventRecorder
    batcher: MetadataBatcher | None = None
    now: Callable[[], dt.datetime] = utc_now
    graceful: GracefulCancelScope = field(default_factory=GracefulCancelScope)
    """The term's scope: what cancels it decides the grace of per-object calls in flight."""
    managers: list[KeyedActors[object, object]] = field(default_factory=list)

    def keyed(
        self,
        handler: Handler[K, V],
        *,
        limiter: trio.CapacityLimiter,
        backoff: Backoff,
        name: str = "",
        idle_timeout_s: float = 30.0,
        on_error: Callable[[K, Exception], None] | None = None,
    ) -> KeyedActors[K, V]:
        """Per-key actors registered with the supervisor (debug view, shutdown grace)."""
        actors: KeyedActors[K, V] = KeyedActors(
            name or self.name,
            handler,
            limiter=limiter,
            backoff=backoff,
            idle_timeout_s=idle_timeout_s,
            graceful=self.graceful,
            on_error=on_error,
        )
        self.managers.append(actors)  # type: ignore[arg-type]  # registered for stats only
        return actors


# -- Events: the one way every controller records them -------------------------------------
# The built-in controllers and extra ones (re-exported as `trio_ccm.controllers.info`/`warn`)
# alike: the involved object is the cached Node or Service, the source is the controller's
# recorder (its `event_component`), with client-go's spam filter and aggregation.
def info(ctx: ControllerContext, obj: Node | Service, *, reason: str, message: str) -> None:
    """Record a Normal Event about `obj` (reason in CamelCase, e.g. `ZoneLabelled`)."""
    _event(ctx, obj, NORMAL, reason, message)


def warn(ctx: ControllerContext, obj: Node | Service, *, reason: str, message: str) -> None:
    """Record a Warning Event about `obj`; the message should name the problem and the fix."""
    _event(ctx, obj, WARNING, reason, message)


def _event(
    ctx: ControllerContext, obj: Node | Service, type_: str, reason: str, message: str
) -> None:
    if isinstance(obj, Node):
        ref = node_ref(obj)
    elif isinstance(obj, Service):
        ref = service_ref(obj)
    else:
        raise TypeError(
            f"Events are recorded about a Node or a Service from the caches, not "
            f"{type(obj).__name__}; pass message.obj (or message.last)"
        )
    ctx.events.event(ref, type_, reason, message)
