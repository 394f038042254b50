"""The simulated libnvidia-ml.so.1, driven through the real nvidia-ml-py binding.

Most tests run in this process: the fake library re-reads the state file named
by RAY_ACCEL_FAKE_NVML_STATE at every nvmlInit, so each test starts its own
scenario and the `nvml` fixture shuts NVML down again afterwards. Tests that
need a fresh process (no driver, Ray's provider, updates seen by a running
process) use subprocesses with `SimulatedHardware.environ()`.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from typing import Any

import pynvml
import pytest
from nvml_session import shutdown_all

from ray_accel.exporter.simulate import (
    STATE_ENV,
    ScenarioError,
    SimulatedHardware,
    available_scenarios,
    load_scenario,
)
from ray_accel.exporter.simulate import build as build_module
from ray_accel.exporter.simulate.nvml_vocabulary import NVML_FUNCTIONS

GIB = 1024**3
MIB = 1024**2
NONE_ID = 0xFFFFFFFF


def uuid_of(i: int) -> str:
    return f"GPU-00000000-0000-4000-8000-{i:012x}"


def gpu(i: int, **keys: Any) -> dict[str, Any]:
    """A minimal device with index-derived identity plus the given keys."""
    return {
        "name": "NVIDIA Test GPU",
        "uuid": uuid_of(i),
        "pci_bus_id": f"00000000:{0x10 + i:02X}:00.0",
        **keys,
    }


def address(handle: Any) -> int:
    return ctypes.cast(handle, ctypes.c_void_p).value or 0


def frozen(name: str, t: float) -> dict[str, Any]:
    scenario = load_scenario(name)
    scenario["freeze_at_s"] = t
    return scenario


def run_child(hw: SimulatedHardware, code: str, timeout: float = 60) -> str:
    env = {**os.environ, **hw.environ()}
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


# --------------------------------------------------------------------------
# Library and symbols
# --------------------------------------------------------------------------


def test_library_exports_exactly_the_simulated_functions() -> None:
    path = build_module.build_library()
    lib = ctypes.CDLL(str(path))
    missing = [name for name in NVML_FUNCTIONS if not hasattr(lib, name)]
    assert missing == []
    nm = shutil.which("nm")
    if nm:
        out = subprocess.run(
            [nm, "-D", "--defined-only", str(path)], capture_output=True, text=True, check=True
        ).stdout
        exported = {line.split()[-1] for line in out.splitlines() if " T " in line}
        assert exported == set(NVML_FUNCTIONS)


def test_symbols_the_bindings_ask_for_are_exported() -> None:
    lib = ctypes.CDLL(str(build_module.build_library()))
    wanted = {
        "nvmlInitWithFlags",
        "nvmlShutdown",
        "nvmlDeviceGetCount_v2",
        "nvmlDeviceGetHandleByIndex_v2",
        "nvmlDeviceGetHandleByPciBusId_v2",
        "nvmlDeviceGetPciInfo_v3",
        "nvmlDeviceGetMemoryInfo_v2",
        "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetGraphicsRunningProcesses_v3",
        "nvmlDeviceGetProcessesUtilizationInfo",
        "nvmlEventSetWait_v2",
        "nvmlDeviceGetNvLinkRemotePciInfo_v2",
        "nvmlDeviceGetGpuFabricInfoV",
    }
    assert all(hasattr(lib, name) for name in wanted)
    from ray._private.thirdparty.pynvml import pynvml as ray_pynvml

    source = pathlib.Path(ray_pynvml.__file__).read_text()
    for wrapper in (
        "nvmlDeviceGetCount",
        "nvmlDeviceGetHandleByIndex",
        "nvmlDeviceGetMemoryInfo",
        "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetGraphicsRunningProcesses_v3",
        "nvmlDeviceGetProcessesUtilizationInfo",
    ):
        body = source.split(f"def {wrapper}(", 1)[1].split("\ndef ", 1)[0]
        for symbol in body.split('_nvmlGetFunctionPointer("')[1:]:
            assert hasattr(lib, symbol.split('"', 1)[0]), symbol


def test_build_is_cached_and_parallel_safe(tmp_path: pathlib.Path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    code = "from ray_accel.exporter.simulate.build import build_library; print(build_library())"
    procs = [
        subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    paths = {p.communicate(timeout=120)[0].strip() for p in procs}
    assert all(p.returncode == 0 for p in procs)
    assert len(paths) == 1
    built = pathlib.Path(paths.pop())
    assert built.name == "libnvidia-ml.so.1" and built.is_relative_to(tmp_path)
    assert [p.name for p in built.parent.iterdir()] == ["libnvidia-ml.so.1"]
    ctypes.CDLL(str(built))


def test_missing_compiler_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", "/nonexistent/cc")
    with pytest.raises(build_module.BuildError, match="no C compiler"):
        build_module.build_library()


# --------------------------------------------------------------------------
# Every shipped scenario through the binding
# --------------------------------------------------------------------------


def _nvidia_devices(scenario: dict) -> list[dict]:
    """The devices NVML lists: a scenario's AMD devices are amdsmi's (tests/test_amd_backend.py)."""
    return [d for d in scenario["devices"] if d.get("vendor", "nvidia") == "nvidia"]


@pytest.mark.parametrize(
    "name", [n for n in available_scenarios() if _nvidia_devices(load_scenario(n))])
def test_shipped_scenario_enumerates(nvml: Callable[..., SimulatedHardware], name: str) -> None:
    hw = nvml(name)
    scenario = hw.scenario
    assert hw.scenario_name == name
    assert pynvml.nvmlDeviceGetCount() == len(_nvidia_devices(scenario))
    assert pynvml.nvmlSystemGetDriverVersion() == scenario["driver_version"]
    for i, device in enumerate(_nvidia_devices(scenario)):
        handle = pynvml.nvmlDeviceGetHandleByIndex(i)
        if device.get("lost_at_s") is not None:
            continue  # lost later in the run; see test_lost_gpu
        assert pynvml.nvmlDeviceGetIndex(handle) == i
        assert pynvml.nvmlDeviceGetName(handle) == device["name"]
        assert pynvml.nvmlDeviceGetUUID(handle) == device["uuid"]
        assert pynvml.nvmlDeviceGetPciInfo(handle).busId == device["pci_bus_id"]
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        assert memory.total == device["memory_total_bytes"]
        assert memory.used + memory.free == memory.total
        same = pynvml.nvmlDeviceGetHandleByUUID(device["uuid"])
        assert address(same) == address(handle)
        for j, mig in enumerate(device.get("mig_devices") or ()):
            mig_handle = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, j)
            assert pynvml.nvmlDeviceGetName(mig_handle) == mig["name"]


def test_shipped_scenarios_are_realistic() -> None:
    h200 = load_scenario("hgx-h200")
    assert len(h200["devices"]) == 8
    for i, device in enumerate(h200["devices"]):
        assert device["memory_total_bytes"] == 150754820096
        assert device["power_limit_mw"] == 700000
        assert device["max_clock_sm_mhz"] == 1980 and device["max_clock_memory_mhz"] == 2619
        assert len(device["nvlinks"]) == 18
        assert device["numa_node"] == (0 if i < 4 else 1)
    assert [d["pci_bus_id"][9:11] for d in h200["devices"]] == [
        "18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"
    ]  # fmt: skip
    l4 = load_scenario("l4-pcie")
    assert {d["name"] for d in l4["devices"]} == {"NVIDIA L4"}
    assert all("nvlinks" not in d and "mig_mode" not in d for d in l4["devices"])
    a100 = load_scenario("a100-mig")["devices"][0]
    assert [m["name"].rsplit(" ", 1)[1] for m in a100["mig_devices"]] == [
        "3g.40gb",
        "2g.20gb",
        "1g.10gb",
    ]


# --------------------------------------------------------------------------
# Exact values
# --------------------------------------------------------------------------

FULL_DEVICE = {
    "name": "NVIDIA H200",
    "uuid": uuid_of(0),
    "serial": "1653924012817",
    "pci_bus_id": "0000:2a:00.0",
    "pci_device_id": 0x233510DE,
    "pci_subsystem_id": 0x18BE10DE,
    "minor_number": 3,
    "architecture": "hopper",
    "memory_total_bytes": 150754820096,
    "memory_reserved_bytes": 633339904,
    "memory_used_bytes": 20 * GIB,
    "utilization_gpu_percent": 87,
    "utilization_memory_percent": 33,
    "encoder_percent": 5,
    "decoder_percent": 6,
    "power_mw": 512345,
    "power_limit_mw": 700000,
    "energy_start_mj": 1000,
    "temperature_c": 61,
    "clock_sm_mhz": 1755,
    "clock_memory_mhz": 2619,
    "clock_video_mhz": 1530,
    "max_clock_sm_mhz": 1980,
    "max_clock_memory_mhz": 2619,
    "max_clock_video_mhz": 1755,
    "clocks_event_reasons": 4,
    "performance_state": 2,
    "ecc_mode": True,
    "ecc_corrected": 12,
    "ecc_uncorrected": 1,
    "remapped_rows": {"correctable": 3, "uncorrectable": 1, "pending": True, "failure": False},
    "retired_pages": {"single_bit": 2, "double_bit": 1, "pending": True},
    "pcie_replay": 7,
    "mig_mode": False,
    "processes": [
        {"pid": 1234, "used_memory_bytes": 10 * GIB, "sm_percent": 80, "memory_percent": 30},
        {"pid": 5678, "used_memory_bytes": GIB, "type": "graphics"},
        {"pid": 999, "used_memory_bytes": 2 * GIB, "type": "both", "encoder_percent": 9},
    ],
}
FULL = {
    "name": "full",
    "driver_version": "570.133.20",
    "nvml_version": "12.570.133.20",
    "cuda_driver_version": 12080,
    "freeze_at_s": 100,
    "devices": [FULL_DEVICE, gpu(1, memory_total_bytes=GIB, memory_used_bytes=0)],
}


def test_frozen_values_round_trip(nvml: Callable[..., SimulatedHardware]) -> None:
    nvml(FULL)
    n = pynvml
    assert n.nvmlSystemGetDriverVersion() == "570.133.20"
    assert n.nvmlSystemGetNVMLVersion() == "12.570.133.20"
    assert n.nvmlSystemGetCudaDriverVersion() == n.nvmlSystemGetCudaDriverVersion_v2() == 12080
    h = n.nvmlDeviceGetHandleByIndex(0)
    assert n.nvmlDeviceGetSerial(h) == "1653924012817"
    pci = n.nvmlDeviceGetPciInfo(h)
    assert (pci.domain, pci.bus, pci.device) == (0, 0x2A, 0)
    assert pci.busId == "00000000:2A:00.0" and pci.busIdLegacy == "0000:2A:00.0"
    assert (pci.pciDeviceId, pci.pciSubSystemId) == (0x233510DE, 0x18BE10DE)
    assert n.nvmlDeviceGetMinorNumber(h) == 3
    assert n.nvmlDeviceGetArchitecture(h) == n.NVML_DEVICE_ARCH_HOPPER
    v1 = n.nvmlDeviceGetMemoryInfo(h)
    assert (v1.total, v1.used, v1.free) == (
        150754820096,
        20 * GIB + 633339904,
        150754820096 - 633339904 - 20 * GIB,
    )
    v2 = n.nvmlDeviceGetMemoryInfo(h, version=n.nvmlMemory_v2)
    assert (v2.total, v2.reserved, v2.used, v2.free) == (
        150754820096,
        633339904,
        20 * GIB,
        v1.free,
    )
    with pytest.raises(n.NVMLError_ArgumentVersionMismatch):
        n.nvmlDeviceGetMemoryInfo(h, version=0x01000028)
    util = n.nvmlDeviceGetUtilizationRates(h)
    assert (util.gpu, util.memory) == (87, 33)
    assert n.nvmlDeviceGetEncoderUtilization(h)[0] == 5
    assert n.nvmlDeviceGetDecoderUtilization(h)[0] == 6
    assert n.nvmlDeviceGetPowerUsage(h) == 512345
    assert n.nvmlDeviceGetEnforcedPowerLimit(h) == n.nvmlDeviceGetPowerManagementLimit(h) == 700000
    assert n.nvmlDeviceGetTotalEnergyConsumption(h) == 1000 + 512345 * 100
    assert n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU) == 61
    assert n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM) == 1755
    assert n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_GRAPHICS) == 1755  # defaults to SM
    assert n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM) == 2619
    assert n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_VIDEO) == 1530
    assert n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM) == 1980
    assert n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_GRAPHICS) == 1980
    assert n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_VIDEO) == 1755
    assert n.nvmlDeviceGetCurrentClocksEventReasons(h) == 4
    assert n.nvmlDeviceGetCurrentClocksThrottleReasons(h) == 4
    assert n.nvmlDeviceGetPerformanceState(h) == 2
    assert n.nvmlDeviceGetEccMode(h) == [1, 1]
    for counter_type in (n.NVML_VOLATILE_ECC, n.NVML_AGGREGATE_ECC):
        assert n.nvmlDeviceGetTotalEccErrors(h, 0, counter_type) == 12
        assert n.nvmlDeviceGetTotalEccErrors(h, 1, counter_type) == 1
    assert n.nvmlDeviceGetRemappedRows(h) == (3, 1, 1, 0)
    assert len(n.nvmlDeviceGetRetiredPages(h, 0)) == 2
    pages = n.nvmlDeviceGetRetiredPages_v2(h, 1)
    assert len(pages) == 1 and pages[0]["address"] > 0
    assert n.nvmlDeviceGetRetiredPagesPendingStatus(h) == 1
    assert n.nvmlDeviceGetPcieReplayCounter(h) == 7
    assert n.nvmlDeviceGetMigMode(h) == [0, 0]
    compute = {(p.pid, p.usedGpuMemory) for p in n.nvmlDeviceGetComputeRunningProcesses(h)}
    assert compute == {(1234, 10 * GIB), (999, 2 * GIB)}
    graphics = n.nvmlDeviceGetGraphicsRunningProcesses(h)
    assert {p.pid for p in graphics} == {5678, 999}
    assert {(p.gpuInstanceId, p.computeInstanceId) for p in graphics} == {(NONE_ID, NONE_ID)}
    v2_list = n.nvmlDeviceGetComputeRunningProcesses_v2(h)
    assert {p.pid for p in v2_list} == {1234, 999}


def test_keyframes_counters_and_energy(nvml: Callable[..., SimulatedHardware]) -> None:
    device = gpu(
        0,
        utilization_gpu_percent={"keyframes": [[10, 20], [20, 40]]},
        utilization_memory_percent={"keyframes": [[10, 20], [20, 40]], "interpolate": "step"},
        temperature_c={"keyframes": [[0, 30], [5, 80]], "period_s": 10},
        power_mw={"keyframes": [[0, 1000], [10, 3000]]},
        energy_start_mj=5,
        ecc_mode=True,
        ecc_corrected={"start": 100, "rate_per_s": 10},
        ecc_uncorrected={"start": 1, "rate_per_s": {"keyframes": [[0, 0], [10, 1]]}},
        pcie_replay={
            "rate_per_s": {"keyframes": [[0, 1], [4, 3]], "period_s": 4, "interpolate": "step"}
        },
    )
    hw = nvml({"freeze_at_s": 17.5, "devices": [device]})
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    util = pynvml.nvmlDeviceGetUtilizationRates(h)
    assert util.gpu == 35  # linear between (10, 20) and (20, 40)
    assert util.memory == 20  # step holds the earlier keyframe
    # Periodic: 17.5 s is 7.5 s into a 10 s cycle, halfway from (5, 80) back to (10, 30).
    assert pynvml.nvmlDeviceGetTemperature(h, 0) == 55
    # Energy: 5 + (integral 0..10 of 1000..3000 = 20000) + 7.5 s at 3000 mW.
    assert pynvml.nvmlDeviceGetTotalEnergyConsumption(h) == 5 + 20000 + 22500
    assert pynvml.nvmlDeviceGetTotalEccErrors(h, 0, 0) == 100 + 175
    # Rate ramps 0 -> 1 over 10 s (area 5) then holds 1 for 7.5 s: 1 + floor(12.5).
    assert pynvml.nvmlDeviceGetTotalEccErrors(h, 1, 0) == 13
    # Step rate 1/s for the first 4 s of each cycle (wrap point only): 17.5 s at 1/s.
    assert pynvml.nvmlDeviceGetPcieReplayCounter(h) == 17

    scenario = hw.scenario
    scenario["freeze_at_s"] = 2.0
    hw.update(scenario)
    time.sleep(0.05)
    assert pynvml.nvmlDeviceGetUtilizationRates(h).gpu == 20  # held before the first keyframe
    assert pynvml.nvmlDeviceGetTemperature(h, 0) == 50  # 30 + (80-30) * 2/5


def test_counters_advance_with_wall_time(nvml: Callable[..., SimulatedHardware]) -> None:
    nvml({"devices": [gpu(0, pcie_replay={"start": 0, "rate_per_s": 1000})]})
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    outer_start = time.monotonic()
    first = pynvml.nvmlDeviceGetPcieReplayCounter(h)
    inner_start = time.monotonic()
    time.sleep(0.3)
    inner = time.monotonic() - inner_start
    second = pynvml.nvmlDeviceGetPcieReplayCounter(h)
    outer = time.monotonic() - outer_start
    assert 1000 * inner - 2 <= second - first <= 1000 * outer + 2


# --------------------------------------------------------------------------
# Unsupported metrics, injected errors, delays
# --------------------------------------------------------------------------


def test_absent_keys_are_not_supported(nvml: Callable[..., SimulatedHardware]) -> None:
    nvml("unsupported")
    geforce = pynvml.nvmlDeviceGetHandleByIndex(0)
    bare = pynvml.nvmlDeviceGetHandleByIndex(1)
    assert pynvml.nvmlDeviceGetUtilizationRates(geforce).gpu <= 100
    for call in (
        lambda: pynvml.nvmlDeviceGetPowerUsage(geforce),
        lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(geforce),
        lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(geforce),
        lambda: pynvml.nvmlDeviceGetEccMode(geforce),
        lambda: pynvml.nvmlDeviceGetTotalEccErrors(geforce, 0, 0),
        lambda: pynvml.nvmlDeviceGetRemappedRows(geforce),
        lambda: pynvml.nvmlDeviceGetSerial(geforce),
        lambda: pynvml.nvmlDeviceGetComputeRunningProcesses(geforce),
        lambda: pynvml.nvmlDeviceGetMigMode(geforce),
        lambda: pynvml.nvmlDeviceGetNvLinkState(geforce, 0),
        lambda: pynvml.nvmlDeviceGetTemperature(geforce, pynvml.NVML_TEMPERATURE_GPU_MAX),
        lambda: pynvml.nvmlDeviceGetUtilizationRates(bare),
        lambda: pynvml.nvmlDeviceGetClockInfo(bare, pynvml.NVML_CLOCK_SM),
        lambda: pynvml.nvmlDeviceGetArchitecture(bare),
    ):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            call()


def test_null_removes_a_default(nvml: Callable[..., SimulatedHardware]) -> None:
    nvml(
        {
            "device_defaults": {"power_mw": 100000, "clock_sm_mhz": 1000},
            "devices": [gpu(0), gpu(1, power_mw=None, clock_graphics_mhz=None)],
        }
    )
    first, second = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in (0, 1))
    assert pynvml.nvmlDeviceGetPowerUsage(first) == 100000
    assert pynvml.nvmlDeviceGetClockInfo(first, pynvml.NVML_CLOCK_GRAPHICS) == 1000
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetPowerUsage(second)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetClockInfo(second, pynvml.NVML_CLOCK_GRAPHICS)
    assert pynvml.nvmlDeviceGetClockInfo(second, pynvml.NVML_CLOCK_SM) == 1000


def test_injected_errors(nvml: Callable[..., SimulatedHardware]) -> None:
    devices = [gpu(i, power_mw=1000, temperature_c=50, processes=[]) for i in range(3)]
    errors = [
        {"function": "nvmlDeviceGetPowerUsage", "device": 1, "code": "UNKNOWN"},
        {"function": "nvmlDeviceGetComputeRunningProcesses", "code": "NO_PERMISSION"},
        {"function": "nvmlDeviceGetTemperature", "device": 2, "code": 15, "until_s": 10},
        {"function": "nvmlDeviceGetTemperature", "device": 0, "code": "TIMEOUT", "from_s": 6},
        {"function": "nvmlSystemGetDriverVersion", "code": "NVML_ERROR_CORRUPTED_INFOROM"},
    ]
    nvml({"freeze_at_s": 5, "devices": devices, "errors": errors})
    h = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(3)]
    assert pynvml.nvmlDeviceGetPowerUsage(h[0]) == 1000
    with pytest.raises(pynvml.NVMLError_Unknown):
        pynvml.nvmlDeviceGetPowerUsage(h[1])
    for handle in h:  # the base name matches the _v3 the binding calls
        with pytest.raises(pynvml.NVMLError_NoPermission):
            pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
    assert pynvml.nvmlDeviceGetGraphicsRunningProcesses(h[0]) == []
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetTemperature(h[2], 0)
    assert pynvml.nvmlDeviceGetTemperature(h[0], 0) == 50  # window starts at 6 s
    with pytest.raises(pynvml.NVMLError_CorruptedInforom):
        pynvml.nvmlSystemGetDriverVersion()


def test_driver_that_fails_then_appears(tmp_path: pathlib.Path) -> None:
    shutdown_all()
    hw = SimulatedHardware.start(
        {
            "devices": [gpu(0)],
            "errors": [
                {"function": "nvmlInitWithFlags", "code": "DRIVER_NOT_LOADED", "until_s": 0.4}
            ],
        },
        state_dir=tmp_path,
    )
    hw.activate()
    try:
        with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
            pynvml.nvmlInit()
        time.sleep(max(0.0, 0.45 - hw.elapsed_s()))
        pynvml.nvmlInit()
        assert pynvml.nvmlDeviceGetCount() == 1
    finally:
        shutdown_all()


def test_delays_hit_only_their_target(nvml: Callable[..., SimulatedHardware]) -> None:
    devices = [gpu(i, power_mw=1000, temperature_c=40) for i in range(2)]
    delays = [{"function": "nvmlDeviceGetPowerUsage", "device": 1, "seconds": 1.0}]
    nvml({"devices": devices, "delays": delays})
    h0, h1 = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in (0, 1))
    slept: list[float] = []

    def delayed_call() -> None:
        start = time.monotonic()
        assert pynvml.nvmlDeviceGetPowerUsage(h1) == 1000  # proceeds normally afterwards
        slept.append(time.monotonic() - start)

    slow = threading.Thread(target=delayed_call)
    slow.start()
    time.sleep(0.05)
    # Other devices, and other functions on the delayed device, answer while it sleeps.
    for _ in range(20):
        assert pynvml.nvmlDeviceGetPowerUsage(h0) == 1000
    assert pynvml.nvmlDeviceGetTemperature(h1, 0) == 40
    assert slow.is_alive()
    slow.join()
    assert len(slept) == 1 and slept[0] >= 0.95


# --------------------------------------------------------------------------
# Lost GPU, XID events, MIG
# --------------------------------------------------------------------------


def test_lost_gpu(nvml: Callable[..., SimulatedHardware]) -> None:
    hw = nvml(frozen("gpu-lost", 25))
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(4)]  # still handed out
    for call in (
        pynvml.nvmlDeviceGetName,
        pynvml.nvmlDeviceGetMemoryInfo,
        pynvml.nvmlDeviceGetUtilizationRates,
        pynvml.nvmlDeviceGetComputeRunningProcesses,
        pynvml.nvmlDeviceGetPowerUsage,
    ):
        with pytest.raises(pynvml.NVMLError_GpuIsLost):
            call(handles[2])
    for i in (0, 1, 3):
        assert pynvml.nvmlDeviceGetUtilizationRates(handles[i]).gpu > 0
        assert pynvml.nvmlDeviceGetComputeRunningProcesses(handles[i])[0].pid == 30511 + i
    scenario = hw.scenario
    scenario["freeze_at_s"] = 10
    hw.update(scenario)
    time.sleep(0.05)
    assert pynvml.nvmlDeviceGetName(handles[2]) == "NVIDIA H100 80GB HBM3"


def test_lost_gpu_takes_its_mig_devices(nvml: Callable[..., SimulatedHardware]) -> None:
    scenario = frozen("a100-mig", 10)
    scenario["devices"][0]["lost_at_s"] = 20
    hw = nvml(scenario)
    parent = pynvml.nvmlDeviceGetHandleByIndex(0)
    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, 0)
    assert pynvml.nvmlDeviceGetMemoryInfo(mig).total == 40192 * MIB
    scenario["freeze_at_s"] = 21
    hw.update(scenario)
    time.sleep(0.05)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetMemoryInfo(mig)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetMemoryInfo(parent)


def test_xid_events_arrive_once(nvml: Callable[..., SimulatedHardware]) -> None:
    devices = [
        gpu(0),
        gpu(1, xid_events=[{"at_s": 0.3, "xid": 79}]),
        gpu(2, xid_events=[{"at_s": 0.0, "xid": 13}]),  # never registered
    ]
    nvml({"devices": devices})
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(3)]
    supported = pynvml.nvmlDeviceGetSupportedEventTypes(handles[0])
    assert supported & pynvml.nvmlEventTypeXidCriticalError
    events = pynvml.nvmlEventSetCreate()
    for handle in handles[:2]:
        pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, events)
    data = pynvml.nvmlEventSetWait(events, 5000)
    assert data.eventType == pynvml.nvmlEventTypeXidCriticalError
    assert data.eventData == 79
    assert pynvml.nvmlDeviceGetIndex(data.device) == 1
    assert address(data.device) == address(handles[1])
    assert (data.gpuInstanceId, data.computeInstanceId) == (NONE_ID, NONE_ID)
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait(events, 150)
    # Another set gets its own copy, at once since the event is already due.
    other = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(handles[1], pynvml.nvmlEventTypeXidCriticalError, other)
    assert pynvml.nvmlEventSetWait(other, 0).eventData == 79
    pynvml.nvmlEventSetFree(other)
    pynvml.nvmlEventSetFree(events)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceRegisterEvents(
            handles[0], pynvml.nvmlEventTypeAll, pynvml.nvmlEventSetCreate()
        )


def test_event_wait_does_not_block_other_threads(nvml: Callable[..., SimulatedHardware]) -> None:
    nvml({"devices": [gpu(0, power_mw=5000)]})
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    events = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, events)
    outcome: list[Exception] = []

    def wait() -> None:
        try:
            pynvml.nvmlEventSetWait(events, 1500)
        except pynvml.NVMLError as err:
            outcome.append(err)

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.05)
    for _ in range(200):
        assert pynvml.nvmlDeviceGetPowerUsage(h) == 5000
    assert waiter.is_alive()  # all 200 calls were answered during the wait
    waiter.join()
    assert len(outcome) == 1 and isinstance(outcome[0], pynvml.NVMLError_Timeout)
    pynvml.nvmlEventSetFree(events)


def test_mig_enumeration(nvml: Callable[..., SimulatedHardware]) -> None:
    hw = nvml("a100-mig")
    assert pynvml.nvmlDeviceGetCount() == 1
    parent = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetMigMode(parent) == [1, 1]
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(parent) == 7
    assert pynvml.nvmlDeviceIsMigDeviceHandle(parent).value == 0
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetUtilizationRates(parent)
    expected = hw.scenario["devices"][0]["mig_devices"]
    for j, mig in enumerate(expected):
        handle = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, j)
        assert pynvml.nvmlDeviceIsMigDeviceHandle(handle).value == 1
        assert pynvml.nvmlDeviceGetName(handle) == mig["name"]
        assert pynvml.nvmlDeviceGetUUID(handle) == mig["uuid"]
        assert pynvml.nvmlDeviceGetGpuInstanceId(handle) == mig["gpu_instance_id"]
        assert pynvml.nvmlDeviceGetComputeInstanceId(handle) == mig["compute_instance_id"]
        assert pynvml.nvmlDeviceGetMemoryInfo(handle).total == mig["memory_total_bytes"]
        back = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle)
        assert address(back) == address(parent)
        assert address(pynvml.nvmlDeviceGetHandleByUUID(mig["uuid"])) == address(handle)
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetUtilizationRates(handle)
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, 3)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, 7)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetGpuInstanceId(parent)
    first = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, 0)
    on_instance = pynvml.nvmlDeviceGetComputeRunningProcesses(first)
    assert [(p.pid, p.gpuInstanceId, p.computeInstanceId) for p in on_instance] == [(73311, 1, 0)]
    on_gpu = pynvml.nvmlDeviceGetComputeRunningProcesses(parent)
    assert [(p.pid, p.gpuInstanceId, p.usedGpuMemory) for p in on_gpu] == [(73311, 1, 30 * GIB)]
    assert (
        pynvml.nvmlDeviceGetComputeRunningProcesses(
            pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, 1)
        )
        == []
    )


# --------------------------------------------------------------------------
# Processes and updates
# --------------------------------------------------------------------------


def test_process_utilization_samples(nvml: Callable[..., SimulatedHardware]) -> None:
    nvml(frozen("hgx-h200", 50))
    busy = pynvml.nvmlDeviceGetHandleByIndex(0)
    empty = pynvml.nvmlDeviceGetHandleByIndex(7)
    samples = pynvml.nvmlDeviceGetProcessUtilization(busy, 0)
    assert [(s.pid, s.smUtil, s.memUtil) for s in samples] == [(41873, 96, 40)]
    stamp = samples[0].timeStamp
    info = pynvml.nvmlDeviceGetProcessesUtilizationInfo(busy, 0)
    assert [(s.pid, s.smUtil) for s in info] == [(41873, 96)]
    assert info[0].timeStamp >= stamp
    # Asked with the newest stamp seen: nothing new until the driver's next sample.
    try:
        newer = pynvml.nvmlDeviceGetProcessUtilization(busy, info[0].timeStamp)
    except pynvml.NVMLError_NotFound:
        newer = []
    assert all(s.timeStamp > info[0].timeStamp for s in newer)
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetProcessUtilization(empty, 0)
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetProcessesUtilizationInfo(empty, 0)


def test_update_reaches_a_running_process(tmp_path: pathlib.Path) -> None:
    hw = SimulatedHardware.start({"devices": [gpu(0, processes=[])]}, state_dir=tmp_path)
    code = """
        import sys, time, pynvml
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        print("ready", flush=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            pids = [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)]
            if pids:
                print("seen", pids, flush=True)
                break
            time.sleep(0.005)
    """
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**os.environ, **hw.environ()},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    hw.set_processes(0, [{"pid": 4242, "used_memory_bytes": GIB}])
    line = child.stdout.readline().strip()
    child.wait(timeout=30)
    assert line == "seen [4242]"


def test_concurrent_sampling_during_updates(nvml: Callable[..., SimulatedHardware]) -> None:
    hw = nvml("hgx-h200")
    errors: list[BaseException] = []
    stop = threading.Event()

    def sample(index: int) -> None:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        try:
            while not stop.is_set():
                pynvml.nvmlDeviceGetMemoryInfo(handle)
                pynvml.nvmlDeviceGetUtilizationRates(handle)
                pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
                pynvml.nvmlDeviceGetFieldValues(handle, [(138, 0), (139, 17), 197])
        except BaseException as err:  # reported to the main thread
            errors.append(err)

    threads = [threading.Thread(target=sample, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for k in range(30):
        hw.set_processes(k % 8, [{"pid": 1000 + k, "used_memory_bytes": k * MIB}])
        time.sleep(0.01)
    stop.set()
    for thread in threads:
        thread.join()
    assert errors == []
    time.sleep(0.05)
    latest = pynvml.nvmlDeviceGetComputeRunningProcesses(pynvml.nvmlDeviceGetHandleByIndex(29 % 8))
    assert [p.pid for p in latest] == [1029]


# --------------------------------------------------------------------------
# NVML conventions: init, handles, buffers, error strings
# --------------------------------------------------------------------------


def test_no_state_env_means_no_driver(tmp_path: pathlib.Path) -> None:
    hw = SimulatedHardware.start({"devices": [gpu(0)]}, state_dir=tmp_path)
    env = {k: v for k, v in {**os.environ, **hw.environ()}.items() if k != STATE_ENV}
    code = """
        import pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError_DriverNotLoaded:
            print("no driver")
    """
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert out.strip() == "no driver"


def test_unreadable_or_broken_state_means_no_driver(
    nvml: Callable[..., SimulatedHardware], tmp_path: pathlib.Path
) -> None:
    hw = nvml({"devices": [gpu(0)]})
    shutdown_all()
    for content in (None, "fakenvml 1\ndevice 0\nname x\n", "not a state file\n"):
        path = tmp_path / "state"
        path.unlink(missing_ok=True)
        if content is not None:
            path.write_text(content)
        os.environ[STATE_ENV] = str(path)
        with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
            pynvml.nvmlInit()
    os.environ[STATE_ENV] = str(hw.state_path)
    pynvml.nvmlInit()
    assert pynvml.nvmlDeviceGetCount() == 1


def test_raw_conventions(nvml: Callable[..., SimulatedHardware]) -> None:
    shutdown_all()
    lib = ctypes.CDLL(str(build_module.build_library()))
    count = ctypes.c_uint(0)
    assert lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) == pynvml.NVML_ERROR_UNINITIALIZED
    assert lib.nvmlShutdown() == pynvml.NVML_ERROR_UNINITIALIZED
    nvml(FULL)
    handle = ctypes.c_void_p()
    assert lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) == 0
    assert lib.nvmlDeviceGetHandleByIndex_v2(2, ctypes.byref(handle)) == 2
    name = ctypes.create_string_buffer(96)
    assert lib.nvmlDeviceGetName(handle, name, 4) == pynvml.NVML_ERROR_INSUFFICIENT_SIZE
    assert lib.nvmlDeviceGetName(handle, name, 12) == 0 and name.value == b"NVIDIA H200"
    assert lib.nvmlDeviceGetName(handle, name, 11) == pynvml.NVML_ERROR_INSUFFICIENT_SIZE
    bogus = ctypes.c_void_p(0x1234)
    assert lib.nvmlDeviceGetName(bogus, name, 96) == pynvml.NVML_ERROR_INVALID_ARGUMENT
    procs = (pynvml.c_nvmlProcessInfo_v3_t * 8)()
    n = ctypes.c_uint(0)
    fn = lib.nvmlDeviceGetComputeRunningProcesses_v3
    assert fn(handle, ctypes.byref(n), None) == pynvml.NVML_ERROR_INSUFFICIENT_SIZE
    assert n.value == 2
    n.value = 1
    assert fn(handle, ctypes.byref(n), procs) == pynvml.NVML_ERROR_INSUFFICIENT_SIZE
    assert n.value == 2
    n.value = 8
    assert fn(handle, ctypes.byref(n), procs) == 0 and n.value == 2
    assert lib.nvmlDeviceGetClockInfo(handle, 7, ctypes.byref(count)) == 2
    lib.nvmlErrorString.restype = ctypes.c_char_p
    for code, text in pynvml.NVMLError._errcode_to_string.items():
        if code != pynvml.NVML_ERROR_IN_USE:
            assert lib.nvmlErrorString(code).decode() == text
    assert lib.nvmlErrorString(0) == b"Success"
    assert lib.nvmlErrorString(12345) == b"Unknown Error"
    for code in range(1, 31):
        assert lib.nvmlErrorString(code)
    assert str(pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)) == "GPU is lost"


def test_handle_lookups(nvml: Callable[..., SimulatedHardware]) -> None:
    nvml("hgx-h200")
    by_pci = pynvml.nvmlDeviceGetHandleByPciBusId("00000000:2A:00.0")
    assert pynvml.nvmlDeviceGetIndex(by_pci) == 1
    short = pynvml.nvmlDeviceGetHandleByPciBusId("0000:db:00.0")
    assert pynvml.nvmlDeviceGetIndex(short) == 7
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetHandleByPciBusId("00000000:99:00.0")
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetHandleByUUID(uuid_of(99))
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetHandleByIndex(8)


# --------------------------------------------------------------------------
# Scenario validation
# --------------------------------------------------------------------------

BAD_SCENARIOS = [
    ({"devices": [{"power_mw": "high"}]}, "devices[0].power_mw: expected number or signal object"),
    ({"devices": [{"powr_mw": 1}]}, "devices[0].powr_mw: unknown key"),
    ({"bogus": 1}, "scenario.bogus: unknown key"),
    (
        {"devices": [{"power_mw": {"keyframes": [[5, 1], [2, 3]]}}]},
        "devices[0].power_mw.keyframes[1][0]: keyframe times must not decrease",
    ),
    (
        {"devices": [{"power_mw": {"keyframes": [[0, 1], [12, 3]], "period_s": 10}}]},
        "devices[0].power_mw.keyframes[1][0]: with period_s, times must lie in [0, 10]",
    ),
    (
        {"devices": [{"utilization_gpu_percent": 150}]},
        "devices[0].utilization_gpu_percent: must be <= 100",
    ),
    (
        {"devices": [{"power_mw": {"keyframes": [[0, 1]], "interpolate": "cubic"}}]},
        'devices[0].power_mw.interpolate: expected "linear" or "step"',
    ),
    (
        {"devices": [{"ecc_corrected": 1.5}]},
        "devices[0].ecc_corrected: expected integer or counter object",
    ),
    ({"devices": [{"uuid": "1234"}]}, 'devices[0].uuid: expected "GPU-" followed by a UUID'),
    ({"devices": [{"pci_bus_id": "18:00"}]}, "devices[0].pci_bus_id: expected a PCI bus id"),
    ({"devices": [{"name": "two\nlines"}]}, "devices[0].name: must not contain control characters"),
    ({"name": "hgx\u202ecod.exe"}, "name: must not contain control or format characters"),
    ({"devices": [{"name": "H200\u200b"}]}, "devices[0].name: must not contain control or format"),
    ({"devices": [{"name": "H200\x85"}]}, "devices[0].name: must not contain control or format"),
    ({"devices": [gpu(0), gpu(0)]}, "devices[1].uuid: 'GPU-00000000-0000-4000-8000-000000000000'"),
    ({"device_defaults": {"power_mw": [1]}}, "device_defaults.power_mw: expected number"),
    (
        {"devices": [{"mig_devices": [{"gpu_instance_id": 1, "compute_instance_id": 0}]}]},
        "devices[0].mig_devices: needs mig_mode",
    ),
    (
        {"devices": [{"mig_mode": True, "mig_devices": [{"compute_instance_id": 0}]}]},
        "devices[0].mig_devices[0].gpu_instance_id: required key is missing",
    ),
    (
        {"devices": [{"mig_mode": True, "mig_devices": [{"power_mw": 3}]}]},
        "devices[0].mig_devices[0].power_mw: unknown key",
    ),
    ({"devices": [{"topology": {"3": "NODE"}}]}, "devices[0].topology.3: no device 3"),
    ({"devices": [{"topology": {"0": "FAR"}}]}, "devices[0].topology.0: expected a topology level"),
    (
        {"errors": [{"function": "nvmlDeviceGetPowerUsag", "code": 3}]},
        "errors[0].function: unknown NVML function 'nvmlDeviceGetPowerUsag'",
    ),
    (
        {"errors": [{"function": "nvmlDeviceGetPowerUsage", "code": "BROKEN"}]},
        "errors[0].code: unknown NVML error 'BROKEN'",
    ),
    (
        {"devices": [{}], "errors": [{"function": "*", "device": 5, "code": 3}]},
        "errors[0].device: no device 5 (there are 1)",
    ),
    (
        {"delays": [{"function": "*", "seconds": -1}]},
        "delays[0].seconds: must be >= 0",
    ),
    (
        {"delays": [{"function": "*", "seconds": 1, "from_s": 5, "until_s": 5}]},
        "delays[0].until_s: must be after from_s",
    ),
    ({"devices": [{"fields": {"abc": 1}}]}, "devices[0].fields.abc: field ids are positive"),
    (
        {"devices": [{"nvlinks": [{"version": 4, "remote_device_type": "switch"}]}]},
        "devices[0].nvlinks[0].remote_pci_bus_id: required key is missing",
    ),
    ({"devices": [{"cpu_affinity": ["5-2"]}]}, "devices[0].cpu_affinity[0]: bad CPU range"),
    ({"devices": [{"processes": [{"pid": 0}]}]}, "devices[0].processes[0].pid: must be >= 1"),
    ("no-such-scenario", "unknown scenario 'no-such-scenario'; shipped scenarios: a100-mig"),
]


@pytest.mark.parametrize(("scenario", "message"), BAD_SCENARIOS)
def test_invalid_scenario_is_a_clear_error(scenario: Any, message: str) -> None:
    with pytest.raises(ScenarioError) as info:
        load_scenario(scenario)
    assert message in str(info.value)


def test_invalid_json_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"devices": [}')
    with pytest.raises(ScenarioError, match=r"broken\.json: invalid JSON"):
        load_scenario(path)
    path.write_bytes(b'{"name": "\xff\xfe"}')
    with pytest.raises(ScenarioError, match=r"broken\.json: not UTF-8 text"):
        load_scenario(path)
    path.write_text("[" * 100_000)
    with pytest.raises(ScenarioError, match=r"broken\.json: invalid JSON: nested too deeply"):
        load_scenario(path)


def test_invalid_update_changes_nothing(nvml: Callable[..., SimulatedHardware]) -> None:
    hw = nvml({"devices": [gpu(0, power_mw=1000)]})
    before = hw.state_path.read_bytes()
    with pytest.raises(ScenarioError, match=r"devices\[0\]\.power_mw"):
        hw.update({"devices": [gpu(0, power_mw={"keyframes": []})]})
    with pytest.raises(ScenarioError, match="no device 3"):
        hw.set_processes(3, [])
    with pytest.raises(ScenarioError, match=r"processes\[0\]\.pid"):
        hw.set_processes(0, [{"pid": "x"}])
    assert hw.state_path.read_bytes() == before
    assert pynvml.nvmlDeviceGetPowerUsage(pynvml.nvmlDeviceGetHandleByIndex(0)) == 1000


def test_expanded_scenario_is_stable() -> None:
    for name in available_scenarios():
        expanded = load_scenario(name)
        assert load_scenario(expanded) == expanded
        assert "device_defaults" not in expanded
    json.dumps(load_scenario("hgx-h200"))


# --------------------------------------------------------------------------
# Phase 2: interconnect and topology
# --------------------------------------------------------------------------


def test_field_values(nvml: Callable[..., SimulatedHardware]) -> None:
    fields = {
        "138": {"*": {"start": 1000, "rate_per_s": 10}, "2": 7},
        "83": {"start": 5, "rate_per_s": 2},
        "91": {"type": "uint", "value": 4},
        "82": 41.5,
    }
    links = [
        {"version": 4, "remote_pci_bus_id": "0000:05:00.0", "remote_device_type": "switch"}
    ] * 4
    hw = nvml({"freeze_at_s": 3, "devices": [gpu(0, fields=fields, nvlinks=links)]})
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    values = pynvml.nvmlDeviceGetFieldValues(
        h, [(138, 0), (138, 2), (138, 3), (138, 4), 83, 91, 82, 9]
    )
    ok = pynvml.NVML_SUCCESS
    assert [v.nvmlReturn for v in values] == [ok, ok, ok, 3, ok, ok, ok, 3]
    assert (values[0].valueType, values[0].value.ullVal) == (
        pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
        1030,
    )
    assert values[1].value.ullVal == 7 and values[2].value.ullVal == 1030
    assert values[4].value.ullVal == 11
    assert (values[5].valueType, values[5].value.uiVal) == (pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, 4)
    assert (values[6].valueType, values[6].value.dVal) == (pynvml.NVML_VALUE_TYPE_DOUBLE, 41.5)
    expected_us = (hw.epoch + 3) * 1e6
    assert all(abs(v.timestamp - expected_us) < 2 and v.latencyUsec == 0 for v in values)


def test_nvlink_pcie_and_topology_on_hgx(nvml: Callable[..., SimulatedHardware]) -> None:
    nvml(frozen("hgx-h200", 50))
    h = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(8)]
    for link in range(18):
        assert pynvml.nvmlDeviceGetNvLinkState(h[0], link) == 1
        assert pynvml.nvmlDeviceGetNvLinkVersion(h[0], link) == 4
        assert (
            pynvml.nvmlDeviceGetNvLinkRemoteDeviceType(h[0], link)
            == pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH
        )
    assert pynvml.nvmlDeviceGetNvLinkRemotePciInfo(h[0], 0).busId == "00000000:05:00.0"
    assert pynvml.nvmlDeviceGetNvLinkRemotePciInfo(h[0], 17).busId == "00000000:08:00.0"
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetNvLinkState(h[0], 18)
    tx = pynvml.nvmlDeviceGetFieldValues(h[0], [(138, link) for link in range(18)])
    assert all(v.nvmlReturn == 0 and v.value.ullVal > 9_000_000_000 for v in tx)
    assert pynvml.nvmlDeviceGetCurrPcieLinkGeneration(h[0]) == 5
    assert pynvml.nvmlDeviceGetMaxPcieLinkGeneration(h[0]) == 5
    assert pynvml.nvmlDeviceGetGpuMaxPcieLinkGeneration(h[0]) == 5
    assert (
        pynvml.nvmlDeviceGetCurrPcieLinkWidth(h[0])
        == pynvml.nvmlDeviceGetMaxPcieLinkWidth(h[0])
        == 16
    )
    start = time.monotonic()
    assert pynvml.nvmlDeviceGetPcieThroughput(h[0], pynvml.NVML_PCIE_UTIL_RX_BYTES) == 2_540_000
    assert time.monotonic() - start >= 0.018
    assert [pynvml.nvmlDeviceGetNumaNodeId(x) for x in h] == [0, 0, 0, 0, 1, 1, 1, 1]
    mask = pynvml.nvmlDeviceGetCpuAffinity(h[4], 4)
    cpus = [w * 64 + b for w in range(4) for b in range(64) if mask[w] >> b & 1]
    assert cpus == list(range(56, 112)) + list(range(168, 224))
    assert pynvml.nvmlDeviceGetTopologyCommonAncestor(h[0], h[3]) == pynvml.NVML_TOPOLOGY_NODE
    assert pynvml.nvmlDeviceGetTopologyCommonAncestor(h[0], h[4]) == pynvml.NVML_TOPOLOGY_SYSTEM
    assert pynvml.nvmlDeviceGetP2PStatus(h[0], h[5], pynvml.NVML_P2P_CAPS_INDEX_NVLINK) == 0
    info = pynvml.c_nvmlGpuFabricInfo_v3_t()
    pynvml.nvmlDeviceGetGpuFabricInfoV(h[0], ctypes.byref(info))
    assert (info.state, info.status, info.cliqueId) == (
        pynvml.NVML_GPU_FABRIC_STATE_COMPLETED,
        0,
        1,
    )
    assert bytes(info.clusterUuid).hex() != "0" * 32
    v2 = pynvml.c_nvmlGpuFabricInfoV_t()
    pynvml.nvmlDeviceGetGpuFabricInfoV(h[1], ctypes.byref(v2))
    assert bytes(v2.clusterUuid) == bytes(info.clusterUuid)
    v2.version = 0x01000024
    with pytest.raises(pynvml.NVMLError_ArgumentVersionMismatch):
        pynvml.nvmlDeviceGetGpuFabricInfoV(h[1], ctypes.byref(v2))


def test_pcie_topology_and_p2p_on_l4(nvml: Callable[..., SimulatedHardware]) -> None:
    nvml("l4-pcie")
    h = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(4)]
    assert pynvml.nvmlDeviceGetTopologyCommonAncestor(h[0], h[1]) == pynvml.NVML_TOPOLOGY_SINGLE
    assert pynvml.nvmlDeviceGetTopologyCommonAncestor(h[3], h[0]) == pynvml.NVML_TOPOLOGY_NODE
    # pynvml defines NVML_P2P_CAPS_INDEX_READ as the tuple (0,), which ctypes rejects.
    read, nvlink = 0, pynvml.NVML_P2P_CAPS_INDEX_NVLINK
    assert pynvml.nvmlDeviceGetP2PStatus(h[2], h[3], read) == pynvml.NVML_P2P_STATUS_OK
    assert pynvml.nvmlDeviceGetP2PStatus(h[2], h[3], nvlink) == pynvml.NVML_P2P_STATUS_NOT_SUPPORTED
    assert (
        pynvml.nvmlDeviceGetP2PStatus(h[0], h[2], read)
        == pynvml.NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED
    )
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetTopologyCommonAncestor(h[0], h[0])
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetNvLinkState(h[0], 0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetGpuFabricInfoV(h[0], ctypes.byref(pynvml.c_nvmlGpuFabricInfo_v3_t()))
    assert pynvml.nvmlDeviceGetEncoderUtilization(h[0])[0] > 0
    assert pynvml.nvmlDeviceGetDecoderUtilization(h[0])[0] > 0
    assert pynvml.nvmlDeviceGetPerformanceState(h[3]) == 8


# --------------------------------------------------------------------------
# Ray's reporter reads the fake
# --------------------------------------------------------------------------

RAY_PROVIDER = """
    import json
    from ray.dashboard.modules.reporter.gpu_providers import NvidiaGpuProvider
    provider = NvidiaGpuProvider()
    assert provider.is_available()
    print(json.dumps(provider.get_gpu_utilization()))
