"""The cloud-node-controller's periodic address sync: compare only what changed.

Every `--node-status-update-frequency` (sliding) a pass makes each initialised Node's
`status.addresses` what the cloud reports (the rules: `node_addresses.py`). What a pass
looks at:

- **A change pass**, when the provider's `instances` offers `InstanceChangeFeed`: the pass
  asks the cloud which instances changed since the cursor of the last pass, and compares
  only the Nodes that claim those instances (by `spec.providerID`), plus the Nodes that
  changed on the Kubernetes side since (`node_changed`: a Node initialised, its addresses or
  its provided node IP edited; those are looked up, in bulk when possible). An unchanged
  Node costs nothing: no view of it is built, no lookup made, nothing compared.
- **A full pass** otherwise: every initialised Node is looked up (one bulk call per
  `--cloud-batch-size` Nodes when the provider offers `BulkInstances`, else one call per
  Node) and compared. With a feed, a pass is full at the start of a term, after a pass that
  failed, when the cloud refuses the cursor (`StaleCursorError`) or answers with something
  that is not an `InstanceChanges`, and once every `FULL_PASS_S` (a resync, as informers
  do: it catches a Node whose provider ID the cloud spells differently). A full pass takes
  the cloud's cursor before it looks anything up, so a change made during it is reported
  by the next change pass: nothing falls between the two. A term's subscription announces
  every cached Node as changed once; those notices are not counted as changes (the term's
  first pass compares every Node anyway), or the second pass would look every Node up again.

Comparing costs no object for a Node whose addresses already equal the cloud's (and carries
no provided node IP to order them by): the two tuples compare in C. A task, under
`--concurrent-node-status-updates`, is started only for a Node whose addresses change; one
Node's failure (lookup or write) never fails the others and is retried by the next pass.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Final

import trio

from trio_ccm.actors.controller import ControllerContext
from trio_ccm.actors.node_addresses import desired_addresses
from trio_ccm.actors.passes import own_failure
from trio_ccm.actors.views import has_taint, node_info
from trio_ccm.base.pacing import Paced
from trio_ccm.cloud.provider import (
    InstanceChangeFeed,
    InstanceChanges,
    InstanceMetadata,
    Instances,
    NodeAddress,
    change_feed,
)
from trio_ccm.errors import CcmError
from trio_ccm.kube.errors import KubeError, NotFoundError
from trio_ccm.kube.objects import Node
from trio_ccm.kube.wellknown import ANNOTATION_PROVIDED_NODE_IP, TAINT_UNINITIALIZED
from trio_ccm.logs import get_logger

__all__ = ["FULL_PASS_S", "AddressSync", "addresses_for"]

log = get_logger("trio_ccm.actors.address_sync")

FULL_PASS_S: Final = 3600.0
"""With a change feed, a full pass at least this often (12 passes at the deployed 5 min)."""

Write = Callable[[Node, Sequence[NodeAddress]], Awaitable[None]]


def addresses_for(node: Node, metadata: InstanceMetadata) -> list[NodeAddress] | None:
    """The addresses the cloud says the Node should have (None: leave them)."""
    return desired_addresses(
        node.metadata.name,
        metadata.node_addresses,
        node.status.addresses,
        node.metadata.annotations.get(ANNOTATION_PROVIDED_NODE_IP),
    )


def _reports_what_it_has(node: Node, metadata: InstanceMetadata) -> bool:
    """Whether the cloud reports exactly the Node's addresses, with no provided node IP to
    order them by: then `desired_addresses` would return them unchanged, so nothing is
    built (the tuples of structs compare in C)."""
    return (
        node.status.addresses == metadata.node_addresses
        and ANNOTATION_PROVIDED_NODE_IP not in node.metadata.annotations
    )


def _synced(node: Node | None) -> bool:
    """Whether the sync looks after this Node: initialised and not being deleted."""
    return (
        node is not None
        and not node.metadata.deletion_timestamp
        and not has_taint(node, TAINT_UNINITIALIZED)
    )


def _checked(provider: str, answer: object) -> InstanceChanges:
    """The feed's answer, or CcmError naming what is wrong with it."""
    if not isinstance(answer, InstanceChanges):
        raise CcmError(
            f"cloud provider {provider}: instances_changed_since returned "
            f"{type(answer).__name__}, not InstanceChanges; fix the provider"
        )
    if not isinstance(answer.cursor, str) or not answer.cursor:
        raise CcmError(
            f"cloud provider {provider}: instances_changed_since returned the cursor "
            f"{answer.cursor!r}, not a non-empty string; fix the provider"
        )
    if not isinstance(answer.changed, Mapping):
        raise CcmError(
            f"cloud provider {provider}: instances_changed_since returned changes of type "
            f"{type(answer.changed).__name__}, not a mapping; fix the provider"
        )
    return answer


