"""Keeps the C heap's free space small: few malloc arenas, freed memory handed back.

glibc keeps memory the agent has freed in its arenas, by default one more for
each thread that allocates (up to eight per core); with a worker thread per
device and snapshots replaced every cycle, each arena holds free space of its
own and the resident size moves by a few MiB although nothing leaks.
`limit_malloc_arenas` caps them before the threads start; `malloc_trim(0)`
returns the free pages now and then. Where the C library has neither (musl),
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
_M_ARENA_MAX = -8  # mallopt's parameter number in glibc's malloc.h


def limit_malloc_arenas(arenas: int = AGENT_MALLOC_ARENAS) -> bool:
    """Caps glibc's malloc arenas at `arenas` (as MALLOC_ARENA_MAX does); must run before
    the threads it should cover allocate. False where the C library cannot, or where
    MALLOC_ARENA_MAX is set (the operator's choice stands)."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return mallopt(_M_ARENA_MAX, arenas) == 1


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
