"""What one sampling cycle reads from an NVIDIA device, one probe per concern.

Each probe asks NVML through `DeviceCalls` (which scopes failures) and turns the
answer into catalog readings in base units. A probe whose call fails yields
nothing, so the metric is absent rather than zero.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache, partial
from typing import Any

import pynvml

from ... import catalog as m
from ...model import ProcessSample, Reading
from ..calls import reading
from .cadence import DEFAULT_INTERVAL_S, SlowReads, rare_reads
from .calls import DeviceCalls
from .fabric import fabric
from .getters import Getters
from .gpm import GpmActivity
from .process_samples import (
    SampleBuffer,
    nvmlDeviceGetComputeRunningProcesses,
    nvmlDeviceGetGraphicsRunningProcesses,
    nvmlDeviceGetProcessUtilization,
    process_buffer,
)

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
    compute_processes: SampleBuffer = field(default_factory=process_buffer)
    graphics_processes: SampleBuffer = field(default_factory=process_buffer)
    getters: Getters = field(default_factory=Getters)


Probe = Callable[[DeviceCalls, Any, DeviceState], Iterable[Reading]]


# The labels of the every-cycle probes' readings, built once (a cycle makes a hundred of them).
_GENERAL, _GPU_SENSOR = (("task", m.TASK_GENERAL),), (("sensor", "gpu"),)
_SM, _MEMORY, _ENCODER, _DECODER = ((("engine", engine),) for engine in (
    m.ENGINE_SM, m.ENGINE_MEMORY, m.ENGINE_ENCODER, m.ENGINE_DECODER))
_ENCODER_TASK, _DECODER_TASK = (("task", m.TASK_ENCODER),), (("task", m.TASK_DECODER),)


def utilization(nvml: DeviceCalls, handle: Any, state: DeviceState) -> list[Reading]:
    found = []
    getters = state.getters
    rates = nvml.call(getters.utilization_rates, handle)
    busy = None
    if rates is not None:
        busy = rates[0] / 100
        found.append(Reading(m.GPU_UTILIZATION, busy, _GENERAL))
        found.append(Reading(m.MEMORY_BANDWIDTH_UTILIZATION, rates[1] / 100))
    state.extra["utilization"] = busy  # for activity
    for getter, labels in ((getters.encoder_utilization, _ENCODER_TASK),
                           (getters.decoder_utilization, _DECODER_TASK)):
        answer = nvml.call(getter, handle)
        if answer is not None:
            found.append(Reading(m.GPU_UTILIZATION, answer[0] / 100, labels))
    return found


def memory(nvml: DeviceCalls, handle: Any, state: DeviceState) -> list[Reading]:
    info = nvml.call(state.getters.memory_info_v2, handle, key="v2")
    if info is None:
        info = nvml.call(state.getters.memory_info, handle)
    if info is None:
        return []
    used, total, reserved = info
    found = [Reading(m.MEMORY_USAGE, float(used)), Reading(m.MEMORY_LIMIT, float(total))]
    if reserved is not None:
        found.append(Reading(m.MEMORY_RESERVED, float(reserved)))
    return found


def power(nvml: DeviceCalls, handle: Any, state: DeviceState) -> tuple[Reading, ...]:
    milliwatts = nvml.call(state.getters.power_usage, handle)
    return () if milliwatts is None else (Reading(m.POWER, milliwatts / 1000),)


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


def temperature(nvml: DeviceCalls, handle: Any, state: DeviceState) -> tuple[Reading, ...]:
    celsius = nvml.call(state.getters.temperature, handle, pynvml.NVML_TEMPERATURE_GPU)
    return () if celsius is None else (Reading(m.TEMPERATURE, float(celsius), _GPU_SENSOR),)


_CLOCK_DOMAINS = ((m.CLOCK_SM, pynvml.NVML_CLOCK_SM), (m.CLOCK_MEMORY, pynvml.NVML_CLOCK_MEM))
_CLOCK_LABELS = tuple((domain, clock_type, (("clock", domain),))
                      for domain, clock_type in _CLOCK_DOMAINS)


def clocks(nvml: DeviceCalls, handle: Any, state: DeviceState) -> list[Reading]:
    found = []
    clock_info = state.getters.clock_info
    for domain, clock_type, labels in _CLOCK_LABELS:
        mhz = nvml.call(clock_info, handle, clock_type, key=domain)
        if mhz is not None:
            found.append(Reading(m.CLOCK_FREQUENCY, float(mhz * MHZ), labels))
    if state.static_readings is None:
        # Maximum clocks never change while the driver is loaded: read them once.
        state.static_readings = tuple(
            reading(m.CLOCK_MAX_FREQUENCY, mhz * MHZ, clock=domain)
            for domain, clock_type in _CLOCK_DOMAINS
            if (mhz := nvml.call(pynvml.nvmlDeviceGetMaxClockInfo, handle, clock_type,
                                 key=domain)) is not None
        )
    found.extend(state.static_readings)
    return found


@lru_cache(maxsize=64)
def _throttle_readings(reasons: int) -> tuple[Reading, ...]:
    """Each reason's reading for a clock-event reasons mask (a device has few masks)."""
    return tuple(held if reasons & bit else free for bit, held, free in _THROTTLE_READINGS)


