"""The C heap of the `trio-ccm` process: give freed memory back to the system (glibc only).

Two things keep a long-running CCM's RSS far above what it holds (measured at 100,000
Nodes: 190 MB free inside glibc's heap, docs/benchmarks.md "Where the bytes go"):

- glibc raises its mmap threshold each time a large mmapped block is freed (up to 32 MB), so
  after the first few, large buffers (a list response, a request body naming every Node)
  come from the heap, where what is freed stays unless it is at the very top;
- free pages in the middle of the heap are only returned by `malloc_trim`.

`tune_malloc()` fixes the mmap threshold at 128 KiB (so such buffers are mapped and
unmapped), and `serve_heap_trims` calls `malloc_trim(0)` once a period. Both are
process-wide: the `trio-ccm` command uses them; a program that embeds `serve()` decides
for itself. Elsewhere than glibc they do nothing.

The cyclic garbage collector: a full collection walks every object it tracks, on the Trio
thread. What a term holds from its start (the modules, the subscriptions' first fill of
every Node, the controllers' tables) is alive for the whole term, so walking it again and
again is wasted, and at 100,000 Nodes such a walk held the thread for seconds.
`serve_collector_freezes` collects once when the controllers have started and then
freezes (`gc.freeze()`): later collections walk only what was made since. When the term
ends the collector is unfrozen, so what the term held can be collected. The cost: a
reference cycle among the frozen objects that becomes garbage during the term is kept
until the term ends.
"""

from __future__ import annotations

import collections
import ctypes
import ctypes.util
import gc
import os
import re
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Final, Protocol

import trio

from trio_ccm.logs import get_logger

__all__ = [
    "COLLECT_PERIOD_S",
    "FREEZE_AFTER_S",
    "MMAP_THRESHOLD",
    "TRIM_PERIOD_S",
    "heap_report",
    "malloc_trim",
    "pymalloc_summary",
    "serve_collector_freezes",
    "serve_heap_trims",
    "tune_malloc",
]

log = get_logger("trio_ccm.cli.heap")

MMAP_THRESHOLD: Final = 128 * 1024
"""glibc's default mmap threshold, fixed (it would otherwise grow with each large free)."""
TRIM_PERIOD_S: Final = 60.0
FREEZE_AFTER_S: Final = 10.0
"""How long after the controllers start the collector is frozen: their first passes over
the subscriptions' fill (paced, seconds at 100,000 Nodes) are done by then."""
COLLECT_PERIOD_S: Final = 60.0
"""While the collector is frozen, a full collection of what is not frozen this often.
CPython collects the oldest generation only once the objects that reached it since its
last full collection number a quarter of those that survived that one, and the collection
before the freeze counts the frozen ones too: at 30,000 Nodes, 19,000 objects had to age
before the next, so a cycle that got old (an answer kept across two young collections, a
failed call's traceback) could hold its memory for as long as the term. A collection of
what is not frozen takes milliseconds at 30,000 Nodes."""
_M_MMAP_THRESHOLD: Final = -3  # <malloc.h>


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    # musl has neither mallopt's parameters nor malloc_trim.
    return libc if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None


def tune_malloc() -> bool:
    """Fix glibc's mmap threshold at MMAP_THRESHOLD; False where there is no glibc."""
    libc = _libc()
    return libc is not None and libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1


def malloc_trim() -> bool:
    """Return the heap's free pages to the system; whether any were (False: no glibc)."""
    libc = _libc()
    return libc is not None and libc.malloc_trim(0) == 1


async def serve_heap_trims(
    period_s: float = TRIM_PERIOD_S, *, trim: Callable[[], object] = malloc_trim
) -> None:
    """Call `trim()` once every `period_s`, until cancelled."""
    while True:
        await trio.sleep(period_s)
        trim()


class Leading(Protocol):
    """What `serve_collector_freezes` reads of a replica (`trio_ccm.supervisor.Serving`)."""

    def wait_leading(self, leading: bool = True) -> Awaitable[None]: ...


