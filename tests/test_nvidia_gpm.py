"""GPM activity metrics: the fake's GPM entry points through the real binding, and the backend.

The binding tests call nvidia-ml-py's GPM wrappers against the simulated
libnvidia-ml.so.1; the backend tests read the same hardware through
`NvidiaBackend` and check the readings it turns them into.
"""

from __future__ import annotations

import ctypes
import time
from typing import Any

import pynvml
import pytest
from agent_process import AgentProcess, write_scenario

from ray_accel.exporter import catalog as m
from ray_accel.exporter.backends.nvidia import NvidiaBackend
from ray_accel.exporter.backends.nvidia import gpm as backend_gpm
from ray_accel.exporter.model import DeviceSample
from ray_accel.exporter.simulate import ScenarioError, SimulatedHardware, load_scenario
from ray_accel.exporter.simulate.nvml_gpm import GPM_LINK_METRICS, GPM_METRICS

MIB = 1024 * 1024
SWITCH_LINK = {"version": 4, "remote_device_type": "switch",
               "remote_pci_bus_id": "00000000:05:00.0"}


def gpu(i: int, **keys: Any) -> dict[str, Any]:
    return {"name": "NVIDIA H100 80GB HBM3", "uuid": f"GPU-00000000-0000-4000-8000-{i:012x}",
            "pci_bus_id": f"00000000:{0x10 + i:02X}:00.0", "architecture": "hopper",
            "power_mw": 300000, **keys}


def mig(gi: int, ci: int, **keys: Any) -> dict[str, Any]:
    return {"name": "NVIDIA H100 80GB HBM3 MIG 3g.40gb",
            "uuid": f"MIG-00000000-0000-4000-9000-{gi:06x}{ci:06x}",
            "gpu_instance_id": gi, "compute_instance_id": ci, "memory_total_bytes": 40 * 2**30,
            **keys}


def scenario(*devices: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"name": "gpm-test", "freeze_at_s": 10, "devices": list(devices), **top}


def values(sample: DeviceSample, metric: str, label: str) -> dict[str, float]:
    return {dict(r.labels)[label]: r.value for r in sample.readings if r.metric == metric}


def gpm_readings(sample: DeviceSample) -> list[Any]:
    gpm_metrics = {m.ACTIVITY, m.PIPE_ACTIVITY, m.PCIE_THROUGHPUT, m.LINK_THROUGHPUT}
    return [r for r in sample.readings if r.metric in gpm_metrics]


def move_to(hw: SimulatedHardware, t: float) -> None:
    """Moves the frozen simulated time to t; the library sees it at its next reload check."""
    hw.modify(lambda doc: doc.update(freeze_at_s=t))
    time.sleep(0.03)  # the library looks at the state file at most every 10 ms


def metrics_between(first: Any, second: Any, ids: list[int]) -> list[Any]:
    request = pynvml.c_nvmlGpmMetricsGet_t()
    request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    request.numMetrics = len(ids)
    for slot, metric_id in enumerate(ids):
        request.metrics[slot].metricId = metric_id
    request.sample1, request.sample2 = first, second
    pynvml.nvmlGpmMetricsGet(request)
    return [request.metrics[slot] for slot in range(len(ids))]


# --------------------------------------------------------------------------
# The scenario vocabulary and the ABI
# --------------------------------------------------------------------------


def test_scenario_metric_names_are_nvml_metric_ids():
    for name, metric_id in GPM_METRICS.items():
        assert getattr(pynvml, f"NVML_GPM_METRIC_{name.upper()}") == metric_id, name
    for name, (links, metric_id) in GPM_LINK_METRICS.items():
        family, *kind, direction, _, _ = name.split("_")
        for link in (0, links - 1):
            if family == "nvlink":
                constant = f"NVML_GPM_METRIC_NVLINK_L{link}_{direction.upper()}_PER_SEC"
            else:
                constant = (f"NVML_GPM_METRIC_C2C_LINK{link}_{kind[-1].upper()}_"
                            f"{direction.upper()}_PER_SEC")
            assert getattr(pynvml, constant) == metric_id(link), (name, link)


