"""Pass-style work: a function that looks at everything, run on a schedule and on demand.

`serve_passes(pass_fn, ...)` runs `pass_fn()` forever:

- **Schedule.** The next pass is due `period_s` after the start of the previous one
  (upstream's `wait.Until`/`NonSlidingUntil`), or after its end with `sliding=True`
  (`wait.Until` with sliding). A pass that took longer than the period is followed at once.
- **On demand.** `wake.set()` makes the next pass due at once, but never sooner than
  `min_spacing_s` after the start of the previous one. A wake seen during a pass asks for
  exactly one more pass after it (the wake is cleared when a pass starts, not when it ends).
  A burst of wakes therefore costs one pass per `min_spacing_s` (or per pass duration, when
  passes are slower), never one per wake.
- **Passes never overlap**, and a pass's failure is its own: an exception from `pass_fn` is
  logged (`pass.failed`; the traceback at the first failure of a streak, one line for each
  failure after it) and the next pass runs on schedule. This is
  the one broad `except` of pass-style work.
- **One object's failure is its own.** Inside a pass (or a sweep), the cloud call for one
  Node, route or load balancer runs under `own_failure(...)`: whatever it raises is logged
  with the object's fields and kept in the returned `Failure` (the caller may add an Event),
  and the pass goes on with the others; the next pass tries again. This is the other broad
  `except` of pass-style work: a provider may raise anything.

Times are Trio's (`trio.current_time`), so everything runs under `MockClock`.

A pass over every Node is O(N) work on the one Trio thread: such a pass steps a
`trio_ccm.base.pacing.Paced` once per Node, so that it yields to the other tasks now and then.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NoReturn

import trio

from trio_ccm.errors import traceback_for
from trio_ccm.logs import get_logger

__all__ = ["Failure", "Wake", "own_failure", "serve_passes"]

log = get_logger("trio_ccm.actors.passes")


class Wake:
    """A level-triggered "something changed" flag: `set()` by watchers, cleared by the
    pass that takes the change into account."""

    def __init__(self) -> None:
        self._event = trio.Event()

    def set(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def clear(self) -> None:
        if self._event.is_set():
            self._event = trio.Event()

    async def wait(self) -> None:
        await self._event.wait()


async def serve_passes(
    pass_fn: Callable[[], Awaitable[object]],
    *,
    name: str,
    period_s: float,
    wake: Wake | None = None,
    min_spacing_s: float = 0.0,
    sliding: bool = False,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Run `pass_fn` forever on the schedule in the module docstring; `name` labels logs.

    `period_s` may be `math.inf` (passes only on demand). `task_status.started()` before
    the first pass.
    """
    if not period_s > 0:
        raise ValueError(f"{name}: period_s={period_s!r} must be > 0")
    if not min_spacing_s >= 0:
        raise ValueError(f"{name}: min_spacing_s={min_spacing_s!r} must be >= 0")
    task_status.started()
    failures = 0
    while True:
        started = trio.current_time()
        if wake is not None:
            wake.clear()  # changes from here on ask for the next pass
        try:
            await pass_fn()
        except Exception as exc:  # a pass's failure boundary: logged, next pass on schedule
            failures += 1
            # The traceback once per streak of failed passes, and never for our own verdicts.
            log.warning(
                "pass.failed",
                controller=name,
                failures=failures,
                error=f"{type(exc).__name__}: {exc}",
                exc_info=traceback_for(exc, failures),
            )
        else:
            failures = 0
        due = (trio.current_time() if sliding else started) + period_s
        if wake is None:
            await trio.sleep_until(due)
            continue
        with trio.move_on_at(due):
            await wake.wait()
            await trio.sleep_until(started + min_spacing_s)


@dataclass(slots=True)
class Failure:
    """What `own_failure` caught (None: the block succeeded)."""

    error: Exception | None = None


@contextmanager
def own_failure(event: str, **fields: object) -> Iterator[Failure]:
    """Run one object's part of a pass: an exception is logged as `event` with `fields`
    (a warning: the next pass retries) and kept in the `Failure`, never raised. Cancellation
    passes through (it is not an Exception)."""
    failure = Failure()
    try:
        yield failure
    except Exception as exc:  # one object's failure is its own; see the module docstring
        failure.error = exc
        log.warning(event, error=str(exc), **fields)
