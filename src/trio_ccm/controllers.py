"""Everything an extra controller needs, under one public name (docs/embedding.md).

- **The shape**: `Controller` (subclass it), `ControllerSetup` (what `__init__` gets, once
  per `serve()`), `ControllerContext` (what `run` gets, once per term of leadership).
- **Per-object work**: `ctx.keyed(handler, limiter=, backoff=)` returns `KeyedActors`, fed
  by `async with ctx.nodes.subscription() as mailbox`; a handler receives a `Message`
  (`Changed(obj)`, `Gone(last)`, or `Reverify(obj)` from the built-in controllers' own
  resyncs) and retries with a `Backoff`. `serve_passes` (with a `Wake`) runs periodic
  work and owns its failure boundary.
- **The objects**: `Node` and `Service` (the cached, read-only Structs; `NODES` and
  `SERVICES` name them for `ctx.kube`), `node_info`/`service_info` (the views a provider is
  shown), `has_taint`/`taints_json` (for the taint patches), the `KubeClient` type of
  `ctx.kube` and the errors a handler may meet (`KubeError`, `NotFoundError`,
  `ConflictError`).
- **The patch builders**: pure functions returning a `Patch` for `ctx.kube.patch(...)`:
  labels, annotations, taints and finalizers (guarded: a concurrent change makes the write
  fail instead of being lost), status conditions.
- **Events**: `info(ctx, obj, reason=, message=)` and `warn(...)` record a Normal or
  Warning Event about a Node or Service through the controller's recorder (its
  `event_component` is the source), with client-go's spam filter and aggregation. They
  never block: when the recorder's queue is full the Event is dropped, and counted.
"""

from __future__ import annotations

from trio_ccm.actors.backoff import Backoff
from trio_ccm.actors.controller import Controller, ControllerContext, ControllerSetup, info, warn
from trio_ccm.actors.keyed import KeyedActors, Message, Reverify
from trio_ccm.actors.passes import Wake, serve_passes
from trio_ccm.actors.views import (
    has_taint,
    node_info,
    service_info,
    taints_json,
)
from trio_ccm.kube.client import KubeClient
from trio_ccm.kube.errors import ConflictError, KubeError, NotFoundError
from trio_ccm.kube.informer import Changed, Gone
from trio_ccm.kube.objects import NODES, SERVICES, Node, Service
from trio_ccm.kube.patches import (
    Patch,
    add_finalizer,
    add_taint,
    remove_finalizer,
    remove_taint,
    set_annotations,
    set_condition,
    set_labels,
)

__all__ = [
    "NODES",
    "SERVICES",
    "Backoff",
    "Changed",
    "ConflictError",
    "Controller",
    "ControllerContext",
    "ControllerSetup",
    "Gone",
    "KeyedActors",
    "KubeClient",
    "KubeError",
    "Message",
    "Node",
    "NotFoundError",
    "Patch",
    "Reverify",
    "Service",
    "Wake",
    "add_finalizer",
    "add_taint",
    "has_taint",
    "info",
    "node_info",
    "remove_finalizer",
    "remove_taint",
    "serve_passes",
    "service_info",
    "set_annotations",
    "set_condition",
    "set_labels",
    "taints_json",
    "warn",
]
