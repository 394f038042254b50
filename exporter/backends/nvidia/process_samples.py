"""Per-process utilization samples in one NVML call instead of the binding's two.

nvidia-ml-py's `nvmlDeviceGetProcessUtilization` first asks the driver how many
samples there are, then calls again with a buffer that size. Each call costs a
real H200's driver about 1 ms of CPU (driver 580: docs/benchmarks-real-gpu.md), so
the backend keeps one buffer per device and asks once; only when the driver says
the buffer is too small (`NVML_ERROR_INSUFFICIENT_SIZE`, with the count it needs)
does it grow the buffer to that count and ask again.
"""

from __future__ import annotations

import ctypes
import struct
from typing import Any, NamedTuple

import pynvml

INITIAL_SAMPLES = 32


class ProcessUtilization(NamedTuple):
    """One sample of nvmlProcessUtilizationSample_t, copied out of the driver's buffer."""

    pid: int
    timeStamp: int
    smUtil: int
    memUtil: int
    encUtil: int
    decUtil: int


_SAMPLE = pynvml.c_nvmlProcessUtilizationSample_t
# pid, (padding), timeStamp, smUtil, memUtil, encUtil, decUtil in the platform's alignment
_SAMPLE_LAYOUT = struct.Struct("@IQIIII")
assert _SAMPLE_LAYOUT.size == ctypes.sizeof(_SAMPLE)


class SampleBuffer:
    """A device's buffer for its process samples, kept between calls."""

    def __init__(self, size: int = INITIAL_SAMPLES) -> None:
        self.resize(size)

    def resize(self, size: int) -> None:
        self.size = max(size, 1)
        self.array = (_SAMPLE * self.size)()


def _c_call(handle: Any, buffer: SampleBuffer, count: ctypes.c_uint,
            since: ctypes.c_ulonglong) -> int:
    # Looked up on each call, as the binding does (its lookups are cached).
    fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetProcessUtilization")
    return fn(handle, buffer.array, ctypes.byref(count), since)


def nvmlDeviceGetProcessUtilization(handle: Any, last_seen_us: int,
                                    buffer: SampleBuffer) -> list[ProcessUtilization]:
    """The samples newer than `last_seen_us`, as the binding's function of this name answers.

    Raises `pynvml.NVMLError` as the binding does (NotFound: no sample since then).
    """
    count = ctypes.c_uint(buffer.size)
    since = ctypes.c_ulonglong(last_seen_us)
    status = _c_call(handle, buffer, count, since)
    if status == pynvml.NVML_ERROR_INSUFFICIENT_SIZE:
        buffer.resize(count.value)
        count = ctypes.c_uint(buffer.size)
        status = _c_call(handle, buffer, count, since)
    pynvml._nvmlCheckReturn(status)
    raw = ctypes.string_at(ctypes.addressof(buffer.array), _SAMPLE_LAYOUT.size * count.value)
    return [ProcessUtilization(*sample) for sample in _SAMPLE_LAYOUT.iter_unpack(raw)]
