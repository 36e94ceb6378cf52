"""cloud-node-lifecycle-controller: delete Nodes whose instance is gone, taint shut-down ones.

Contract, one pass every `--node-monitor-period` (sliding):
- A Ready Node loses the shutdown taint if it has it (no cloud call).
- Any other Node is asked about: gone → Event `DeletingNode` and a delete with a UID
  precondition (a Node re-registered under the same name is never deleted); shut down →
  the taint `node.cloudprovider.kubernetes.io/shutdown:NoSchedule`.
- **An error never deletes a Node**: a provider error skips the Node this pass, and a Node
  missing from a bulk listing is confirmed with `instance_exists` before it is deleted.
  A failed bulk listing fails the pass; the next one runs on schedule.
- Nodes being deleted are left alone.

**A pass costs O(Nodes that need a look), not O(Nodes).** The Nodes a pass has anything to
do with (`needs_look`: not Ready, or Ready and still carrying the shutdown taint) are kept in
a set for the term, from a subscription to the Node cache: each pass first takes the
updates that came since the last one (every cached Node at the first pass of a term, from
the subscription's first fill), then looks at the set only. A Ready Node without the taint
costs nothing per pass, and its heartbeats reach no one (the informer drops updates that
change only the resourceVersion). Chosen over an index kept by the informer: the rule stays
here with the controller's other rules, the informer keeps one way of telling about
changes, and the set lives and dies with the term.

Upstream's rules kept and what trio-ccm does better: docs/controllers.md.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

import trio

from trio_ccm.actors.controller import Controller, ControllerContext, info, warn
from trio_ccm.actors.passes import own_failure, serve_passes
from trio_ccm.actors.views import has_taint, node_info
from trio_ccm.base.mailbox import Mailbox
from trio_ccm.base.pacing import Paced
from trio_ccm.cloud.provider import (
    InstanceMetadata,
    Instances,
    InvalidProviderIDError,
    NodeInfo,
)
from trio_ccm.kube.errors import ConflictError, KubeError, NotFoundError
from trio_ccm.kube.informer import CHECKPOINT_EVERY, Changed, Update
from trio_ccm.kube.objects import NODES, Node
from trio_ccm.kube.patches import JSONValue, add_taint, remove_taint
from trio_ccm.kube.wellknown import (
    CLOUD_NODE_LIFECYCLE_CONTROLLER,
    COMPONENT_CLOUD_NODE_LIFECYCLE,
    CONDITION_READY,
    REASON_DELETING_NODE,
    REASON_DELETING_NODE_FAILED,
    TAINT_SHUTDOWN,
)
from trio_ccm.logs import get_logger

__all__ = ["NodeLifecycleController", "needs_look"]

log = get_logger("trio_ccm.actors.node_lifecycle")

_SHUTDOWN_TAINT: dict[str, JSONValue] = {"key": TAINT_SHUTDOWN, "effect": "NoSchedule"}


def _ready(node: Node) -> bool:
    ready = node.status.condition(CONDITION_READY)
    return ready is not None and ready.status == "True"


def needs_look(node: Node) -> bool:
    """Whether a monitoring pass has anything to do with `node`: it is not being deleted,
    and it is not Ready (or has no Ready condition), or it is Ready and still carries the
    shutdown taint."""
    if node.metadata.deletion_timestamp:
        return False
    return not _ready(node) or has_taint(node, TAINT_SHUTDOWN)


class NodeLifecycleController(Controller):
    """cloud-node-lifecycle-controller; see the module docstring."""

    name = CLOUD_NODE_LIFECYCLE_CONTROLLER
    informers = frozenset({"nodes"})
    client_name = "node-controller"
    event_component = COMPONENT_CLOUD_NODE_LIFECYCLE
    capability = "instances"

    async def run(self, ctx: ControllerContext) -> None:
        """One monitoring pass every --node-monitor-period after the previous one ended."""
        instances = ctx.cloud.instances
        assert instances is not None  # the capability is checked before a term starts
        async with ctx.nodes.subscription() as updates:
            term = _LifecycleTerm(ctx, instances, updates)
            await serve_passes(
                term.monitor,
                name=ctx.name,
                period_s=ctx.settings.node_monitor_period_s,
                sliding=True,
            )


class _LifecycleTerm:
    """One term of leadership: the Nodes that need a look, and the monitoring passes."""

    def __init__(
        self, ctx: ControllerContext, instances: Instances, updates: Mailbox[str, Update[Node]]
    ) -> None:
        self.ctx = ctx
        self.instances = instances
        self.limiter = trio.CapacityLimiter(ctx.settings.concurrent_node_syncs)
        self.updates = updates
        # The names of the Nodes that need a look (`needs_look`), as of the last update
        # taken; a dict for a stable order (the order they began to need one).
        self.watched: dict[str, None] = {}

    async def take_updates(self) -> None:
        """Bring `watched` up to date with the Nodes changed since the last pass (every
        cached Node at the first pass of a term), yielding now and then."""
        paced = Paced(CHECKPOINT_EVERY)
        while True:
            try:
                name, update = self.updates.get_nowait()
            except trio.WouldBlock:
                return
            if isinstance(update, Changed) and needs_look(update.obj):
                self.watched[name] = None
            else:
                self.watched.pop(name, None)
            await paced.step()

    async def monitor(self) -> None:
        """One pass: Ready Nodes lose the shutdown taint; the others are asked about."""
        started = trio.current_time()
        await self.take_updates()
        not_ready: list[Node] = []
        examined = 0
        async with trio.open_nursery() as nursery:
            # Nothing yields between the last update taken and this loop, so the cache
            # agrees with `watched`; the check guards that, and reads the newest version.
            for name in list(self.watched):
                node = self.ctx.nodes.get(name)
                if node is None or not needs_look(node):  # its update is in the mailbox
                    del self.watched[name]
                    continue
                examined += 1
                if _ready(node):
                    nursery.start_soon(self.patch_taint, node, False)
                else:
                    not_ready.append(node)
        log.debug(
            "lifecycle.monitored",
            examined=examined,
            not_ready=len(not_ready),
            nodes=len(self.ctx.nodes),
            took_s=trio.current_time() - started,
        )
        if not not_ready:
            return
        async with trio.open_nursery() as nursery:
            if self.ctx.batcher is not None:
                # A failed listing fails the pass (an error never deletes): next period.
                found = await self.ctx.batcher.all_metadata([node_info(n) for n in not_ready])
                for node in not_ready:
                    nursery.start_soon(self.check_listed, node, found)
            else:
                for node in not_ready:
                    nursery.start_soon(self.check_each, node)

    async def check_listed(self, node: Node, found: Mapping[str, InstanceMetadata]) -> None:
        metadata = found.get(node.metadata.name)
        if metadata is None:
            # Missing from the listing: confirm with a direct question before deleting.
            async with self.limiter:
                if await self.ask(node, self.instances.instance_exists) is False:
                    await self.delete(node)
            return
        if metadata.shutdown:
            await self.patch_taint(node, True)

    async def check_each(self, node: Node) -> None:
        async with self.limiter:
            exists = await self.ask(node, self.instances.instance_exists)
            if exists is False:
                await self.delete(node)
                return
            shutdown = exists and await self.ask(node, self.instances.instance_shutdown)
        if shutdown:
            await self.patch_taint(node, True)

    @staticmethod
    async def ask(node: Node, question: Callable[[NodeInfo], Awaitable[bool]]) -> bool | None:
        """The cloud's answer about the Node's instance; None when it has none this round
        (an error, or a provider ID the cloud refuses): never a reason to delete."""
        # The provider's error skips this round.
        with own_failure("lifecycle.check-failed", node=node.metadata.name):
            try:
                return await question(node_info(node))
            except InvalidProviderIDError as exc:  # cloud-node gave the Warning; never deleted
                log.debug("lifecycle.check-skipped", node=node.metadata.name, error=str(exc))
        return None

    async def delete(self, node: Node) -> None:
        name = node.metadata.name
        info(
            self.ctx,
            node,
            reason=REASON_DELETING_NODE,
            message=f"Deleting node {name} because it does not exist in the cloud provider",
        )
        try:
            await self.ctx.kube.delete(NODES, name, uid=node.metadata.uid or None)
        except NotFoundError:
            return
        except ConflictError:
            log.info("node.delete-skipped", node=name, reason="re-registered with a new uid")
            return
        except KubeError as exc:
            warn(
                self.ctx,
                node,
                reason=REASON_DELETING_NODE_FAILED,
                message=f"Error deleting node {name}: {exc}",
            )
            log.warning("node.delete-failed", node=name, error=str(exc))
            return
        log.info("node.deleted", node=name, reason="instance does not exist in the cloud")

    async def patch_taint(self, node: Node, add: bool) -> None:
        name = node.metadata.name
        taints = node.spec.taints
        patch = add_taint(taints, _SHUTDOWN_TAINT) if add else remove_taint(taints, TAINT_SHUTDOWN)
        if patch.empty:
            return
        try:
            await self.ctx.kube.patch(NODES, name, patch)
        except NotFoundError:
            return
        except KubeError as exc:  # the next period retries on a fresh Node
            log.warning("node.taint-failed", node=name, taint=TAINT_SHUTDOWN, error=str(exc))
            return
        log.info("node.shutdown-tainted" if add else "node.shutdown-untainted", node=name)
