"""node-route-controller: a cloud route for every pod CIDR of every Node, and the Node
condition `NetworkUnavailable` that says whether its routes exist.

Contract, one pass at a time (`plan` is pure: state in, actions out; the pass carries them
out):
- One `list_routes` per pass; a failed listing fails the pass. Every pod CIDR of a Node
  wants a route to it: kept, created, or (address-aware providers) replaced.
- **Only routes inside `--cluster-cidr` are ever deleted** (blackholes, and routes no Node
  wants); a create waits for the deletes it could collide with; at most 200 cloud
  operations at once. A failed create is an Event `FailedToCreateRoute`.
- `NetworkUnavailable` (RouteCreated / NoRouteCreated) is written only when it changes.
- Passes run at start, every `--route-reconciliation-period` (non-sliding), and soon after
  a relevant Node change (at most one per second); they never overlap.
- **Unknown outcomes**: a create or delete whose outcome is unknown (`OutcomeUnknownError`,
  or a caller's timeout) may still land after a later pass fixed things. Every pass lists
  the routes afresh (no record is trusted), and one more pass is asked for once the call
  can no longer land, so a late landing is undone then, not a period later.

Upstream's rules kept and what trio-ccm does better: docs/controllers.md.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

import prometheus_client
import trio

from trio_ccm.actors.controller import Controller, ControllerContext, ControllerSetup, warn
from trio_ccm.actors.passes import Wake, own_failure, serve_passes
from trio_ccm.actors.rechecks import Rechecks, late_landing_s, outcome_unknown
from trio_ccm.actors.views import node_addresses
from trio_ccm.base.govalues import format_duration
from trio_ccm.base.mailbox import MailboxReader
from trio_ccm.cloud.provider import CloudProvider, NodeAddress, Route, Routes
from trio_ccm.errors import ConfigError
from trio_ccm.kube.errors import KubeError, NotFoundError
from trio_ccm.kube.events import timestamp
from trio_ccm.kube.informer import Changed, Update
from trio_ccm.kube.objects import NODES, Node
from trio_ccm.kube.patches import set_condition
from trio_ccm.kube.wellknown import (
    COMPONENT_ROUTE,
    CONDITION_NETWORK_UNAVAILABLE,
    NO_ROUTE_CREATED,
    NODE_ROUTE_CONTROLLER,
    REASON_FAILED_TO_CREATE_ROUTE,
    ROUTE_CREATED,
)
from trio_ccm.logs import get_logger
from trio_ccm.settings import Settings, cidrs_of

__all__ = ["NodeRouteController", "Plan", "plan", "responsible"]

log = get_logger("trio_ccm.actors.node_route")

MAX_CONCURRENT_ROUTE_OPERATIONS: Final = 200
"""Cloud route operations in flight at once (upstream's maxConcurrentRouteOperations)."""
MIN_PASS_SPACING_S: Final = 1.0
"""A pass triggered by a Node change starts at least this long after the previous start."""

Action = Literal["keep", "add", "update"]
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


# -- planning (pure) ----------------------------------------------------------------------
def _network(cidr: str) -> Network | None:
    try:
        return ipaddress.ip_network(cidr.strip(), strict=False)
    except ValueError:
        return None


def _cidr_key(cidr: str) -> str:
    """A CIDR in canonical form, so equal networks compare equal (unparsable: as given)."""
    network = _network(cidr)
    return cidr if network is None else str(network)


def _pod_cidrs(node: Node) -> tuple[str, ...]:
    spec = node.spec
    return spec.pod_cidrs or ((spec.pod_cidr,) if spec.pod_cidr else ())


def _same_addresses(a: Iterable[NodeAddress], b: Iterable[NodeAddress]) -> bool:
    return Counter(a) == Counter(b)


def responsible(route: Route, clusters: Sequence[Network]) -> bool:
    """Whether the route is ours to delete: its first or last address is in a cluster CIDR."""
    network = _network(route.destination_cidr)
    if network is None:
        log.debug("route.ignored", route=route.name, cidr=route.destination_cidr)
        return False
    return any(
        network.version == cluster.version
        and (network.network_address in cluster or network.broadcast_address in cluster)
        for cluster in clusters
    )


@dataclass(frozen=True, slots=True)
class _Create:
    node: Node
    cidr_key: str
    route: Route


@dataclass(slots=True)
class Plan:
    """What one pass does: routes to delete and to create, and per Node the action of each
    of its pod CIDRs (canonical form). A Node with routes but no pod CIDRs maps to {}."""

    deletes: list[Route] = field(default_factory=list)
    creates: list[_Create] = field(default_factory=list)
    actions: dict[str, dict[str, Action]] = field(default_factory=dict)
    failed: int = 0
    """Creates that failed (counted while the pass runs)."""

    def unavailable(self, node: str) -> bool | None:
        """The Node's NetworkUnavailable as planned or achieved; None: no condition."""
        actions = self.actions.get(node)
        if actions is None:
            return None
        return not actions or any(action != "keep" for action in actions.values())


def plan(
    nodes: Sequence[Node],
    routes: Sequence[Route],
    clusters: Sequence[Network],
    *,
    address_aware: bool,
) -> Plan:
    """Compare the listed routes with the Nodes; see the module docstring."""
    result = Plan()
    by_node: dict[str, list[Route]] = {}
    for route in routes:
        if route.target_node:
            by_node.setdefault(route.target_node, []).append(route)
            result.actions.setdefault(route.target_node, {})
    for node in nodes:
        name = node.metadata.name
        cidrs = _pod_cidrs(node)
        if not cidrs:
            continue
        addresses = node_addresses(node)
        actions = result.actions.setdefault(name, {})
        for cidr in cidrs:
            key = _cidr_key(cidr)
            existing = [
                r
                for r in by_node.get(name, ())
                if not r.blackhole and _cidr_key(r.destination_cidr) == key
            ]
            action: Action = "add"
            if existing:
                current = not address_aware or any(
                    _same_addresses(r.target_node_addresses, addresses) for r in existing
                )
                action = "keep" if current else "update"
            actions[key] = action
            if action != "keep":
                result.creates.append(
                    _Create(
                        node,
                        key,
                        Route(
                            target_node=name,
                            destination_cidr=cidr,
                            target_node_addresses=addresses,
                        ),
                    )
                )
    for route in routes:
        if not responsible(route, clusters):
            continue
        wanted = result.actions.get(route.target_node, {}).get(_cidr_key(route.destination_cidr))
        if route.blackhole or wanted != "keep":
            result.deletes.append(route)
    return result


# -- the controller -----------------------------------------------------------------------
_Relevant = tuple[tuple[str, ...], tuple[NodeAddress, ...]]


def _relevant(node: Node) -> _Relevant:
    """What of a Node can change its routes (a change of anything else triggers nothing)."""
    return _pod_cidrs(node), node_addresses(node)


class NodeRouteController(Controller):
    """node-route-controller; see the module docstring."""

    name = NODE_ROUTE_CONTROLLER
    informers = frozenset({"nodes"})
    client_name = "route-controller"
    event_component = COMPONENT_ROUTE
    capability = "routes"

    @classmethod
    def requires(cls, cloud: CloudProvider, settings: Settings) -> str | None:
        """Upstream's start conditions: skipped without --configure-cloud-routes or without
        cloud routes; an error (exit) when it would run without --cluster-cidr."""
        if not settings.configure_cloud_routes:
            return "--configure-cloud-routes=false"
        if (missing := super().requires(cloud, settings)) is not None:
            return missing
        if not settings.cluster_cidr:
            raise ConfigError(
                "node-route-controller: --cluster-cidr is empty, so no route could be told "
                "apart from someone else's; give the pod CIDR(s), e.g. "
                "--cluster-cidr=10.244.0.0/16, or turn routes off with "
                "--configure-cloud-routes=false (or --controllers=*,-route)"
            )
        return None

    def __init__(self, setup: ControllerSetup) -> None:
        super().__init__(setup)
        self.syncs = prometheus_client.Counter(
            "route_controller_route_sync",
            "A metric counting the amount of times routes have been synced with cloud provider.",
            registry=setup.registry,
        )

    async def run(self, ctx: ControllerContext) -> None:
        """A pass at start, every period, and soon after relevant Node changes."""
        routes = ctx.cloud.routes
        assert routes is not None  # the capability is checked before a term starts
        term = _RouteTerm(ctx, routes, self.syncs)
        async with ctx.nodes.subscription() as mailbox, trio.open_nursery() as nursery:
            # The mailbox starts with every cached Node: seeded from the same cache, so they
            # are not taken for changes (the first pass covers them).
            term.seen = {node.metadata.name: _relevant(node) for node in ctx.nodes.items()}
            nursery.start_soon(term.watch, mailbox)
            nursery.start_soon(term.rechecks.serve, term.late_landing_over)
            await serve_passes(
                term.reconcile,
                name=ctx.name,
                period_s=ctx.settings.route_reconciliation_period_s,
                wake=term.changed,
                min_spacing_s=MIN_PASS_SPACING_S,
            )


class _RouteTerm:
    """One term of leadership: the passes and what triggers them."""

    def __init__(self, ctx: ControllerContext, routes: Routes, syncs: prometheus_client.Counter):
        self.ctx = ctx
        self.routes = routes
        self.syncs = syncs
        self.cluster = ctx.settings.cluster_name
        self.clusters: list[Network] = cidrs_of(ctx.settings.cluster_cidr)
        # One limit for every cloud route operation of a pass (passes never overlap).
        self.limiter = trio.CapacityLimiter(MAX_CONCURRENT_ROUTE_OPERATIONS)
        self.seen: dict[str, _Relevant] = {}  # per Node: what of it a route depends on
        self.changed = Wake()
        self.rechecks: Rechecks[str] = Rechecks()  # one key: "pass"

    def note_unknown(self, started: float, exc: Exception | None) -> None:
        """A route call's outcome is unknown: a pass once it can no longer land (none when
        nothing of it is still queued: a 5xx answer, say; the next period retries)."""
        if exc is not None and outcome_unknown(exc) and late_landing_s(exc) > 0:
            self.rechecks.at("pass", started + late_landing_s(exc))

    def late_landing_over(self, _: str) -> None:
        log.info("route.late-landing-check")
        self.changed.set()

    async def watch(self, mailbox: MailboxReader[str, Update[Node]]) -> None:
        async for name, update in mailbox:
            now = _relevant(update.obj) if isinstance(update, Changed) else None
            if self.seen.get(name) == now:
                continue
            if now is None:
                del self.seen[name]
            else:
                self.seen[name] = now
            log.debug("route.node-changed", node=name, deleted=now is None)
            self.changed.set()

    # -- one pass ---------------------------------------------------------------------
    async def reconcile(self) -> None:
        """One pass; a failed ListRoutes fails it (the next pass tries again)."""
        self.syncs.inc()
        started = trio.current_time()
        listed = await self.routes.list_routes(self.cluster)
        nodes = self.ctx.nodes.items()
        todo = plan(nodes, listed, self.clusters, address_aware=self.routes.enable_node_addresses)
        async with trio.open_nursery() as nursery:
            # A create waits for the deletes of routes to its destination or to its Node.
            deleting: dict[tuple[str, str], list[trio.Event]] = {}
            for route in todo.deletes:
                done = trio.Event()
                deleting.setdefault(("cidr", _cidr_key(route.destination_cidr)), []).append(done)
                deleting.setdefault(("node", route.target_node), []).append(done)
                nursery.start_soon(self.delete, route, done)
            for create in todo.creates:
                waits = [
                    *deleting.get(("cidr", create.cidr_key), ()),
                    *deleting.get(("node", create.route.target_node), ()),
                ]
                nursery.start_soon(self.create, create, waits, todo)
        async with trio.open_nursery() as nursery:
            for node in nodes:
                unavailable = todo.unavailable(node.metadata.name)
                if unavailable is not None:
                    nursery.start_soon(self.set_condition, node.metadata.name, unavailable)
        took_s = trio.current_time() - started
        if todo.deletes or todo.creates:
            log.info(
                "route.reconciled",
                routes=len(listed),
                deleted=len(todo.deletes),
                created=len(todo.creates) - todo.failed,
                failed=todo.failed,
                took_s=took_s,
            )
        else:
            log.debug("route.reconciled", routes=len(listed), took_s=took_s)

    async def delete(self, route: Route, done: trio.Event) -> None:
        started = trio.current_time()
        try:
            # Only logged, as upstream: the next pass tries again.
            with own_failure(
                "route.delete-failed",
                route=route.name,
                node=route.target_node,
                cidr=route.destination_cidr,
            ) as failure:
                async with self.limiter:
                    await self.routes.delete_route(self.cluster, route)
            self.note_unknown(started, failure.error)
            if failure.error is None:
                log.info(
                    "route.deleted",
                    route=route.name,
                    node=route.target_node,
                    cidr=route.destination_cidr,
                    blackhole=route.blackhole,
                    took_s=trio.current_time() - started,
                )
        finally:
            done.set()

    async def create(self, create: _Create, waits: Sequence[trio.Event], todo: Plan) -> None:
        for done in waits:  # the old route to this destination goes first
            await done.wait()
        node, route = create.node, create.route
        name, hint = node.metadata.name, node.metadata.uid
        started = trio.current_time()
        # An Event and NetworkUnavailable=True; the next pass retries.
        with own_failure("route.create-failed", node=name, cidr=route.destination_cidr) as failure:
            async with self.limiter:
                await self.routes.create_route(self.cluster, hint, route)
        self.note_unknown(started, failure.error)
        if failure.error is not None:
            todo.failed += 1
            elapsed = format_duration(trio.current_time() - started, micro="µs")
            message = (
                f"Could not create route {hint} {route.destination_cidr} for node {name} "
                f"after {elapsed}: {failure.error}"
            )
            warn(self.ctx, node, reason=REASON_FAILED_TO_CREATE_ROUTE, message=message)
            return
        todo.actions[name][create.cidr_key] = "keep"
        log.info(
            "route.created",
            node=name,
            cidr=route.destination_cidr,
            took_s=trio.current_time() - started,
        )

    async def set_condition(self, name: str, unavailable: bool) -> None:
        node = self.ctx.nodes.get(name)
        if node is None:  # deleted meanwhile
            return
        status = "True" if unavailable else "False"
        reason, message = NO_ROUTE_CREATED if unavailable else ROUTE_CREATED
        current = node.status.condition(CONDITION_NETWORK_UNAVAILABLE)
        if current is not None and (current.status, current.reason) == (status, reason):
            return
        now = timestamp(self.ctx.now())
        patch = set_condition(
            {
                "type": CONDITION_NETWORK_UNAVAILABLE,
                "status": status,
                "reason": reason,
                "message": message,
                "lastTransitionTime": now,
                "lastHeartbeatTime": now,
            }
        )
        try:
            async with self.limiter:
                await self.ctx.kube.patch(NODES, name, patch, subresource="status")
        except NotFoundError:
            return
        except KubeError as exc:  # the next pass writes it again
            log.warning("node.network-condition-failed", node=name, error=str(exc))
            return
        log.info("node.network-condition-set", node=name, status=status, reason=reason)
