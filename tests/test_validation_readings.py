"""Readings checked against their metric's valid range (exporter/validation.py).

Each impossible value a driver was seen to return is dropped, named in the
sample's errors and counted by kind and metric; a sane value passes as it is;
the log says it once per device and metric; a counter never goes backwards.
"""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path

import pytest

from ray_accel.exporter import catalog as m
from ray_accel.exporter.backends.base import Backend, ErrorTally
from ray_accel.exporter.model import Device, DeviceSample, Link, ProcessSample, Reading
from ray_accel.exporter.sampler import Sampler
from ray_accel.exporter.sinks.prometheus import snapshot_text
from ray_accel.exporter.store import SnapshotStore
from ray_accel.exporter.validation import (
    BAD_LABELS,
    COUNTER_DECREASED,
    NOT_FINITE,
    OUT_OF_RANGE,
    OVER_LIMIT,
    RESET_CONFIRM_SAMPLES,
    ReadingValidator,
)

GPU = Device("nvidia", "0", "GPU-0", "NVIDIA H200")
MI300X = Device("amd", "0", "amd-0", "AMD Instinct MI300X")
GIB = 2**30
SANE = (
    Reading(m.GPU_UTILIZATION, 0.75, (("task", "general"),)),
    Reading(m.MEMORY_BANDWIDTH_UTILIZATION, 1.0),
    Reading(m.MEMORY_USAGE, 80 * GIB),
    Reading(m.MEMORY_LIMIT, 141 * GIB),
    Reading(m.POWER, 690.0),
    Reading(m.POWER_LIMIT, 700.0),
    Reading(m.ENERGY, 1.0e6),
    Reading(m.TEMPERATURE, 45.0, (("sensor", "gpu"),)),
    Reading(m.CLOCK_FREQUENCY, 1.98e9, (("clock", "sm"),)),
    Reading(m.PERFORMANCE_STATE, 0.0),
)


def _sample(*readings: Reading, device: Device = GPU, up: bool = True, links=(),
            processes=()) -> DeviceSample:
    return DeviceSample(device, up=up, taken_at=time.time(), readings=readings, links=links,
                        processes=processes)


def _values(sample: DeviceSample) -> dict[str, float]:
    return {r.metric: r.value for r in sample.readings}


@pytest.fixture
def checked():
    tally = ErrorTally()
    validator = ReadingValidator(tally, "nvidia")
    return validator, tally


def test_sane_readings_pass_unchanged(checked):
    validator, tally = checked
    sample = _sample(*SANE)
    assert validator.check(sample) is sample
    assert tally.snapshot() == {}


@pytest.mark.parametrize(("reading", "kind"), [
    (Reading(m.GPU_UTILIZATION, 1.5, (("task", "general"),)), OUT_OF_RANGE),
    (Reading(m.MEMORY_BANDWIDTH_UTILIZATION, 2.5), OUT_OF_RANGE),
    (Reading(m.POWER, -50.0), OUT_OF_RANGE),
    (Reading(m.POWER, 4294917.296), OUT_OF_RANGE),  # -50 W wrapped through uint32 milliwatts
    (Reading(m.POWER, 1500.0), OVER_LIMIT),  # above twice the 700 W limit
    (Reading(m.MEMORY_USAGE, 150 * GIB), OVER_LIMIT),  # above the 141 GiB total
    (Reading(m.TEMPERATURE, 200.0, (("sensor", "gpu"),)), OUT_OF_RANGE),
    (Reading(m.TEMPERATURE, -41.0, (("sensor", "gpu"),)), OUT_OF_RANGE),
    (Reading(m.CLOCK_FREQUENCY, 4294967295e6, (("clock", "sm"),)), OUT_OF_RANGE),
    (Reading(m.CLOCK_FREQUENCY, -1.0, (("clock", "sm"),)), OUT_OF_RANGE),
    (Reading(m.MEMORY_LIMIT, -1.0), OUT_OF_RANGE),
    (Reading(m.MEMORY_LIMIT, 2.0**64 - 1), OUT_OF_RANGE),  # 16 EiB: NVML's largest value
    (Reading(m.MEMORY_USAGE, 2.0**64 - 1), OUT_OF_RANGE),
    (Reading(m.PERFORMANCE_STATE, 32.0), OUT_OF_RANGE),
    (Reading(m.THROTTLE_ACTIVE, 2.0, (("reason", "hw_slowdown"),)), OUT_OF_RANGE),
    (Reading(m.GPU_UTILIZATION, math.nan, (("task", "general"),)), NOT_FINITE),
    (Reading(m.POWER, math.inf), NOT_FINITE),
    (Reading(m.ENERGY, -math.inf), NOT_FINITE),
])
def test_an_impossible_value_is_dropped_flagged_and_counted(checked, reading, kind):
    validator, tally = checked
    sane = [r for r in SANE if (r.metric, r.labels) != (reading.metric, reading.labels)]
    out = validator.check(_sample(*sane, reading))
    assert reading not in out.readings
    assert sorted(map(repr, out.readings)) == sorted(map(repr, sane))
    assert out.errors[reading.metric].startswith(f"{kind}: ")
    assert tally.snapshot() == {(kind, reading.metric): 1}