"""


def test_ray_provider_reads_hgx(tmp_path: pathlib.Path) -> None:
    hw = SimulatedHardware.start("hgx-h200", state_dir=tmp_path)
    gpus = json.loads(run_child(hw, RAY_PROVIDER))
    devices = hw.scenario["devices"]
    assert [g["index"] for g in gpus] == list(range(8))
    assert [g["uuid"] for g in gpus] == [d["uuid"] for d in devices]
    assert {g["name"] for g in gpus} == {"NVIDIA H200"}
    assert {g["memory_total"] for g in gpus} == {150754820096 // MIB}
    assert all(0 <= g["utilization_gpu"] <= 100 and 0 < g["power_mw"] <= 700000 for g in gpus)
    first = gpus[0]["processes_pids"]
    assert first == {"41873": {"pid": 41873, "gpu_memory_usage": 125 * 1024, "gpu_utilization": 96}}
    assert gpus[7]["processes_pids"] == {}


def test_ray_provider_reads_mig(tmp_path: pathlib.Path) -> None:
    hw = SimulatedHardware.start("a100-mig", state_dir=tmp_path)
    gpus = json.loads(run_child(hw, RAY_PROVIDER))
    migs = hw.scenario["devices"][0]["mig_devices"]
    assert [(g["index"], g["name"], g["uuid"]) for g in gpus] == [
        (j, m["name"], m["uuid"]) for j, m in enumerate(migs)
    ]
    assert [g["memory_total"] for g in gpus] == [m["memory_total_bytes"] // MIB for m in migs]
    assert gpus[0]["utilization_gpu"] == -1  # not available on MIG devices
    assert list(gpus[0]["processes_pids"]) == ["73311"]


def test_elapsed_and_environ(tmp_path: pathlib.Path) -> None:
    hw = SimulatedHardware.start({"devices": []}, state_dir=tmp_path)
    env = hw.environ()
    assert env[STATE_ENV] == str(hw.state_path)
    assert env["LD_LIBRARY_PATH"].split(":")[0] == str(hw.library_path.parent)
    assert 0 <= hw.elapsed_s() < 60
    assert math.isclose(hw.epoch + hw.elapsed_s(), time.time(), abs_tol=1)
    assert hw.state_path.read_text().startswith("fakenvml 1\n")
