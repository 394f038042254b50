"""Where our NVIDIA cycle's CPU goes (section 1): the simulated driver time by NVML function,
and our own Python by source file.

The driver time is what the fake libnvidia-ml.so.1 spends on the CPU in each call the
scenario's `delays` rules make costly (copied from a real H200: docs/benchmarks-real-gpu.md):
calls per cycle x the rule's seconds. Our Python is a cProfile of the cycle on the same node
without those rules, each function's own time summed by the file it is in; cProfile slows
what it profiles, so the figures are shares of the profiled time.
"""

from __future__ import annotations

import cProfile
import pstats
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from ray_accel.exporter.simulate import load_scenario

ROOT = Path(__file__).resolve().parents[1]
PROFILED_PYTHON_CYCLES = 200


def simulated_costs(scenario: str | dict = "hgx-h200") -> dict[str, float]:
    """NVML function -> CPU seconds the fake spends in one call of it (its `busy` rules)."""
    doc = load_scenario(scenario) if isinstance(scenario, str) else scenario
    return {rule["function"]: rule["seconds"] for rule in doc.get("delays") or ()
            if rule.get("busy")}


def _cost_of(function: str, costs: dict[str, float]) -> float:
    base = function.removesuffix("_v2").removesuffix("_v3")
    return costs.get(function, costs.get(base, 0.0))


def driver_time_rows(call_costs: list[dict], cycles: int,
                     costs: dict[str, float]) -> list[dict]:
    """Per costly NVML function: calls per cycle, simulated seconds per call and per cycle."""
    rows = []
    for row in call_costs:
        cost = _cost_of(row["function"], costs)
        if cost:
            per_cycle = row["calls"] / cycles
            rows.append({"function": row["function"], "calls": per_cycle, "cost_s": cost,
                         "per_cycle_s": per_cycle * cost})
    return sorted(rows, key=lambda r: -r["per_cycle_s"])


def _source(filename: str) -> str:
    path = Path(filename)
    if path.name == "pynvml.py":
        return "pynvml.py (nvidia-ml-py)"
    if filename.startswith(("~", "<")):  # cProfile's name for built-in functions
        return "Python's built-ins"
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return "Python's library"


def python_by_source(cycle: Callable[[], object],
                     cycles: int = PROFILED_PYTHON_CYCLES) -> list[tuple[str, float]]:
    """(source file, share of the profiled time) over `cycles` cycles, the largest first."""
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(cycles):
        cycle()
    profile.disable()
    own: Counter[str] = Counter()
    for (filename, _, _), (_, _, tottime, _, _) in pstats.Stats(profile).stats.items():
        own[_source(filename)] += tottime
    total = sum(own.values()) or 1.0
    return [(source, seconds / total) for source, seconds in own.most_common()]


def driver_time_lines(c: dict, costs: dict[str, float], rows: int = 6) -> list[str]:
    """Report lines: where the simulated driver time of a cycle goes."""
    found = driver_time_rows(c["our_call_costs"], c["profiled_cycles"], costs)
    total = sum(r["per_cycle_s"] for r in found)
    lines = ["Where that driver time goes: each costly NVML function's calls per cycle (counted "
             f"over {c['profiled_cycles']} cycles) times what the fake spends on the CPU per "
             "call (the scenario's `delays`):", "",
             "| function | calls per cycle | CPU per call | CPU per cycle |", "|---|---|---|---|"]
    for row in found[:rows]:
        lines.append(f"| `{row['function']}` | {row['calls']:.3g} | {row['cost_s'] * 1e3:.3g} ms "
                     f"| {row['per_cycle_s'] * 1e3:.3g} ms |")
    lines.append(f"| all | | | {total * 1e3:.3g} ms |")
    return lines


def python_lines(shares: list[tuple[str, float]], rows: int = 10) -> list[str]:
    """Report lines: where our own Python's time goes, by source file."""
    lines = [f"Where our own Python goes: a cProfile of {PROFILED_PYTHON_CYCLES} cycles without "
             "the simulated driver time, each function's own time by the file it is in:", "",
             "| source | share |", "|---|---|"]
    lines += [f"| `{source}` | {share:.0%} |" for source, share in shares[:rows]]
    return lines
