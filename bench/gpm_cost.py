"""What GPM adds to the NVIDIA cycle: the simulated 8x H200 node with and without GPM.

Also the cycle without the simulated driver time (the scenario's `delays`): what of
the cycle is ours and what is the CPU time a real H200's driver spends.

Runs the collection comparison of bench/run.py (our backend's cycle beside Ray
2.60's provider, CPU per cycle, in the same process) twice: on `hgx-h200` as
shipped (GPM on: one sample and one metrics call per GPU each cycle) and on the
same node with `gpm_supported: false`. Prints one JSON line; bench/run.py puts
it in docs/benchmarks.md.
"""

from __future__ import annotations

import copy
import json
import statistics
import sys

from measure import PROFILED_CYCLES

from ray_accel.exporter.simulate import SimulatedHardware, load_scenario

GPM_PREFIX = "nvmlGpm"
FIELD_VALUES = "nvmlDeviceGetFieldValues"


def without_gpm(name: str = "hgx-h200") -> dict:
    """The scenario with GPM turned off on every GPU (a VM where it is disabled)."""
    scenario = copy.deepcopy(load_scenario(name))
    for device in scenario["devices"]:
        device["gpm_supported"] = False
    return scenario


def without_driver_cost(name: str = "hgx-h200") -> dict:
    """The scenario with no simulated driver CPU time (no `delays` rules): our own share."""
    scenario = copy.deepcopy(load_scenario(name))
    scenario["delays"] = []
    return scenario


def driver_share_lines(with_gpm: dict, no_driver: dict) -> list[str]:
    """Report lines: how much of our cycle is the driver time copied from a real H200."""
    ours, own = statistics.median(with_gpm["ours"]), statistics.median(no_driver["ours"])
    ray = statistics.median(with_gpm["ray"])
    driver = ours - own
    return [
        "How much of that cycle is the driver's: the same cycle (GPM on) with the scenario's",
        "`delays` rules removed, so the fake spends no CPU time in its calls. The difference",
        "is the CPU time the real H200's driver spent in the same calls (energy on the rare",
        "cadence, PCIe replays on the slow one, the link counters' field values when due,",
        "process utilization), which no change on our side removes short of reading them less",
        "often:",
        "",
        "| | CPU per cycle | ratio to Ray's provider |",
        "|---|---|---|",
        f"| whole cycle | {ours * 1e3:.3g} ms | {ours / ray:.3f} |",
        f"| without the simulated driver time | {own * 1e3:.3g} ms | {own / ray:.3f} |",
        f"| the simulated driver time | {driver * 1e3:.3g} ms | {driver / ray:.3f} |",
        "",
        f"The 0.10x target is {ray * 0.1 * 1e3:.3g} ms per cycle here; the simulated driver "
        f"time alone is {driver / (ray * 0.1):.0%} of it.",
    ]


def gpm_lines(with_gpm: dict, without: dict) -> list[str]:
    """Report lines: the cycle with GPM off on every GPU, and what GPM adds (section 1)."""
    ours, off = statistics.median(with_gpm["ours"]), statistics.median(without["ours"])
    gpm_calls = [row for row in with_gpm["our_call_costs"]
                 if row["function"].startswith(GPM_PREFIX)]
    inside = sum(row["total_us"] for row in gpm_calls) / PROFILED_CYCLES
    field_calls = [_calls_per_cycle(c, FIELD_VALUES) for c in (with_gpm, without)]
    return [
        "GPM (one `nvmlGpmSampleGet` and one `nvmlGpmMetricsGet` per GPU and cycle) is part of",
        "the figures above; its link rates spare the link counters' field-value call where",
        "they are not due. The same comparison with `gpm_supported: false` on every GPU:",
        "",
        "| | GPM on | GPM off | GPM's share |",
        "|---|---|---|---|",
        f"| CPU per cycle | {ours * 1e3:.3g} ms | {off * 1e3:.3g} ms | "
        f"{(ours - off) * 1e3:+.3g} ms |",
        f"| ratio to Ray's provider | {with_gpm['ratio']:.3f} | {without['ratio']:.3f} | "
        f"{with_gpm['ratio'] - without['ratio']:+.3f} |",
        f"| values delivered per cycle | {with_gpm['our_values']} | {without['our_values']} | "
        f"{with_gpm['our_values'] - without['our_values']:+d} |",
        f"| wall time inside the GPM calls per cycle | {inside:.3g} us | | |",
        f"| `{FIELD_VALUES}` calls per cycle | {field_calls[0]:.3g} | {field_calls[1]:.3g} | "
        f"{field_calls[0] - field_calls[1]:+.3g} |",
    ]


def _calls_per_cycle(c: dict, function: str) -> float:
    return sum(row["calls"] for row in c["our_call_costs"]
               if row["function"] == function) / PROFILED_CYCLES


def measured(scenario: str | dict, rounds: int) -> dict:
    """Our cycle and Ray's provider on one scenario (bench/run.py's collection comparison)."""
    from collection import collection  # collection.py imports this module

    with SimulatedHardware.start(scenario) as hardware:
        hardware.activate()
        results: dict = {}
        collection(results, rounds=rounds)
    c = results["collection"]
    gpm_calls = [row for row in c["our_call_costs"] if row["function"].startswith(GPM_PREFIX)]
    return {
        "ours_cpu_ms": statistics.median(c["ours"]) * 1e3,
        "ray_cpu_ms": statistics.median(c["ray"]) * 1e3,
        "ratio": c["ratio"],
        "our_values": c["our_values"],
        "our_calls": c["our_calls"],
        "gpm_calls": gpm_calls,
    }


def main(rounds: int = 50) -> dict:
    with_gpm = measured("hgx-h200", rounds)
    no_gpm = measured(without_gpm(), rounds)
    no_driver = measured(without_driver_cost(), rounds)
    return {
        "with_gpm": with_gpm,
        "without_gpm": no_gpm,
        "gpm_cpu_ms": with_gpm["ours_cpu_ms"] - no_gpm["ours_cpu_ms"],
        "without_driver_cost_cpu_ms": no_driver["ours_cpu_ms"],
        "driver_cpu_ms": with_gpm["ours_cpu_ms"] - no_driver["ours_cpu_ms"],
        "ratio_without_driver_cost": no_driver["ours_cpu_ms"] / with_gpm["ray_cpu_ms"],
    }


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 50)))
