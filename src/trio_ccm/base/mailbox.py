"""The coalescing per-key mailbox: the one hand-off primitive between tasks.

`put(key, value)` never blocks and keeps only the latest value per key, so memory is
bounded by the number of distinct keys, not by the rate of changes: a slow receiver that
missed five updates of a key sees only the last one. Keys come out in the order they first
became pending (a key updated while pending keeps its place).

The pending keys are an `OrderedDict`: taking the oldest is O(1). (A plain dict's first key
is found by skipping the slots its earlier pops left behind: draining 100,000 keys took 3 s
in one step, and a dict that once held that many kept every later get O(its old size).)
A dict never shrinks, so once a mailbox that held many keys is empty it starts a new one:
a subscription's first fill of 100,000 keys would otherwise keep 7 MB for good.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import AsyncIterator, Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import trio

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
V_co = TypeVar("V_co", covariant=True)
_SMALL = 64  # an emptied mailbox that never held more keys keeps its dict


class MailboxReader(Protocol[K, V_co]):
    """The receiving side of a Mailbox: what a consumer needs (so a Mailbox of a narrower
    value type can feed a consumer of a wider one)."""

    def __aiter__(self) -> AsyncIterator[tuple[K, V_co]]: ...

    async def get_batch(self, limit: int) -> Sequence[tuple[K, V_co]]: ...

    def take(self, key: K) -> tuple[bool, V_co | None]: ...

    def pending(self, key: K) -> bool: ...


@dataclass(frozen=True)
class MailboxStatistics:
    pending: int
    puts: int
    coalesced: int
    receivers_waiting: int
    closed: bool


class Mailbox(Generic[K, V]):
    """Latest value per key plus a wake-up; see the module docstring."""

    def __init__(self) -> None:
        self._pending: OrderedDict[K, V] = OrderedDict()
        self._peak = 0  # the most keys pending since `_pending` was made
        self._wakeup = trio.Event()
        self._closed = False
        self._puts = 0
        self._coalesced = 0
        self._waiting = 0

    def put(self, key: K, value: V) -> None:
        """Hand over the latest value for `key` (replaces a pending one; never blocks)."""
        if self._closed:
            raise trio.ClosedResourceError("mailbox is closed")
        self._puts += 1
        pending = self._pending
        if key in pending:
            self._coalesced += 1
        pending[key] = value
        if len(pending) > self._peak:
            self._peak = len(pending)
        self._wakeup.set()

    def get_nowait(self) -> tuple[K, V]:
        if not self._pending:
            if self._closed:
                raise trio.EndOfChannel
            raise trio.WouldBlock
        taken = self._pending.popitem(last=False)
        self._shrink_if_empty()
        return taken

    async def get(self) -> tuple[K, V]:
        """The oldest pending key and its latest value; EndOfChannel once closed and empty."""
        while True:
            if self._pending or self._closed:
                # Checkpoint first, then take synchronously: a value taken before a yield
                # would be in neither the mailbox nor its receiver meanwhile, and a child
                # that saw `pending(key)` could then be handed nothing (read as "deleted").
                await trio.lowlevel.checkpoint()
                try:
                    return self.get_nowait()
                except trio.WouldBlock:
                    continue  # another receiver took it during the checkpoint
            self._wakeup = trio.Event()
            self._waiting += 1
            try:
                await self._wakeup.wait()
            finally:
                self._waiting -= 1

    async def get_batch(self, limit: int) -> list[tuple[K, V]]:
        """`get`, then up to `limit - 1` more of the oldest pending keys in the same step:
        a burst per scheduler pass for a reader that handles each value without yielding
        (hand them all over before the next checkpoint, as `get` explains).
        EndOfChannel once closed and empty."""
        batch = [await self.get()]
        pending = self._pending
        while pending and len(batch) < limit:
            batch.append(pending.popitem(last=False))
        self._shrink_if_empty()
        return batch

    def take(self, key: K) -> tuple[bool, V | None]:
        """Remove and return the pending value of `key`: (True, value) or (False, None)."""
        if key in self._pending:
            value = self._pending.pop(key)
            self._shrink_if_empty()
            return True, value
        return False, None

    def _shrink_if_empty(self) -> None:
        if not self._pending and self._peak > _SMALL:
            self._pending = OrderedDict()
            self._peak = 0

    def pending(self, key: K) -> bool:
        return key in self._pending

    def close(self) -> None:
        """No more puts; receivers drain what is pending, then get EndOfChannel."""
        self._closed = True
        self._wakeup.set()

    def __len__(self) -> int:
        return len(self._pending)

    def __aiter__(self) -> Mailbox[K, V]:
        return self

    async def __anext__(self) -> tuple[K, V]:
        try:
            return await self.get()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None

    def statistics(self) -> MailboxStatistics:
        return MailboxStatistics(
            len(self._pending), self._puts, self._coalesced, self._waiting, self._closed
        )
