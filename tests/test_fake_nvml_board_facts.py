"""Board facts other monitoring tools read, answered by the simulated NVML library.

nvidia-smi, DCGM and nvitop ask for BAR1 memory, fans, modes, compute capability,
part numbers and power-limit constraints; the fake answers them through the real
nvidia-ml-py binding as the boards do, and NOT_SUPPORTED (not a missing symbol)
where a board lacks the feature.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pynvml
import pytest

from ray_accel.exporter.simulate import ScenarioError, SimulatedHardware, load_scenario

MIB = 1024**2


def gpu(i: int, **keys: Any) -> dict[str, Any]:
    return {"name": "NVIDIA Test GPU", "uuid": f"GPU-00000000-0000-4000-8000-{i:012x}",
            "pci_bus_id": f"00000000:{0x10 + i:02X}:00.0", **keys}


@pytest.fixture
def nvml(tmp_path) -> Iterator[Callable[[Any], SimulatedHardware]]:
    started = iter(range(100))
    initialised = []

    def start(scenario: Any) -> SimulatedHardware:
        hardware = SimulatedHardware.start(scenario, state_dir=tmp_path / f"hw{next(started)}")
        hardware.activate()
        pynvml.nvmlInit()
        initialised.append(hardware)
        return hardware

    yield start
    for _ in initialised:
        pynvml.nvmlShutdown()


def not_supported(call: Callable[[], Any]) -> bool:
    try:
        call()
    except pynvml.NVMLError as error:
        return error.value == pynvml.NVML_ERROR_NOT_SUPPORTED
    return False


def test_the_h200_answers_as_the_recorded_board(nvml):
    nvml("hgx-h200")
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    bar1 = pynvml.nvmlDeviceGetBAR1MemoryInfo(handle)
    assert (bar1.bar1Total, bar1.bar1Used) == (262144 * MIB, 1 * MIB)
    assert bar1.bar1Free == bar1.bar1Total - bar1.bar1Used
    assert pynvml.nvmlDeviceGetBrand(handle) == pynvml.NVML_BRAND_NVIDIA
    assert pynvml.nvmlDeviceGetVbiosVersion(handle) == "96.00.A5.00.1A"
    assert pynvml.nvmlDeviceGetBoardPartNumber(handle) == "692-2G520-0282-001"
    assert pynvml.nvmlDeviceGetPersistenceMode(handle) == pynvml.NVML_FEATURE_ENABLED
    assert pynvml.nvmlDeviceGetComputeMode(handle) == pynvml.NVML_COMPUTEMODE_DEFAULT
    assert pynvml.nvmlDeviceGetDisplayActive(handle) == pynvml.NVML_FEATURE_DISABLED
    assert pynvml.nvmlDeviceGetCudaComputeCapability(handle) == (9, 0)
    assert pynvml.nvmlDeviceGetPowerManagementLimitConstraints(handle) == [200000, 700000]
    assert pynvml.nvmlDeviceGetPowerManagementDefaultLimit(handle) == 700000
    assert pynvml.nvmlDeviceGetNumGpuCores(handle) == 16896
    assert pynvml.nvmlDeviceGetMemoryBusWidth(handle) == 6144
    # Passively cooled: the fan calls exist and answer NOT_SUPPORTED.
    assert not_supported(lambda: pynvml.nvmlDeviceGetNumFans(handle))
    assert not_supported(lambda: pynvml.nvmlDeviceGetFanSpeed(handle))
    assert not_supported(lambda: pynvml.nvmlDeviceGetFanSpeed_v2(handle, 0))
    # Linux has no driver model; driver 580 calls the display mode deprecated.
    assert not_supported(lambda: pynvml.nvmlDeviceGetDriverModel(handle))
    with pytest.raises(pynvml.NVMLError) as deprecated:
        pynvml.nvmlDeviceGetDisplayMode(handle)
    assert deprecated.value.value == pynvml.NVML_ERROR_DEPRECATED
    assert not_supported(lambda: pynvml.nvmlDeviceGetConfComputeMemSizeInfo(handle))


def test_temperature_v_reads_the_same_sensor_and_checks_its_version(nvml):
    nvml({"devices": [gpu(0, temperature_c=61)]})
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetTemperatureV(handle, pynvml.NVML_TEMPERATURE_GPU) == 61
    assert pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU) == 61
    temperature = pynvml.c_nvmlTemperature_v1_t()
    temperature.version = pynvml.nvmlTemperature_v1 + 1
    function = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetTemperatureV")
    mismatch = pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
    assert function(handle, pynvml.byref(temperature)) == mismatch


def test_fans_of_an_actively_cooled_card(nvml):
    nvml({"devices": [gpu(0, fan_count=2, fan_speed_percent=35)]})
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetNumFans(handle) == 2
    assert pynvml.nvmlDeviceGetFanSpeed(handle) == 35
    assert pynvml.nvmlDeviceGetFanSpeed_v2(handle, 1) == 35
    with pytest.raises(pynvml.NVMLError) as beyond:
        pynvml.nvmlDeviceGetFanSpeed_v2(handle, 2)
    assert beyond.value.value == pynvml.NVML_ERROR_INVALID_ARGUMENT


def test_bar1_on_mig_handles(nvml):
    nvml("a100-mig")
    parent = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetBAR1MemoryInfo(parent).bar1Total == 128 * 1024 * MIB
    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, 0)
    assert pynvml.nvmlDeviceGetBAR1MemoryInfo(mig).bar1Total == 64 * 1024 * MIB
    # Board-wide facts belong to the physical GPU.
    assert not_supported(lambda: pynvml.nvmlDeviceGetPersistenceMode(mig))


def test_compute_capability_follows_the_architecture_unless_given(nvml):
    nvml({"devices": [gpu(0, architecture="ampere"),
                      gpu(1, architecture="ampere", cuda_compute_capability=[8, 6]),
                      gpu(2)]})
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(3)]
    assert pynvml.nvmlDeviceGetCudaComputeCapability(handles[0]) == (8, 0)
    assert pynvml.nvmlDeviceGetCudaComputeCapability(handles[1]) == (8, 6)
    assert not_supported(lambda: pynvml.nvmlDeviceGetCudaComputeCapability(handles[2]))


def test_nvlink_error_counters_agree_with_the_link_fields(nvml):
    links = [{"version": 4, "remote_device_type": "switch",
              "remote_pci_bus_id": "00000000:05:00.0"}] * 2
    fields = {"161": {"1": 7}, "163": {"*": {"start": 100, "rate_per_s": 0}}}
    nvml({"devices": [gpu(0, nvlinks=links, fields=fields)]})
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    replay = pynvml.NVML_NVLINK_ERROR_DL_REPLAY
    assert pynvml.nvmlDeviceGetNvLinkErrorCounter(handle, 1, replay) == 7
    assert not_supported(lambda: pynvml.nvmlDeviceGetNvLinkErrorCounter(handle, 0, replay))
    crc = pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT
    assert [pynvml.nvmlDeviceGetNvLinkErrorCounter(handle, link, crc) for link in (0, 1)] == \
        [100, 100]
    assert not_supported(lambda: pynvml.nvmlDeviceGetNvLinkErrorCounter(
        handle, 0, pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA))
    with pytest.raises(pynvml.NVMLError) as no_link:
        pynvml.nvmlDeviceGetNvLinkErrorCounter(handle, 2, replay)
    assert no_link.value.value == pynvml.NVML_ERROR_INVALID_ARGUMENT


def test_violation_time_is_the_time_a_reason_held_the_clocks(nvml):
    power_cap = pynvml.nvmlClocksEventReasonSwPowerCap
    reasons = {"keyframes": [[0, 0], [10, power_cap], [25, 0]], "interpolate": "step"}
    nvml({"freeze_at_s": 40, "devices": [gpu(0, clocks_event_reasons=reasons)]})
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    before = time.time()
    power = pynvml.nvmlDeviceGetViolationStatus(handle, pynvml.NVML_PERF_POLICY_POWER)
    assert power.violationTime == 15 * 10**9
    assert power.referenceTime >= int(before * 1e6)
    thermal = pynvml.nvmlDeviceGetViolationStatus(handle, pynvml.NVML_PERF_POLICY_THERMAL)
    assert thermal.violationTime == 0
    with pytest.raises(pynvml.NVMLError) as bad_policy:
        pynvml.nvmlDeviceGetViolationStatus(handle, 7)
    assert bad_policy.value.value == pynvml.NVML_ERROR_INVALID_ARGUMENT


def test_process_samples_are_stamped_with_the_wall_clock_while_time_is_frozen(nvml):
    nvml({"freeze_at_s": 100000, "devices": [gpu(0, processes=[{"pid": 4242, "sm_percent": 50}])]})
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    first = pynvml.nvmlDeviceGetProcessUtilization(handle, 0)
    assert [s.pid for s in first] == [4242]
    assert abs(first[0].timeStamp / 1e6 - time.time()) < 60
    time.sleep(0.2)  # past the driver's sampling period
    # A caller passing the newest stamp it saw gets the next sample, not NOT_FOUND for ever.
    again = pynvml.nvmlDeviceGetProcessUtilization(handle, first[0].timeStamp)
    assert again[0].timeStamp > first[0].timeStamp


@pytest.mark.parametrize(("key", "value", "message"), [
    ("compute_mode", "SHARED", "compute mode"),
    ("brand", "ACME", "brand"),
    ("cuda_compute_capability", [9], "major, minor"),
    ("fan_speed_percent", 120, "fan_speed_percent"),
    ("vbios_version", "x" * 40, "vbios_version"),
])
def test_bad_board_facts_are_refused_with_the_key(key, value, message):
    with pytest.raises(ScenarioError, match=message):
        load_scenario({"devices": [gpu(0, **{key: value})]})
