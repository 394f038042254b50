"""A Neuron node's recorded series -> the scenario's `neuron` section, in neuron-monitor's units.

The section describes the node (device type and version, devices, NeuronCores
per device, memory per device, the instance) and its Neuron runtimes, each on
its cores: utilization (percent: one signal for all its cores where they were
as busy, else one per core), memory by category on each core (its
first core's), host memory, vCPU use, completed executions and errors per
second (the rate of the counters the backend keeps), the p50 of the total
latency, and when it ran (`from_s`/`until_s` from its first to its last
sample: one that left and came back is one window); and each device's ECC
counters. A metric group that every report of the recording left out or
reported with an error becomes `faults.missing_groups` or
`faults.group_errors` (the section's faults hold for the whole run, so one
that came and went is not recorded). The instance id is kept (it names the
devices) unless identities are replaced.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .. import catalog as m
from ..model import Device
from ..simulate.neuron_scenario import METRIC_GROUPS
from .processes import stretches, window_keys
from .series import DeviceSeries, Points
from .timeline import counter_signal, gauge_signal
from .vendors import LinkFacts, Numa, VendorRecorder

SECTION = "neuron"
FACT_KEYS = ("neuron_device_type", "neuron_device_version", "neuroncore_version")
INSTANCE_FACTS = ("instance_type", "instance_id")
# hw.errors error type on a device -> its neuron_hw_counters field
ECC_FIELDS = {m.ECC_CORRECTED: "mem_ecc_corrected", m.ECC_UNCORRECTED: "mem_ecc_uncorrected",
              "sram_ecc_corrected": "sram_ecc_corrected",
              "sram_ecc_uncorrected": "sram_ecc_uncorrected"}
ERROR_TYPES = ("generic", "numerical", "transient", "model", "runtime", "hardware")
# what the backend names a group that a report left out, or reported with an error
MISSING, FAILED = "missing", "error"
RECORDED_ERROR = "error (recorded: neuron-monitor's message is not kept)"
MEMORY_CATEGORIES = ("constants", "model_code", "model_shared_scratchpad", "runtime_memory",
                     "tensors")


def _rate(points: Points) -> Any:
    """The per-second rate of a counter's recorded points, as a signal (0 when flat)."""
    counted = counter_signal(points)
    return counted["rate_per_s"] if isinstance(counted, dict) else 0


def _percent(points: Points) -> Any:
    return gauge_signal([(t, v * 100) for t, v in points])


def _utilization(pid: int, held: Sequence[DeviceSeries]) -> Any:
    """The runtime's utilization: one signal for all its cores (`held`, in order) where
    they were as busy, else one per core."""
    key = ("p", pid, m.PROCESS_UTILIZATION, (("engine", m.ENGINE_SM),))
    per_core = [_percent(points) if (points := one.points.get(key)) else 0 for one in held]
    if all(signal == per_core[0] for signal in per_core):
        return per_core[0]
    return per_core


def _runtime(pid: int, cores: list[int], held: Sequence[DeviceSeries],
             chip: DeviceSeries | None) -> dict[str, Any]:
    """One runtime's entry, from its cores' series (in order) and its first core's chip's."""
    first_core = held[0]
    runtime: dict[str, Any] = {"pid": pid, "cores": cores}
    seen = {t for key, points in first_core.points.items() if key[0] == "p" and key[1] == pid
            for t, _ in points}
    if runs := stretches(seen, first_core.up_times):  # when it ran: from its first to last
        runtime.update(window_keys(runs[0][0], runs[-1][1], first_core.up_times))
    if first_core.points.get(("p", pid, m.PROCESS_UTILIZATION, (("engine", m.ENGINE_SM),))):
        runtime["utilization_percent"] = _utilization(pid, held)
    memory = {category: gauge_signal(points) for category in MEMORY_CATEGORIES
              if (points := first_core.device(m.NEURON_CORE_MEMORY_USAGE, category=category))}
    if memory:
        runtime["core_memory_bytes"] = memory
    if chip is None:
        return runtime
    own = {key[2:]: points for key, points in chip.points.items()
           if key[0] == "p" and key[1] == pid}
    host = own.get((m.NEURON_RUNTIME_HOST_MEMORY, ()))
    if host:
        runtime["host_memory_bytes"] = gauge_signal(host)
    for mode in ("user", "system"):
        if points := own.get((m.NEURON_RUNTIME_VCPU_UTILIZATION, (("mode", mode),))):
            runtime[f"vcpu_{mode}_percent"] = _percent(points)
    if completed := own.get((m.NEURON_EXECUTIONS, (("outcome", "completed"),))):
        runtime["executions_per_s"] = _rate(completed)
    errors = {kind: _rate(points) for kind in ERROR_TYPES
              if (points := own.get((m.NEURON_EXECUTION_ERRORS, (("error_type", kind),))))}
    if errors:
        runtime["errors_per_s"] = errors
    latency = own.get((m.NEURON_EXECUTION_LATENCY, (("stage", "total"), ("quantile", "0.5"))))
    if latency:
        runtime["latency_s"] = gauge_signal(latency)
    return runtime


