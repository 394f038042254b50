"""Counts and times the C functions a pynvml-style module calls on the measuring thread.

Both nvidia-ml-py and Ray's vendored copy look every C function up through
`_nvmlGetFunctionPointer(name)` on each call, so wrapping that lookup sees every
call by name without touching the library. Calls on other threads (the XID
watcher's event wait, which blocks by design) are not the cycle's and are left out.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from types import ModuleType
from typing import Any


class NvmlCallLog:
    """While entered, counts each NVML function the entering thread calls through `module`,
    and its wall time."""

    def __init__(self, module: ModuleType) -> None:
        self.module = module
        self.counts: Counter[str] = Counter()
        self.seconds: Counter[str] = Counter()
        self._original = module._nvmlGetFunctionPointer

    @property
    def calls(self) -> int:
        return sum(self.counts.values())

    def __enter__(self) -> NvmlCallLog:
        log = self
        measuring = threading.get_ident()

        def timed_lookup(name: str) -> Any:
            function = log._original(name)
            if threading.get_ident() != measuring:
                return function

            def call(*args: Any) -> Any:
                start = time.perf_counter()
                try:
                    return function(*args)
                finally:
                    log.seconds[name] += time.perf_counter() - start
                    log.counts[name] += 1

            return call

        self.module._nvmlGetFunctionPointer = timed_lookup
        return self

    def __exit__(self, *exc: object) -> None:
        self.module._nvmlGetFunctionPointer = self._original

    def table(self) -> list[dict[str, Any]]:
        """One row per function, the costliest first: calls and wall microseconds."""
        return [{"function": name, "calls": self.counts[name],
                 "total_us": round(self.seconds[name] * 1e6, 1),
                 "per_call_us": round(self.seconds[name] * 1e6 / self.counts[name], 1)}
                for name, _ in self.seconds.most_common()]
