"""A device's stale samples -> `delays` rules (exporter/record/events.py)."""

from __future__ import annotations

from ray_accel.exporter.record.events import hang_rules
from ray_accel.exporter.record.series import DeviceSeries

CALLS = ("amdsmi_get_gpu_activity", "amdsmi_get_gpu_vram_usage")


def _series(up: list[float], stale: list[float]) -> DeviceSeries:
    return DeviceSeries(up_times=up, stale_times=stale)


def test_a_run_of_stale_samples_hangs_the_sampling_calls_until_it_answered() -> None:
    rules = hang_rules(2, _series([0, 1, 2, 3, 9, 10], [4, 5, 6, 7, 8]), 1.0, 10.0, CALLS)
    assert [r["function"] for r in rules] == list(CALLS)
    assert {(r["device"], r["from_s"], r["until_s"], r["seconds"]) for r in rules} == {
        (2, 3.001, 8.5, 5.999)}


def test_a_hang_still_on_at_the_end_has_no_end() -> None:
    rules = hang_rules(0, _series([0, 1, 2], [3, 4, 5]), 1.0, 5.0, CALLS)
    assert rules and all("until_s" not in r and r["seconds"] > 3600 for r in rules)


def test_a_late_answer_is_not_a_hang() -> None:
    # One stale frame, and the device answered again within half a cycle of its last
    # answer (a busy CPU made its sample late): nothing to replay, and no empty window.
    assert hang_rules(1, _series([0, 1, 2.0, 2.3, 3.3], [2.2]), 1.0, 4.0, CALLS) == []