def host_keys(devices: Sequence[Device], series: Sequence[DeviceSeries],
              facts: Mapping[str, str], children: Mapping[str, Sequence[tuple[Device,
                                                                              DeviceSeries]]],
              interval_s: float) -> dict[str, Any]:
    """The whole section: the node, its devices' ECC counters, its runtimes and the
    monitor's faults."""
    keys: dict[str, Any] = {key: facts[key] for key in FACT_KEYS if facts.get(key)}
    keys["neuron_device_count"] = len(devices)
    per_device = {len(children.get(d.uuid, ())) for d in devices}
    if len(per_device) == 1:
        keys["neuroncore_per_device_count"] = per_device.pop()
    limit = series[0].last(m.MEMORY_LIMIT) if series else None
    if limit is not None:
        keys["neuron_device_memory_size"] = int(limit)
    instance = {key: facts[key] for key in INSTANCE_FACTS if facts.get(key)}
    if devices and "instance_id" not in instance:  # the devices are named after it
        named = devices[0].uuid.removeprefix("neuron-").rpartition("-nd")[0]
        if named:
            instance["instance_id"] = named
    if instance:
        keys["instance"] = instance
    ecc: dict[str, Any] = {}
    for position, one in enumerate(series):
        counts = {field: counter_signal(points) for error_type, field in ECC_FIELDS.items()
                  if (points := one.device(m.HW_ERRORS, error_type=error_type))}
        if any(value != 0 for value in counts.values()):
            ecc[str(position)] = counts
    if ecc:
        keys["ecc"] = ecc
    keys["runtimes"] = _runtimes(devices, series, children)
    if series and (faults := _faults(series[0])):
        keys["faults"] = faults
    return keys


def _faults(series: DeviceSeries) -> dict[str, Any]:
    """The metric groups missing, or reported with an error, in every report the device's
    samples came from (the backend names them in each sample's errors)."""
    up = set(series.up_times)
    reports = [errors for t, errors in series.errors if t in up]
    if not reports or len(reports) < len(up):
        return {}  # some report had every group
    always = {group: kind for group, kind in reports[0].items()
              if group in METRIC_GROUPS and all(r.get(group) == kind for r in reports)}
    faults: dict[str, Any] = {}
    missing = sorted(g for g, kind in always.items() if kind == MISSING)
    if missing:
        faults["missing_groups"] = missing
    failing = {g: RECORDED_ERROR for g, kind in sorted(always.items()) if kind == FAILED}
    if failing:
        faults["group_errors"] = failing
    return faults


def _runtimes(devices: Sequence[Device], series: Sequence[DeviceSeries],
              children: Mapping[str, Sequence[tuple[Device, DeviceSeries]]]
              ) -> list[dict[str, Any]]:
    cores: dict[int, list[tuple[int, DeviceSeries, int]]] = {}  # pid -> (core, series, chip)
    for position, device in enumerate(devices):
        for core, core_series in children.get(device.uuid, ()):
            number = int(core.facts.get("neuroncore", "0"))
            for pid in {key[1] for key in core_series.points if key[0] == "p"}:
                cores.setdefault(pid, []).append((number, core_series, position))
    runtimes = []
    for pid, held in sorted(cores.items()):
        held.sort(key=lambda one: one[0])
        chip = held[0][2]
        runtimes.append(_runtime(pid, [number for number, _, _ in held],
                                 [one for _, one, _ in held], series[chip]))
    return runtimes


def no_entry(device: Device, series: DeviceSeries, link_facts: LinkFacts, interval_s: float,
             children: list[dict[str, Any]]) -> dict[str, Any]:
    """The section lists no devices one by one (they follow from its counts)."""
    return {}


def no_child_entry(device: Device, series: DeviceSeries, interval_s: float) -> dict[str, Any]:
    return {}


def no_peer_keys(device: Device, numa: Numa) -> dict[str, Any]:
    return {}


def no_versions(facts: Mapping[str, str]) -> dict[str, Any]:
    return {}


RECORDER = VendorRecorder(
    vendor="aws", device=no_entry, child=no_child_entry, peers=no_peer_keys,
    top_level=no_versions, call_prefix="", absent_kinds=frozenset(), hung_calls=(),
    section=SECTION, devices_key=None, count_key="neuron_device_count", host_keys=host_keys,
    records_errors=False)
