"""Long loops on the one Trio thread, cut into steps.

A loop over every Node is O(N) work: at 100,000 Nodes, seconds in a single step would hold
up every other task, the Lease's renewals included. `Paced` lets such a loop yield to the
other tasks every `every` items (the informer's relists and subscriptions, the controllers'
passes over every Node).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import trio

__all__ = ["PACE_ITEMS", "Gathering", "Paced"]

PACE_ITEMS = 500
"""Items a paced loop handles between yields (a few ms of work each time)."""


class Paced:
    """`await paced.step()` once per item of a long loop: every `every` items it yields to
    the other tasks (a checkpoint: also where the loop can be cancelled)."""

    __slots__ = ("_left", "every")

    def __init__(self, every: int = PACE_ITEMS) -> None:
        self.every = every
        self._left = every

    async def step(self) -> None:
        self._left -= 1
        if self._left <= 0:
            self._left = self.every
            await trio.lowlevel.checkpoint()


class Gathering:
    """How long a stream's reader rests after a batch, so that a trickle is read in
    gathered batches instead of one wake-up per item.

    A watch that receives one event at a time (a kubelet's heartbeat every 3 ms at 100,000
    Nodes) costs a wake-up per event: a pass through the scheduler, a socket and TLS read,
    the HTTP layers. `after(now, waiting)`, asked after each batch, answers `rest_s` when
    nothing more is waiting to be read (`waiting()` is false: the reader has caught up
    with the sender) and the reader has been awake at least `awake_s` since its last rest
    (`woke(now)`), else 0: read on. A rest is taken only once the reader has caught up, so
    it never slows a stream that keeps it busy; an item waits at most `rest_s` longer."""

    __slots__ = ("_woke", "awake_s", "rest_s")

    def __init__(self, rest_s: float, *, awake_s: float) -> None:
        self.rest_s = rest_s
        self.awake_s = awake_s
        self._woke = -math.inf

    def after(self, now: float, waiting: Callable[[], bool]) -> float:
        """Seconds to rest after a batch taken at `now` (0: read on)."""
        if now - self._woke < self.awake_s or waiting():
            return 0.0
        return self.rest_s

    def woke(self, now: float) -> None:
        """The reader's rest ended at `now`."""
        self._woke = now
