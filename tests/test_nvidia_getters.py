"""The NVIDIA backend's every-cycle getters (exporter/backends/nvidia/getters.py) against the
binding's own functions: the real nvidia-ml-py binding reading the fake libnvidia-ml.so.1 of
the `hgx-h200` node, frozen in time so that both read the same values."""

from __future__ import annotations

import copy

import pynvml
import pytest

from ray_accel.exporter import catalog as m
from ray_accel.exporter.backends.nvidia.getters import Getters, scalar
from ray_accel.exporter.simulate import load_scenario


@pytest.fixture
def node(open_backend):
    """The frozen 8x H200 node, GPU 0's temperature failing with a timeout."""
    doc = copy.deepcopy(load_scenario("hgx-h200"))
    doc["delays"] = []
    doc["freeze_at_s"] = 30.0
    doc["errors"] = [{"function": "nvmlDeviceGetTemperature", "device": 0, "code": "TIMEOUT"}]
    return open_backend(doc)


def _answers(getters: Getters, handle) -> dict[str, object]:
    return {
        "utilization": getters.utilization_rates(handle),
        "encoder": getters.encoder_utilization(handle),
        "decoder": getters.decoder_utilization(handle),
        "power": getters.power_usage(handle),
        "temperature": getters.temperature(handle, pynvml.NVML_TEMPERATURE_GPU),
        "sm_clock": getters.clock_info(handle, pynvml.NVML_CLOCK_SM),
        "memory_clock": getters.clock_info(handle, pynvml.NVML_CLOCK_MEM),
        "pstate": getters.performance_state(handle),
        "reasons": getters.clocks_event_reasons(handle),
        "throttle_reasons": getters.clocks_throttle_reasons(handle),
        "memory_v2": getters.memory_info_v2(handle),
        "memory": getters.memory_info(handle),
    }


def _binding(handle) -> dict[str, object]:
    rates = pynvml.nvmlDeviceGetUtilizationRates(handle)
    v2 = pynvml.nvmlDeviceGetMemoryInfo(handle, pynvml.nvmlMemory_v2)
    v1 = pynvml.nvmlDeviceGetMemoryInfo(handle)
    return {
        "utilization": (rates.gpu, rates.memory),
        "encoder": tuple(pynvml.nvmlDeviceGetEncoderUtilization(handle)),
        "decoder": tuple(pynvml.nvmlDeviceGetDecoderUtilization(handle)),
        "power": pynvml.nvmlDeviceGetPowerUsage(handle),
        "temperature": pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
        "sm_clock": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
        "memory_clock": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM),
        "pstate": pynvml.nvmlDeviceGetPerformanceState(handle),
        "reasons": pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle),
        "throttle_reasons": pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle),
        "memory_v2": (v2.used, v2.total, v2.reserved),
        "memory": (v1.used, v1.total, None),
    }


def test_getters_answer_what_the_binding_answers_and_keep_their_names(node):
    backend, devices, _ = node
    getters = Getters()
    handles = [backend._tracked[d.uuid].handle for d in devices[1:]]
    for handle in handles:
        ours, theirs = _answers(getters, handle), _binding(handle)
        assert ours == theirs
        assert ours["power"] > 0 and ours["sm_clock"] > 0 and ours["memory_v2"][2] > 0
    # a getter's answer is a number of its own, not the buffer the next call overwrites
    first = getters.utilization_rates(handles[0])
    busy = [getters.utilization_rates(h) for h in handles]
    assert first == busy[0] and len(set(busy)) > 1
    assert getters.temperature.__name__ == "nvmlDeviceGetTemperature"


def test_a_failing_getter_raises_the_bindings_error_and_costs_only_its_value(node):
    backend, devices, _ = node
    handle = backend._tracked[devices[0].uuid].handle
    with pytest.raises(pynvml.NVMLError_Timeout):
        Getters().temperature(handle, pynvml.NVML_TEMPERATURE_GPU)
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        scalar("nvmlDeviceGetNoSuchValue")(handle)
    sample = backend.sample(devices[0])
    assert sample.up and sample.errors["nvmlDeviceGetTemperature"] == "timeout"
    assert not any(r.metric == m.TEMPERATURE for r in sample.readings)
    assert any(r.metric == m.POWER for r in sample.readings)
    other = backend.sample(devices[1])
    assert any(r.metric == m.TEMPERATURE for r in other.readings)