def test_a_ratio_may_exceed_one_by_rounding_only(checked):
    validator, tally = checked
    just_over = Reading(m.GPU_UTILIZATION, 1 + 1e-9, (("task", "general"),))
    clearly_over = Reading(m.GPU_UTILIZATION, 1.001, (("task", "encoder"),))
    out = validator.check(_sample(just_over, clearly_over))
    assert out.readings == (just_over,)
    assert tally.snapshot() == {(OUT_OF_RANGE, m.GPU_UTILIZATION): 1}


def test_without_a_power_limit_the_absolute_ceiling_applies(checked):
    validator, tally = checked
    out = validator.check(_sample(Reading(m.POWER, 1500.0), Reading(m.POWER, 6000.0)))
    assert _values(out) == {m.POWER: 1500.0}
    assert tally.snapshot() == {(OUT_OF_RANGE, m.POWER): 1}


def test_an_invalid_limit_bounds_nothing_and_is_dropped_itself(checked):
    validator, tally = checked
    out = validator.check(_sample(Reading(m.MEMORY_USAGE, 80 * GIB),
                                  Reading(m.MEMORY_LIMIT, math.nan)))
    assert _values(out) == {m.MEMORY_USAGE: 80 * GIB}
    assert tally.snapshot() == {(NOT_FINITE, m.MEMORY_LIMIT): 1}


def test_the_first_valid_positive_limit_bounds_the_sample_every_cycle(checked):
    """A limit read as zero or as no number bounds nothing and is dropped; the next one of
    its metric bounds the sample, in the first cycle and in those after it, where the metrics
    and labels are known."""
    validator, tally = checked
    for cycle in range(3):
        out = validator.check(_sample(Reading(m.POWER_LIMIT, 0.0), Reading(m.POWER, 1300.0),
                                      Reading(m.POWER_LIMIT, math.nan),
                                      Reading(m.POWER_LIMIT, 700.0), Reading(m.POWER, 1500.0)))
        assert [r.value for r in out.readings if r.metric == m.POWER] == [1300.0], cycle
        assert [r.value for r in out.readings if r.metric == m.POWER_LIMIT] == [700.0], cycle
        assert tally.snapshot() == {(OVER_LIMIT, m.POWER): cycle + 1,
                                    (OUT_OF_RANGE, m.POWER_LIMIT): cycle + 1,
                                    (NOT_FINITE, m.POWER_LIMIT): cycle + 1}, cycle


@pytest.mark.parametrize("limit, usage", [(m.MEMORY_LIMIT, m.MEMORY_USAGE),
                                          (m.POWER_LIMIT, m.POWER)])
def test_a_limit_of_zero_is_not_exported_beside_a_use_above_it(checked, limit, usage):
    """No device has 0 bytes of memory or a 0 W limit (a driver's stand-in for 'not
    reported', or a recording edited by hand): the zero is refused with why, every cycle,
    and the use is still checked against its own range."""
    validator, tally = checked
    for cycle in range(1, 3):
        out = validator.check(_sample(Reading(limit, 0.0), Reading(usage, 500.0)))
        assert _values(out) == {usage: 500.0}, cycle
        assert tally.snapshot() == {(OUT_OF_RANGE, limit): cycle}
        assert "valid range (> 0" in out.errors[limit], out.errors


