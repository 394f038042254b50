"""Builds one neuron-monitor JSON report from a scenario's ``neuron`` section.

The shape follows AWS's Neuron Monitor User Guide ("The JSON output format"):
``neuron_runtime_data`` (one entry per Neuron application: pid,
neuron_runtime_tag, error, report{...}), ``system_data``, ``instance_info``
and ``neuron_hardware_info``. Counts (ECC events, executions, errors) are
what happened during the report's period, as the real tool reports them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Mapping
from typing import Any

from ..neuron_scenario import ECC_FIELDS, ERROR_TYPES, MEMORY_CATEGORIES, ecc_counters
from ..signals import counter_at, integral, value_at

MIB = 2**20
DMA_BUFFER_BYTES = MIB
# total_latency percentiles as multiples of the scenario's latency (its p50)
LATENCY_SHAPE = (("p0", 0.8), ("p1", 0.85), ("p25", 0.95), ("p50", 1.0), ("p75", 1.05),
                 ("p99", 1.4), ("p100", 1.6))
DEVICE_SHARE = 0.9  # device_latency as a share of total_latency


def _grown(rate: Any, then: float, now: float) -> int:
    """Whole events a rate signal produced between two scenario times."""
    return max(math.floor(integral(rate, now)) - math.floor(integral(rate, then)), 0)


class ReportBuilder:
    """Reports of one simulated neuron-monitor process, remembering the previous one's time."""

    def __init__(self, runtime_groups: Collection[str], system_groups: Collection[str],
                 tag_filter: str | None, started_t: float) -> None:
        self.runtime_groups = tuple(runtime_groups)
        self.system_groups = tuple(system_groups)
        self._tag_filter = re.compile(tag_filter) if tag_filter else None
        self._last_t = started_t

    def build(self, section: Mapping[str, Any], t: float, period: float,
              alive: Callable[[int], bool]) -> dict[str, Any]:
        """The report at scenario time `t`, covering the `period` seconds since the last one."""
        faults = section.get("faults") or {}
        missing = set(faults.get("missing_groups") or ())
        errors = faults.get("group_errors") or {}
        then, self._last_t = self._last_t, t

        def group(name: str, body: dict[str, Any]) -> dict[str, Any]:
            return {"period": period, **body, "error": errors.get(name, "")}

        runtimes = []
        for runtime in section.get("runtimes") or ():
            if runtime.get("while_alive") and not alive(runtime["pid"]):
                continue
            if not runtime.get("from_s", 0) <= t < (runtime.get("until_s") or math.inf):
                continue  # outside its window: not running yet, or gone
            tag = runtime.get("tag") or str(runtime["pid"])
            if self._tag_filter is not None and not self._tag_filter.search(tag):
                continue
            report = {}
            if not runtime.get("error"):
                bodies = _runtime_groups(runtime, t, then)
                report = {name: group(name, bodies[name]) for name in self.runtime_groups
                          if name not in missing}
            runtimes.append({"pid": runtime["pid"], "address": "", "neuron_runtime_tag": tag,
                             "error": runtime.get("error", ""), "report": report})
        system = _system_groups(section, t, then)
        return {
            "neuron_runtime_data": runtimes,
            "system_data": {name: group(name, system[name]) for name in self.system_groups
                            if name not in missing},
            "instance_info": {**_instance_defaults(), **(section.get("instance") or {}),
                              "error": ""},
            "neuron_hardware_info": {
                "neuron_device_type": section["neuron_device_type"],
                "neuron_device_version": section["neuron_device_version"],
                "neuroncore_version": section["neuroncore_version"],
                "neuron_device_count": section["neuron_device_count"],
                "neuron_device_memory_size": section["neuron_device_memory_size"],
                "neuroncore_per_device_count": section["neuroncore_per_device_count"],
                "error": section.get("hardware_error", ""),
            },
        }