class AddressSync:
    """One term's address sync; see the module docstring.

    `owners(provider_id)` names the Nodes that claim an instance; `write(node, addresses)`
    patches a Node's addresses; `workers` caps the writes of one pass.
    """

    def __init__(
        self,
        ctx: ControllerContext,
        instances: Instances,
        *,
        owners: Callable[[str], Iterable[str]],
        write: Write,
        workers: int,
    ) -> None:
        self.ctx = ctx
        self.instances = instances
        self.feed: InstanceChangeFeed | None = change_feed(instances)
        self.owners = owners
        self.write = write
        self.workers = workers
        self.cursor: str | None = None  # None: the next pass is a full pass
        self.full_at = -float("inf")  # when the last full pass started
        # Nodes changed on the Kubernetes side since the last pass (with a feed only).
        self.changed: set[str] = set()
        # The Nodes cached when the term starts: its subscription announces each as
        # changed once, which is no change (the term's first pass is a full pass).
        self.unannounced: set[str] = set(ctx.nodes.keys()) if self.feed is not None else set()

    def node_changed(self, name: str) -> None:
        """The Node changed in the cache: the next change pass compares it."""
        if self.feed is None:
            return
        if self.unannounced and name in self.unannounced:
            self._announced(name)
            return
        self.changed.add(name)

    def forget(self, name: str) -> None:
        self.changed.discard(name)
        if self.unannounced:
            self._announced(name)

    def _announced(self, name: str) -> None:
        self.unannounced.discard(name)
        if not self.unannounced:
            self.unannounced = set()  # an emptied set keeps its table: give it back

    async def sync(self) -> None:
        """One pass: a change pass when the cloud can say what changed, else a full pass."""
        cursor, self.cursor = self.cursor, None  # a pass that fails leaves a full pass next
        if self.feed is None:
            await self.full_pass()
            return
        if cursor is not None and trio.current_time() - self.full_at < FULL_PASS_S:
            changes: InstanceChanges | None = None
            # Any failure of the feed, garbage included: compare every Node, lose nothing.
            with own_failure("node.address-changes-failed", action="comparing every Node"):
                changes = _checked(
                    self.ctx.cloud.name, await self.feed.instances_changed_since(cursor)
                )
            if changes is not None:
                await self.change_pass(changes)
                self.cursor = changes.cursor
                return
        self.changed = set()
        nodes = [n for n in self.ctx.nodes.items() if _synced(n)]
        if not nodes:
            return  # nothing to compare, no cursor to take: the next pass is full again
        self.full_at = trio.current_time()
        cursor = None
        with own_failure("node.address-cursor-failed", action="the next pass is a full pass"):
            cursor = _checked_cursor(self.ctx.cloud.name, await self.feed.instances_cursor())
        await self.full_pass(nodes)
        self.cursor = cursor

    async def full_pass(self, nodes: Sequence[Node] | None = None) -> None:
        """Every initialised Node (`nodes`, when the caller has listed them), looked up and
        compared."""
        if nodes is None:
            nodes = [n for n in self.ctx.nodes.items() if _synced(n)]
        if not nodes:
            return
        started = trio.current_time()
        await self.compare(await self.lookup(nodes))
        log.debug("node.addresses-synced", nodes=len(nodes), took_s=trio.current_time() - started)

    async def change_pass(self, changes: InstanceChanges) -> None:
        """The Nodes of the instances in `changes`, and the Nodes changed since the last pass."""
        started = trio.current_time()
        changed_nodes, self.changed = self.changed, set()
        found: dict[str, InstanceMetadata | None] = {}
        paced = Paced()
        for provider_id, metadata in changes.changed.items():
            await paced.step()
            for name in self.owners(provider_id):
                found[name] = metadata
        nodes: list[Node] = []
        for name in changed_nodes:
            node = self.ctx.nodes.get(name)
            if name not in found and node is not None and _synced(node):
                nodes.append(node)
        if nodes:
            looked_up = await self.lookup(nodes)
            found.update(looked_up)
            for node in nodes:  # no answer (a failed lookup, no instance): asked next pass
                if looked_up.get(node.metadata.name) is None:
                    self.node_changed(node.metadata.name)
        await self.compare(found)
        log.debug(
            "node.address-changes-synced",
            instances=len(changes.changed),
            nodes_changed=len(changed_nodes),
            compared=len(found),
            took_s=trio.current_time() - started,
        )

    async def lookup(self, nodes: Sequence[Node]) -> Mapping[str, InstanceMetadata | None]:
        """The cloud's metadata of `nodes`, by name: bulk calls when the provider has them."""
        if self.ctx.batcher is not None:
            return await self.ctx.batcher.all_metadata([node_info(n) for n in nodes])
        limiter = trio.CapacityLimiter(self.workers)
        found: dict[str, InstanceMetadata | None] = {}

        async def one(node: Node) -> None:
            async with limiter:
                with own_failure("node.address-lookup-failed", node=node.metadata.name):
                    found[node.metadata.name] = await self.instances.instance_metadata(
                        node_info(node)
                    )

        async with trio.open_nursery() as nursery:
            for node in nodes:
                nursery.start_soon(one, node)
        return found

    async def compare(self, found: Mapping[str, InstanceMetadata | None]) -> None:
        """Compare each Node with its metadata in paced steps; a task only for the Nodes
        whose addresses change (a period costs no task per unchanged Node)."""
        limiter = trio.CapacityLimiter(self.workers)
        paced = Paced()
        async with trio.open_nursery() as nursery:
            for name, metadata in found.items():
                await paced.step()
                current = self.ctx.nodes.get(name)
                if metadata is None or not _synced(current):
                    continue
                assert current is not None  # _synced
                if _reports_what_it_has(current, metadata):
                    continue
                try:
                    addresses = addresses_for(current, metadata)
                except CcmError as exc:
                    log.warning("node.address-sync-failed", node=name, error=str(exc))
                    self.node_changed(name)  # compared again next pass, as without a feed
                    continue
                if addresses is not None and tuple(addresses) != current.status.addresses:
                    nursery.start_soon(self.update_one, name, metadata, limiter)

    async def update_one(
        self, name: str, metadata: InstanceMetadata, limiter: trio.CapacityLimiter
    ) -> None:
        async with limiter:
            current = self.ctx.nodes.get(name)
            if not _synced(current):
                return
            assert current is not None  # _synced
            try:
                addresses = addresses_for(current, metadata)
                if addresses is not None:
                    await self.write(current, addresses)
            except NotFoundError:
                return
            except (CcmError, KubeError) as exc:
                log.warning("node.address-sync-failed", node=name, error=str(exc))
                self.node_changed(name)


def _checked_cursor(provider: str, cursor: object) -> str:
    """The feed's cursor, or CcmError naming what is wrong with it."""
    if not isinstance(cursor, str) or not cursor:
        raise CcmError(
            f"cloud provider {provider}: instances_cursor returned {cursor!r}, not a "
            "non-empty string; fix the provider"
        )
    return cursor
