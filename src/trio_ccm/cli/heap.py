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
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from collections.abc import Callable
from typing import Final

import trio

__all__ = ["MMAP_THRESHOLD", "TRIM_PERIOD_S", "malloc_trim", "serve_heap_trims", "tune_malloc"]

MMAP_THRESHOLD: Final = 128 * 1024
"""glibc's default mmap threshold, fixed (it would otherwise grow with each large free)."""
TRIM_PERIOD_S: Final = 60.0
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