def test_the_log_says_it_once_per_device_and_metric(checked, caplog):
    validator, tally = checked
    other = Device("nvidia", "1", "GPU-1", "NVIDIA H200")
    with caplog.at_level(logging.WARNING, logger="ray_accel.exporter.validation"):
        for _ in range(5):
            validator.check(_sample(Reading(m.MEMORY_BANDWIDTH_UTILIZATION, 2.5),
                                    Reading(m.POWER, -50.0)))
            validator.check(_sample(Reading(m.POWER, -50.0), device=other))
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3, lines
    assert sum("GPU-0" in line and m.POWER in line for line in lines) == 1
    assert sum("GPU-0" in line and m.MEMORY_BANDWIDTH_UTILIZATION in line for line in lines) == 1
    assert sum("GPU-1" in line and m.POWER in line for line in lines) == 1
    assert tally.snapshot() == {(OUT_OF_RANGE, m.POWER): 10,
                                (OUT_OF_RANGE, m.MEMORY_BANDWIDTH_UTILIZATION): 5}


def _energy(value: float) -> Reading:
    return Reading(m.ENERGY, value)


def test_a_counter_that_goes_backwards_is_not_exported_as_a_decrease(checked):
    validator, tally = checked
    exported = []
    for value in (100.0, 150.0, 90.0, 160.0):
        exported.append(_values(validator.check(_sample(_energy(value)))).get(m.ENERGY))
    assert exported == [100.0, 150.0, None, 160.0]
    assert tally.snapshot() == {(COUNTER_DECREASED, m.ENERGY): 1}


def test_a_device_that_came_back_from_down_may_start_its_counters_again(checked):
    validator, tally = checked
    validator.check(_sample(_energy(5000.0)))
    validator.check(_sample(up=False))  # lost: a reset or a driver reload follows
    assert _values(validator.check(_sample(_energy(3.0)))) == {m.ENERGY: 3.0}
    assert tally.snapshot() == {}


def test_a_counter_counting_on_from_a_lower_value_is_taken_as_an_unannounced_reset(checked):
    validator, tally = checked
    validator.check(_sample(_energy(5000.0)))
    exported = [_values(validator.check(_sample(_energy(v)))).get(m.ENERGY)
                for v in range(10, 10 + RESET_CONFIRM_SAMPLES + 1)]
    assert exported == [None] * (RESET_CONFIRM_SAMPLES - 1) + [12.0, 13.0]
    assert tally.snapshot() == {(COUNTER_DECREASED, m.ENERGY): RESET_CONFIRM_SAMPLES - 1}


def test_link_counters_are_checked_per_link_and_direction(checked):
    validator, tally = checked

    def link(index: int, tx: float, up: float = 1.0) -> Link:
        return Link("nvlink", index, (Reading(m.LINK_IO, tx, (("direction", "transmit"),)),
                                      Reading(m.LINK_UP, up)))

    validator.check(_sample(links=(link(0, 1000.0), link(1, 50.0))))
    out = validator.check(_sample(links=(link(0, 900.0), link(1, 60.0, up=3.0))))
    assert [[(r.metric, r.value) for r in lk.readings] for lk in out.links] == [
        [(m.LINK_UP, 1.0)], [(m.LINK_IO, 60.0)]]
    assert tally.snapshot() == {(COUNTER_DECREASED, m.LINK_IO): 1, (OUT_OF_RANGE, m.LINK_UP): 1}


def test_labels_that_go_wrong_after_good_cycles_are_refused_then(checked):
    """What the catalog was found to describe at a place is looked up again when the
    metrics or labels there change: a label name or value gone wrong is refused."""
    validator, tally = checked
    for _ in range(2):
        assert validator.check(_sample(*SANE)).readings == SANE
    for wrong in ((("zone", "gpu"),), (("sensor", 3),)):
        changed = tuple(Reading(r.metric, r.value, wrong) if r.metric == m.TEMPERATURE else r
                        for r in SANE)
        out = validator.check(_sample(*changed))
        assert m.TEMPERATURE not in _values(out) and len(out.readings) == len(SANE) - 1
    assert tally.snapshot() == {(BAD_LABELS, m.TEMPERATURE): 2}
    assert validator.check(_sample(*SANE)).readings == SANE


