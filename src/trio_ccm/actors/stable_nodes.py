"""The stable Nodes: the backends of every load balancer, kept as the Nodes change.

`StableNodes` keeps one provider view (`NodeInfo`) per stable Node (upstream's predicates:
not being deleted, not excluded by label, not `ToBeDeletedByClusterAutoscaler`) and
publishes one thing: **the set moved** (the Nodes' names or provider IDs), once the changes
have settled: no change of the set for `NODE_SYNC_COALESCE_S`, or `NODE_SYNC_MAX_WAIT_S`
after the first. Readiness, heartbeats and labels other than the exclusion label are no
move. What a move means to a load balancer is the service controller's business.

The set is compared as a digest (`NodeSet`), and the views sorted, only once a change has
settled; a change of a view alone (addresses, labels) marks the backends stale, rebuilt
when a load balancer next asks (`current()`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

import trio

from trio_ccm.actors.views import has_taint, node_info
from trio_ccm.base.govalues import parse_bool
from trio_ccm.base.mailbox import Mailbox
from trio_ccm.base.pacing import Paced
from trio_ccm.cloud.provider import NodeInfo
from trio_ccm.kube.informer import Informer, Update
from trio_ccm.kube.objects import Node
from trio_ccm.kube.wellknown import LABEL_EXCLUDE_FROM_LB, TAINT_TO_BE_DELETED_BY_CA

__all__ = ["Backends", "NodeSet", "StableNodes", "node_set", "stable_node"]

NODE_SYNC_COALESCE_S: Final = 1.0  # quiet time that ends a node-set change ...
NODE_SYNC_MAX_WAIT_S: Final = 10.0  # ... unless it keeps changing for this long

NodeSet = bytes
"""The backends as the controller compares them: a digest of the (Node name, provider ID)
pairs in name order (16 bytes, where a set of the pairs took 160 bytes per Node)."""


def stable_node(node: Node) -> bool:
    """Whether a Node is a backend of load balancers (upstream's stable node set)."""
    if node.metadata.deletion_timestamp:
        return False
    excluded = node.metadata.labels.get(LABEL_EXCLUDE_FROM_LB)
    # Go's strconv.ParseBool, as upstream: the label is ignored only for a false value.
    if excluded is not None and parse_bool(excluded) is not False:
        return False
    return not has_taint(node, TAINT_TO_BE_DELETED_BY_CA)


def node_set(infos: Sequence[NodeInfo]) -> NodeSet:
    """The digest of the (name, provider ID) pairs of `infos` (sorted by name)."""
    digest = hashlib.blake2b(digest_size=16)
    for info in infos:
        digest.update(f"{info.name}\t{info.provider_id}\n".encode())
    return digest.digest()


@dataclass(frozen=True, slots=True)
class Backends:
    """The stable Nodes as load balancers get them: their set and the providers' views, by
    name (computed once per change of the Nodes, not once per load balancer). No `Node`s:
    a heartbeat replaces the cached Node, and holding the old one would keep two copies."""

    node_set: NodeSet
    infos: tuple[NodeInfo, ...]


class StableNodes:
    """The stable Nodes of one term; see the module docstring."""

    def __init__(self, nodes: Informer[Node]) -> None:
        self.nodes = nodes
        self.infos: dict[str, NodeInfo] = {}  # stable Node -> its view, kept by `noted`
        self.stale = False  # a stable Node's view changed since `backends` was built
        self.backends = Backends(node_set(()), ())  # `load` reads the Nodes

    async def load(self) -> None:
        """A term's first views: every stable Node in the cache (paced: at 100,000 Nodes
        this is a second of work, which must not hold up other tasks)."""
        paced = Paced()
        for node in self.nodes.items():  # a copy: the cache may change as we yield
            await paced.step()
            if stable_node(node):
                self.infos[node.metadata.name] = node_info(node)
        await self.refresh()

    async def current(self) -> Backends:
        """The backends, their views rebuilt first if a Node's view changed meanwhile."""
        if self.stale:
            await self.refresh()
        return self.backends

    async def refresh(self) -> Backends:
        """The backends from the views `noted` keeps (every change of a Node's view
        reaches it: the informer delivers all but bare resourceVersion moves)."""
        views = tuple(view for _, view in sorted(self.infos.items()))
        await trio.lowlevel.checkpoint()
        self.stale = False
        self.backends = Backends(node_set(views), views)
        return self.backends

    def noted(self, name: str) -> bool:
        """Bring Node `name`'s view up to date; whether the node set (its names and
        provider IDs) changed. A change of a view alone only marks the backends stale."""
        node = self.nodes.get(name)
        if node is None or not stable_node(node):
            if self.infos.pop(name, None) is None:
                return False
            self.stale = True
            return True
        view = node_info(node)
        cached = self.infos.get(name)
        if cached == view:
            return False
        self.infos[name] = view
        self.stale = True
        return cached is None or cached.provider_id != view.provider_id

    async def serve(
        self, mailbox: Mailbox[str, Update[Node]], moved: Callable[[Backends], None]
    ) -> None:
        """Note every Node change from `mailbox` (a subscription); call `moved(backends)`
        each time the set has moved and settled."""
        current = self.backends.node_set
        paced = Paced()  # a subscription starts with every Node: 100,000 of them, say
        while True:
            key, _ = await mailbox.get()
            changed = self.noted(key)
            while len(mailbox):  # already in the cache too: part of the set as it is now
                key, _ = mailbox.get_nowait()
                changed = self.noted(key) or changed
                await paced.step()
            if not changed:
                continue
            give_up_at = trio.current_time() + NODE_SYNC_MAX_WAIT_S
            while trio.current_time() < give_up_at:
                await trio.sleep(NODE_SYNC_COALESCE_S)
                changed = False
                while len(mailbox):
                    key, _ = mailbox.get_nowait()
                    changed = self.noted(key) or changed
                    await paced.step()
                if not changed:
                    break
            backends = await self.refresh()
            if backends.node_set != current:
                current = backends.node_set
                moved(backends)
