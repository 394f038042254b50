"""Values of a neuron-monitor report that cannot be true: refused with why, never read as
something plausible (an idle core, a counter reset, thousands of devices)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from ray_accel.exporter import catalog as m
from ray_accel.exporter.backends.base import ErrorTally
from ray_accel.exporter.backends.neuron.probes import chip_readings, core_readings
from ray_accel.exporter.backends.neuron.report import (
    HW_COUNTERS,
    ReportError,
    ReportReader,
    hardware_of,
)
from ray_accel.exporter.model import Device, DeviceSample
from ray_accel.exporter.validation import OUT_OF_RANGE, ReadingValidator

CHIP = Device("aws", "0", "neuron-0", "Trainium")
CORE = Device("aws", "0/0", "neuron-0-0", "NeuronCore-v2", parent_uuid="neuron-0")


def _report(utilization: dict[str, float], ecc_corrected: float = 0) -> dict[str, Any]:
    return {
        "neuron_runtime_data": [{"pid": 4242, "neuron_runtime_tag": "4242", "error": "",
                                 "report": {"neuroncore_counters": {
                                     "period": 1.0, "error": "",
                                     "neuroncores_in_use": {
                                         core: {"neuroncore_utilization": percent}
                                         for core, percent in utilization.items()}}}}],
        "system_data": {"neuron_hw_counters": {
            "period": 1.0, "error": "",
            "neuron_devices": [{"neuron_device_index": 0,
                                "mem_ecc_corrected": ecc_corrected}]}},
    }


def _checked(device: Device, readings) -> DeviceSample:
    tally = ErrorTally()
    sample = DeviceSample(device, up=True, taken_at=time.time(), readings=tuple(readings))
    return ReadingValidator(tally, "neuron").check(sample)


def test_a_core_busier_than_it_can_be_is_refused_not_read_as_idle():
    view = ReportReader().read(_report({"0": 250.0, "1": 50.0}))
    core = _checked(CORE, core_readings(view, 0))
    assert [r for r in core.readings if r.metric == m.GPU_UTILIZATION] == []
    assert core.errors[m.GPU_UTILIZATION].startswith(OUT_OF_RANGE)
    # the chip's mean cannot be told from a core whose figure cannot be true
    chip = _checked(CHIP, chip_readings(view, 0, [0, 1], None))
    assert [r for r in chip.readings if r.metric == m.GPU_UTILIZATION] == []
    other = _checked(CORE, core_readings(view, 1))
    assert [r.value for r in other.readings if r.metric == m.GPU_UTILIZATION] == [0.5]


@pytest.mark.parametrize("count", [-3, float("inf"), float("nan")])
def test_a_count_a_period_cannot_have_leaves_the_running_total_as_it_was(count):
    reader = ReportReader()
    first = reader.read(_report({"0": 10.0}, ecc_corrected=5))
    assert first.ecc == {0: {"mem_ecc_corrected": 5.0}}
    later = reader.read(_report({"0": 10.0}, ecc_corrected=count))
    assert later.ecc == {0: {"mem_ecc_corrected": 5.0}}
    assert "mem_ecc_corrected" in later.problems[HW_COUNTERS]
    after = reader.read(_report({"0": 10.0}, ecc_corrected=2))
    assert after.ecc == {0: {"mem_ecc_corrected": 7.0}}


@pytest.mark.parametrize("devices, cores", [(20_000, 1), (16, 10_000), (-1, 2), (2.5, 2),
                                            (float("nan"), 2), (float("inf"), 2)])
def test_a_device_count_no_host_has_is_refused(devices, cores):
    info = {"neuron_hardware_info": {"neuron_device_count": devices,
                                     "neuroncore_per_device_count": cores}}
    with pytest.raises(ReportError, match="cannot be true"):
        hardware_of(info)
    assert hardware_of({"neuron_hardware_info": {"neuron_device_count": 16,
                                                 "neuroncore_per_device_count": 8}
                        }).device_count == 16