def throttling(nvml: DeviceCalls, handle: Any, state: DeviceState) -> list[Reading]:
    getters = state.getters
    reasons = nvml.first_of(
        (getters.clocks_event_reasons, (handle,)),
        (getters.clocks_throttle_reasons, (handle,)),
    )
    found = [] if reasons is None else list(_throttle_readings(reasons))
    pstate = nvml.call(getters.performance_state, handle)
    if pstate is not None and pstate != pynvml.NVML_PSTATE_UNKNOWN:
        found.append(Reading(m.PERFORMANCE_STATE, float(pstate)))
    return found


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


def activity(nvml: DeviceCalls, handle: Any, state: DeviceState) -> list[Reading]:
    """GPM engine, pipe and link activity since the last cycle (Hopper and newer), and
    whether the device spins (judged with this cycle's utilization, read before)."""
    gpm = state.extra.get("gpm")
    if gpm is None:
        gpm = state.extra["gpm"] = GpmActivity()
    return gpm.read(nvml, handle, state.extra.get("utilization"))


DEVICE_PROBES: tuple[Probe, ...] = (
    utilization, memory, power, temperature, clocks, throttling, activity, fabric,
)
# Read on the slow cadence (cadence.py); every metric they yield is `Cadence.SLOW` in the catalog.
SLOW_PROBES: tuple[Probe, ...] = (power_limit, errors, memory_health)
# Read on the rare cadence; every metric they yield is `Cadence.RARE` in the catalog.
RARE_PROBES: tuple[Probe, ...] = (energy,)


_PROCESSES = "processes"  # DeviceState.extra key: the last answers and the samples made of them


def processes(nvml: DeviceCalls, handle: Any, state: DeviceState) -> tuple[ProcessSample, ...]:
    """Processes holding a context on the device, with memory and engine use.

    The samples are made again only when the driver's answers change (a process list,
    or the utilization samples, which are reused while that call is slow)."""
    lists = (nvml.call(nvmlDeviceGetComputeRunningProcesses, handle, state.compute_processes),
             nvml.call(nvmlDeviceGetGraphicsRunningProcesses, handle, state.graphics_processes))
    if not (lists[0] or lists[1]):
        return ()
    # NVML keeps a buffer of samples; asking with the newest timestamp seen so
    # far returns only new ones (none: no process was busy since then).
    found = nvml.call(nvmlDeviceGetProcessUtilization, handle, state.last_process_sample_us,
                      state.process_samples)
    answers = (lists, found)
    last = state.extra.get(_PROCESSES)
    if last is None or last[0] != answers:
        last = state.extra[_PROCESSES] = (answers, _process_samples(lists, found, state))
    return last[1]


def _process_samples(lists: tuple[Any, Any], found: Any,
                     state: DeviceState) -> tuple[ProcessSample, ...]:
    memory_by_pid: dict[int, float | None] = {}
    for listed in lists:
        for proc in listed or ():
            used = proc.usedGpuMemory
            previous = memory_by_pid.get(proc.pid)
            memory_by_pid[proc.pid] = max(used, previous or 0) if used is not None else previous
    utilization_by_pid = _process_utilization(found, state)
    samples = []
    for pid in sorted(memory_by_pid):
        readings = []
        if memory_by_pid[pid] is not None:
            readings.append(Reading(m.PROCESS_MEMORY_USAGE, float(memory_by_pid[pid])))
        readings.extend(utilization_by_pid.get(pid, ()))
        samples.append(ProcessSample(pid, tuple(readings)))
    return tuple(samples)


def _process_utilization(found: Any, state: DeviceState) -> dict[int, tuple[Reading, ...]]:
    """The latest utilization sample of each process in `found` as readings; the newest
    timestamp seen kept for the next call."""
    latest: dict[int, Any] = {}
    for sample in found or ():
        if sample.pid not in latest or sample.timeStamp > latest[sample.pid].timeStamp:
            latest[sample.pid] = sample
        state.last_process_sample_us = max(state.last_process_sample_us, sample.timeStamp)
    return {
        pid: (
            Reading(m.PROCESS_UTILIZATION, sample.smUtil / 100, _SM),
            Reading(m.PROCESS_UTILIZATION, sample.memUtil / 100, _MEMORY),
            Reading(m.PROCESS_UTILIZATION, sample.encUtil / 100, _ENCODER),
            Reading(m.PROCESS_UTILIZATION, sample.decUtil / 100, _DECODER),
        )
        for pid, sample in latest.items()
    }
