"""What a person wrote into a generated section of docs/benchmarks.md, kept across runs.

Section 5's findings (where the head's time went, what changed) and its subsections
from benchmarks run by hand (bench/history_queries.py) are not made by `make bench`;
a full run writes its new opening paragraph and table and keeps them around it.
"""

from __future__ import annotations

# A paragraph with this opening says the section came from a run of its own; a full
# run makes it untrue, so it is not kept.
RERUN_NOTE = "This section was rerun on its own"


def _section(document: str, heading: str) -> list[str]:
    lines = document.splitlines()
    starts = [at for at, line in enumerate(lines) if line.startswith(heading)]
    if not starts:
        return []
    start = starts[0] + 1
    ends = [at for at in range(start, len(lines)) if lines[at].startswith("## ")]
    return lines[start:ends[0] if ends else len(lines)]


def _paragraphs(lines: list[str]) -> list[list[str]]:
    paragraphs: list[list[str]] = [[]]
    for line in lines:
        if line.strip():
            paragraphs[-1].append(line)
        elif paragraphs[-1]:
            paragraphs.append([])
    return [p for p in paragraphs if p]


def _joined(paragraphs: list[list[str]]) -> list[str]:
    lines: list[str] = []
    for paragraph in paragraphs:
        lines += [*paragraph, ""]
    return lines


def kept_notes(document: str, heading: str) -> tuple[list[str], list[str]]:
    """The hand-written lines of the section opening with `heading` in `document`: the
    paragraphs between its opening paragraph and its table, and everything after the
    table (each part ending with a blank line; empty where there is none)."""
    lines = _section(document, heading)
    starts = [at for at, line in enumerate(lines) if line.startswith("|")]
    if not starts:
        return [], []
    end = starts[0]  # the run's table: the first block of table lines
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    before = _paragraphs(lines[:starts[0]])[1:]  # the first is the run's own opening
    before = [p for p in before if not p[0].startswith(RERUN_NOTE)]
    after = _paragraphs(lines[end:])
    return _joined(before), _joined(after)
