"""A value computed once per sampling cycle and shared by the samples of all chips.

The agent samples each device on its own thread, once per cycle. The first
chip to ask in a cycle computes the value; the others get the same one. A chip
asking a second time means a new cycle has begun, so the value is computed
again. No clock is involved.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class PerCycle(Generic[T]):
    """`compute()`'s result, recomputed whenever a consumer asks for the second time."""

    def __init__(self, compute: Callable[[], T]) -> None:
        self._compute = compute
        self._lock = threading.Lock()
        self._value: T | None = None
        self._served: set[str] = set()

    def get(self, consumer: str) -> T:
        """The current cycle's value for `consumer` (a chip's uuid)."""
        with self._lock:
            if self._value is None or consumer in self._served:
                self._value = self._compute()
                self._served = set()
            self._served.add(consumer)
            return self._value
