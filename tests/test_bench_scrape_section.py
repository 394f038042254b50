"""`python bench/scrape.py` rewrites section 2 of a report and nothing else.

The figures are made up here (no benchmark runs): what is checked is the splice.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

REPORT = """# Benchmarks

## 1. Collection cost per sampling cycle

the collection figures

## 2. Scrape cost

| 10,038 | 34.7 ms (33.6-34.9) | 0.44 us (0.436-641) | 1,834 KiB |

## 3. Agent footprint

the footprint figures

## Against the targets

- MISSED: 10k-series scrape under 50 ms: 77 ms uncached.
"""


def test_a_rerun_replaces_section_2_only():
    import scrape

    results = {"scrape": {
        "rows": [(1011, [0.002] * 5, [4e-7] * 5, 190_000),
                 (10_081, [0.021] * 5, [4e-7] * 5, 1_900_000)],
        "first_renders": [[0.003] * 5, [0.030] * 5],
        "node_series": 1011, "bare_series": 376, "process_series": 35, "link_series": 600}}
    rewritten = scrape.with_scrape_rerun(REPORT, results, "Rerun on its own.")
    section = rewritten.split("## 2. Scrape cost")[1].split("## 3.")[0]
    assert "34.7 ms" not in rewritten
    assert "Rerun on its own." in section
    assert "| 10,081 | 21 ms (21-21) | 30 ms (30-30) | 0.4 us (0.4-0.4) | 1,855 KiB |" in section
    assert "exports 1011 series: 376 device and agent series" in section
    assert rewritten.startswith(REPORT.split("## 2.")[0])  # section 1 as it was
    assert rewritten.endswith(REPORT.split("\n## 3.")[1])  # section 3 and the targets too