def test_struct_layouts_the_library_was_built_for():
    # fake_nvml.c asserts these sizes at compile time; the binding must agree.
    assert ctypes.sizeof(pynvml.c_nvmlGpmSupport_t) == 8
    assert ctypes.sizeof(pynvml.c_nvmlGpmMetric_t) == 40
    assert pynvml.c_nvmlGpmMetricsGet_t.metrics.offset == 24
    assert ctypes.sizeof(pynvml.c_nvmlGpmMetricsGet_t) == 24 + 40 * pynvml.NVML_GPM_METRIC_MAX


def test_bad_gpm_sections_are_refused():
    bad = [
        {"sm_util": 101},
        {"graphics_activity": 5},
        {"pcie_tx_per_sec": -1},
        {"nvlink_rx_per_sec": {"36": 5}},
        {"c2c_link_total_tx_per_sec": {"*": 5}},
    ]
    for section in bad:
        with pytest.raises(ScenarioError):
            load_scenario(scenario(gpu(0, gpm=section)))


# --------------------------------------------------------------------------
# The fake's GPM calls through the binding
# --------------------------------------------------------------------------


def test_metrics_are_the_signal_averages_between_two_samples(nvml):
    links = [SWITCH_LINK] * 2
    hw = nvml(scenario(gpu(0, nvlinks=links, gpm={
        "graphics_util": {"keyframes": [[0, 0], [20, 100]], "interpolate": "linear"},
        "sm_util": 40,
        "pcie_tx_per_sec": 1000,
        "nvlink_rx_per_sec": {"*": 500, "1": 700},
    })))
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice == 1
    first, second = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
    pynvml.nvmlGpmSampleGet(handle, first)
    move_to(hw, 14)
    pynvml.nvmlGpmSampleGet(handle, second)
    ids = [pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL, pynvml.NVML_GPM_METRIC_SM_UTIL,
           pynvml.NVML_GPM_METRIC_SM_OCCUPANCY, pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC,
           pynvml.NVML_GPM_METRIC_NVLINK_L0_RX_PER_SEC, pynvml.NVML_GPM_METRIC_NVLINK_L1_RX_PER_SEC,
           pynvml.NVML_GPM_METRIC_NVLINK_L2_RX_PER_SEC, 0]
    answers = metrics_between(first, second, ids)
    statuses = [a.nvmlReturn for a in answers]
    assert statuses == [0, 0, pynvml.NVML_ERROR_NOT_SUPPORTED, 0, 0, 0,
                        pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_INVALID_ARGUMENT]
    # graphics rises 50 -> 70 over [10, 14]: its average is 60
    assert [a.value for a in answers[:2]] == pytest.approx([60.0, 40.0])
    assert [a.value for a in answers[3:6]] == pytest.approx([1000.0, 500.0, 700.0])
    assert answers[0].metricInfo.unit == b"%"
    assert answers[3].metricInfo.unit == b"MiB/sec"
    pynvml.nvmlGpmSampleFree(first)
    pynvml.nvmlGpmSampleFree(second)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlGpmSampleFree(first)


def test_samples_at_one_instant_give_the_signal_value(nvml):
    nvml(scenario(gpu(0, gpm={"sm_util": {"keyframes": [[0, 0], [20, 100]]}})))
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    first, second = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
    pynvml.nvmlGpmSampleGet(handle, first)
    pynvml.nvmlGpmSampleGet(handle, second)
    (answer,) = metrics_between(first, second, [pynvml.NVML_GPM_METRIC_SM_UTIL])
    assert answer.nvmlReturn == 0 and answer.value == pytest.approx(50.0)


def test_version_mismatch_is_answered_like_nvml(nvml):
    nvml(scenario(gpu(0, gpm={"sm_util": 40})))
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    support = pynvml.c_nvmlGpmSupport_t()
    support.version = 2
    query = pynvml._nvmlGetFunctionPointer("nvmlGpmQueryDeviceSupport")
    assert query(handle, ctypes.byref(support)) == pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
    first, second = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
    pynvml.nvmlGpmSampleGet(handle, first)
    pynvml.nvmlGpmSampleGet(handle, second)
    request = pynvml.c_nvmlGpmMetricsGet_t()
    request.version = pynvml.NVML_GPM_METRICS_GET_VERSION + 1
    request.numMetrics = 1
    request.metrics[0].metricId = pynvml.NVML_GPM_METRIC_SM_UTIL
    request.sample1, request.sample2 = first, second
    with pytest.raises(pynvml.NVMLError_ArgumentVersionMismatch):
        pynvml.nvmlGpmMetricsGet(request)


