"""NVML's simple every-cycle getters, with their output buffers kept per device.

nvidia-ml-py's wrappers make new ctypes objects on every call: one for the
answer, one for each enum argument (a sensor, a clock type). On the dozen
getters a GPU answers each cycle that costs more of our CPU than the calls
themselves. A device's `Getters` keeps one output buffer per getter (one thread
at a time reads a device) and otherwise calls as the binding does: the C
function looked up through `pynvml._nvmlGetFunctionPointer` on each call (so a
missing one raises FUNCTION_NOT_FOUND, and call logs still see every call), a
failed status raised by `pynvml._nvmlCheckReturn` as the binding's own
`NVMLError`. Each getter is named after its NVML function: the call wrapper
tallies errors and costs under that name. Answers are plain numbers (or tuples
of them), never the buffer, so a kept answer stays what it was.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import pynvml

_number_field = object.__getattribute__  # ctypes' own field access (the binding's adds checks)
_set_field = ctypes.Structure.__setattr__


def _named(getter: Callable[..., Any], name: str) -> Callable[..., Any]:
    getter.__name__ = getter.__qualname__ = name
    return getter


def scalar(name: str, out_type: type = ctypes.c_uint) -> Callable[..., int]:
    """`name(handle, *args, out)` answering one number (`out_type`): called as
    ``getter(handle, *args)``; integer arguments (enums) are passed as C ints."""
    out = out_type()
    ref = ctypes.byref(out)

    def getter(handle: Any, *args: int) -> int:
        pynvml._nvmlCheckReturn(pynvml._nvmlGetFunctionPointer(name)(handle, *args, ref))
        return out.value

    return _named(getter, name)


def pair(name: str) -> Callable[[Any], tuple[int, int]]:
    """`name(handle, unsigned int *, unsigned int *)` (encoder/decoder utilization and its
    sampling period): both numbers."""
    first, second = ctypes.c_uint(), ctypes.c_uint()
    refs = (ctypes.byref(first), ctypes.byref(second))

    def getter(handle: Any) -> tuple[int, int]:
        pynvml._nvmlCheckReturn(pynvml._nvmlGetFunctionPointer(name)(handle, *refs))
        return first.value, second.value

    return _named(getter, name)


def utilization_rates() -> Callable[[Any], tuple[int, int]]:
    """`nvmlDeviceGetUtilizationRates`: (gpu, memory) percent."""
    name = "nvmlDeviceGetUtilizationRates"
    out = pynvml.c_nvmlUtilization_t()
    ref = ctypes.byref(out)

    def getter(handle: Any) -> tuple[int, int]:
        pynvml._nvmlCheckReturn(pynvml._nvmlGetFunctionPointer(name)(handle, ref))
        return _number_field(out, "gpu"), _number_field(out, "memory")

    return _named(getter, name)


def memory_info(v2: bool) -> Callable[[Any], tuple[int, int, int | None]]:
    """`nvmlDeviceGetMemoryInfo` (v1), or its `_v2` (the version field set, as the binding
    does, and `reserved` read): (used, total, reserved; None from v1) bytes."""
    name = "nvmlDeviceGetMemoryInfo"
    out = pynvml.c_nvmlMemory_v2_t() if v2 else pynvml.c_nvmlMemory_t()
    ref = ctypes.byref(out)
    function = name + "_v2" if v2 else name

    def getter(handle: Any) -> tuple[int, int, int | None]:
        if v2:
            _set_field(out, "version", pynvml.nvmlMemory_v2)
        pynvml._nvmlCheckReturn(pynvml._nvmlGetFunctionPointer(function)(handle, ref))
        return (_number_field(out, "used"), _number_field(out, "total"),
                _number_field(out, "reserved") if v2 else None)

    return _named(getter, name)


class Getters:
    """One device's getters (see the module's doc)."""

    def __init__(self) -> None:
        self.utilization_rates = utilization_rates()
        self.memory_info_v2 = memory_info(v2=True)
        self.memory_info = memory_info(v2=False)
        self.encoder_utilization = pair("nvmlDeviceGetEncoderUtilization")
        self.decoder_utilization = pair("nvmlDeviceGetDecoderUtilization")
        self.power_usage = scalar("nvmlDeviceGetPowerUsage")
        self.temperature = scalar("nvmlDeviceGetTemperature")
        self.clock_info = scalar("nvmlDeviceGetClockInfo")
        self.performance_state = scalar("nvmlDeviceGetPerformanceState")
        self.clocks_event_reasons = scalar("nvmlDeviceGetCurrentClocksEventReasons",
                                           ctypes.c_ulonglong)
        self.clocks_throttle_reasons = scalar("nvmlDeviceGetCurrentClocksThrottleReasons",
                                              ctypes.c_ulonglong)
