"""Every NVML call goes through here once: errors are classified and scoped.

- NotSupported / NoPermission / FunctionNotFound: the value is absent; the call
  is not made again for that device (the answer will not change).
- GpuIsLost / Unknown: the whole device is down for this cycle (`DeviceDown`).
- Anything else: the value is absent for this cycle only.

Some calls cost the driver milliseconds of CPU time on real GPUs (on an H200,
driver 580: `nvmlDeviceGetTotalEnergyConsumption` about 4.4 ms, process
utilization about 1 ms, where most calls take microseconds). A call that spent
more than `slow_call_cpu_s` of this thread's CPU time twice in a row (once may be
a one-off, such as the driver loading something) is answered from its last
result until `slow_reuse_s` has passed, then read again and timed again: the
agent's cost stays flat, and no value is older than that.
Calls made with `every_cycle=True` (the link byte counters, whose rates need
each cycle) are never reused.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

import pynvml

from ..base import CallErrors, DeviceDown, ErrorTally

T = TypeVar("T")

BACKEND_NAME = "nvidia"
SLOW_CALL_CPU_S = 0.0003
SLOW_REUSE_S = 10.0

log = logging.getLogger(__name__)
_REPORTED_SLOW: set[str] = set()
#: NVML function -> [calls answered, thread CPU seconds they spent], since the process
#: started (`ray-accel record` turns costly calls into `busy` delay rules).
CALL_CPU_S: dict[str, list[float]] = {}

_PERMANENT = frozenset({
    pynvml.NVML_ERROR_NOT_SUPPORTED,
    pynvml.NVML_ERROR_NO_PERMISSION,
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
})
_DEVICE_DOWN = frozenset({pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_UNKNOWN})
_ERROR_KINDS = {
    getattr(pynvml, name): name.removeprefix("NVML_ERROR_").lower()
    for name in dir(pynvml)
    if name.startswith("NVML_ERROR_")
}


def error_kind(error: pynvml.NVMLError) -> str:
    """A short, stable name for an NVML error: `not_supported`, `gpu_is_lost`, ..."""
    return _ERROR_KINDS.get(error.value, f"code_{error.value}")


class DeviceCalls(CallErrors):
    """NVML calls for one device, remembering which functions it does not support.

    Instances live as long as the device; `begin_cycle()` clears the errors of
    the previous cycle. One thread at a time uses an instance.
    """

    def __init__(self, tally: ErrorTally, slow_call_cpu_s: float = SLOW_CALL_CPU_S,
                 slow_reuse_s: float = SLOW_REUSE_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(tally)
        self._clock = clock
        self._reused: dict[str, tuple[float, Any]] = {}  # name -> (reuse until, answer)
        self._slow_streak: dict[str, int] = {}  # name -> slow answers in a row
        self._slow_call_cpu_s = slow_call_cpu_s
        self._slow_reuse_s = slow_reuse_s

    def call(
        self,
        fn: Callable[..., T],
        *args: Any,
        key: str = "",
        empty_on: frozenset[int] = frozenset(),
        empty: Any = None,
        every_cycle: bool = False,
    ) -> T | None:
        """Call `fn(*args)`; return its result, or None when the value is absent.

        `key` distinguishes calls of one function with different arguments in
        the unsupported-function memory. Codes in `empty_on` are normal answers
        meaning "nothing to report" (e.g. NotFound from process utilization on
        an idle GPU) and return `empty` without counting an error. A slow call's
        answer is reused for a while unless `every_cycle` (see the module's doc).
        """
        name = fn.__name__ + (f"[{key}]" if key else "")
        if name in self._unsupported:
            return None
        now = self._clock()
        reused = self._reused.get(name)
        if reused is not None and now < reused[0]:
            return reused[1]
        started = time.thread_time()
        try:
            answer = fn(*args)
        except pynvml.NVMLError as error:
            if error.value in empty_on:
                return self._remember(name, now, started, every_cycle, empty)
            kind = error_kind(error)
            self._tally.count(kind, fn.__name__)
            if error.value in _DEVICE_DOWN:
                raise DeviceDown(name, kind) from None
            if error.value in _PERMANENT:
                self._unsupported[name] = kind
            self.cycle_errors[name] = kind
            return None
        return self._remember(name, now, started, every_cycle, answer)

    def _remember(self, name: str, now: float, started_cpu: float, every_cycle: bool,
                  answer: Any) -> Any:
        """Keeps a slow call's answer for reuse; forgets it once the call is fast again."""
        spent = time.thread_time() - started_cpu
        cost = CALL_CPU_S.setdefault(name.partition("[")[0], [0, 0.0])
        cost[0] += 1
        cost[1] += spent
        if every_cycle or spent <= self._slow_call_cpu_s:
            self._slow_streak.pop(name, None)
            self._reused.pop(name, None)
            return answer
        streak = self._slow_streak[name] = self._slow_streak.get(name, 0) + 1
        if streak >= 2:
            if name not in _REPORTED_SLOW:  # once per function, not once per device
                _REPORTED_SLOW.add(name)
                log.info("%s took %.2f ms of CPU: its answers are reused for %g s", name,
                         spent * 1e3, self._slow_reuse_s)
            self._reused[name] = (now + self._slow_reuse_s, answer)
        return answer

    def note_unsupported(self, name: str, kind: str) -> None:
        """Record that the device lacks a feature a call answered about (not a failed call)."""
        self._unsupported[name] = kind

    @property
    def reused(self) -> list[str]:
        """Calls answered from their last result for now, being slow."""
        return sorted(self._reused)

    def first_of(self, *calls: tuple[Callable[..., Any], tuple[Any, ...]]) -> Any | None:
        """The first call in `calls` that answers; for functions renamed across drivers."""
        for fn, args in calls:
            value = self.call(fn, *args)
            if value is not None:
                return value
        return None
