"""trio_ccm.base.pacing: a long loop yields to the other tasks every few items; a stream's
reader rests only once it has caught up."""

from __future__ import annotations

import pytest
import trio

from trio_ccm.base.pacing import Gathering, Paced


async def test_a_paced_loop_lets_other_tasks_run_every_few_items() -> None:
    """A loop that steps a `Paced(every=100)` yields after each 100 items, so a task that was
    ready to run gets in at one of those yields, not after the whole loop."""
    seen_at: list[int] = []
    done = 0

    async def other() -> None:
        seen_at.append(done)

    paced = Paced(every=100)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(other)
        for _ in range(1_000):
            await paced.step()
            done += 1
    # It ran at a yield well before the end (Trio may run this task's next 100 first).
    (at,) = seen_at
    assert at < 1_000
    assert at % 100 == 99


@pytest.mark.parametrize(
    ("woke", "now", "waiting", "rest"),
    [
        pytest.param(None, 0.0, False, 0.1, id="caught-up-never-rested"),
        pytest.param(None, 0.0, True, 0.0, id="more-waiting-never-rested"),
        pytest.param(1.0, 1.004, False, 0.0, id="caught-up-just-woke"),
        pytest.param(1.0, 1.01, False, 0.1, id="caught-up-awake-long-enough"),
        pytest.param(1.0, 2.0, True, 0.0, id="more-waiting-awake-long-enough"),
    ],
)
def test_a_reader_rests_only_once_caught_up_and_awake_a_while(
    woke: float | None, now: float, waiting: bool, rest: float
) -> None:
    """`Gathering.after` answers its rest only when nothing more is waiting and the reader
    has been awake `awake_s` since its last rest; else 0 (read on)."""
    gathering = Gathering(0.1, awake_s=0.005)
    if woke is not None:
        gathering.woke(woke)
    assert gathering.after(now, lambda: waiting) == rest
