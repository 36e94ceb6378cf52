"""The stable Nodes: the backends of every load balancer, kept as the Nodes change.

`StableNodes` keeps one provider view (`NodeInfo`) per stable Node (upstream's predicates:
not being deleted, not excluded by label, not `ToBeDeletedByClusterAutoscaler`) and
publishes one thing: **the set moved** (the Nodes' names or provider IDs), once the changes
have settled: no change of the set for `NODE_SYNC_COALESCE_S`, or `NODE_SYNC_MAX_WAIT_S`
after the first. Readiness, heartbeats and labels other than the exclusion label are no
move. What a move means to a load balancer is the service controller's business.

**One pass at a time**, as upstream's node worker (its queue holds one pending sync): a
move is published only once the load balancers have taken the previous one (or
`NODE_SYNC_PASS_WAIT_S` has passed), and then only after a pause as long as that pass took
(`NODE_SYNC_PASS_GAP`), so a wave of Nodes spends at most about half its time pushing
node sets, however large the sets. Changes meanwhile are noted and coalesced; the newest set
is always published in the end, and so is the published set again when a load balancer was
given another one in between (`current()` while the set was moving).

The set is kept as a digest (`NodeSet`) updated per Node change (a sum of per-Node hashes,
so neither a sort nor a pass over every Node); the views are sorted (by name, the order
cached until a Node comes or goes) only when a load balancer asks for them after a change
of a view, at most once a second (`current()`).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final, Protocol

import trio

from trio_ccm.actors.views import has_taint, node_info
from trio_ccm.base.govalues import parse_bool
from trio_ccm.base.mailbox import Mailbox
from trio_ccm.base.pacing import Paced
from trio_ccm.cloud.provider import NodeInfo
from trio_ccm.kube.informer import Informer, Update
from trio_ccm.kube.objects import Node
from trio_ccm.kube.wellknown import LABEL_EXCLUDE_FROM_LB, TAINT_TO_BE_DELETED_BY_CA

__all__ = ["Backends", "NodeSet", "Pass", "StableNodes", "node_set", "stable_node"]

NODE_SYNC_COALESCE_S: Final = 1.0  # quiet time that ends a node-set change ...
NODE_SYNC_MAX_WAIT_S: Final = 10.0  # ... unless it keeps changing for this long
NODE_SYNC_PASS_WAIT_S: Final = 120.0  # the longest a pass is waited for (a Service in backoff)
NODE_SYNC_PASS_GAP: Final = 1.0  # the pause after a pass, in units of the pass's duration
VIEWS_MAX_AGE_S: Final = 1.0  # the views are rebuilt at most this often

_DIGEST_BYTES: Final = 32
_MODULUS: Final = 1 << (8 * _DIGEST_BYTES)

NodeSet = bytes
"""The backends as the controller compares them: a digest of the (Node name, provider ID)
pairs (32 bytes, where a set of the pairs took 160 bytes per Node): the sum, modulo
2**256, of one 256-bit hash per pair, so that one Node's change updates it at once."""


def _member(info: NodeInfo) -> int:
    """One (name, provider ID) pair's share of the digest."""
    digest = hashlib.blake2b(f"{info.name}\t{info.provider_id}".encode(), digest_size=32)
    return int.from_bytes(digest.digest(), "big")


def _as_set(total: int) -> NodeSet:
    return total.to_bytes(_DIGEST_BYTES, "big")


def node_set(infos: Iterable[NodeInfo]) -> NodeSet:
    """The digest of the (name, provider ID) pairs of `infos` (in any order)."""
    return _as_set(sum(map(_member, infos)) % _MODULUS)


def stable_node(node: Node) -> bool:
    """Whether a Node is a backend of load balancers (upstream's stable node set)."""
    if node.metadata.deletion_timestamp:
        return False
    excluded = node.metadata.labels.get(LABEL_EXCLUDE_FROM_LB)
    # Go's strconv.ParseBool, as upstream: the label is ignored only for a false value.
    if excluded is not None and parse_bool(excluded) is not False:
        return False
    return not has_taint(node, TAINT_TO_BE_DELETED_BY_CA)


@dataclass(frozen=True, slots=True)
class Backends:
    """The stable Nodes as load balancers get them: their set and the providers' views, by
    name (computed once per change of the Nodes, not once per load balancer). No `Node`s:
    a heartbeat replaces the cached Node, and holding the old one would keep two copies."""

    node_set: NodeSet
    infos: tuple[NodeInfo, ...]


class Pass(Protocol):
    """A published move as its receiver tracks it: done once every load balancer has the
    set (or failed to take it)."""

    async def wait(self) -> None: ...


