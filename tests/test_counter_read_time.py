"""When a link's counters were read (`Link.counters_at`): the time their rates span.

A rate is the counters' change over the time between two reads, so that time
must be when the library read them, not when the call began or its thread ran
again after it. NVML stamps each field value with the time it read it; the
fake library stamps them as NVML does, and plays a call slow before it reads.
"""

from __future__ import annotations

import time

import pytest

from ray_accel.exporter import catalog as m
from ray_accel.exporter.backends.base import read_timed
from ray_accel.exporter.backends.nvidia import NvidiaBackend
from ray_accel.exporter.simulate import SimulatedHardware

FIELD_CALL_S = 0.4  # how long the field-value call takes before it reads the counters


def _clock(*times: float):
    """A stand-in for time.time() answering `times` in turn."""
    answers = iter(times)
    return lambda: next(answers)


@pytest.mark.parametrize(("said", "expected"), [
    (103.0, 103.0),  # the library's own time, within the call
    (100.0, 100.0),  # ... at its very start
    (99.9995, 100.0),  # ... a whole-microsecond stamp a hair before it: the call's start
    (None, 102.5),  # no time given: the middle of the call
    (0.0, 102.5),  # a time the call cannot have read at: the middle
    (106.0, 102.5),
])
def test_a_read_is_timed_by_the_library_where_its_time_lies_within_the_call(
        monkeypatch, said, expected):
    monkeypatch.setattr(time, "time", _clock(100.0, 105.0))
    assert read_timed(lambda: "answer", lambda _: said) == ("answer", expected)


def test_without_a_library_time_a_read_is_timed_at_the_middle_of_the_call(monkeypatch):
    monkeypatch.setattr(time, "time", _clock(100.0, 105.0))
    assert read_timed(lambda: "answer") == ("answer", 102.5)


def test_a_slow_field_value_call_stamps_the_counters_when_nvml_read_them(tmp_path):
    gpu = {"name": "NVIDIA H100 PCIe", "uuid": "GPU-00000000-0000-4000-8000-000000000001",
           "pci_bus_id": "00000000:10:00.0", "architecture": "hopper",
           "fields": {"197": {"type": "uint", "value": {"start": 0, "rate_per_s": 1e8}},
                      "198": {"type": "uint", "value": {"start": 0, "rate_per_s": 1e8}}}}
    doc = {"name": "slow-fields", "devices": [gpu],
           "delays": [{"function": "nvmlDeviceGetFieldValues", "seconds": FIELD_CALL_S}]}
    hardware = SimulatedHardware.start(doc, state_dir=tmp_path)
    hardware.activate()
    backend = NvidiaBackend()
    try:
        (device,) = backend.open()
        before = time.time()
        sample = backend.sample(device)
        after = time.time()
    finally:
        backend.close()
        hardware.close()
    (pcie,) = [link for link in sample.links if link.link_type == m.LINK_PCIE]
    assert pcie.readings, sample.errors
    # The library reads after its slow start: the call's middle lies well before that.
    assert before + FIELD_CALL_S <= pcie.counters_at <= after