async def serve_collector_freezes(
    replica: Leading,
    *,
    after_s: float = FREEZE_AFTER_S,
    collect_every_s: float = COLLECT_PERIOD_S,
) -> None:
    """For each term: `after_s` after the controllers start, collect and freeze; then a
    full collection of what is not frozen every `collect_every_s`; unfreeze when they stop
    (and when cancelled). Until cancelled."""
    try:
        while True:
            await replica.wait_leading(True)
            with trio.move_on_after(after_s):
                await replica.wait_leading(False)  # a term too short to freeze for
                continue
            gc.collect()
            gc.freeze()
            log.info("ccm.gc-frozen", objects=gc.get_freeze_count())
            while True:
                with trio.move_on_after(collect_every_s):
                    await replica.wait_leading(False)
                    break
                started = time.perf_counter()
                found = gc.collect()
                log.debug(
                    "ccm.gc-collected", found=found, seconds=round(time.perf_counter() - started, 4)
                )
            gc.unfreeze()
            log.info("ccm.gc-unfrozen")
    finally:
        gc.unfreeze()


_MALLINFO2_FIELDS: Final = (
    "arena",
    "ordblks",
    "smblks",
    "hblks",
    "hblkhd",
    "usmblks",
    "fsmblks",
    "uordblks",
    "fordblks",
    "keepcost",
)


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in _MALLINFO2_FIELDS]


def _mallinfo() -> dict[str, int]:
    """glibc's own statistics (mallinfo2, glibc 2.33+), in bytes; empty elsewhere."""
    libc = _libc()
    if libc is None or not hasattr(libc, "mallinfo2"):
        return {}
    libc.mallinfo2.restype = _Mallinfo2
    info = libc.mallinfo2()
    return {name: int(getattr(info, name)) for name in _MALLINFO2_FIELDS}


def _pymalloc_stats() -> str:
    """`sys._debugmallocstats()`: it writes to the C stderr, so that is caught in a file."""
    with tempfile.TemporaryFile(mode="w+") as out:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            os.dup2(out.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        return out.read()


_PYMALLOC_FIGURES: Final = {
    "arenas": re.compile(r"arenas allocated current\s+=\s+([\d,]+)"),
    "arena_bytes": re.compile(r"arenas \* \d+ bytes/arena\s+=\s+([\d,]+)"),
    "in_blocks": re.compile(r"bytes in allocated blocks\s+=\s+([\d,]+)"),
    "free_blocks": re.compile(r"bytes in available blocks\s+=\s+([\d,]+)"),
    "free_pools": re.compile(r"\d+ unused pools \* \d+ bytes\s+=\s+([\d,]+)"),
}


def pymalloc_summary(stats: str) -> dict[str, int]:
    """The figures that tell live objects from fragmentation, read from
    `sys._debugmallocstats()`'s text: arenas held, bytes in them, bytes in live blocks, free
    blocks in pools in use, empty pools in arenas still held. Empty when pymalloc is off."""
    found = {name: pattern.search(stats) for name, pattern in _PYMALLOC_FIGURES.items()}
    return {
        name: int(match.group(1).replace(",", ""))
        for name, match in found.items()
        if match is not None
    }


def heap_report(top: int = 40) -> str:
    """Where the process's memory is, as text: glibc's statistics, pymalloc's (arenas,
    pools, blocks by size class), the collector's generations, and the `top` object types
    by count. A debugging aid (`TRIO_CCM_HEAP_REPORT`): it walks every tracked object."""
    started = time.perf_counter()
    gc.collect()
    lines = [f"# full collection {time.perf_counter() - started:.3f} s"]
    lines.append("# glibc mallinfo2 (bytes)")
    lines += [f"{name} {value}" for name, value in _mallinfo().items()]
    lines.append(f"# gc counts {gc.get_count()} tracked {len(gc.get_objects())}")
    lines.append(f"# gc frozen {gc.get_freeze_count()}")
    types = collections.Counter(type(obj).__qualname__ for obj in gc.get_objects())
    lines.append(f"# top {top} tracked types by count")
    lines += [f"{count} {name}" for name, count in types.most_common(top)]
    stats = _pymalloc_stats()
    summary = pymalloc_summary(stats)
    if len(summary) == len(_PYMALLOC_FIGURES):
        mib = 1024 * 1024
        held = summary["arena_bytes"]
        lines.append(
            f"# pymalloc summary: {summary['arenas']} arenas, {held / mib:.1f} MiB; live blocks "
            f"{summary['in_blocks'] / mib:.1f} MiB; free blocks in pools in use "
            f"{summary['free_blocks'] / mib:.1f} MiB; empty pools in arenas still held "
            f"{summary['free_pools'] / mib:.1f} MiB (the last two: fragmentation, kept until "
            "every block of an arena is free)"
        )
    lines.append("# pymalloc")
    lines.append(stats)
    return "\n".join(lines) + "\n"