@pytest.mark.parametrize("device", [
    gpu(0, architecture="ampere", gpm={"sm_util": 40}),
    gpu(0, gpm_supported=False, gpm={"sm_util": 40}),  # a Hopper VM with GPM off
])
def test_device_without_gpm_says_so_and_refuses_samples(nvml, device):
    nvml(scenario(device))
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice == 0
    sample = pynvml.nvmlGpmSampleAlloc()
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlGpmSampleGet(handle, sample)
    pynvml.nvmlGpmSampleFree(sample)


def test_mig_samples_are_per_gpu_instance_on_the_parent(nvml):
    hw = nvml(scenario(gpu(0, mig_mode=True, mig_devices=[
        mig(1, 0, gpm={"sm_util": 70}),
        mig(2, 0, gpm={"sm_util": 20}),
    ])))
    parent = pynvml.nvmlDeviceGetHandleByIndex(0)
    samples = [pynvml.nvmlGpmSampleAlloc() for _ in range(4)]
    pynvml.nvmlGpmMigSampleGet(parent, 1, samples[0])
    pynvml.nvmlGpmMigSampleGet(parent, 2, samples[1])
    move_to(hw, 12)
    pynvml.nvmlGpmMigSampleGet(parent, 1, samples[2])
    pynvml.nvmlGpmMigSampleGet(parent, 2, samples[3])
    sm = [pynvml.NVML_GPM_METRIC_SM_UTIL]
    assert metrics_between(samples[0], samples[2], sm)[0].value == pytest.approx(70.0)
    assert metrics_between(samples[1], samples[3], sm)[0].value == pytest.approx(20.0)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):  # samples of two instances
        metrics_between(samples[0], samples[3], sm)
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlGpmMigSampleGet(parent, 9, samples[0])
    mig_handle = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, 0)
    with pytest.raises(pynvml.NVMLError_NotSupported):  # MIG samples go through the parent
        pynvml.nvmlGpmSampleGet(mig_handle, samples[0])


def test_injected_errors_apply_to_gpm_calls(nvml):
    nvml(scenario(gpu(0, gpm={"sm_util": 40}), errors=[
        {"function": "nvmlGpmMetricsGet", "code": "TIMEOUT"}]))
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    first, second = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
    pynvml.nvmlGpmSampleGet(handle, first)
    pynvml.nvmlGpmSampleGet(handle, second)
    with pytest.raises(pynvml.NVMLError_Timeout):
        metrics_between(first, second, [pynvml.NVML_GPM_METRIC_SM_UTIL])


# --------------------------------------------------------------------------
# The backend
# --------------------------------------------------------------------------


def two_cycles(backend: NvidiaBackend, hw: SimulatedHardware, devices: list,
               to_t: float = 12) -> tuple[list[DeviceSample], list[DeviceSample]]:
    first = [backend.sample(d) for d in devices]
    move_to(hw, to_t)
    return first, [backend.sample(d) for d in devices]


def test_backend_readings_in_base_units(open_backend):
    links = [SWITCH_LINK] * 2
    backend, devices, hw = open_backend(scenario(gpu(0, nvlinks=links, gpm={
        "graphics_util": 55, "sm_util": 40, "sm_occupancy": 25, "dram_bw_util": 30,
        "any_tensor_util": 35, "hmma_tensor_util": 30, "imma_tensor_util": 5,
        "dfma_tensor_util": 0, "dmma_tensor_util": 0, "fp64_util": 1, "fp32_util": 12,
        "fp16_util": 8, "integer_util": 10, "pcie_tx_per_sec": 1000, "pcie_rx_per_sec": 250,
        "nvlink_tx_per_sec": {"*": 2000}, "nvlink_rx_per_sec": {"0": 100, "1": 300},
        "c2c_link_total_tx_per_sec": {"0": 64}, "c2c_link_total_rx_per_sec": {"0": 32},
    })))
    first, second = two_cycles(backend, hw, devices)
    assert gpm_readings(first[0]) == []  # nothing to measure against yet
    sample = second[0]
    assert values(sample, m.ACTIVITY, "engine") == pytest.approx(
        {"graphics": 0.55, "sm": 0.40, "sm_occupancy": 0.25, "dram": 0.30})
    assert values(sample, m.PIPE_ACTIVITY, "pipe") == pytest.approx({
        "tensor": 0.35, "tensor_hmma": 0.30, "tensor_imma": 0.05, "tensor_dfma": 0.0,
        "tensor_dmma": 0.0, "fp64": 0.01, "fp32": 0.12, "fp16": 0.08, "integer": 0.10})
    assert values(sample, m.PCIE_THROUGHPUT, "direction") == {
        "transmit": 1048576000.0, "receive": 262144000.0}
    links_read = {(dict(r.labels)["link_type"], dict(r.labels)["link"],
                   dict(r.labels)["direction"]): r.value
                  for r in sample.readings if r.metric == m.LINK_THROUGHPUT}
    assert links_read == {
        ("nvlink", "0", "transmit"): 2000 * MIB, ("nvlink", "1", "transmit"): 2000 * MIB,
        ("nvlink", "0", "receive"): 100 * MIB, ("nvlink", "1", "receive"): 300 * MIB,
        ("c2c", "0", "transmit"): 64 * MIB, ("c2c", "0", "receive"): 32 * MIB,
    }
    for spec in map(m.spec, (m.ACTIVITY, m.PIPE_ACTIVITY, m.PCIE_THROUGHPUT, m.LINK_THROUGHPUT)):
        assert {k for r in sample.readings if r.metric == spec.name for k, _ in r.labels} == set(
            spec.labels)


