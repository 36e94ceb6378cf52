"""trio_ccm.cli.heap: glibc's mmap threshold fixed, free heap pages trimmed once a period."""

from __future__ import annotations

import sys

import pytest
import trio
import trio.testing

from trio_ccm.cli.heap import (
    TRIM_PERIOD_S,
    _pymalloc_stats,
    heap_report,
    malloc_trim,
    pymalloc_summary,
    serve_heap_trims,
    tune_malloc,
)

glibc = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")


@glibc
def test_the_mmap_threshold_is_set_and_the_heap_can_be_trimmed() -> None:
    """On glibc both calls succeed (mallopt answers 1; malloc_trim returns a bool)."""
    assert tune_malloc() is True
    assert isinstance(malloc_trim(), bool)


async def test_the_heap_is_trimmed_once_a_period(autojump_clock: trio.testing.MockClock) -> None:
    """`serve_heap_trims` trims once per period, the first one a period after it starts."""
    trims: list[float] = []
    with trio.move_on_after(3.5 * TRIM_PERIOD_S):
        await serve_heap_trims(trim=lambda: trims.append(trio.current_time()))
    assert trims == [TRIM_PERIOD_S, 2 * TRIM_PERIOD_S, 3 * TRIM_PERIOD_S]


@glibc
def test_the_heap_report_names_the_allocators_and_the_tracked_types() -> None:
    """The report has glibc's and pymalloc's statistics and the tracked types by count."""
    report = heap_report(top=5)
    assert "# full collection " in report
    assert "\nuordblks " in report
    assert "arenas allocated current" in report
    assert "# pymalloc summary: " in report
    types = report.split("# top 5 tracked types by count\n")[1].split("# pymalloc")[0]
    assert len(types.splitlines()) == 5


@glibc
def test_the_pymalloc_summary_tells_fragmentation_from_live_blocks() -> None:
    """Freeing nine in ten of 100,000 small objects, one kept in each run of ten, moves
    their bytes from live blocks to free blocks in pools still in use: arenas stay held."""
    before = pymalloc_summary(_pymalloc_stats())
    objects = [[i] for i in range(100_000)]  # small objects: a list, its items, an int
    filled = pymalloc_summary(_pymalloc_stats())
    kept = objects[::10]
    del objects
    after = pymalloc_summary(_pymalloc_stats())
    assert set(before) == {"arenas", "arena_bytes", "in_blocks", "free_blocks", "free_pools"}
    assert after["arena_bytes"] == after["arenas"] * 1024 * 1024
    grown = filled["in_blocks"] - before["in_blocks"]
    assert grown > 5_000_000  # 100,000 lists and their item arrays
    assert filled["in_blocks"] - after["in_blocks"] > 0.8 * grown
    assert after["free_blocks"] - filled["free_blocks"] > 0.8 * grown
    assert after["arenas"] == filled["arenas"]
    assert len(kept) == 10_000


def test_the_pymalloc_summary_is_empty_without_pymalloc() -> None:
    """Statistics without pymalloc's lines (PYTHONMALLOC=malloc) give no figures."""
    assert pymalloc_summary("Small block threshold = 512\n") == {}
