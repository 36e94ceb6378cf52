"""trio_ccm.cli.heap: glibc's mmap threshold fixed, free heap pages trimmed once a period."""

from __future__ import annotations

import sys

import pytest
import trio
import trio.testing

from trio_ccm.cli.heap import (
    TRIM_PERIOD_S,
    heap_report,
    malloc_trim,
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
    types = report.split("# top 5 tracked types by count\n")[1].split("# pymalloc")[0]
    assert len(types.splitlines()) == 5
