"""A renderer that keeps its series' line prefixes between renders writes what a fresh one
writes (Prometheus text and OpenMetrics), whatever changed in between, and keeps a bounded
number of them. A fresh render is itself prometheus_client's output byte for byte
(test_sinks_exposition.py)."""

from __future__ import annotations

from dataclasses import replace

from snapshots import sample_snapshot

from ray_accel.exporter import catalog as m
from ray_accel.exporter.model import ProcessSample, Reading
from ray_accel.exporter.sinks.line_prefixes import LinePrefixes
from ray_accel.exporter.sinks.prometheus import PrometheusRenderer, snapshot_text
from ray_accel.exporter.sinks.series import snapshot_series


def _with_processes(snapshot, pids):
    gpu, *rest = snapshot.devices
    processes = tuple(ProcessSample(pid, (Reading(m.PROCESS_MEMORY_USAGE, float(pid)),))
                      for pid in pids)
    return replace(snapshot, devices=(replace(gpu, processes=processes), *rest))


def _changing_snapshots():
    """Cycle after cycle: new values, processes replaced, a node label added with characters
    that need escaping, then taken away again, one renamed, a device gone."""
    base = sample_snapshot()
    yield base
    yield replace(base, cycle=8, taken_at=base.taken_at + 1, cycle_duration_s=0.25)
    yield _with_processes(replace(base, cycle=9), [10, 11, 12])
    yield _with_processes(replace(base, cycle=10), [13, 14])
    yield replace(base, cycle=11, node_labels={"simulated": "true", "zone": 'a"b\\c\nd'})
    yield replace(base, cycle=12)
    yield replace(base, cycle=13, node_labels={"hostname": "true"})  # same values, new name
    yield replace(base, cycle=14, devices=base.devices[1:])


def test_a_kept_renderer_writes_what_a_fresh_one_writes_in_both_formats():
    kept = PrometheusRenderer(include_process_metrics=False)
    for snapshot in _changing_snapshots():
        for openmetrics_format in (False, True):  # the two share the kept prefixes
            fresh = PrometheusRenderer(include_process_metrics=False)
            assert (kept.render(snapshot, openmetrics_format)
                    == fresh.render(snapshot, openmetrics_format))


def test_prefixes_stay_bounded_while_processes_come_and_go():
    prefixes = LinePrefixes()
    base = sample_snapshot()
    for step in range(200):
        snapshot = _with_processes(replace(base, cycle=step), range(step * 4, step * 4 + 4))
        assert snapshot_text(snapshot, prefixes) == snapshot_text(snapshot)
    families = sum(1 for _ in snapshot_series(base).in_catalog_order())
    # each family at most twice its series and a little more, never the 800 pids seen
    assert len(prefixes) <= 2 * (families + 4) + 16 * families


def test_beyond_the_limit_families_are_written_but_not_kept():
    prefixes = LinePrefixes(limit=3)
    snapshot = sample_snapshot()
    assert snapshot_text(snapshot, prefixes) == snapshot_text(snapshot)
    assert len(prefixes) <= 3
