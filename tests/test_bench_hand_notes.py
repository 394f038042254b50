"""A full `make bench` run keeps what a person wrote into section 5 (bench/hand_notes.py).

The document is made up here (no benchmark runs): what is checked is what is kept.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from hand_notes import kept_notes

HEADING = "## 5. Cluster aggregation"
DOCUMENT = f"""# Benchmarks

## 4. Sampling interval

| a | table of another section |

{HEADING}

The run's opening paragraph,
over two lines.

Where the head's time went (found by hand).

- a finding

This section was rerun on its own (`python bench/aggregation.py N`), not with make bench.

| nodes | round |
|---|---|
| 10 | 2.8 s |

### Cluster history (run by hand)

| nodes | raw |
|---|---|
| 100 | 605 ms |

What it shows.

## 6. Scrapes under slow clients

not kept
"""


def test_findings_and_hand_run_subsections_are_kept_and_the_runs_own_parts_are_not():
    before, after = kept_notes(DOCUMENT, HEADING)
    assert before == ["Where the head's time went (found by hand).", "", "- a finding", ""]
    assert after == ["### Cluster history (run by hand)", "", "| nodes | raw |", "|---|---|",
                     "| 100 | 605 ms |", "", "What it shows.", ""]


def test_a_document_without_the_section_or_its_table_keeps_nothing():
    assert kept_notes("", HEADING) == ([], [])
    assert kept_notes(f"{HEADING}\n\nonly an opening\n\n## 6. Next\n", HEADING) == ([], [])
