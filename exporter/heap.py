"""Keeps the C heap's free space small: few malloc arenas, freed memory handed back.

glibc keeps memory the agent has freed in its arenas, by default one more for
each thread that allocates (up to eight per core); with vendor calls, sampling
and serving on threads of their own and snapshots replaced every cycle, each
arena holds free space of its own and the resident size moves by a few MiB
although nothing leaks.
`limit_malloc_arenas` caps them before the threads start, `fix_mmap_threshold`
keeps large blocks out of them; `malloc_trim(0)` returns the free pages now and
then. Where the C library has neither (musl),
both do nothing.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable

DEFAULT_EVERY_S = 60.0


def _malloc_trim() -> Callable[[], object] | None:
    try:
        libc = ctypes.CDLL(None)
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: trim(0)


#: The main arena and one that every other thread shares: the agent's threads spend
#: most of their time waiting, so they rarely contend for it.
AGENT_MALLOC_ARENAS = 2
#: Blocks from this size up (/metrics bodies, JSON documents, compression buffers) are
#: mapped on their own and unmapped when freed. glibc raises its threshold to the size of
#: the largest such block freed, after which they come from the arenas and leave holes
#: the next cycle's differently sized ones do not fit.
AGENT_MMAP_THRESHOLD_BYTES = 128 * 1024
# mallopt's parameter numbers in glibc's malloc.h, and the variables that set them
_M_ARENA_MAX, _M_MMAP_THRESHOLD = -8, -3
_ENVIRONMENT = {_M_ARENA_MAX: "MALLOC_ARENA_MAX", _M_MMAP_THRESHOLD: "MALLOC_MMAP_THRESHOLD_"}


def _mallopt(parameter: int, value: int) -> bool:
    if _ENVIRONMENT[parameter] in os.environ:
        return False  # the operator's choice stands
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return mallopt(parameter, value) == 1


def limit_malloc_arenas(arenas: int = AGENT_MALLOC_ARENAS) -> bool:
    """Caps glibc's malloc arenas at `arenas` (as MALLOC_ARENA_MAX does); must run before
    the threads it should cover allocate. False where the C library cannot, or where
    MALLOC_ARENA_MAX is set (the operator's choice stands)."""
    return _mallopt(_M_ARENA_MAX, arenas)


def fix_mmap_threshold(size: int = AGENT_MMAP_THRESHOLD_BYTES) -> bool:
    """Maps blocks of `size` bytes and more on their own, always (as MALLOC_MMAP_THRESHOLD_
    does, which turns glibc's raising of the threshold off). False where the C library
    cannot, or where MALLOC_MMAP_THRESHOLD_ is set."""
    return _mallopt(_M_MMAP_THRESHOLD, size)


def tune_malloc() -> None:
    """The agent's malloc settings: capped arenas and a fixed mmap threshold."""
    limit_malloc_arenas()
    fix_mmap_threshold()


class HeapTrimmer:
    """Trims the heap at most once every `every_s` seconds, when `maybe_trim` is called."""

    def __init__(self, every_s: float = DEFAULT_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._trim = _malloc_trim()
        self._every_s = every_s
        self._clock = clock
        self._last = clock()
        self.trims = 0

    def maybe_trim(self) -> None:
        if self._trim is None or self._clock() - self._last < self._every_s:
            return
        self._trim()
        self._last = self._clock()
        self.trims += 1
