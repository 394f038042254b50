"""`bench/run.py --section collection` rewrites section 1 of a report and nothing else.

The figures are made up here (no benchmark runs): what is checked is the splice.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))


def _collection(ours_s: float, ratio: float) -> dict:
    costs = [{"function": "nvmlGpmSampleGet", "calls": 80, "total_us": 400.0,
              "per_call_us": 5.0},
             {"function": "nvmlDeviceGetTotalEnergyConsumption", "calls": 16,
              "total_us": 80_000.0, "per_call_us": 5000.0}]
    return {"rounds": 50, "devices": 8, "ours": [ours_s] * 7, "ray": [ours_s / ratio] * 7,
            "ours_wall": [ours_s] * 7, "ray_wall": [ours_s / ratio] * 7, "our_calls": 170.0,
            "ray_calls": 105.0, "our_call_costs": costs, "ray_call_costs": costs,
            "our_values": 1100, "ray_values": 47, "ratio": ratio, "profiled_cycles": 40,
            "python_by_source": [("exporter/backends/nvidia/gpm.py", 0.25)]}


REPORT = """# Benchmarks

## 1. Collection cost per sampling cycle

| CPU per cycle (8 GPUs) | 12.4 ms | 72.9 ms | 0.17 |

## 2. Scrape cost

the scrape figures

## Against the targets

- met: per-cycle CPU at most 1/5 of Ray's provider: 0.17 here, with 16x the values.
- met: 10k-series scrape under 50 ms: 35 ms uncached.

## Reproduce
"""


@pytest.fixture(scope="module")
def run():
    import run as bench_run

    return bench_run


def test_a_rerun_replaces_section_1_and_its_target_lines_only(run):
    results = {"collection": _collection(0.011, 0.15),
               "collection_without_gpm": _collection(0.010, 0.14),
               "collection_without_driver_cost": _collection(0.004, 0.055)}
    rewritten = run.with_collection_rerun(REPORT, results, "Rerun on its own.")
    assert "12.4 ms" not in rewritten and "0.17 here" not in rewritten
    assert "| CPU per cycle (8 GPUs) | 11 ms (11-11) |" in rewritten
    assert "Rerun on its own." in rewritten
    # the driver time by function: 16 energy calls in 40 cycles, 5 ms each in hgx-h200's rules
    assert "| `nvmlDeviceGetTotalEnergyConsumption` | 0.4 | 5 ms | 2 ms |" in rewritten
    assert "| `exporter/backends/nvidia/gpm.py` | 25% |" in rewritten
    assert "## 2. Scrape cost\n\nthe scrape figures" in rewritten  # the rest as it was
    assert "- met: 10k-series scrape under 50 ms: 35 ms uncached." in rewritten
    targets = rewritten.split("## Against the targets")[1].split("## Reproduce")[0]
    assert [line for line in targets.splitlines() if "per-cycle CPU" in line] == [
        "- MISSED: per-cycle CPU, GPM included, at most 0.10x Ray's provider: 0.15 here.",
        "- met: per-cycle CPU at most 1/5 of Ray's provider: 0.15 here, with 23x the values "
        "(on a real H200: see benchmarks-real-gpu.md).",
    ]
    # rerun again: still one section 1 and two collection target lines
    again = run.with_collection_rerun(rewritten, results, "Rerun on its own.")
    assert again.count("## 1. Collection cost per sampling cycle") == 1
    assert again.count("per-cycle CPU") == rewritten.count("per-cycle CPU")
