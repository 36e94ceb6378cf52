"""AsyncValue: read at once, wait for a value or a transition."""

from __future__ import annotations

import trio
import trio.testing

from trio_ccm.base.observable import AsyncValue


async def test_wait_value_returns_at_once_when_it_already_holds() -> None:
    """A value that already matches needs no change (but still checkpoints)."""
    value = AsyncValue(True)
    with trio.fail_after(1):
        assert await value.wait_value(True) is True


async def test_waiters_wake_on_the_change_they_wait_for(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """wait_value(wanted) and a predicate wake only when the value comes to match."""
    value = AsyncValue(0)
    woke: list[tuple[str, float, int]] = []

    async def wait(name: str, wanted: object) -> None:
        got = await value.wait_value(wanted)  # type: ignore[arg-type]
        woke.append((name, trio.current_time(), got))

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait, "three", 3)
            nursery.start_soon(wait, "even>0", lambda v: v > 0 and v % 2 == 0)
            for step in range(1, 5):
                await trio.sleep(1)
                value.value = step
    assert sorted(woke) == [("even>0", 2.0, 2), ("three", 3.0, 3)]


async def test_setting_the_same_value_wakes_nobody(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """wait_transition sees only real changes."""
    value = AsyncValue("a")
    seen: list[tuple[float, str]] = []

    async def watch() -> None:
        got = await value.wait_transition()
        seen.append((trio.current_time(), got))

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            await trio.sleep(1)
            value.value = "a"
            await trio.sleep(1)
            value.value = "b"
    assert seen == [(2.0, "b")]