class StableNodes:
    """The stable Nodes of one term; see the module docstring."""

    def __init__(self, nodes: Informer[Node]) -> None:
        self.nodes = nodes
        self.infos: dict[str, NodeInfo] = {}  # stable Node -> its view, kept by `noted`
        self.total = 0  # the digest's sum, kept by `noted`
        self.order: list[str] | None = []  # the names, sorted; None: to sort again
        self.stale = False  # a stable Node's view changed since `backends` was built
        self.backends = Backends(node_set(()), ())  # `load` reads the Nodes
        self.published = self.backends.node_set  # the set of the last move published
        self.strayed = False  # `current()` gave out another set since
        self.built_at = -math.inf  # when `backends` was built

    async def load(self) -> None:
        """A term's first views: every stable Node in the cache (paced: at 100,000 Nodes
        this is a second of work, which must not hold up other tasks)."""
        paced = Paced()
        for node in self.nodes.items():  # a copy: the cache may change as we yield
            await paced.step()
            if stable_node(node):
                self.put(node.metadata.name, node_info(node))
        await self.refresh()
        self.published, self.strayed = self.backends.node_set, False

    @property
    def node_set(self) -> NodeSet:
        """The set as noted so far (no view built)."""
        return _as_set(self.total)

    async def current(self) -> Backends:
        """The backends, their views rebuilt first if a Node's view changed meanwhile, at
        most once per `VIEWS_MAX_AGE_S`: the load balancers synced within it share their
        views (as upstream computes the hosts once per pass; in a wave, where every Node
        initialised changes its view, a rebuild per load balancer was 250 copies of
        100,000 views). A set that moved since is published after (`strayed`, `serve`)."""
        if self.stale and trio.current_time() - self.built_at >= VIEWS_MAX_AGE_S:
            await self.refresh()
        return self.backends

    async def refresh(self) -> Backends:
        """The backends from the views `noted` keeps (every change of a Node's view
        reaches it: the informer delivers all but bare resourceVersion moves)."""
        if self.order is None:
            self.order = sorted(self.infos)
            await trio.lowlevel.checkpoint()
        infos = self.infos
        views = tuple([infos[name] for name in self.order])
        await trio.lowlevel.checkpoint()
        self.stale = False
        self.built_at = trio.current_time()
        self.backends = Backends(self.node_set, views)
        if self.backends.node_set != self.published:
            self.strayed = True
        return self.backends

    def put(self, name: str, view: NodeInfo) -> None:
        """Node `name` is a backend, with this view."""
        old = self.infos.get(name)
        if old is None:
            self.order = None
        elif old.provider_id != view.provider_id:
            self.total -= _member(old)
        if old is None or old.provider_id != view.provider_id:
            self.total = (self.total + _member(view)) % _MODULUS
        self.infos[name] = view
        self.stale = True

    def noted(self, name: str) -> bool:
        """Bring Node `name`'s view up to date; whether the node set (its names and
        provider IDs) changed. A change of a view alone only marks the backends stale."""
        node = self.nodes.get(name)
        if node is None or not stable_node(node):
            old = self.infos.pop(name, None)
            if old is None:
                return False
            self.total = (self.total - _member(old)) % _MODULUS
            self.order = None
            self.stale = True
            return True
        view = node_info(node)
        cached = self.infos.get(name)
        if cached == view:
            return False
        self.put(name, view)
        return cached is None or cached.provider_id != view.provider_id

    async def drain(self, mailbox: Mailbox[str, Update[Node]], paced: Paced) -> bool:
        """Note every change waiting in `mailbox`; whether the set changed."""
        changed = False
        while len(mailbox):
            key, _ = mailbox.get_nowait()
            changed = self.noted(key) or changed
            await paced.step()
        return changed

    async def serve(
        self, mailbox: Mailbox[str, Update[Node]], moved: Callable[[Backends], Pass | None]
    ) -> None:
        """Note every Node change from `mailbox` (a subscription); call `moved(backends)`
        each time the set has moved and settled, one pass at a time (module docstring)."""
        paced = Paced()  # a subscription starts with every Node: 100,000 of them, say
        while True:
            if not self.moving():
                key, _ = await mailbox.get()
                self.noted(key)
                await self.drain(mailbox, paced)  # already in the cache too: the set now
                if not self.moving():
                    continue
            give_up_at = trio.current_time() + NODE_SYNC_MAX_WAIT_S
            while trio.current_time() < give_up_at:
                await trio.sleep(NODE_SYNC_COALESCE_S)
                if not await self.drain(mailbox, paced):
                    break
            if not self.moving():
                continue
            backends = await self.refresh()
            self.published, self.strayed = backends.node_set, False
            taken = moved(backends)
            if taken is not None:
                await self.after_pass(taken, mailbox, paced)

    def moving(self) -> bool:
        """Whether a move is to be published: the set is not the one published last, or a
        load balancer was given another set since."""
        return self.strayed or self.node_set != self.published

    async def after_pass(
        self, taken: Pass, mailbox: Mailbox[str, Update[Node]], paced: Paced
    ) -> None:
        """One pass at a time: wait for the load balancers to take the published set, then
        pause as long again; what changes meanwhile is noted (so a Service synced meanwhile
        gets fresh views), to be published next."""
        started = trio.current_time()
        wait_until = started + NODE_SYNC_PASS_WAIT_S
        done = False
        while not done and trio.current_time() < wait_until:
            with trio.move_on_after(NODE_SYNC_COALESCE_S):
                await taken.wait()
                done = True
            await self.drain(mailbox, paced)
        now = trio.current_time()
        gap_until = now + min(NODE_SYNC_PASS_WAIT_S, NODE_SYNC_PASS_GAP * (now - started))
        while trio.current_time() < gap_until:
            await trio.sleep(min(NODE_SYNC_COALESCE_S, gap_until - trio.current_time()))
            await self.drain(mailbox, paced)
