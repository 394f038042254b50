"""What one sampling cycle reads from an NVIDIA device, one probe per concern.

Each probe asks NVML through `DeviceCalls` (which scopes failures) and turns the
answer into catalog readings in base units. A probe whose call fails yields
nothing, so the metric is absent rather than zero.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pynvml

from ... import catalog as m
from ...model import ProcessSample, Reading
from ..calls import reading
from .cadence import DEFAULT_INTERVAL_S, SlowReads, rare_reads
from .calls import DeviceCalls
from .fabric import fabric
from .gpm import GpmActivity
from .process_samples import SampleBuffer, nvmlDeviceGetProcessUtilization

MHZ = 1_000_000

# Clock-event (throttle) reason bits and the label each gets.
THROTTLE_REASONS: tuple[tuple[int, str], ...] = (
    (pynvml.nvmlClocksEventReasonGpuIdle, m.REASON_GPU_IDLE),
    (pynvml.nvmlClocksEventReasonApplicationsClocksSetting, "applications_clocks_setting"),
    (pynvml.nvmlClocksEventReasonSwPowerCap, m.REASON_SW_POWER_CAP),
    (pynvml.nvmlClocksEventReasonHwSlowdown, m.REASON_HW_SLOWDOWN),
    (pynvml.nvmlClocksEventReasonSyncBoost, "sync_boost"),
    (pynvml.nvmlClocksEventReasonSwThermalSlowdown, m.REASON_SW_THERMAL_SLOWDOWN),
    (pynvml.nvmlClocksEventReasonHwThermalSlowdown, m.REASON_HW_THERMAL_SLOWDOWN),
    (pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown, m.REASON_HW_POWER_BRAKE_SLOWDOWN),
    (pynvml.nvmlClocksEventReasonDisplayClockSetting, "display_clock_setting"),
)

_NOT_FOUND = frozenset({pynvml.NVML_ERROR_NOT_FOUND})
# Each reason's two possible readings (1: holding the clocks down, 0: not), built once.
_THROTTLE_READINGS: tuple[tuple[int, Reading, Reading], ...] = tuple(
    (bit, Reading(m.THROTTLE_ACTIVE, 1.0, (("reason", name),)),
     Reading(m.THROTTLE_ACTIVE, 0.0, (("reason", name),)))
    for bit, name in THROTTLE_REASONS
)


@dataclass
class DeviceState:
    """Per-device memory a probe keeps between cycles."""

    last_process_sample_us: int = 0
    static_readings: tuple[Reading, ...] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    slow: SlowReads = field(default_factory=SlowReads)
    rare: SlowReads = field(default_factory=partial(rare_reads, DEFAULT_INTERVAL_S, 0.0))
    process_samples: SampleBuffer = field(default_factory=SampleBuffer)


Probe = Callable[[DeviceCalls, Any, DeviceState], Iterable[Reading]]


def utilization(nvml: DeviceCalls, handle: Any, state: DeviceState) -> Iterator[Reading]:
    rates = nvml.call(pynvml.nvmlDeviceGetUtilizationRates, handle)
    state.extra["utilization"] = rates.gpu / 100 if rates is not None else None  # for activity
    if rates is not None:
        yield reading(m.GPU_UTILIZATION, rates.gpu / 100, task=m.TASK_GENERAL)
        yield reading(m.MEMORY_BANDWIDTH_UTILIZATION, rates.memory / 100)
    for task, fn in ((m.TASK_ENCODER, pynvml.nvmlDeviceGetEncoderUtilization),
                     (m.TASK_DECODER, pynvml.nvmlDeviceGetDecoderUtilization)):
        answer = nvml.call(fn, handle)
        if answer is not None:
            yield reading(m.GPU_UTILIZATION, answer[0] / 100, task=task)


def memory(nvml: DeviceCalls, handle: Any, _: DeviceState) -> Iterator[Reading]:
    info = nvml.call(pynvml.nvmlDeviceGetMemoryInfo, handle, pynvml.nvmlMemory_v2, key="v2")
    if info is None:
        info = nvml.call(pynvml.nvmlDeviceGetMemoryInfo, handle)
    if info is None:
        return
    yield reading(m.MEMORY_USAGE, info.used)
    yield reading(m.MEMORY_LIMIT, info.total)
    reserved = getattr(info, "reserved", None)
    if reserved is not None:
        yield reading(m.MEMORY_RESERVED, reserved)


def power(nvml: DeviceCalls, handle: Any, _: DeviceState) -> Iterator[Reading]:
    milliwatts = nvml.call(pynvml.nvmlDeviceGetPowerUsage, handle)
    if milliwatts is not None:
        yield reading(m.POWER, milliwatts / 1000)


# The slow-cadence probes (cadence.py) call with `every_cycle=True`: their cadence decides
# when they are read, and a slow call's answer is not reused on top of it.


def power_limit(nvml: DeviceCalls, handle: Any, _: DeviceState) -> Iterator[Reading]:
    """The enforced power limit (slow cadence)."""
    limit = nvml.call(pynvml.nvmlDeviceGetEnforcedPowerLimit, handle, every_cycle=True)
    if limit is not None:
        yield reading(m.POWER_LIMIT, limit / 1000)


def energy(nvml: DeviceCalls, handle: Any, _: DeviceState) -> Iterator[Reading]:
    """The energy counter (rare cadence: about 5 ms of a real H200's driver CPU a read)."""
    millijoules = nvml.call(pynvml.nvmlDeviceGetTotalEnergyConsumption, handle,
                            every_cycle=True)
    if millijoules is not None:
        yield reading(m.ENERGY, millijoules / 1000)


def temperature(nvml: DeviceCalls, handle: Any, _: DeviceState) -> Iterator[Reading]:
    celsius = nvml.call(pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU)
    if celsius is not None:
        yield reading(m.TEMPERATURE, celsius, sensor="gpu")


_CLOCK_DOMAINS = ((m.CLOCK_SM, pynvml.NVML_CLOCK_SM), (m.CLOCK_MEMORY, pynvml.NVML_CLOCK_MEM))


def clocks(nvml: DeviceCalls, handle: Any, state: DeviceState) -> Iterator[Reading]:
    for domain, clock_type in _CLOCK_DOMAINS:
        mhz = nvml.call(pynvml.nvmlDeviceGetClockInfo, handle, clock_type, key=domain)
        if mhz is not None:
            yield reading(m.CLOCK_FREQUENCY, mhz * MHZ, clock=domain)
    if state.static_readings is None:
        # Maximum clocks never change while the driver is loaded: read them once.
        state.static_readings = tuple(
            reading(m.CLOCK_MAX_FREQUENCY, mhz * MHZ, clock=domain)
            for domain, clock_type in _CLOCK_DOMAINS
            if (mhz := nvml.call(pynvml.nvmlDeviceGetMaxClockInfo, handle, clock_type,
                                 key=domain)) is not None
        )
    yield from state.static_readings


def throttling(nvml: DeviceCalls, handle: Any, _: DeviceState) -> Iterator[Reading]:
    reasons = nvml.first_of(
        (pynvml.nvmlDeviceGetCurrentClocksEventReasons, (handle,)),
        (pynvml.nvmlDeviceGetCurrentClocksThrottleReasons, (handle,)),
    )
    if reasons is not None:
        for bit, held, free in _THROTTLE_READINGS:
            yield held if reasons & bit else free
    pstate = nvml.call(pynvml.nvmlDeviceGetPerformanceState, handle)
    if pstate is not None and pstate != pynvml.NVML_PSTATE_UNKNOWN:
        yield reading(m.PERFORMANCE_STATE, pstate)


def errors(nvml: DeviceCalls, handle: Any, _: DeviceState) -> Iterator[Reading]:
    for error_type, nvml_type in ((m.ECC_CORRECTED, pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED),
                                  (m.ECC_UNCORRECTED, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)):
        count = nvml.call(pynvml.nvmlDeviceGetTotalEccErrors, handle, nvml_type,
                          pynvml.NVML_VOLATILE_ECC, key=error_type, every_cycle=True)
        if count is not None:
            yield reading(m.HW_ERRORS, count, error_type=error_type)
    replays = nvml.call(pynvml.nvmlDeviceGetPcieReplayCounter, handle, every_cycle=True)
    if replays is not None:
        yield reading(m.HW_ERRORS, replays, error_type=m.PCIE_REPLAY)


def memory_health(nvml: DeviceCalls, handle: Any, _: DeviceState) -> Iterator[Reading]:
    remap = nvml.call(pynvml.nvmlDeviceGetRemappedRows, handle, every_cycle=True)
    if remap is not None:
        correctable, uncorrectable, pending, failure = remap
        yield reading(m.REMAPPED_ROWS, correctable, cause="correctable")
        yield reading(m.REMAPPED_ROWS, uncorrectable, cause="uncorrectable")
        yield reading(m.ROW_REMAP_PENDING, 1 if pending else 0)
        yield reading(m.ROW_REMAP_FAILURE, 1 if failure else 0)
    for cause, nvml_cause in (
        ("single_bit", pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS),
        ("double_bit", pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR),
    ):
        pages = nvml.call(pynvml.nvmlDeviceGetRetiredPages, handle, nvml_cause, key=cause,
                          every_cycle=True)
        if pages is not None:
            yield reading(m.RETIRED_PAGES, len(pages), cause=cause)
    pending = nvml.call(pynvml.nvmlDeviceGetRetiredPagesPendingStatus, handle,
                        every_cycle=True)
    if pending is not None:
        yield reading(m.RETIRED_PAGES_PENDING, 1 if pending == pynvml.NVML_FEATURE_ENABLED else 0)


def activity(nvml: DeviceCalls, handle: Any, state: DeviceState) -> Iterator[Reading]:
    """GPM engine, pipe and link activity since the last cycle (Hopper and newer), and
    whether the device spins (judged with this cycle's utilization, read before)."""
    gpm = state.extra.get("gpm")
    if gpm is None:
        gpm = state.extra["gpm"] = GpmActivity()
    yield from gpm.read(nvml, handle, state.extra.get("utilization"))


DEVICE_PROBES: tuple[Probe, ...] = (
    utilization, memory, power, temperature, clocks, throttling, activity,
)
# Read on the slow cadence (cadence.py); every metric they yield is `Cadence.SLOW` in the catalog.
SLOW_PROBES: tuple[Probe, ...] = (power_limit, errors, memory_health, fabric)
# Read on the rare cadence; every metric they yield is `Cadence.RARE` in the catalog.
RARE_PROBES: tuple[Probe, ...] = (energy,)


def processes(nvml: DeviceCalls, handle: Any, state: DeviceState) -> tuple[ProcessSample, ...]:
    """Processes holding a context on the device, with memory and engine use."""
    memory_by_pid: dict[int, float | None] = {}
    for fn in (pynvml.nvmlDeviceGetComputeRunningProcesses,
               pynvml.nvmlDeviceGetGraphicsRunningProcesses):
        for proc in nvml.call(fn, handle) or ():
            used = proc.usedGpuMemory
            previous = memory_by_pid.get(proc.pid)
            memory_by_pid[proc.pid] = max(used, previous or 0) if used is not None else previous
    if not memory_by_pid:
        return ()
    utilization_by_pid = _process_utilization(nvml, handle, state)
    samples = []
    for pid in sorted(memory_by_pid):
        readings = []
        if memory_by_pid[pid] is not None:
            readings.append(reading(m.PROCESS_MEMORY_USAGE, memory_by_pid[pid]))
        readings.extend(utilization_by_pid.get(pid, ()))
        samples.append(ProcessSample(pid, tuple(readings)))
    return tuple(samples)


def _process_utilization(
    nvml: DeviceCalls, handle: Any, state: DeviceState
) -> dict[int, tuple[Reading, ...]]:
    # NVML keeps a buffer of samples; asking with the newest timestamp seen so
    # far returns only new ones. NotFound means no process was busy since then.
    found = nvml.call(nvmlDeviceGetProcessUtilization, handle, state.last_process_sample_us,
                      state.process_samples, empty_on=_NOT_FOUND, empty=[])
    latest: dict[int, Any] = {}
    for sample in found or ():
        if sample.pid not in latest or sample.timeStamp > latest[sample.pid].timeStamp:
            latest[sample.pid] = sample
        state.last_process_sample_us = max(state.last_process_sample_us, sample.timeStamp)
    return {
        pid: (
            reading(m.PROCESS_UTILIZATION, sample.smUtil / 100, engine=m.ENGINE_SM),
            reading(m.PROCESS_UTILIZATION, sample.memUtil / 100, engine=m.ENGINE_MEMORY),
            reading(m.PROCESS_UTILIZATION, sample.encUtil / 100, engine=m.ENGINE_ENCODER),
            reading(m.PROCESS_UTILIZATION, sample.decUtil / 100, engine=m.ENGINE_DECODER),
        )
        for pid, sample in latest.items()
    }
