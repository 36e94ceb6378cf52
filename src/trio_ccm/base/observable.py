"""An observable value: shared state that tasks can read at once or wait on.

`AsyncValue` holds one value (say "this replica leads"). Setting it wakes every task
waiting for a value or a transition that now holds; reading it never blocks. It keeps no
history: a waiter sees the value as it is when it runs, so a value that changes and changes
back before a waiter runs wakes it for nothing, never wrongly (`wait_value` re-checks).
Modelled on trio-util's `AsyncValue`, with the two waits this project uses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

import trio

T = TypeVar("T")

__all__ = ["AsyncValue"]


class AsyncValue(Generic[T]):
    """A value plus a wake-up for each change; see the module docstring."""

    def __init__(self, value: T) -> None:
        self._value = value
        self._changed = trio.Event()

    @property
    def value(self) -> T:
        return self._value

    @value.setter
    def value(self, value: T) -> None:
        """Store `value`; waiters wake only when it differs from the current one."""
        if value == self._value:
            return
        self._value = value
        self._changed.set()
        self._changed = trio.Event()

    async def wait_value(self, wanted: T | Callable[[T], bool]) -> T:
        """Return the value once it equals `wanted` (or satisfies it, if callable).

        Returns at once (after a checkpoint) when it already does.
        """

        def holds(value: T) -> bool:
            return wanted(value) if callable(wanted) else value == wanted

        await trio.lowlevel.checkpoint()
        while not holds(self._value):
            await self._changed.wait()
        return self._value

    async def wait_transition(self) -> T:
        """Wait for the next change of the value and return the new value."""
        await self._changed.wait()
        return self._value
