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
so neither a sort nor a pass over every Node); per stable Node only its provider ID is kept.
**The views are built when a load balancer asks** (`current()`), sorted by name (the order
cached until a Node comes or goes), at most once a second, again only for the Nodes noted
since (the others' views are the last build's), and **let go** once no load balancer has
asked for `VIEWS_KEPT_S` and no move is going: a settled cluster holds no view (at 100,000
Nodes they were 9 MB, 88 bytes a Node, kept for good); the next ask builds them anew from
the cache.
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
VIEWS_KEPT_S: Final = 30.0  # ... and let go this long after the last ask, when no move is going

_DIGEST_BYTES: Final = 32
_MODULUS: Final = 1 << (8 * _DIGEST_BYTES)

NodeSet = bytes
"""The backends as the controller compares them: a digest of the (Node name, provider ID)
pairs (32 bytes, where a set of the pairs took 160 bytes per Node): the sum, modulo
2**256, of one 256-bit hash per pair, so that one Node's change updates it at once."""


def _member(name: str, provider_id: str) -> int:
    """One (name, provider ID) pair's share of the digest."""
    digest = hashlib.blake2b(f"{name}\t{provider_id}".encode(), digest_size=32)
    return int.from_bytes(digest.digest(), "big")


def _as_set(total: int) -> NodeSet:
    return total.to_bytes(_DIGEST_BYTES, "big")


def node_set(infos: Iterable[NodeInfo]) -> NodeSet:
    """The digest of the (name, provider ID) pairs of `infos` (in any order)."""
    return _as_set(sum(_member(info.name, info.provider_id) for info in infos) % _MODULUS)


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
        self.ids: dict[str, str] = {}  # stable Node -> its provider ID, kept by `noted`
        self.total = 0  # the digest's sum, kept by `noted`
        self.order: list[str] | None = []  # the names, sorted; None: to sort again
        self.backends: Backends | None = None  # the last views built; None: let go
        self.built_order: list[str] | None = None  # the `order` they were built in
        self.changed: set[str] = set()  # Nodes noted since they were built
        self.stale = False  # a Node was noted since they were built
        self.built_at = -math.inf  # when they were built
        self.asked_at = -math.inf  # when a load balancer last asked (`current()`)
        self.building = trio.Lock()
        self.published = node_set(())  # the set of the last move published
        self.strayed = False  # `current()` gave out another set since

    async def load(self) -> None:
        """A term's first set: every stable Node in the cache (paced: at 100,000 Nodes
        this is a second of work, which must not hold up other tasks). No view is built
        until a load balancer asks."""
        paced = Paced()
        for node in self.nodes.items():  # a copy: the cache may change as we yield
            await paced.step()
            if stable_node(node):
                self.put(node.metadata.name, node.spec.provider_id)
        self.published, self.strayed = self.node_set, False

    @property
    def node_set(self) -> NodeSet:
        """The set as noted so far (no view built)."""
        return _as_set(self.total)

    async def current(self) -> Backends:
        """The backends: the views built (or rebuilt, if a Node was noted meanwhile, at
        most once per `VIEWS_MAX_AGE_S`): the load balancers synced within it share their
        views (as upstream computes the hosts once per pass; in a wave, where every Node
        initialised changes its view, a rebuild per load balancer was 250 copies of
        100,000 views). A set that moved since is published after (`strayed`, `serve`)."""
        self.asked_at = trio.current_time()
        if not self.outdated():
            assert self.backends is not None
            return self.backends
        async with self.building:  # one build at a time: each takes the `changed` before it
            if self.outdated() or self.backends is None:
                return await self.build()
            return self.backends

    def outdated(self) -> bool:
        """Whether the views are to be built (again) when asked now."""
        return self.backends is None or (
            self.stale and trio.current_time() - self.built_at >= VIEWS_MAX_AGE_S
        )

    async def refresh(self) -> Backends:
        """The backends built now (a move to publish)."""
        async with self.building:
            return await self.build()

    async def build(self) -> Backends:
        """The backends, their views built from the cache: anew for the Nodes noted since
        the last build (every change of a Node's view reaches `noted`: the informer
        delivers all but bare resourceVersion moves), the last build's for the others.
        Only under `building`."""
        if self.order is None:
            self.order = sorted(self.ids)
            await trio.lowlevel.checkpoint()
        order, previous, built_order = self.order, self.backends, self.built_order
        changed, self.changed = self.changed, set()
        nodes = self.node_set  # the set the views are built for
        # The last build's views, by position when no Node came or went since, else by name.
        by_name: dict[str, NodeInfo] = {}
        aligned: tuple[NodeInfo, ...] = ()
        if previous is not None and built_order is order:
            aligned = previous.infos
        elif previous is not None:
            by_name = {info.name: info for info in previous.infos}
        views: list[NodeInfo] = []
        skipped = False
        paced = Paced()
        for i, name in enumerate(order):
            view = None
            if name not in changed:
                view = aligned[i] if aligned else by_name.get(name)
            if view is None:
                node = self.nodes.get(name)
                if node is None:  # gone meanwhile: its Gone, still to be noted, moves the set
                    skipped = True
                    continue
                view = node_info(node)
            views.append(view)
            await paced.step()  # what is noted meanwhile is in `changed`, for the next build
        self.backends = Backends(nodes, tuple(views))
        self.built_order = None if skipped else order  # positions hold only without a gap
        self.built_at = trio.current_time()
        self.stale = bool(self.changed)
        if nodes != self.published:
            self.strayed = True
        return self.backends

    def let_go(self) -> None:
        """Forget the views and their order (the next ask builds them anew from the cache,
        sorted again)."""
        self.backends = self.built_order = self.order = None
        self.changed = set()  # a set never gives its table back
        self.stale = False

    def put(self, name: str, provider_id: str) -> None:
        """Node `name` is a backend, with this provider ID."""
        old = self.ids.get(name)
        if old is None:
            self.order = None
        else:
            self.total -= _member(name, old)
        self.total = (self.total + _member(name, provider_id)) % _MODULUS
        self.ids[name] = provider_id

    def noted(self, name: str) -> bool:
        """Note a change of Node `name` (its view is built anew at the next build);
        whether the node set (its names and provider IDs) changed."""
        node = self.nodes.get(name)
        if node is None or not stable_node(node):
            old = self.ids.pop(name, None)
            if old is None:
                return False
            self.total = (self.total - _member(name, old)) % _MODULUS
            self.order = None
            self.stale = True
            return True
        if self.backends is not None or self.building.locked():  # else all are built anew
            self.changed.add(name)
        self.stale = True
        provider_id = node.spec.provider_id
        if self.ids.get(name) == provider_id:
            return False
        self.put(name, provider_id)
        return True

    async def idle_get(self, mailbox: Mailbox[str, Update[Node]]) -> None:
        """Wait for the next change in `mailbox` (take it and note it); meanwhile let the
        views go once no load balancer has asked for them for `VIEWS_KEPT_S`."""
        while True:
            if self.backends is None:
                wake_at = trio.current_time() + VIEWS_KEPT_S  # to look again: built meanwhile?
            else:
                wake_at = max(self.asked_at, self.built_at) + VIEWS_KEPT_S
                if trio.current_time() >= wake_at:
                    if not self.building.locked():
                        self.let_go()
                        continue
                    wake_at = trio.current_time() + VIEWS_MAX_AGE_S  # after the build, again
            with trio.move_on_at(wake_at):
                key, _ = await mailbox.get()
                self.noted(key)
                return

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
                await self.idle_get(mailbox)
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
