"""A device's stale and down samples -> `delays` and `errors` rules, or its loss
(exporter/record/events.py)."""

from __future__ import annotations

from array import array

from ray_accel.exporter import catalog as m
from ray_accel.exporter.record import amd, nvidia
from ray_accel.exporter.record.events import error_rules, hang_rules, lost_at
from ray_accel.exporter.record.frames import DeviceFrame
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


def _frame(taken_at: float, pairs: list[tuple[tuple, float]],
           counters_at: float | None = None) -> DeviceFrame:
    keys = tuple(k for k, _ in pairs)
    return DeviceFrame("GPU-0", taken_at, True, False, keys, array("d", (v for _, v in pairs)),
                       {}, counters_at)


def test_values_read_on_a_cadence_are_placed_once_at_their_read() -> None:
    pcie = ("l", "pcie", 0, m.LINK_IO, (("direction", "transmit"),))
    energy = ("d", m.ENERGY, ())
    power = ("d", m.POWER, ())
    rare_age = ("d", m.RARE_VALUES_AGE, ())
    series = DeviceSeries()
    # link counters read at 0.2 s and exported again until read at 2.2 s; energy read at 0
    # and at 2 s (its age since)
    for t, counters_at, age in ((0.0, 0.2, 0.0), (1.0, 0.2, 1.0), (2.0, 2.2, 0.0),
                                (3.0, 2.2, 1.0)):
        sent = {0.2: 20.0, 2.2: 220.0}[counters_at]
        series.add(t, _frame(t, [(pcie, sent), (energy, 10.0 * (t - age)),
                                 (power, t), (rare_age, age)], counters_at), counters_at)
    assert series.points[pcie] == [(0.2, 20.0), (2.2, 220.0)]
    assert series.points[energy] == [(0.0, 0.0), (2.0, 20.0)]
    assert [t for t, _ in series.points[power]] == [0.0, 1.0, 2.0, 3.0]  # read every cycle


def _outages(down: dict[float, dict[str, str]], end: float = 10.0) -> DeviceSeries:
    """A device sampled each second to `end`, down at the times of `down` (with why)."""
    times = [float(t) for t in range(int(end) + 1)]
    return DeviceSeries(up_times=[t for t in times if t not in down],
                        down_times=[t for t in times if t in down],
                        errors=sorted(down.items()))


def test_an_outage_the_device_came_back_from_is_an_error_rule_with_its_code() -> None:
    # GPU_IS_LOST for a while, then UNKNOWN on its power call: both windows keep their
    # code, and the device is not lost (its replay answers again after each).
    lost = {"nvmlDeviceGetUtilizationRates": "gpu_is_lost"}
    power = {"nvmlDeviceGetPowerUsage": "unknown"}
    series = _outages({2.0: lost, 3.0: lost, 6.0: power, 7.0: power})
    assert lost_at(series, nvidia.RECORDER.lost_kinds) is None
    rules = error_rules(1, series, 1.0, nvidia.RECORDER)
    assert [(r["function"], r["code"], r["from_s"], r["until_s"]) for r in rules] == [
        ("nvmlDeviceGetPowerUsage", "UNKNOWN", 5.5, 7.5),
        ("nvmlDeviceGetUtilizationRates", "GPU_IS_LOST", 1.5, 3.5)]


def test_a_device_that_answered_no_call_fails_every_call_of_its_library() -> None:
    silent = {"every call": "timeout"}
    rules = error_rules(0, _outages({4.0: silent, 5.0: silent}), 1.0, amd.RECORDER)
    assert [(r["function"], r["code"]) for r in rules] == [("amdsmi_*", "TIMEOUT")]


def test_only_a_device_down_with_the_lost_kind_to_the_end_is_lost() -> None:
    lost = {"nvmlDeviceGetUtilizationRates": "gpu_is_lost"}
    unknown = {"nvmlDeviceGetUtilizationRates": "unknown"}
    kinds = nvidia.RECORDER.lost_kinds
    # UNKNOWN first, then lost to the end: lost just after the last sample not lost
    series = _outages({6.0: unknown, 7.0: lost, 8.0: lost, 9.0: lost, 10.0: lost})
    assert lost_at(series, kinds) == 6.001
    rules = error_rules(0, series, 1.0, nvidia.RECORDER)
    assert [(r["code"], r["from_s"], r["until_s"]) for r in rules] == [("UNKNOWN", 5.5, 6.5)]
    # down to the end for another reason: an error rule, not a loss
    assert lost_at(_outages({9.0: unknown, 10.0: unknown}), kinds) is None
    # lost from the first sample on
    assert lost_at(_outages({float(t): lost for t in range(11)}), kinds) == 0.0