def test_values_that_go_wrong_after_good_cycles_are_refused_one_by_one(checked):
    """Once the metrics and labels at a place are known, their values are checked all at once;
    a value that fails there (not a number, out of range, over its bound) is found by the
    checks in turn, which count each counter once."""
    validator, tally = checked
    for _ in range(2):
        assert validator.check(_sample(*SANE)).readings == SANE

    def with_values(**values: object) -> tuple[Reading, ...]:
        return tuple(Reading(r.metric, values.get(r.metric, r.value), r.labels) for r in SANE)

    out = validator.check(_sample(*with_values(**{m.POWER: "690", m.ENERGY: 0.5e6})))
    assert m.POWER not in _values(out) and m.ENERGY not in _values(out)
    assert out.errors[m.POWER].startswith(f"{NOT_FINITE}: ")
    out = validator.check(_sample(*with_values(**{m.MEMORY_USAGE: 150 * GIB,
                                                  m.ENERGY: 0.6e6})))
    assert m.MEMORY_USAGE not in _values(out) and m.ENERGY not in _values(out)
    assert tally.snapshot() == {(NOT_FINITE, m.POWER): 1, (OVER_LIMIT, m.MEMORY_USAGE): 1,
                                (COUNTER_DECREASED, m.ENERGY): 2}
    # Two lower readings so far, rising: the third in a row is an unannounced reset.
    out = validator.check(_sample(*with_values(**{m.ENERGY: 0.7e6})))
    assert out.readings == with_values(**{m.ENERGY: 0.7e6})


def test_readings_handed_back_unchanged_are_checked_again_when_what_bounds_them_changed(
        checked):
    """A backend hands back the same readings tuple for what it did not read again; it
    passes on without a second look only while the checks it passed would give the same."""
    validator, tally = checked
    held = ProcessSample(7, (Reading(m.PROCESS_MEMORY_USAGE, 100 * GIB),))
    kept = validator.check(_sample(Reading(m.MEMORY_LIMIT, 141 * GIB), processes=(held,)))
    assert kept.processes[0] is held
    again = validator.check(_sample(Reading(m.MEMORY_LIMIT, 141 * GIB), processes=(held,)))
    assert again.processes[0] is held and tally.snapshot() == {}
    smaller = validator.check(_sample(Reading(m.MEMORY_LIMIT, 80 * GIB), processes=(held,)))
    assert smaller.processes[0].readings == ()
    assert tally.snapshot() == {(OVER_LIMIT, m.PROCESS_MEMORY_USAGE): 1}


def test_counters_handed_back_unchanged_after_a_loss_count_from_there(checked):
    validator, tally = checked

    def link(tx: float) -> Link:
        return Link("nvlink", 0, (Reading(m.LINK_IO, tx, (("direction", "transmit"),)),))

    unchanged = link(1000.0)
    validator.check(_sample(links=(unchanged,)))
    validator.check(_sample(up=False))  # lost: its counters are forgotten
    validator.check(_sample(links=(unchanged,)))  # the same tuple: 1000 is the last value again
    out = validator.check(_sample(links=(link(900.0),)))
    assert out.links[0].readings == ()
    assert tally.snapshot() == {(COUNTER_DECREASED, m.LINK_IO): 1}


def test_process_readings_are_checked_against_their_device(checked):
    validator, tally = checked
    greedy = ProcessSample(7, (Reading(m.PROCESS_MEMORY_USAGE, 200 * GIB),
                               Reading(m.PROCESS_UTILIZATION, 0.5, (("engine", "sm"),))))
    busy = ProcessSample(8, (Reading(m.PROCESS_UTILIZATION, 1.5, (("engine", "sm"),)),))
    out = validator.check(_sample(Reading(m.MEMORY_LIMIT, 141 * GIB), processes=(greedy, busy)))
    assert [[r.value for r in p.readings] for p in out.processes] == [[0.5], []]
    assert tally.snapshot() == {(OVER_LIMIT, m.PROCESS_MEMORY_USAGE): 1,
                                (OUT_OF_RANGE, m.PROCESS_UTILIZATION): 1}


def test_a_process_that_left_forgets_its_counters(checked):
    validator, tally = checked

    def runtime(pid: int, executions: float) -> ProcessSample:
        return ProcessSample(pid, (Reading(m.NEURON_EXECUTIONS, executions,
                                           (("outcome", "completed"),)),))

    validator.check(_sample(processes=(runtime(40, 500.0),)))
    assert validator.check(_sample(processes=(runtime(40, 400.0),))).processes[0].readings == ()
    validator.check(_sample())  # pid 40 exited; a new process may get its pid
    out = validator.check(_sample(processes=(runtime(40, 2.0),)))
    assert out.processes[0].readings[0].value == 2.0
    assert tally.snapshot() == {(COUNTER_DECREASED, m.NEURON_EXECUTIONS): 1}


