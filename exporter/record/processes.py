"""Recorded processes -> the scenario's process entries, as they came and went.

Each process gets one entry per stretch of consecutive samples it was listed
in, with the values of the last sample of that stretch; a stretch that began
after the recording's first sample gets `from_s`, one that ended before its
last sample `until_s`, each half way between the samples either side.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from .. import catalog as m
from .series import DeviceSeries


def stretches(seen: set[float], times: Sequence[float]) -> list[tuple[int, int]]:
    """(first, last) positions in `times` of each run of times in `seen`."""
    runs: list[tuple[int, int]] = []
    start: int | None = None
    for position, t in enumerate(times):
        if t in seen and start is None:
            start = position
        elif t not in seen and start is not None:
            runs.append((start, position - 1))
            start = None
    if start is not None:
        runs.append((start, len(times) - 1))
    return runs


def window_keys(first: int, last: int, times: Sequence[float]) -> dict[str, float]:
    """`from_s` and `until_s` of the stretch at positions `first`..`last` of `times`: half
    way to the samples either side; none where it reaches the recording's first or last."""
    keys = {}
    if first > 0:
        keys["from_s"] = round((times[first - 1] + times[first]) / 2, 3)
    if last < len(times) - 1:
        keys["until_s"] = round((times[last] + times[last + 1]) / 2, 3)
    return keys


def process_entries(series: DeviceSeries, engines: Sequence[tuple[str, str]],
                    elsewhere: Collection[int] = ()) -> list[dict[str, Any]]:
    """Entries for every process the device listed (`engines`: engine label -> scenario key),
    but those in `elsewhere` (listed on a child device too)."""
    times = series.up_times
    by_pid: dict[int, dict[tuple, dict[float, float]]] = {}
    for key, points in series.points.items():
        if key[0] == "p" and key[1] not in elsewhere:
            by_pid.setdefault(key[1], {})[key[2:]] = dict(points)
    entries = []
    for pid, values in sorted(by_pid.items()):
        seen = {t for points in values.values() for t in points}
        for first, last in stretches(seen, times):
            at = times[last]
            entry: dict[str, Any] = {"pid": pid}
            memory = values.get((m.PROCESS_MEMORY_USAGE, ()), {})
            if at in memory:
                entry["used_memory_bytes"] = int(memory[at])
            for engine, key in engines:
                share = values.get((m.PROCESS_UTILIZATION, (("engine", engine),)), {})
                if at in share:
                    entry[key] = min(round(share[at] * 100), 100)
            entry.update(window_keys(first, last, times))
            entries.append(entry)
    return sorted(entries, key=lambda e: (e.get("from_s", 0), e["pid"]))


def put_processes(out: dict[str, Any], series: DeviceSeries, engines: Sequence[tuple[str, str]],
                  elsewhere: Collection[int] = ()) -> None:
    """The device's `processes` key: its entries, or an empty list where the device answered
    but listed none (an absent key would make the replay answer NOT_SUPPORTED)."""
    listed = process_entries(series, engines, elsewhere)
    if series.points or listed:
        out["processes"] = listed
