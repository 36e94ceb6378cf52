"""serve_passes: passes on a schedule and on demand, never overlapping, failures contained.

Under `MockClock(autojump_threshold=0)`: every time is an exact virtual second.
"""

from __future__ import annotations

import math

import pytest
import trio
import trio.testing
from structlog.testing import capture_logs

from trio_ccm.actors.passes import Wake, serve_passes

LIMIT_S = 1000


class Pass:
    """A pass that records its start times, takes `duration_s`, and can fail on script."""

    def __init__(self, duration_s: float = 0.0, fail_at: frozenset[int] = frozenset()) -> None:
        self.duration_s = duration_s
        self.fail_at = fail_at
        self.starts: list[float] = []
        self.running = 0
        self.overlapped = False

    async def __call__(self) -> None:
        self.starts.append(trio.current_time())
        self.running += 1
        self.overlapped |= self.running > 1
        try:
            await trio.sleep(self.duration_s)
            if len(self.starts) - 1 in self.fail_at:
                raise RuntimeError(f"pass {len(self.starts) - 1} failed")
        finally:
            self.running -= 1


async def run_for(seconds: float, **kwargs: object) -> None:
    with trio.move_on_after(seconds):
        await serve_passes(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("duration_s", "sliding", "starts"),
    [
        pytest.param(2.0, False, [0.0, 10.0, 20.0], id="from-start"),
        pytest.param(2.0, True, [0.0, 12.0, 24.0], id="sliding"),
        pytest.param(15.0, False, [0.0, 15.0], id="overrun-follows-at-once"),
    ],
)
async def test_passes_follow_the_period(
    autojump_clock: trio.testing.MockClock,
    duration_s: float,
    sliding: bool,
    starts: list[float],
) -> None:
    """A pass starts every period after the previous start (or end, when sliding)."""
    one = Pass(duration_s)
    with trio.fail_after(LIMIT_S):
        await run_for(29.0, pass_fn=one, name="t", period_s=10.0, sliding=sliding)
    assert one.starts == starts


async def test_a_wake_brings_the_next_pass_forward_but_not_before_the_spacing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Wakes at t=0.2 and t=5 start passes at t=1 (spacing) and t=5; a burst costs one."""
    one = Pass()
    wake = Wake()

    async def poke() -> None:
        await trio.sleep(0.2)
        wake.set()
        await trio.sleep(4.8)
        for _ in range(50):
            wake.set()

    with trio.fail_after(LIMIT_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(poke)
            await run_for(9.0, pass_fn=one, name="t", period_s=100.0, wake=wake, min_spacing_s=1.0)
    assert one.starts == [0.0, 1.0, 5.0]


async def test_a_wake_during_a_pass_asks_for_exactly_one_more(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Changes seen while a pass runs cause one more pass right after it, never overlap."""
    one = Pass(duration_s=3.0)
    wake = Wake()

    async def poke() -> None:
        await trio.sleep(1.0)
        wake.set()
        await trio.sleep(1.0)
        wake.set()

    with trio.fail_after(LIMIT_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(poke)
            await run_for(20.0, pass_fn=one, name="t", period_s=math.inf, wake=wake)
    assert one.starts == [0.0, 3.0]
    assert not one.overlapped


async def test_a_failed_pass_is_logged_once_and_the_schedule_goes_on(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An exception from a pass is logged, with its traceback at the first failure of a
    streak and as one line after it; the next pass runs on time."""
    one = Pass(fail_at=frozenset({1, 2, 4}))
    with capture_logs() as logs, trio.fail_after(LIMIT_S):
        await run_for(45.0, pass_fn=one, name="route", period_s=10.0)
    assert one.starts == [0.0, 10.0, 20.0, 30.0, 40.0]
    failed = [e for e in logs if e["event"] == "pass.failed"]
    assert [
        (e["controller"], e["log_level"], e["failures"], e["error"], type(e["exc_info"]))
        for e in failed
    ] == [
        ("route", "warning", 1, "RuntimeError: pass 1 failed", RuntimeError),
        ("route", "warning", 2, "RuntimeError: pass 2 failed", type(None)),
        ("route", "warning", 1, "RuntimeError: pass 4 failed", RuntimeError),
    ]


@pytest.mark.parametrize(
    ("period_s", "spacing_s", "message"),
    [
        pytest.param(0.0, 0.0, "period_s=0.0 must be > 0", id="period"),
        pytest.param(1.0, -1.0, "min_spacing_s=-1.0 must be >= 0", id="spacing"),
    ],
)
async def test_bad_schedules_are_refused(period_s: float, spacing_s: float, message: str) -> None:
    """A zero period (a spinning loop) or a negative spacing is a ValueError."""
    with pytest.raises(ValueError, match=message):
        await serve_passes(Pass(), name="t", period_s=period_s, min_spacing_s=spacing_s)
