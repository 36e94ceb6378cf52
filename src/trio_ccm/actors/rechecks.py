"""Keys to look at again at a stated time: the late-landing check of unknown outcomes.

A mutating cloud call whose outcome is unknown (`OutcomeUnknownError`: it timed out, lost
its connection after sending, or got a 5xx after sending) may still be applied by the cloud
until `late_landing_s` after it started. A controller that later succeeds on the same object
cannot trust that success before then: the earlier call may land over it. `Rechecks.at(key,
when)` asks for `due(key)` once at trio time `when` (the latest one asked for wins), so
the controller re-verifies the object once the earlier call can no longer land.

One task (`serve`) for all keys; `forget(key)` drops a key's check.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Hashable
from typing import Final, Generic, NoReturn, TypeVar

import trio

from trio_ccm.cloud.provider import OutcomeUnknownError

__all__ = [
    "DEFAULT_LATE_LANDING_S",
    "UNKNOWN_OUTCOMES",
    "Rechecks",
    "late_landing_s",
    "outcome_unknown",
]

K = TypeVar("K", bound=Hashable)

DEFAULT_LATE_LANDING_S: Final = 60.0
"""How long an unknown outcome may still land when the provider does not say (and for a
caller's own timeout on a mutating call): longer than any cloud call timeout we ship."""


UNKNOWN_OUTCOMES: Final = (OutcomeUnknownError, trio.TooSlowError)
"""What a mutating call raises when the cloud may still apply it: the provider said so, or
a caller's `trio.fail_after` stopped it after it may have been sent (our decision: a
caller's timeout on a mutating call is an unknown outcome, never a clean failure)."""


def outcome_unknown(exc: BaseException) -> bool:
    """Whether a mutating call that raised `exc` may still be applied by the cloud: the
    provider said so (`OutcomeUnknownError`), or a caller's `trio.fail_after` stopped it
    after it may have been sent (`trio.TooSlowError`)."""
    return isinstance(exc, UNKNOWN_OUTCOMES)


def late_landing_s(exc: BaseException) -> float:
    """How long after its start the call that raised `exc` may still land."""
    stated = exc.late_landing_s if isinstance(exc, OutcomeUnknownError) else None
    return DEFAULT_LATE_LANDING_S if stated is None else stated


class Rechecks(Generic[K]):
    """Per key, one moment to look again; see the module docstring."""

    def __init__(self) -> None:
        self._due: dict[K, float] = {}
        self._heap: list[tuple[float, int, K]] = []
        self._order = 0  # ties in time go in the order asked
        self._wakeup = trio.Event()

    def at(self, key: K, when: float) -> None:
        """Call `due(key)` at trio time `when`, or at the later moment already asked: the
        check is for when no earlier call can land any more."""
        if self._due.get(key, -math.inf) >= when:
            return
        self._due[key] = when
        self._order += 1
        heapq.heappush(self._heap, (when, self._order, key))
        self._wakeup.set()

    def forget(self, key: K) -> None:
        self._due.pop(key, None)

    def __contains__(self, key: object) -> bool:
        return key in self._due

    async def serve(self, due: Callable[[K], None]) -> NoReturn:
        """Call `due(key)` for each key whose moment has come, forever."""
        while True:
            now = trio.current_time()
            while self._heap and self._heap[0][0] <= now:
                when, _, key = heapq.heappop(self._heap)
                if self._due.get(key) == when:
                    del self._due[key]
                    due(key)
            self._wakeup = trio.Event()
            with trio.move_on_at(self._heap[0][0] if self._heap else math.inf):
                await self._wakeup.wait()