def test_backend_follows_changing_activity(open_backend):
    backend, devices, hw = open_backend(scenario(gpu(0, gpm={
        "sm_util": {"keyframes": [[0, 0], [20, 100]], "interpolate": "linear"}})))
    backend.sample(devices[0])
    for t, expected in ((12, 0.55), (16, 0.70)):  # averages over [10, 12], then [12, 16]
        move_to(hw, t)
        assert values(backend.sample(devices[0]), m.ACTIVITY, "engine") == pytest.approx(
            {"sm": expected})


def test_a_repeated_answer_keeps_its_readings_and_a_changed_one_is_read(open_backend):
    backend, devices, hw = open_backend(scenario(gpu(0, gpm={
        "sm_util": {"keyframes": [[0, 40], [20, 40], [20, 80]], "interpolate": "linear"}})))
    backend.sample(devices[0])
    found = []
    for t in (12, 14, 16, 26):  # averages over [10, 12] ... [14, 16]: 40 %; [16, 26]: 64 %
        move_to(hw, t)
        found.append(backend.sample(devices[0]))
    same, again, changed = (gpm_readings(sample) for sample in found[1:])
    assert values(found[0], m.ACTIVITY, "engine")["sm"] == pytest.approx(0.40)
    assert len(same) == len(again) == 1 and all(a is b for a, b in zip(same, again, strict=True))
    assert values(found[3], m.ACTIVITY, "engine")["sm"] == pytest.approx(0.64)
    assert len(changed) == len(same)


def test_backend_activity_per_mig_instance(open_backend):
    backend, devices, hw = open_backend(scenario(gpu(0, mig_mode=True, gpm={"sm_util": 50},
                                                     mig_devices=[
        mig(1, 0, gpm={"sm_util": 70, "any_tensor_util": 60}),
        mig(2, 0, gpm={"sm_util": 20}),
    ])))
    _, second = two_cycles(backend, hw, devices)
    by_index = {s.device.index: values(s, m.ACTIVITY, "engine") for s in second}
    assert by_index == {"0": {"sm": pytest.approx(0.5)}, "0/1/0": {"sm": pytest.approx(0.7)},
                        "0/2/0": {"sm": pytest.approx(0.2)}}
    tensor = {s.device.index: values(s, m.PIPE_ACTIVITY, "pipe") for s in second}
    assert tensor["0/1/0"] == {"tensor": pytest.approx(0.6)} and tensor["0/2/0"] == {}


@pytest.mark.parametrize("name", ["a100-mig", "l4-pcie", "unsupported"])
def test_shipped_devices_without_gpm_have_no_activity_series(open_backend, name):
    doc = load_scenario(name)
    doc["freeze_at_s"] = 10
    backend, devices, hw = open_backend(doc)
    _, second = two_cycles(backend, hw, devices)
    for sample in second:
        if not sample.up:
            continue
        assert gpm_readings(sample) == [], sample.device.index
        assert sample.errors.get(backend_gpm.GPM_UNSUPPORTED) == "not_supported"


