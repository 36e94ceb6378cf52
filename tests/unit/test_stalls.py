"""StallWatch: a task step that holds the Trio thread is logged with its task and GC share."""

from __future__ import annotations

import gc
from typing import Literal

import trio
from structlog.testing import capture_logs

from trio_ccm.cli.stalls import StallWatch


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def run_with(watch: StallWatch, body: object) -> None:
    trio.run(body, instruments=[watch])  # type: ignore[arg-type]


def test_a_long_step_is_logged_with_its_task() -> None:
    """A step that holds the Trio thread past the threshold is logged with its task's name."""
    clock = FakeClock()
    watch = StallWatch(1.0, clock=clock)

    async def hog() -> None:
        await trio.lowlevel.checkpoint()
        clock.now += 2.5  # this step holds the thread for 2.5 s
        await trio.lowlevel.checkpoint()
        clock.now += 0.4  # this one for less than the threshold

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(hog, name="hog-task")

    with capture_logs() as logs:
        run_with(watch, main)
    stalls = [line for line in logs if line["event"] == "trio.stall"]
    assert [(s["task"], s["seconds"], s["gc_seconds"]) for s in stalls] == [("hog-task", 2.5, 0.0)]
    assert stalls[0]["log_level"] == "warning"
    assert watch.stalls == 1


def test_the_share_of_a_stall_spent_in_garbage_collection_is_reported() -> None:
    """A 3.5 s step of which a garbage collection took 3 s is logged with gc_seconds=3.0."""
    clock = FakeClock()
    watch = StallWatch(1.0, clock=clock)
    armed = False  # only our own collection is slow (the collector may also run by itself)

    def slow_collection(phase: Literal["start", "stop"], info: dict[str, int]) -> None:
        if phase == "start" and armed:
            clock.now += 3.0  # the collection itself takes 3 s

    async def main() -> None:
        nonlocal armed
        await trio.lowlevel.checkpoint()
        clock.now += 0.5
        armed = True
        gc.collect()
        armed = False

    watch.track_gc()
    gc.callbacks.append(slow_collection)  # after the watch's: it has seen "start" already
    try:
        with capture_logs() as logs:
            run_with(watch, main)
    finally:
        gc.callbacks.remove(slow_collection)
        watch.untrack_gc()
    assert slow_collection not in gc.callbacks
    assert watch._on_gc not in gc.callbacks
    (stall,) = [line for line in logs if line["event"] == "trio.stall"]
    assert stall["seconds"] == 3.5
    assert stall["gc_seconds"] == 3.0