def _instance_defaults() -> dict[str, str]:
    return {"instance_name": "", "instance_id": "i-0000000000000000f",
            "instance_type": "trn1.32xlarge", "instance_availability_zone": "us-east-1c",
            "instance_availability_zone_id": "use1-az6", "instance_region": "us-east-1",
            "ami_id": "ami-00000000000000001", "subnet_id": "subnet-00000001"}


def _runtime_groups(runtime: Mapping[str, Any], t: float, then: float) -> dict[str, Any]:
    cores = [str(core) for core in runtime["cores"]]
    busy = runtime.get("utilization_percent", 0)
    per_core = busy if isinstance(busy, list) else [busy] * len(cores)  # one per core, or all
    flops = value_at(runtime.get("flops", 0), t)
    memory = {category: int(value_at((runtime.get("core_memory_bytes") or {}).get(category, 0),
                                     t))
              for category in MEMORY_CATEGORIES}
    host = int(value_at(runtime.get("host_memory_bytes", 0), t))
    completed = _grown(runtime.get("executions_per_s", 0), then, t)
    error_counts = {kind: _grown((runtime.get("errors_per_s") or {}).get(kind, 0), then, t)
                    for kind in ERROR_TYPES}
    latency = value_at(runtime.get("latency_s", 0), t)
    total = ({p: latency * k for p, k in LATENCY_SHAPE}
             if completed and latency > 0 else None)
    return {
        "neuroncore_counters": {"neuroncores_in_use": {
            core: {"neuroncore_utilization": value_at(signal, t), "flops": int(flops)}
            for core, signal in zip(cores, per_core, strict=True)}},
        "memory_used": {
            "neuron_runtime_used_bytes": {
                "host": host,
                "neuron_device": sum(memory.values()) * len(cores),
                "usage_breakdown": {
                    "host": {"application_memory": max(host - DMA_BUFFER_BYTES, 0),
                             "constants": 0, "dma_buffers": min(host, DMA_BUFFER_BYTES),
                             "tensors": 0},
                    "neuroncore_memory_usage": {core: dict(memory) for core in cores},
                },
            },
            "loaded_models": [],
        },
        "neuron_runtime_vcpu_usage": {"vcpu_usage": {
            "user": value_at(runtime.get("vcpu_user_percent", 0), t),
            "system": value_at(runtime.get("vcpu_system_percent", 0), t)}},
        "execution_stats": {
            "error_summary": error_counts,
            "execution_summary": {
                "completed": completed,
                "completed_with_err": sum(v for k, v in error_counts.items() if k != "numerical"),
                "completed_with_num_err": error_counts["numerical"],
                "timed_out": 0, "incorrect_input": 0, "failed_to_queue": 0},
            "latency_stats": {
                "total_latency": total,
                "device_latency": (None if total is None
                                   else {p: v * DEVICE_SHARE for p, v in total.items()})},
        },
    }


def _system_groups(section: Mapping[str, Any], t: float, then: float) -> dict[str, Any]:
    devices = []
    for index in range(section["neuron_device_count"]):
        counters = ecc_counters(section, index)
        entry: dict[str, Any] = {"neuron_device_index": index}
        for name in ECC_FIELDS:
            spec = counters.get(name, 0)
            entry[name] = max(counter_at(spec, t) - counter_at(spec, then), 0)
        devices.append(entry)
    idle = {"user": 1.0, "nice": 0, "system": 0.5, "idle": 98.5, "io_wait": 0, "irq": 0,
            "soft_irq": 0}
    return {
        "neuron_hw_counters": {"neuron_devices": devices},
        "vcpu_usage": {"average_usage": idle, "usage_data": {"0": idle},
                       "context_switch_count": 1000},
        "memory_info": {"memory_total_bytes": 512 * 2**30, "memory_used_bytes": 16 * 2**30,
                        "swap_total_bytes": 0, "swap_used_bytes": 0},
    }
