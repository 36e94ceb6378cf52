"""Long loops on the one Trio thread, cut into steps.

A loop over every Node is O(N) work: at 100,000 Nodes, seconds in a single step would hold
up every other task, the Lease's renewals included. `Paced` lets such a loop yield to the
other tasks every `every` items (the informer's relists and subscriptions, the controllers'
passes over every Node).
"""

from __future__ import annotations

import trio

__all__ = ["PACE_ITEMS", "Paced"]

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
