"""How the benchmarks measure and write figures: CPU per operation, medians with their spread."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from importlib.metadata import version

REPEATS = 7


# Cycles whose NVML calls are counted and timed one by one: two of the rare cadence's 30 s
# intervals at 1 s, so that the energy reads of every GPU are counted.
PROFILED_CYCLES = 60


def cpu_seconds() -> float:
    """CPU time of this process, all threads."""
    return time.process_time()


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of another process so far, all threads, from /proc."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(action: Callable[[], object], rounds: int, repeats: int = REPEATS,
            clock: Callable[[], float] = cpu_seconds) -> list[float]:
    """Seconds of `clock` (CPU by default) per call of `action`, one figure per repeat."""
    figures = []
    for _ in range(repeats):
        start = clock()
        for _ in range(rounds):
            action()
        figures.append((clock() - start) / rounds)
    return figures


def spread(values: list[float], scale: float = 1e3, unit: str = "ms") -> str:
    """Median and (min-max) of `values`, scaled."""
    return (f"{statistics.median(values) * scale:.3g} {unit} "
            f"({min(values) * scale:.3g}-{max(values) * scale:.3g})")


def with_section(lines: list[str], heading: str, section: list[str]) -> list[str]:
    """`lines` (a report's) with the section opening with the line `heading`, up to the
    next `## ` heading, replaced by `section`."""
    start = lines.index(heading)
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("## "))
    return [*lines[:start], *section, *lines[end:]]


def target_line(ok: bool, text: str) -> str:
    return f"- {'met' if ok else 'MISSED'}: {text}."


def ray_version() -> str:
    """Ray's release, also where only its provider was copied in (tools/ray_provider_subset.py)."""
    import ray

    return getattr(ray, "ray_accel_subset_of", None) or version("ray")
