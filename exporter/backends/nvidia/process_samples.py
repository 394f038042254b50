"""Per-process answers in one NVML call each instead of the binding's two.

nvidia-ml-py's `nvmlDeviceGetProcessUtilization` and
`nvmlDeviceGet{Compute,Graphics}RunningProcesses` first ask the driver how many
entries there are, then call again with a buffer that size. Process utilization
costs a real H200's driver about 1 ms of CPU a call (driver 580:
docs/benchmarks-real-gpu.md), and each cycle asks for both process lists, so the
backend keeps one buffer per device and question and asks once; only when the
driver says the buffer is too small (`NVML_ERROR_INSUFFICIENT_SIZE`, with the
count it needs) does it grow the buffer (to twice that count, as the binding
sizes its own, in case more processes come meanwhile) and ask again. The
answers are copied out of the buffer in one piece, the structs' layouts taken
from the binding. No utilization sample since the last one seen (NOT_FOUND,
which the binding raises) is an empty answer, without the cost of an exception.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Callable
from typing import Any, NamedTuple

import pynvml

INITIAL_SAMPLES = 32
INITIAL_PROCESSES = 16
# The most entries a list is given room for: a driver that keeps asking for more (or a
# count it answers wrongly) must not grow a buffer without end. NVML lists are far shorter.
MOST_ENTRIES = 4096


class ProcessUtilization(NamedTuple):
    """One sample of nvmlProcessUtilizationSample_t, copied out of the driver's buffer."""

    pid: int
    timeStamp: int
    smUtil: int
    memUtil: int
    encUtil: int
    decUtil: int


class ProcessInfo(NamedTuple):
    """One nvmlProcessInfo_t (v3) of a running-process list; `usedGpuMemory` None where the
    driver cannot tell (NVML_VALUE_NOT_AVAILABLE), as the binding answers."""

    pid: int
    usedGpuMemory: int | None
    gpuInstanceId: int
    computeInstanceId: int


_SAMPLE = pynvml.c_nvmlProcessUtilizationSample_t
# pid, (padding), timeStamp, smUtil, memUtil, encUtil, decUtil in the platform's alignment
_SAMPLE_LAYOUT = struct.Struct("@IQIIII")
assert _SAMPLE_LAYOUT.size == ctypes.sizeof(_SAMPLE)
_PROCESS = pynvml.c_nvmlProcessInfo_v3_t
# pid, (padding), usedGpuMemory, gpuInstanceId, computeInstanceId
_PROCESS_LAYOUT = struct.Struct("@IQII")
assert _PROCESS_LAYOUT.size == ctypes.sizeof(_PROCESS)
_MEMORY_NOT_AVAILABLE = pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value


class SampleBuffer:
    """A device's buffer for one kind of per-process answer, kept between calls."""

    def __init__(self, size: int = INITIAL_SAMPLES, entry: type = _SAMPLE) -> None:
        self.entry = entry
        self.resize(size)
        self.last: tuple[bytes, list[Any]] | None = None  # the last answer, and its bytes

    def resize(self, size: int) -> None:
        self.size = max(size, 1)
        self.array = (self.entry * self.size)()

    def raw(self, count: int, layout: struct.Struct) -> bytes:
        """The first `count` entries' bytes (copied in one piece)."""
        return ctypes.string_at(self.array, layout.size * min(count, self.size))


def process_buffer() -> SampleBuffer:
    """A buffer for one running-process list of a device."""
    return SampleBuffer(INITIAL_PROCESSES, _PROCESS)


def _filled(buffer: SampleBuffer, call: Callable[[Any, ctypes.c_uint], int],
            none_on: int | None = None) -> int:
    """How many entries `call(array, count)` put in the buffer, growing it once if the driver
    says it is too small; 0 where it answers `none_on`. Raises `pynvml.NVMLError` for any
    other failure."""
    count = ctypes.c_uint(buffer.size)
    status = call(buffer.array, count)
    if status == pynvml.NVML_ERROR_INSUFFICIENT_SIZE:
        # Room for what the driver says it needs and a few more by the next call, within
        # MOST_ENTRIES; a count no larger than the buffer is no reason to grow it.
        wanted = min(count.value * 2, MOST_ENTRIES)
        if wanted > buffer.size:
            buffer.resize(wanted)
            count = ctypes.c_uint(buffer.size)
            status = call(buffer.array, count)
    if status == none_on:
        return 0
    pynvml._nvmlCheckReturn(status)
    return count.value


def _function(name: str) -> Any:
    # Looked up on each C call, as the binding does (its lookups are cached).
    return pynvml._nvmlGetFunctionPointer(name)


def nvmlDeviceGetProcessUtilization(handle: Any, last_seen_us: int,
                                    buffer: SampleBuffer) -> list[ProcessUtilization]:
    """The samples newer than `last_seen_us`, as the binding's function of this name answers,
    except that none since then (the driver's NOT_FOUND, which the binding raises, every
    cycle on an idle GPU) is an empty list. Raises `pynvml.NVMLError` for other failures.
    """
    since = ctypes.c_ulonglong(last_seen_us)
    count = _filled(buffer, lambda array, size: _function("nvmlDeviceGetProcessUtilization")(
        handle, array, ctypes.byref(size), since), none_on=pynvml.NVML_ERROR_NOT_FOUND)
    return [ProcessUtilization(*sample)
            for sample in _SAMPLE_LAYOUT.iter_unpack(buffer.raw(count, _SAMPLE_LAYOUT))]


def _running(function: str, handle: Any, buffer: SampleBuffer) -> list[ProcessInfo]:
    """The list; the same list object as last time where the driver's answer is the same
    (a device's processes change rarely), so it is neither made again nor compared entry
    by entry."""
    count = _filled(buffer,
                    lambda array, size: _function(function)(handle, ctypes.byref(size), array))
    raw = buffer.raw(count, _PROCESS_LAYOUT)
    if buffer.last is not None and buffer.last[0] == raw:
        return buffer.last[1]
    answer = [ProcessInfo(pid, None if used == _MEMORY_NOT_AVAILABLE else used, gi, ci)
              for pid, used, gi, ci in _PROCESS_LAYOUT.iter_unpack(raw)]
    buffer.last = (raw, answer)
    return answer


def nvmlDeviceGetComputeRunningProcesses(handle: Any, buffer: SampleBuffer) -> list[ProcessInfo]:
    """The device's compute processes (v3 entries), as the binding's function of this name
    answers, in one call with `buffer` (see the module's doc)."""
    return _running("nvmlDeviceGetComputeRunningProcesses_v3", handle, buffer)


def nvmlDeviceGetGraphicsRunningProcesses(handle: Any, buffer: SampleBuffer) -> list[ProcessInfo]:
    """The device's graphics processes (v3 entries), as the binding's function of this name
    answers, in one call with `buffer`."""
    return _running("nvmlDeviceGetGraphicsRunningProcesses_v3", handle, buffer)
