"""NVML's side of the vendor call wrapper (exporter/backends/calls.py): how its errors scope.

- NotSupported / NoPermission / FunctionNotFound: permanent, the value is absent
  and the call is not made again for that device.
- GpuIsLost / Unknown: the whole device is down for this cycle (`DeviceDown`).
- Anything else: the value is absent for this cycle only.

Some calls cost the driver milliseconds of CPU time on real GPUs (on an H200,
driver 580: `nvmlDeviceGetTotalEnergyConsumption` about 4.4 ms, process
utilization about 1 ms, where most calls take microseconds), so NVIDIA turns on
the wrapper's slow-call reuse: a call that spent more than `SLOW_CALL_CPU_S` of
this thread's CPU time twice in a row is answered from its last result for
`SLOW_REUSE_S`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from typing import Any, TypeVar

import pynvml

from ..calls import (
    CALL_CPU_S,
    COSTLY_CALL_CPU_S,
    SLOW_REUSE_S,
    DeviceDown,
    ErrorTally,
    Failure,
    VendorCalls,
)

__all__ = ["BACKEND_NAME", "CALL_CPU_S", "SLOW_CALL_CPU_S", "SLOW_REUSE_S", "DeviceCalls",
           "DeviceDown", "error_kind"]

T = TypeVar("T")

BACKEND_NAME = "nvidia"
SLOW_CALL_CPU_S = COSTLY_CALL_CPU_S  # the cost at which a recorded call becomes a busy delay

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


class DeviceCalls(VendorCalls):
    """NVML calls for one device, remembering which functions it does not support.

    Instances live as long as the device; `begin_cycle()` clears the errors of
    the previous cycle. One thread at a time uses an instance.
    """

    vendor_error = pynvml.NVMLError

    def __init__(self, tally: ErrorTally, slow_call_cpu_s: float = SLOW_CALL_CPU_S,
                 slow_reuse_s: float = SLOW_REUSE_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(tally, slow_call_cpu_s=slow_call_cpu_s, slow_reuse_s=slow_reuse_s,
                         clock=clock, call_costs=CALL_CPU_S)

    def error_code(self, error: BaseException) -> Any:
        return getattr(error, "value", None)

    def failure(self, error: BaseException) -> Failure:
        code = self.error_code(error)
        return Failure(error_kind(error),
                       permanent=code in _PERMANENT, device_down=code in _DEVICE_DOWN)

    def call(
        self,
        fn: Callable[..., T],
        *args: Any,
        key: str = "",
        empty_on: Collection[int] = frozenset(),
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
        return self.invoke(fn, fn.__name__, args, key, empty_on, empty, every_cycle)

    def first_of(self, *calls: tuple[Callable[..., Any], tuple[Any, ...]]) -> Any | None:
        """The first call in `calls` that answers; for functions renamed across drivers."""
        for fn, args in calls:
            value = self.call(fn, *args)
            if value is not None:
                return value
        return None
