"""Section 1 of the benchmarks: our NVIDIA cycle against Ray's own GPU provider, on one node.

Both read the same (simulated or real) GPUs in one process; `collection()` measures,
the other functions write the report's section 1 and its target lines.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from importlib.metadata import version

import pynvml
from cycle_profile import driver_time_lines, python_by_source, python_lines, simulated_costs
from gpm_cost import driver_share_lines, gpm_lines, without_driver_cost, without_gpm
from measure import (
    PROFILED_CYCLES,
    REPEATS,
    measure,
    ray_version,
    spread,
    target_line,
    with_section,
)
from nvml_calls import NvmlCallLog

from ray_accel.exporter.backends.nvidia import NvidiaBackend
from ray_accel.exporter.catalog import RARE_READ_EVERY, SLOW_READ_INTERVAL_S
from ray_accel.exporter.model import DeviceSample
from ray_accel.exporter.simulate import SimulatedHardware


def ray_values(infos: list) -> int:
    """Numbers Ray's provider delivers: per GPU fields plus per-process entries."""
    fields = ("utilization_gpu", "memory_used", "memory_total", "power_mw", "temperature_c")
    total = 0
    for info in infos:
        total += sum(1 for f in fields if info.get(f) is not None)
        total += len(info.get("processes_pids") or [])
    return total


def our_values(samples: list[DeviceSample]) -> int:
    return sum(len(s.readings) + sum(len(p.readings) for p in s.processes)
               + sum(len(link.readings) for link in s.links) for s in samples)


def collection(results: dict, rounds: int = 50, profile: bool = False) -> None:
    """Per-cycle CPU and wall time of our backend and Ray's provider on the same node; with
    `profile`, where our cycle's Python goes too (cycle_profile.py)."""
    from ray._private.thirdparty.pynvml import pynvml as ray_pynvml
    from ray.dashboard.modules.reporter.gpu_providers import GpuMetricProvider

    clock = SteppedClock()
    backend = NvidiaBackend(clock=clock)
    devices = backend.open()

    def ours() -> list[DeviceSample]:
        clock.now += 1.0  # one cycle at the default interval: slow answers age as they would
        return [backend.sample(device) for device in devices]

    for _ in range(20):
        ours()
    ours_cpu = measure(ours, rounds)
    ours_wall = measure(ours, rounds, clock=time.perf_counter)
    with NvmlCallLog(pynvml) as our_log:
        for _ in range(PROFILED_CYCLES):
            samples = ours()
    by_source = python_by_source(ours) if profile else []
    backend.close()
    # Ray's reporter reads NVML from its own process: measured with ours closed, so that
    # its nvmlInit per poll pays what it pays there.
    ray_provider = GpuMetricProvider()
    ray_provider.initialize()
    for _ in range(20):
        ray_provider.get_gpu_usage()
    ray_cpu = measure(ray_provider.get_gpu_usage, rounds)
    ray_wall = measure(ray_provider.get_gpu_usage, rounds, clock=time.perf_counter)
    with NvmlCallLog(ray_pynvml) as ray_log:
        for _ in range(PROFILED_CYCLES):
            infos = ray_provider.get_gpu_usage()
    results["collection"] = {
        "rounds": rounds, "devices": len(devices), "ours": ours_cpu, "ray": ray_cpu,
        "ours_wall": ours_wall, "ray_wall": ray_wall,
        "our_calls": our_log.calls / PROFILED_CYCLES, "ray_calls": ray_log.calls / PROFILED_CYCLES,
        "our_call_costs": our_log.table(), "ray_call_costs": ray_log.table(),
        "our_values": our_values(samples), "ray_values": ray_values(infos),
        "profiled_cycles": PROFILED_CYCLES, "python_by_source": by_source,
        "ratio": statistics.median(ours_cpu) / statistics.median(ray_cpu),
    }


def collection_on(scenario: dict, hardware: SimulatedHardware, profile: bool = False) -> dict:
    """The collection comparison on another scenario; `hardware` is active again after it."""
    with SimulatedHardware.start(scenario) as other:
        other.activate()
        measured: dict = {}
        collection(measured, profile=profile)
    hardware.activate()
    return measured["collection"]


def collection_without_gpm(results: dict, hardware: SimulatedHardware) -> None:
    """The collection comparison again with GPM off on every GPU: what GPM adds to a cycle;
    and without the simulated driver time: what of the cycle is ours."""
    results["collection_without_gpm"] = collection_on(without_gpm(), hardware)
    results["collection_without_driver_cost"] = collection_on(without_driver_cost(), hardware,
                                                              profile=True)


class SteppedClock:
    """A monotonic clock the benchmark moves forward by whole sampling intervals."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def collection_table(c: dict) -> list[str]:
    """Markdown rows comparing our backend with Ray's provider (section 1 of a report)."""
    per_device = statistics.median(c["ours"]) / c["devices"]
    per_value_ours = statistics.median(c["ours"]) / c["our_values"]
    per_value_ray = statistics.median(c["ray"]) / max(c["ray_values"], 1)
    wall_ratio = statistics.median(c["ours_wall"]) / statistics.median(c["ray_wall"])
    return [
        f"| | ray-accel | Ray {ray_version()} provider | ratio |",
        "|---|---|---|---|",
        f"| CPU per cycle ({c['devices']} GPUs) | {spread(c['ours'])} | {spread(c['ray'])} | "
        f"{c['ratio']:.2f} |",
        f"| wall time per cycle | {spread(c['ours_wall'])} | {spread(c['ray_wall'])} | "
        f"{wall_ratio:.2f} |",
        f"| NVML calls per cycle | {c['our_calls']:g} | {c['ray_calls']:g} | "
        f"{c['our_calls'] / max(c['ray_calls'], 1):.2f} |",
        f"| values delivered per cycle | {c['our_values']} | {c['ray_values']} | "
        f"{c['our_values'] / max(c['ray_values'], 1):.1f} |",
        f"| CPU per device | {per_device * 1e3:.3g} ms | "
        f"{statistics.median(c['ray']) / c['devices'] * 1e3:.3g} ms | |",
        f"| CPU per value delivered | {per_value_ours * 1e6:.3g} us | "
        f"{per_value_ray * 1e6:.3g} us | {per_value_ours / per_value_ray:.2f} |",
    ]


