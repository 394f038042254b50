"""The GPM and call-cost parts of the real-hardware record (tools/record_gpm.py,
tools/record_call_costs.py), taken on the simulated H200.

docs/real-gpu/real-gpu.json was recorded before the recorder learned GPM, so it
has no `gpm` section yet: until a lent GPU records one, these tests check the
simulated recording alone; once it is there, the fake must answer every GPM
metric the real H200 answered, in the same unit, and the same calls alike.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pynvml
import pytest

from ray_accel.exporter.backends.nvidia import gpm as backend_gpm
from ray_accel.exporter.simulate import SimulatedHardware

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "docs" / "real-gpu" / "real-gpu.json"
NVLINK_IDS = set(range(pynvml.NVML_GPM_METRIC_NVLINK_L0_RX_PER_SEC,
                       pynvml.NVML_GPM_METRIC_NVLINK_L17_TX_PER_SEC + 1))


def _recorder() -> Any:
    spec = importlib.util.spec_from_file_location("record_real_gpu",
                                                  ROOT / "tools" / "record_real_gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    with SimulatedHardware.start("hgx-h200") as hardware:
        hardware.activate()
        return _recorder().record()


@pytest.fixture(scope="module")
def simulated(recorded) -> dict[str, Any]:
    return recorded["gpm"]


def _succeeded(metrics: dict[str, Any]) -> set[int]:
    return {int(i) for i, metric in metrics.items() if metric["return"] == pynvml.NVML_SUCCESS}


def test_the_simulated_record_holds_every_gpm_call(simulated):
    assert sorted(simulated) == [str(i) for i in range(8)]
    gpu = simulated["0"]
    assert gpu["support"]["isSupportedDevice"] == 1
    calls = gpu["device"]
    for name in ("alloc_sample_1", "sample_1", "alloc_sample_2", "sample_2", "metrics_get",
                 "free_0", "free_1"):
        assert "error" not in calls[name], name
        assert calls[name]["cpu_us"] >= 0
    metrics = calls["metrics"]
    assert len(metrics) == pynvml.NVML_GPM_METRIC_MAX - 1
    expected = {pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL, pynvml.NVML_GPM_METRIC_SM_UTIL,
                pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL, pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC,
                *NVLINK_IDS}
    assert expected <= _succeeded(metrics)
    assert metrics[str(pynvml.NVML_GPM_METRIC_C2C_TOTAL_TX_PER_SEC)]["return"] == \
        pynvml.NVML_ERROR_NOT_SUPPORTED  # no Grace on an HGX board
    assert {m["unit"] for m in metrics.values()} == {"%", "MiB/sec"}
    assert 50 < metrics[str(pynvml.NVML_GPM_METRIC_SM_UTIL)]["value"] <= 100  # GPU 0 trains
    assert gpu["gpu_instances"] == {}  # MIG is off
    # the PCIe byte counters beside the samples move as GPM's PCIe rates say (32-bit, wrapping)
    before, after = calls["pcie_counters_sample_1"], calls["pcie_counters_sample_2"]
    for field, metric_id in ((pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES,
                              pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC),
                             (pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES,
                              pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC)):
        assert before[str(field)]["type"] == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
        moved = (after[str(field)]["ull"] - before[str(field)]["ull"]) % 2**32
        rate = metrics[str(metric_id)]["value"] * 2**20
        assert moved == pytest.approx(rate * 1.0, rel=0.1)  # the samples are 1 s apart


def test_the_fake_answers_the_gpm_calls_the_real_gpu_answered(simulated):
    real = json.loads(RECORD.read_text()).get("gpm")
    simulated_gpu = simulated["0"]
    simulated_metrics = simulated_gpu["device"]["metrics"]
    if real is None:
        # No GPU has been lent since the recorder learned GPM: the next record will hold
        # what this one does, and nothing real can be compared yet.
        assert _succeeded(simulated_metrics)
        return
    real_gpu = real["0"]
    assert simulated_gpu["support"]["isSupportedDevice"] == real_gpu["support"][
        "isSupportedDevice"]
    assert set(simulated_gpu["device"]) == set(real_gpu["device"])
    for name, call in real_gpu["device"].items():
        if name != "metrics":
            assert ("error" in simulated_gpu["device"][name]) == ("error" in call), name
    real_metrics = real_gpu["device"].get("metrics", {})
    # Every metric the agent exports that the real GPU answered, the fake answers, in its unit.
    exported = {metric.metric_id for metric in backend_gpm.GPM_METRICS}
    for metric_id in sorted(_succeeded(real_metrics) & exported):
        assert metric_id in _succeeded(simulated_metrics), metric_id
        assert simulated_metrics[str(metric_id)]["unit"] == real_metrics[str(metric_id)][
            "unit"], metric_id


def test_the_costly_calls_are_timed_one_by_one_on_the_cpu_they_spend(recorded):
    """tools/record_call_costs.py on the simulated H200, whose energy read spends 5 ms of
    CPU (busy) a call and whose power read is free: each repeat is timed on its own."""
    costs = recorded["call_costs"]
    energy = costs["nvmlDeviceGetTotalEnergyConsumption"]
    assert len(energy) == 10 and all("error" not in call for call in energy)
    assert all(call["cpu_us"] >= 4000 for call in energy)
    assert all(call["cpu_us"] < 1000 for call in costs["nvmlDeviceGetPowerUsage"])
    assert {"nvmlDeviceGetFieldValues[83]", "nvmlDeviceGetFieldValues[197,198]",
            "nvmlDeviceGetPcieReplayCounter",
            "nvmlDeviceGetProcessUtilization"} <= set(costs)
    # the XID event set asked without blocking, as each device read asks it: nothing waits
    waits = costs["nvmlEventSetWait[0 ms]"]
    assert len(waits) == 10 and all(call["code"] == pynvml.NVML_ERROR_TIMEOUT for call in waits)
