"""Turns neuron-monitor's JSON reports into one immutable view per report.

Field names follow AWS's Neuron Monitor User Guide. A metric group that is
absent from a report, or carries a non-empty ``error``, makes its values
absent (never zero). neuron-monitor reports ECC events, executions and
execution errors as counts *of the report's period*; `ReportReader` adds them
up into counters (from when the backend started reading), skipping a group
repeated unchanged from the previous report.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

NEURONCORE_COUNTERS = "neuroncore_counters"
MEMORY_USED = "memory_used"
RUNTIME_VCPU = "neuron_runtime_vcpu_usage"
EXECUTION_STATS = "execution_stats"
HW_COUNTERS = "neuron_hw_counters"
HARDWARE_INFO = "neuron_hardware_info"
RUNTIME_GROUPS = (NEURONCORE_COUNTERS, MEMORY_USED, RUNTIME_VCPU, EXECUTION_STATS)
SYSTEM_GROUPS = (HW_COUNTERS,)
ECC_FIELDS = ("mem_ecc_corrected", "mem_ecc_uncorrected", "sram_ecc_corrected",
              "sram_ecc_uncorrected")
LATENCY_STAGES = (("total_latency", "total"), ("device_latency", "device"))


class ReportError(ValueError):
    """A report that says nothing usable about the hardware."""


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _index(key: Any) -> int | None:
    text = str(key)
    return int(text) if text.isdigit() else None


@dataclass(frozen=True)
class Hardware:
    """What ``neuron_hardware_info`` and ``instance_info`` say about the node."""

    device_count: int
    cores_per_device: int
    device_memory_bytes: float | None
    device_type: str
    device_version: str
    core_version: str
    instance_id: str
    instance_type: str


# Beyond any Neuron host (trn2.48xlarge: 16 devices of 8 NeuronCores): a count past these is
# a monitor's fault, and would have the agent track that many devices.
MOST_DEVICES = 128
MOST_CORES_PER_DEVICE = 64


def hardware_of(report: Mapping[str, Any]) -> Hardware:
    """The hardware a report describes.

    Raises:
        ReportError: ``neuron_hardware_info`` is missing, reports an error, or lacks the counts.
    """
    info = report.get(HARDWARE_INFO)
    if not isinstance(info, Mapping):
        raise ReportError("neuron-monitor reported no neuron_hardware_info")
    if info.get("error"):
        raise ReportError(f"neuron-monitor: {info['error']}")
    devices = _number(info.get("neuron_device_count"))
    cores = _number(info.get("neuroncore_per_device_count"))
    if devices is None or cores is None:
        raise ReportError("neuron_hardware_info lacks neuron_device_count or "
                          "neuroncore_per_device_count")
    for name, count, most in (("neuron_device_count", devices, MOST_DEVICES),
                              ("neuroncore_per_device_count", cores, MOST_CORES_PER_DEVICE)):
        if not (0 <= count <= most and count == int(count)):
            raise ReportError(f"neuron_hardware_info: {name} {count:g} cannot be true "
                              f"(a whole number up to {most})")
    instance = report.get("instance_info") if isinstance(report.get("instance_info"),
                                                         Mapping) else {}
    return Hardware(
        device_count=int(devices),
        cores_per_device=int(cores),
        device_memory_bytes=_number(info.get("neuron_device_memory_size")),
        device_type=str(info.get("neuron_device_type") or "neuron"),
        device_version=str(info.get("neuron_device_version") or ""),
        core_version=str(info.get("neuroncore_version") or ""),
        instance_id=str(instance.get("instance_id") or ""),
        instance_type=str(instance.get("instance_type") or ""),
    )


@dataclass(frozen=True)
class Runtime:
    """One Neuron application (a process using the Neuron runtime) in one report."""

    pid: int
    tag: str
    cores: tuple[int, ...]                      # every NeuronCore it appears on
    utilization: Mapping[int, float]            # core -> ratio 0-1
    core_memory: Mapping[int, Mapping[str, float]]  # core -> category -> bytes
    host_memory_bytes: float | None = None
    device_memory_bytes: float | None = None
    vcpu: Mapping[str, float] = field(default_factory=dict)  # user/system -> ratio
    latency: Mapping[tuple[str, str], float] = field(default_factory=dict)  # (stage, pct) -> s
    # cumulative since the backend started: (kind, key) -> count, kind "error" or "outcome"
    executions: Mapping[tuple[str, str], float] = field(default_factory=dict)


@dataclass(frozen=True)
class ReportView:
    """Everything sampling needs from the latest report."""

    received_at: float                          # time.monotonic() when it arrived
    taken_at: float                             # time.time() when it arrived
    runtimes: tuple[Runtime, ...] = ()
    utilization: Mapping[int, float] | None = None          # core -> ratio; None: unknown
    core_memory: Mapping[int, Mapping[str, float]] | None = None  # None: unknown
    ecc: Mapping[int, Mapping[str, float]] | None = None    # device -> field -> total
    problems: Mapping[str, str] = field(default_factory=dict)  # group -> missing/error/...
    # the devices the report says the host has (None where it does not say), or why it cannot
    hardware: Hardware | None = None
    hardware_problem: str = ""


def _group(report: Mapping[str, Any], name: str) -> tuple[Mapping[str, Any] | None, str]:
    """(group, "") when usable, else (None, why): "missing" or "error"."""
    group = report.get(name)
    if not isinstance(group, Mapping):
        return None, "missing"
    if group.get("error"):
        return None, "error"
    return group, ""


def _utilization(group: Mapping[str, Any]) -> dict[int, float]:
    """Each core's utilization as a ratio, as reported: a percent outside 0-100 is kept as
    it is, for the reading checks to refuse with why (never read as an idle core)."""
    found = {}
    for key, core in (group.get("neuroncores_in_use") or {}).items():
        percent = _number((core or {}).get("neuroncore_utilization"))
        if _index(key) is not None and percent is not None:
            found[_index(key)] = percent / 100
    return found


def is_ratio(value: float) -> bool:
    """Whether a utilization can be true (0 to 1)."""
    return 0.0 <= value <= 1.0


def _memory(group: Mapping[str, Any]) -> tuple[dict[int, dict[str, float]], float | None,
                                               float | None]:
    used = group.get("neuron_runtime_used_bytes") or {}
    breakdown = (used.get("usage_breakdown") or {}).get("neuroncore_memory_usage") or {}
    per_core = {}
    for key, categories in breakdown.items():
        if _index(key) is None or not isinstance(categories, Mapping):
            continue
        per_core[_index(key)] = {name: value for name, raw in categories.items()
                                 if (value := _number(raw)) is not None}
    return per_core, _number(used.get("host")), _number(used.get("neuron_device"))


def _vcpu(group: Mapping[str, Any]) -> dict[str, float]:
    usage = group.get("vcpu_usage") or {}
    return {mode: value / 100 for mode in ("user", "system")
            if (value := _number(usage.get(mode))) is not None}


def _latency(group: Mapping[str, Any]) -> dict[tuple[str, str], float]:
    stats = group.get("latency_stats") or {}
    found = {}
    for key, stage in LATENCY_STAGES:
        for percentile, raw in (stats.get(key) or {}).items():  # null while nothing ran
            if (value := _number(raw)) is not None:
                found[(stage, str(percentile))] = value
    return found


def _count(raw: Any) -> float | None:
    """A count one period added: a number of 0 or more; None for anything else (a negative
    count would lower the running total, which Prometheus would take as a reset)."""
    value = _number(raw)
    return value if value is not None and 0 <= value < math.inf else None


def _period_counts(group: Mapping[str, Any]) -> dict[tuple[str, str], float]:
    counts = {}
    for kind, key in (("error", "error_summary"), ("outcome", "execution_summary")):
        for name, raw in (group.get(key) or {}).items():
            if (value := _count(raw)) is not None:
                counts[(kind, str(name))] = value
    return counts


class ReportReader:
    """Reads successive reports of one backend, keeping the counters they add up to.

    Used by one thread (the monitor's reader); the views it returns are immutable.
    """

    def __init__(self) -> None:
        self._ecc: dict[int, dict[str, float]] = {}
        self._executions: dict[int, dict[tuple[str, str], float]] = {}
        self._last_groups: dict[tuple[str, int], Mapping[str, Any]] = {}

    def _fresh(self, key: tuple[str, int], group: Mapping[str, Any]) -> bool:
        """False for a group identical to the one last added (the same collection again)."""
        if self._last_groups.get(key) == group:
            return False
        self._last_groups[key] = group
        return True

    def read(self, report: Mapping[str, Any]) -> ReportView:
        """The view of one report; its period counts are added to the counters."""
        problems: dict[str, str] = {}
        runtimes = []
        utilization_known = memory_known = True
        live: set[int] = set()
        for entry in report.get("neuron_runtime_data") or ():
            pid = entry.get("pid") if isinstance(entry, Mapping) else None
            if not isinstance(pid, int) or pid <= 0:
                continue
            if entry.get("error"):
                # its cores are unknown, so no core's figures can be trusted this time
                problems["neuron_runtime_data"] = "runtime_error"
                utilization_known = memory_known = False
                continue
            live.add(pid)
            runtime, known = self._runtime(pid, entry, problems)
            utilization_known &= known[0]
            memory_known &= known[1]
            runtimes.append(runtime)
        for pid in [p for p in self._executions if p not in live]:
            del self._executions[pid]
        for key in [k for k in self._last_groups if k[0] == EXECUTION_STATS and k[1] not in live]:
            del self._last_groups[key]
        ecc = self._read_ecc(report, problems)
        hardware, hardware_problem = None, ""
        if HARDWARE_INFO in report:  # a report may leave out a group not collected again
            try:
                hardware = hardware_of(report)
            except ReportError as error:
                hardware_problem = str(error)
        utilization: dict[int, float] = {}
        memory: dict[int, dict[str, float]] = {}
        for runtime in runtimes:
            for core, ratio in runtime.utilization.items():
                before = utilization.get(core, 0.0)
                if not is_ratio(ratio):  # stands, for the reading checks to refuse with why
                    utilization[core] = ratio
                elif is_ratio(before):  # runtimes sharing a core add up, within 1
                    utilization[core] = min(before + ratio, 1.0)
            for core, categories in runtime.core_memory.items():
                into = memory.setdefault(core, {})
                for name, value in categories.items():
                    into[name] = into.get(name, 0.0) + value
        return ReportView(
            received_at=time.monotonic(),
            taken_at=time.time(),
            runtimes=tuple(sorted(runtimes, key=lambda r: r.pid)),
            utilization=utilization if utilization_known else None,
            core_memory=memory if memory_known else None,
            ecc=ecc,
            problems=problems,
            hardware=hardware,
            hardware_problem=hardware_problem,
        )

    def _runtime(self, pid: int, entry: Mapping[str, Any],
                 problems: dict[str, str]) -> tuple[Runtime, tuple[bool, bool]]:
        report = entry.get("report") if isinstance(entry.get("report"), Mapping) else {}
        groups = {}
        for name in RUNTIME_GROUPS:
            group, why = _group(report, name)
            if group is None:
                problems[name] = why
            groups[name] = group
        utilization = _utilization(groups[NEURONCORE_COUNTERS] or {})
        core_memory, host, device = _memory(groups[MEMORY_USED] or {})
        executions = self._executions.setdefault(pid, {})
        stats = groups[EXECUTION_STATS]
        if stats is not None and self._fresh((EXECUTION_STATS, pid), stats):
            for key, count in _period_counts(stats).items():
                executions[key] = executions.get(key, 0.0) + count
        runtime = Runtime(
            pid=pid,
            tag=str(entry.get("neuron_runtime_tag") or pid),
            cores=tuple(sorted(set(utilization) | set(core_memory))),
            utilization=utilization,
            core_memory=core_memory,
            host_memory_bytes=host,
            device_memory_bytes=device,
            vcpu=_vcpu(groups[RUNTIME_VCPU] or {}),
            latency=_latency(stats or {}),
            executions=dict(executions) if stats is not None else {},
        )
        return runtime, (groups[NEURONCORE_COUNTERS] is not None, groups[MEMORY_USED] is not None)

    def _read_ecc(self, report: Mapping[str, Any],
                  problems: dict[str, str]) -> dict[int, dict[str, float]] | None:
        system = report.get("system_data") if isinstance(report.get("system_data"),
                                                         Mapping) else {}
        group, why = _group(system, HW_COUNTERS)
        if group is None:
            problems[HW_COUNTERS] = why
            return None
        if self._fresh((HW_COUNTERS, -1), group):
            for device in group.get("neuron_devices") or ():
                index = _number((device or {}).get("neuron_device_index"))
                if index is None:
                    continue
                totals = self._ecc.setdefault(int(index), {})
                for name in ECC_FIELDS:
                    if name not in device:
                        continue
                    count = _count(device[name])
                    if count is None:
                        problems[HW_COUNTERS] = f"{name} {device[name]!r} is not a count"
                        continue
                    totals[name] = totals.get(name, 0.0) + count
        return {device: dict(totals) for device, totals in self._ecc.items()}
