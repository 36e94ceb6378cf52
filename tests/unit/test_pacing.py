"""trio_ccm.base.pacing: a long loop yields to the other tasks every few items."""

from __future__ import annotations

import trio

from trio_ccm.base.pacing import Paced


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