def collection_section(results: dict, note: str = "") -> list[str]:
    """Section 1 of the report, from its heading to the blank line before section 2."""
    c = results["collection"]
    return [
        "## 1. Collection cost per sampling cycle",
        "",
        "Both read the same simulated node in the same process: ours is one",
        "`NvidiaBackend.sample()` per device; Ray's is",
        "`ray.dashboard.modules.reporter.gpu_providers.GpuMetricProvider.get_gpu_usage()`,",
        "what Ray's reporter agent calls every 5 s. Cycles are 1 s apart on a stepped clock:",
        "values marked *slow cadence* in [metrics.md](metrics.md) (error counters, link",
        "states, the PCIe link's current generation and width)",
        f"are read every {SLOW_READ_INTERVAL_S:g} s and the *rare cadence* (energy) "
        f"every {SLOW_READ_INTERVAL_S * RARE_READ_EVERY:g} s, each GPU at its own point of",
        "those intervals, and a GPU whose GPM measures its links reads their byte counters",
        "when due (docs/backends.md), so the figures spread their cost as the agent at its",
        "default interval does.",
        *(["", note] if note else []),
        "",
        *collection_table(c),
        "",
        *gpm_lines(c, results["collection_without_gpm"]),
        "",
        *driver_share_lines(c, results["collection_without_driver_cost"]),
        "",
        *driver_time_lines(c, simulated_costs()),
        "",
        *python_lines(results["collection_without_driver_cost"]["python_by_source"]),
        "",
        *call_costs_section(c),
        "",
    ]


def collection_checks(c: dict) -> list[tuple[bool, str]]:
    """The targets on the collection cost (section 1)."""
    return [
        (c["ratio"] <= 0.1, f"per-cycle CPU, GPM included, at most 0.10x Ray's provider: "
         f"{c['ratio']:.2f} here"),
        (c["ratio"] <= 0.2, f"per-cycle CPU at most 1/5 of Ray's provider: {c['ratio']:.2f} "
         f"here, with {c['our_values'] / max(c['ray_values'], 1):.0f}x the values (on a "
         "real H200: see benchmarks-real-gpu.md)"),
    ]


COLLECTION_TARGET_PREFIX = ": per-cycle CPU"


def with_collection_rerun(document: str, results: dict, note: str) -> str:
    """`document` (a report) with section 1 and its target lines from `results`."""
    lines = with_section(document.split("\n"), "## 1. Collection cost per sampling cycle",
                         collection_section(results, note))
    targets_at = lines.index("## Against the targets") + 2
    kept = [i for i, line in enumerate(lines)
            if i >= targets_at and line.startswith("- ") and COLLECTION_TARGET_PREFIX in line]
    for i in reversed(kept):
        del lines[i]
    lines[targets_at:targets_at] = [target_line(ok, text)
                                    for ok, text in collection_checks(results["collection"])]
    return "\n".join(lines)


def call_costs_section(c: dict, rows: int = 8) -> list[str]:
    """The costliest NVML functions of each side, per cycle (wall time inside the call)."""
    lines = [f"The costliest NVML functions of each, timed call by call over {PROFILED_CYCLES} "
             "cycles (wall time inside the library):", "",
             "| | function | calls per cycle | per call | per cycle |", "|---|---|---|---|---|"]
    for side, key in (("ray-accel", "our_call_costs"), (f"Ray {ray_version()}", "ray_call_costs")):
        for row in c[key][:rows]:
            lines.append(f"| {side} | `{row['function']}` | {row['calls'] / PROFILED_CYCLES:g} | "
                         f"{row['per_call_us']:.3g} us | "
                         f"{row['total_us'] / PROFILED_CYCLES:.3g} us |")
    return lines


def real_gpu_report(results: dict) -> str:
    """The collection comparison on whatever real GPUs this host has."""
    c = results["collection"]
    return "\n".join([
        "# Benchmarks on a real GPU",
        "",
        "Generated by `python bench/run.py --real-gpu --out docs/benchmarks-real-gpu.md` on a",
        "GPU host (`make bench` cannot reproduce these without one). Same method as section 1",
        "of [benchmarks.md](benchmarks.md): both read the same GPUs in one process; CPU is the",
        f"process's CPU seconds, median and (min-max) over {REPEATS} repeats of "
        f"{c['rounds']} cycles.",
        "",
        f"- Machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
        f"- GPUs: {c['devices']}x {results['gpu_name']}, driver {results['driver']}",
        f"- Python {platform.python_version()}, nvidia-ml-py {version('nvidia-ml-py')}, "
        f"Ray's provider from Ray {ray_version()}",
        "",
        *collection_table(c),
        "",
        *call_costs_section(c),
        "",
        "Ray's provider is measured after the agent's backend has shut NVML down, as in",
        "Ray's reporter process, where it initialises and shuts NVML down on every poll.",
        "The agent keeps NVML open, and answers calls that cost the driver more than",
        "0.3 ms of CPU twice in a row from their last result for 10 s (cycles here are 1 s",
        "apart on a stepped clock, so that cost is spread as it is at the default interval).",
        "Every timed call is listed in the JSON file written beside this one.",
        "",
    ])