def test_backend_on_gpm_hopper_scenario_reports_busy_and_idle(open_backend):
    doc = load_scenario("hgx-h200")
    doc["freeze_at_s"] = 10
    backend, devices, hw = open_backend(doc)
    _, second = two_cycles(backend, hw, devices)
    sm = {s.device.index: values(s, m.ACTIVITY, "engine")["sm"] for s in second}
    tensor = {s.device.index: values(s, m.PIPE_ACTIVITY, "pipe")["tensor"] for s in second}
    assert all(sm[i] > 0.8 and tensor[i] > 0.5 for i in "0123")  # training
    assert sm["5"] == 0 and sm["7"] == 0 and tensor["5"] == 0  # idle: measured 0, not absent


def test_failing_gpm_call_costs_only_its_values(open_backend):
    doc = scenario(gpu(0, gpm={"sm_util": 40}), gpu(1, gpm={"sm_util": 60}),
                   errors=[{"function": "nvmlGpmMetricsGet", "device": 0, "code": "TIMEOUT"}])
    backend, devices, hw = open_backend(doc)
    _, second = two_cycles(backend, hw, devices)
    assert second[0].up and values(second[0], m.ACTIVITY, "engine") == {}
    assert any(r.metric == m.POWER for r in second[0].readings)
    assert second[0].errors.get("nvmlGpmMetricsGet") == "timeout"
    assert values(second[1], m.ACTIVITY, "engine") == {"sm": pytest.approx(0.6)}


def test_slow_gpm_call_suspends_gpm_not_the_device(open_backend):
    doc = scenario(gpu(0, gpm={"sm_util": 40}), gpu(1, gpm={"sm_util": 60}),
                   delays=[{"function": "nvmlGpmSampleGet", "device": 0,
                            "seconds": backend_gpm.SLOW_CALL_S * 3}])
    backend, devices, hw = open_backend(doc)
    backend.sample(devices[0])  # one slow call: as likely a busy CPU, nothing suspended
    assert backend_gpm.GPM_UNSUPPORTED not in backend.sample(devices[0]).errors
    later = [backend.sample(d) for d in devices]  # slow twice in a row: suspended from here
    assert later[0].up and any(r.metric == m.POWER for r in later[0].readings)
    assert values(later[0], m.ACTIVITY, "engine") == {}
    assert later[0].errors[backend_gpm.GPM_UNSUPPORTED].startswith("suspended")
    move_to(hw, 12)
    assert values(backend.sample(devices[1]), m.ACTIVITY, "engine") == {"sm": pytest.approx(0.6)}


def test_a_device_offering_no_metric_is_not_sampled_again(open_backend):
    backend, devices, hw = open_backend(scenario(gpu(0)))  # Hopper, but no GPM signal at all
    two_cycles(backend, hw, devices)
    calls = []
    original = pynvml._nvmlGetFunctionPointer
    pynvml._nvmlGetFunctionPointer = lambda name: (calls.append(name), original(name))[1]
    try:
        sample = backend.sample(devices[0])
    finally:
        pynvml._nvmlGetFunctionPointer = original
    assert sample.up and gpm_readings(sample) == []
    assert not [name for name in calls if name.startswith("nvmlGpm")]


def test_agent_keeps_a_device_whose_gpm_call_hangs_for_seconds(tmp_path):
    doc = scenario(gpu(0, gpm={"sm_util": 40}), gpu(1, gpm={"sm_util": 60}), freeze_at_s=None,
                   delays=[{"function": "nvmlGpmSampleGet", "device": 1, "seconds": 3,
                            "from_s": 1.0}])
    with AgentProcess("--simulate", write_scenario(tmp_path, doc), "--interval", "0.5") as agent:
        # one late cycle while the call hangs; then GPM is suspended on device 1 alone
        snapshot = agent.wait_for(lambda d: len(d["devices"]) == 2 and all(
            x["up"] and not x["stale"] for x in d["devices"]) and d["devices"][1]["errors"].get(
            backend_gpm.GPM_UNSUPPORTED, "").startswith("suspended"), timeout=30)
        first, second = snapshot["devices"]
        assert m.POWER in second["values"] and m.ACTIVITY not in second["values"]
        assert first["values"][m.ACTIVITY][0]["value"] == pytest.approx(0.4)
        assert backend_gpm.GPM_UNSUPPORTED not in first["errors"]
