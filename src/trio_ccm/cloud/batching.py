"""Coalesce concurrent per-Node metadata lookups into bulk cloud calls.

`MetadataBatcher.instance_metadata(node)` answers one Node, but the lookups that arrive
within `window_s` of the first one of a batch are answered together by one
`BulkInstances.instances_metadata(nodes)` call. A batch holds at most `max_batch` distinct
Nodes; a full batch is sent at once and the next lookup starts a new one.
`all_metadata(nodes)` serves periodic sweeps: one bulk call per `max_batch` Nodes.

Who makes the call. There is no background task and no `serve()`: a batcher that works
only while someone serves it is one more thing to wire and to forget, and the caller
already owns the cancel scope the call belongs in (the controllers' scope, cancelled when
the Lease is lost). So the call runs in one of the waiting callers, the batch's *driver*:
the first caller of a batch waits out the window, sends the batch and wakes the others.
A driver that is cancelled does not shield the call (cancellation must stop cloud calls at
once, and a shield would hold the cancelled caller hostage to a slow cloud); it leaves the
batch, and the next waiter to run takes the driver's place: it waits out what is left of
the window, or, when the cancelled call was already under way, sends the batch again at
once (without the cancelled caller's Node, unless someone else asked for it too). So the
other waiters always get their answer, at the price of a repeated read when a driver is
cancelled mid-call. When every waiter of a batch is gone, the batch is dropped: nothing
leaks.

Outcomes. A Node missing from the bulk answer raises `InstanceNotFoundError` naming the
Node, in its own waiters only. An exception from the bulk call is raised in every waiter
of the batch, as the same object (so `RetryAfter` and `ThrottledError` keep their type and
fields); before each raise its traceback is reset to the bulk call's, so it never grows by
more than the raising waiter's own frames however many waiters raise it.

Duplicate Node names in one batch are sent once, with the latest `NodeInfo` given.

Spacing. With `spacing_s`, a batch is not sent sooner than `spacing_s` after the previous
bulk call started (a full batch still goes at once): a lookup alone waits only its window,
but lookups that keep coming (a wave, each Node actor looking up as a write slot frees)
gather into one call every `spacing_s` instead of one call per couple of Nodes (a 5,000-Node
wave made 1,226 calls of four Nodes; each call costs the CCM a request and its parsing, as
many Nodes' worth of everything else).

A batch keeps filling until the call reads it. Once its window is over, the driver starts
the bulk call, but the batch stays open: the Nodes go to the provider as a `Sequence` that
is read, and the batch closed, only when the provider first looks at it, which a budgeted
provider does after its token wait (`cloud/budget.py`). In a wave of new Nodes a call
waits about 1/qps for its token; a batch closed at its window's end would carry the few
lookups of 20 ms (two Nodes a call were measured in a 5,000-Node wave), while one that
fills during the wait carries every lookup of that time, up to `max_batch`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import overload

import trio

from trio_ccm.cloud.provider import BulkInstances, InstanceMetadata, InstanceNotFoundError, NodeInfo

__all__ = ["BatcherStatistics", "MetadataBatcher"]


@dataclass(frozen=True, slots=True)
class BatcherStatistics:
    """A snapshot of one MetadataBatcher."""

    batches: int  # bulk calls started (a batch re-sent after a cancelled driver counts twice)
    nodes: int  # Nodes asked for in those calls, in total
    largest: int  # Nodes in the largest call
    pending: int  # instance_metadata() calls waiting for an answer now


class _Batch:
    """Lookups answered by one bulk call."""

    __slots__ = (
        "answer",
        "changed",
        "deadline",
        "driver",
        "error",
        "interest",
        "nodes",
        "open",
        "sending",
    )

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline  # when the window closes
        self.open = True  # still taking lookups (until the call reads the batch)
        self.sending = False  # the window is over: a driver calls (or waits for its token)
        self.nodes: dict[str, NodeInfo] = {}
        self.interest: Counter[str] = Counter()  # waiters per Node name
        self.driver: object | None = None  # the waiter that sends the batch
        self.changed = trio.Event()  # set on: full, driver gone, answered
        self.answer: Mapping[str, InstanceMetadata] | None = None
        self.error: tuple[BaseException, TracebackType | None] | None = None

    @property
    def done(self) -> bool:
        return self.answer is not None or self.error is not None

    def wake(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    def outcome(self, name: str) -> InstanceMetadata:
        if self.error is not None:
            error, traceback = self.error
            raise error.with_traceback(traceback)
        assert self.answer is not None
        found = self.answer.get(name)
        if found is None:
            raise InstanceNotFoundError(
                f"Node {name}: the cloud's bulk instance lookup returned no instance for it; "
                "check that its instance exists (it may have been terminated)"
            )
        return found


class MetadataBatcher:
    """Answers per-Node metadata lookups with shared bulk calls; see the module docstring."""

    def __init__(
        self,
        bulk: BulkInstances,
        *,
        window_s: float = 0.02,
        max_batch: int = 200,
        spacing_s: float = 0.0,
    ) -> None:
        if not window_s >= 0:
            raise ValueError(f"MetadataBatcher: window_s must be >= 0, got {window_s!r}")
        if not spacing_s >= 0:
            raise ValueError(f"MetadataBatcher: spacing_s must be >= 0, got {spacing_s!r}")
        if max_batch < 1:
            raise ValueError(f"MetadataBatcher: max_batch must be at least 1, got {max_batch!r}")
        self._bulk = bulk
        self.window_s = window_s
        self.max_batch = max_batch
        self.spacing_s = spacing_s
        self._last_start = -math.inf  # when the last bulk call of `instance_metadata` started
        self._open: _Batch | None = None
        self._batches = 0
        self._nodes = 0
        self._largest = 0
        self._pending = 0

    async def instance_metadata(self, node: NodeInfo) -> InstanceMetadata:
        """The Node's metadata from a bulk call shared with concurrent lookups.

        Raises InstanceNotFoundError when the answer lacks the Node, and the bulk call's
        own exception when it failed.
        """
        name = node.name
        batch = self._join(node)
        me = object()
        self._pending += 1
        try:
            while not batch.done:
                if batch.driver is None:
                    batch.driver = me
                if batch.driver is not me:
                    await batch.changed.wait()
                elif batch.open and not batch.sending:
                    with trio.move_on_at(batch.deadline):
                        await batch.changed.wait()  # until full, or the window's end
                    if trio.current_time() >= batch.deadline:
                        batch.sending = True  # still open: it fills until the call reads it
                else:
                    await self._send(batch)
            # Every caller has waited at least once above: a batch is closed before it is
            # sent, so a caller never joins one that is already answered.
            return batch.outcome(name)
        finally:
            self._pending -= 1
            self._leave(batch, name, me)

    def _join(self, node: NodeInfo) -> _Batch:
        batch = self._open
        if batch is None:
            deadline = max(trio.current_time() + self.window_s, self._last_start + self.spacing_s)
            batch = self._open = _Batch(deadline)
        batch.nodes[node.name] = node
        batch.interest[node.name] += 1
        if len(batch.nodes) >= self.max_batch:
            self._close(batch)
            batch.wake()  # the driver sends it now
        return batch

    def _close(self, batch: _Batch) -> None:
        batch.open = False
        if self._open is batch:
            self._open = None

    def _leave(self, batch: _Batch, name: str, me: object) -> None:
        batch.interest[name] -= 1
        if batch.interest[name] <= 0:
            del batch.interest[name]
            if not batch.done:
                batch.nodes.pop(name, None)
        if batch.done:
            return
        if not batch.interest:
            self._close(batch)  # nobody is left to wait for it
        elif batch.driver is me:
            batch.driver = None  # cancelled: the next waiter to run takes over
            batch.wake()

    async def _send(self, batch: _Batch) -> None:
        self._last_start = trio.current_time()
        try:
            answer = await self._bulk.instances_metadata(_Reading(self, batch))
        except Exception as exc:  # delivered to every waiter of the batch, not handled
            batch.error = (exc, exc.__traceback__)
        else:
            batch.answer = answer
        # Closed however the call ended: one refused before it read the batch (the budget's
        # leadership guard after a lost Lease, a throttle) left it open, and every later
        # lookup, the next term's too, joined it and got its error.
        self._close(batch)
        batch.wake()

    def _read(self, batch: _Batch) -> list[NodeInfo]:
        """The batch as the call sends it: closed now, so later lookups start a new one."""
        self._close(batch)
        nodes = list(batch.nodes.values())
        self._count(len(nodes))
        return nodes

    def _count(self, size: int) -> None:
        self._batches += 1
        self._nodes += size
        self._largest = max(self._largest, size)

    async def all_metadata(self, nodes: Sequence[NodeInfo]) -> Mapping[str, InstanceMetadata]:
        """Metadata of all `nodes` (by name), one bulk call per `max_batch` distinct Nodes.

        For periodic sweeps; the calls run one after the other and do not join the
        batches of `instance_metadata`. Nodes without an instance are absent from the
        answer; an exception from any call propagates.
        """
        distinct = list({node.name: node for node in nodes}.values())
        merged: dict[str, InstanceMetadata] = {}
        for start in range(0, len(distinct), self.max_batch):
            chunk = distinct[start : start + self.max_batch]
            self._count(len(chunk))
            answer = await self._bulk.instances_metadata(chunk)
            asked = {node.name for node in chunk}
            merged.update((name, meta) for name, meta in answer.items() if name in asked)
        if not distinct:
            await trio.lowlevel.checkpoint()
        return merged

    def statistics(self) -> BatcherStatistics:
        return BatcherStatistics(
            batches=self._batches, nodes=self._nodes, largest=self._largest, pending=self._pending
        )


class _Reading(Sequence[NodeInfo]):
    """The Nodes of a batch as a bulk call sees them: read (and the batch closed) when the
    provider first looks, so lookups made while the call waited for its token are in it."""

    def __init__(self, batcher: MetadataBatcher, batch: _Batch) -> None:
        self._batcher = batcher
        self._batch = batch
        self._nodes: list[NodeInfo] | None = None

    def _read(self) -> list[NodeInfo]:
        if self._nodes is None:
            self._nodes = self._batcher._read(self._batch)
        return self._nodes

    @overload
    def __getitem__(self, index: int) -> NodeInfo: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[NodeInfo]: ...
    def __getitem__(self, index: int | slice) -> NodeInfo | Sequence[NodeInfo]:
        return self._read()[index]

    def __len__(self) -> int:
        return len(self._read())

    def __iter__(self) -> Iterator[NodeInfo]:
        return iter(self._read())