def test_the_check_is_vendor_neutral(checked):
    validator, tally = checked
    out = validator.check(_sample(Reading(m.POWER, 4294967.295), Reading(m.POWER_LIMIT, 750.0),
                                  Reading(m.TEMPERATURE, 65535.0, (("sensor", "hotspot"),)),
                                  Reading(m.TEMPERATURE, 60.0, (("sensor", "edge"),)),
                                  device=MI300X))
    assert [(r.metric, r.value) for r in out.readings] == [
        (m.POWER_LIMIT, 750.0), (m.TEMPERATURE, 60.0)]
    assert tally.snapshot() == {(OUT_OF_RANGE, m.POWER): 1, (OUT_OF_RANGE, m.TEMPERATURE): 1}


class _Impossible(Backend):
    """One device answering power -50 W (wrapped through uint32) and utilization 150 %."""

    name = "impossible"
    vendor = "test"

    def open(self):
        return [GPU]

    def sample(self, device: Device) -> DeviceSample:
        return _sample(Reading(m.POWER, 4294917.296), Reading(m.POWER_LIMIT, 700.0),
                       Reading(m.GPU_UTILIZATION, 1.5, (("task", "general"),)),
                       Reading(m.TEMPERATURE, 40.0, (("sensor", "gpu"),)), device=device)


def test_the_sampler_drops_and_counts_what_a_backend_gets_wrong():
    sampler = Sampler([_Impossible()], SnapshotStore(), interval_s=0.2)
    snapshot = [sampler.run_cycle() for _ in range(3)][-1]
    (sample,) = snapshot.devices
    assert _values(sample) == {m.POWER_LIMIT: 700.0, m.TEMPERATURE: 40.0}
    sampled = snapshot.error_counts[("impossible", OUT_OF_RANGE, m.POWER)]
    assert sampled >= 2  # once per cycle that sampled the device
    assert snapshot.error_counts[("impossible", OUT_OF_RANGE, m.GPU_UTILIZATION)] == sampled
    text = snapshot_text(snapshot).decode()
    assert "hw_power_watts{" not in text and "hw_gpu_utilization_ratio{" not in text
    assert 'hw_temperature_celsius{' in text
    assert ('ray_accelerator_agent_errors_total{backend="impossible",function="hw.power",'
            f'kind="out_of_range"}} {sampled}') in text.replace(", ", ",")


def _recorded_readings(values: dict) -> tuple[Reading, ...]:
    return tuple(Reading(metric, item["value"], tuple(item["labels"].items()))
                 for metric, items in values.items() for item in items)


def test_what_a_real_h200_answered_passes_every_check(checked):
    """The recorded snapshot of a real H200 (docs/real-gpu/real-gpu.json): nothing refused."""
    record = Path(__file__).resolve().parents[1] / "docs" / "real-gpu" / "real-gpu.json"
    (device,) = json.loads(record.read_text())["snapshot"]["devices"]
    sample = _sample(
        *_recorded_readings(device["values"]),
        links=tuple(Link(link["link_type"], link["index"], _recorded_readings(link["values"]))
                    for link in device["links"]),
        processes=tuple(ProcessSample(proc["pid"], _recorded_readings(proc["values"]))
                        for proc in device["processes"]))
    assert len(sample.readings) >= 30 and sample.links[0].readings and sample.processes
    validator, tally = checked
    assert validator.check(sample) is sample
    assert tally.snapshot() == {}


def test_every_refused_reading_of_a_metric_says_why(checked):
    """Two sensors' temperatures refused in one sample: the device's errors keep both
    reasons, not only the last one."""
    validator, tally = checked
    out = validator.check(_sample(Reading(m.TEMPERATURE, -300.0, (("sensor", "edge"),)),
                                  Reading(m.TEMPERATURE, 10_000.0, (("sensor", "hotspot"),)),
                                  Reading(m.TEMPERATURE, 60.0, (("sensor", "memory"),))))
    assert [r.value for r in out.readings] == [60.0]
    reasons = out.errors[m.TEMPERATURE].split("; ")
    assert len(reasons) == 2 and all(r.startswith(OUT_OF_RANGE) for r in reasons)
    assert "-300" in reasons[0] and "10000" in reasons[1]
    assert tally.snapshot() == {(OUT_OF_RANGE, m.TEMPERATURE): 2}
