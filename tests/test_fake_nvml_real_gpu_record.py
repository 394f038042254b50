"""The fake NVML checked against what a real H200 answered (docs/real-gpu/real-gpu.json).

The record was taken by tools/real_gpu_check.sh on a single-GPU H200 machine
(driver 580, no NVLink). The same recorder runs here on the simulated 8x H200
node, and the two must agree on everything that does not depend on the
machine: the shape of every call's answer, the metrics a device reports, and
how NVML's memory figures relate.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from ray_accel.exporter.simulate import SimulatedHardware

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "docs" / "real-gpu" / "real-gpu.json"
# Answers that depend on the machine: the recorded one has no NVLink.
NVLINK_ONLY = {"nvlink_version_0", "nvlink_remote_type_0"}
# Calls the recorder learnt after the committed record was taken: compared once a lent
# GPU has recorded them.
RECORDED_SINCE = {"board", "field_times"}


def _recorder():
    spec = importlib.util.spec_from_file_location("record_real_gpu",
                                                  ROOT / "tools" / "record_real_gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _shape(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_shape(value[0])] if value else []
    return "number" if isinstance(value, int | float) else type(value).__name__


@pytest.fixture(scope="module")
def records() -> tuple[dict, dict]:
    real = json.loads(RECORD.read_text())
    with SimulatedHardware.start("hgx-h200") as hardware:
        hardware.activate()
        simulated = _recorder().record()
    return real, simulated


def test_every_call_answers_in_the_same_shape(records):
    real, simulated = records
    real_raw, simulated_raw = real["raw"]["0"], simulated["raw"]["0"]
    assert set(real_raw) == set(simulated_raw) - (RECORDED_SINCE - set(real_raw))
    for call in sorted(set(real_raw) - NVLINK_ONLY):
        assert _shape(simulated_raw[call]) == _shape(real_raw[call]), call
    fields = {f["id"]: f for f in simulated_raw["fields"]}
    for field in real_raw["fields"]:  # where the real GPU answered, the fake answers alike
        if field["return"] == 0:
            assert fields[field["id"]]["return"] == 0 and fields[field["id"]]["type"] == \
                field["type"], field["id"]


def test_field_values_carry_the_time_they_were_read_within_the_call(records):
    # The agent times link counters by these stamps (backends/base.py `read_timed`).
    for record in records:
        times = record["raw"]["0"].get("field_times")
        if times is None:
            assert record is records[0], "the simulated record has no field times"
            continue  # a real record taken before the recorder asked
        for stamp in times["timestamps_us"]:
            assert times["called_s"] - 0.001 <= stamp / 1e6 <= times["returned_s"] + 0.001


def test_memory_v1_used_counts_the_reservation_as_on_the_real_driver(records):
    for record in records:
        raw = record["raw"]["0"]
        assert raw["memory_v1"]["used"] == raw["memory_v2"]["used"] + raw["memory_v2"]["reserved"]
        assert raw["memory_v1"]["total"] == raw["memory_v2"]["total"]


def test_a_simulated_device_reports_every_metric_the_real_one_did(records):
    real, simulated = records
    real_device, simulated_device = real["snapshot"]["devices"][0], simulated["snapshot"][
        "devices"][0]
    assert set(real_device["values"]) <= set(simulated_device["values"])
    for metric, entries in real_device["values"].items():
        real_labels = {json.dumps(e["labels"], sort_keys=True) for e in entries}
        simulated_labels = {json.dumps(e["labels"], sort_keys=True)
                            for e in simulated_device["values"][metric]}
        assert real_labels <= simulated_labels, metric
    assert set(real_device["errors"]) <= set(simulated_device["errors"]) | {
        "nvmlDeviceGetRetiredPagesPendingStatus"}
