"""Stalls of the Trio thread: one task step, or one garbage collection, that holds it long.

Every controller, the leader elector's renewals and the HTTP endpoints share one thread. A
step that holds it for seconds delays all of them, and one that holds it past the renew
deadline (10 s) loses the Lease. `StallWatch` names the culprit in the log:

    {"event": "trio.stall", "task": "...", "seconds": 2.41, "gc_seconds": 2.3, ...}

`task` is the Trio task whose step it was; `gc_seconds` the part of the step spent in
garbage collections it happened to trigger (then the cause is the heap, not that task).

The `trio-ccm` command installs it for its own run (`trio.run(instruments=...)` and
`gc.callbacks`); a program that embeds `serve()` may add it to its run with
`trio.lowlevel.add_instrument(StallWatch())` and `watch.track_gc()`. Its cost is two clock
reads per task step.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any, Final

import trio

from trio_ccm.logs import get_logger

__all__ = ["DEFAULT_STALL_S", "StallWatch"]

log = get_logger("trio_ccm.cli.stalls")

DEFAULT_STALL_S: Final = 1.0
"""A step at least this long is logged: a tenth of the default renew deadline."""


class StallWatch(trio.abc.Instrument):
    """A Trio instrument that logs task steps longer than `threshold_s` (`trio.stall`)."""

    def __init__(
        self,
        threshold_s: float = DEFAULT_STALL_S,
        *,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.threshold_s = threshold_s
        self.stalls = 0
        """How many steps were logged."""
        self._clock = clock
        self._step_started = 0.0
        self._gc_in_step = 0.0
        self._gc_started: float | None = None
        self._gc_tracked = False

    # -- trio.abc.Instrument -----------------------------------------------------------
    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._step_started = self._clock()
        self._gc_in_step = 0.0

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        seconds = self._clock() - self._step_started
        if seconds >= self.threshold_s:
            self.stalls += 1
            log.warning(
                "trio.stall",
                task=task.name,
                seconds=round(seconds, 3),
                gc_seconds=round(self._gc_in_step, 3),
                hint="one step held the Trio thread this long; past the renew deadline "
                "the Lease is lost",
            )

    # -- garbage collections -----------------------------------------------------------
    def track_gc(self) -> None:
        """Time garbage collections too (`gc.callbacks`: process-wide; once per process)."""
        if not self._gc_tracked:
            gc.callbacks.append(self._on_gc)
            self._gc_tracked = True

    def untrack_gc(self) -> None:
        if self._gc_tracked:
            gc.callbacks.remove(self._on_gc)
            self._gc_tracked = False

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_started = self._clock()
        elif self._gc_started is not None:
            self._gc_in_step += self._clock() - self._gc_started
            self._gc_started = None
