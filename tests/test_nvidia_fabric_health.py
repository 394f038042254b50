"""NVLink fabric health through the real nvidia-ml-py binding against the fake NVML library.

The fabric's state, registration status, health mask and summary are scenario
step signals; the backend reads them every cycle (v3 struct), so a fabric that
degrades mid-run shows in the next sample of the same open backend.
"""

from __future__ import annotations

import copy
import ctypes
import time

import pynvml
import pytest

from ray_accel.exporter import catalog as m
from ray_accel.exporter.backends.nvidia import fabric_health
from ray_accel.exporter.model import DeviceSample
from ray_accel.exporter.simulate import ScenarioError, load_scenario

CLUSTER = "5d3c2b1a-0f9e-4d8c-b7a6-958473625140"
HEALTHY_MASK = {"degraded_bw": "false", "route_recovery": "false", "route_unhealthy": "false",
                "access_timeout_recovery": "false", "incorrect_configuration": "none",
                "partition_assigned": "true", "gfm_state": "connected"}
B200 = {
    "name": "NVIDIA B200",
    "architecture": "blackwell",
    "memory_total_bytes": 191 * 10**9,
    "memory_used_bytes": 10 * 10**9,
    "utilization_gpu_percent": 40,
    "processes": [],
}


def scenario(fabric: dict | None, freeze_at_s: float = 10.0, devices: int = 2, **top) -> dict:
    """Identical B200s sharing one fabric (or none), frozen in time."""
    defaults = copy.deepcopy(B200)
    if fabric is not None:
        defaults["fabric"] = {"cluster_uuid": CLUSTER, "clique_id": 7, **fabric}
    return {
        "name": "fabric-test", "freeze_at_s": freeze_at_s, "device_defaults": defaults,
        "devices": [{"uuid": f"GPU-00000000-0000-0000-0000-0000000000b{i}",
                     "pci_bus_id": f"00000000:{0x18 + i:02X}:00.0"} for i in range(devices)],
        **top,
    }


def fabric_readings(sample: DeviceSample) -> dict[tuple[str, tuple], float]:
    names = {m.FABRIC_STATE, m.FABRIC_STATUS, m.FABRIC_HEALTH_SUMMARY, m.FABRIC_HEALTH_ISSUE,
             m.FABRIC_INFO}
    return {(r.metric, r.labels): r.value for r in sample.readings if r.metric in names}


def issues(sample: DeviceSample) -> dict[str, float]:
    return {dict(labels)["field"]: value for (name, labels), value
            in fabric_readings(sample).items() if name == m.FABRIC_HEALTH_ISSUE}


def info(sample: DeviceSample) -> dict[str, str]:
    (labels,) = [labels for (name, labels) in fabric_readings(sample) if name == m.FABRIC_INFO]
    return dict(labels)


def test_a_healthy_fabric_reads_as_completed_and_healthy(open_backend):
    backend, devices, _ = open_backend(scenario(
        {"state": "COMPLETED", "status": "SUCCESS", "health_mask": HEALTHY_MASK,
         "health_summary": "HEALTHY"}))
    sample = backend.sample(devices[0])
    got = fabric_readings(sample)
    assert got[(m.FABRIC_STATE, ())] == fabric_health.STATE_COMPLETED == 3
    assert got[(m.FABRIC_STATUS, ())] == 0
    assert got[(m.FABRIC_HEALTH_SUMMARY, ())] == fabric_health.SUMMARY_HEALTHY == 1
    assert issues(sample) == {f.issue: 0 for f in fabric_health.HEALTH_FIELDS}
    assert info(sample) == {"cluster_uuid": CLUSTER, "clique_id": "7", "state": "completed",
                            "status": "success", "health_summary": "healthy",
                            "incorrect_configuration": "none"}
    assert devices[0].facts["nvlink_domain"] == f"{CLUSTER}/7"


def test_the_catalogs_good_values_are_nvmls():
    # The metrics carry NVML's codes; consumers (alerts, the tab) read the catalog's names.
    assert m.FABRIC_STATE_COMPLETED == fabric_health.STATE_COMPLETED
    assert m.FABRIC_SUMMARY_HEALTHY == fabric_health.SUMMARY_HEALTHY


def test_each_health_mask_field_is_decoded_at_its_own_bits(open_backend):
    # One field in trouble at a time; the others report fine: no field bleeds into another.
    for field in fabric_health.HEALTH_FIELDS:
        trouble = next(name for name, code in field.values.items() if code in field.trouble)
        mask = {**HEALTHY_MASK, field.nvml: trouble}
        backend, devices, _ = open_backend(scenario({"health_mask": mask}, devices=1))
        got = issues(backend.sample(devices[0]))
        assert got == {f.issue: 1 if f is field else 0 for f in fabric_health.HEALTH_FIELDS}
        backend.close()


def test_the_raw_mask_matches_the_bindings_layout(open_backend):
    # degraded bandwidth TRUE (1 << 0), route unhealthy FALSE (2 << 4), incorrect
    # configuration INSUFFICIENT_NVLINKS (5 << 8); the other fields NOT_SUPPORTED (absent).
    backend, devices, _ = open_backend(scenario({"health_mask": 1 | 2 << 4 | 5 << 8,
                                                 "health_summary": "LIMITED_CAPACITY"}))
    sample = backend.sample(devices[0])
    assert issues(sample) == {"degraded_bandwidth": 1, "route_unhealthy": 0,
                              "incorrect_configuration": 1}
    assert info(sample)["incorrect_configuration"] == "insufficient_nvlinks"
    assert info(sample)["health_summary"] == "limited_capacity"
    assert fabric_readings(sample)[(m.FABRIC_HEALTH_SUMMARY, ())] == 3


def test_health_changes_mid_run_are_read_by_the_open_backend(open_backend):
    degrading = {
        "health_mask": {"keyframes": [[0, HEALTHY_MASK],
                                      [60, {**HEALTHY_MASK, "degraded_bw": "true"}]]},
        "health_summary": {"keyframes": [[0, "HEALTHY"], [60, "UNHEALTHY"]]},
    }
    backend, devices, hardware = open_backend(scenario(degrading, freeze_at_s=30))
    before = backend.sample(devices[0])
    assert issues(before)["degraded_bandwidth"] == 0
    assert fabric_readings(before)[(m.FABRIC_HEALTH_SUMMARY, ())] == 1
    hardware.update(scenario(degrading, freeze_at_s=90))
    time.sleep(0.05)  # the library looks for a changed state file every 10 ms
    after = backend.sample(devices[0])
    assert issues(after)["degraded_bandwidth"] == 1
    assert fabric_readings(after)[(m.FABRIC_HEALTH_SUMMARY, ())] == 2
    assert info(after)["health_summary"] == "unhealthy"


def test_every_fabric_call_of_the_binding_follows_the_step_signals(open_backend):
    registering = {"state": {"keyframes": [[0, "IN_PROGRESS"], [20, "COMPLETED"]]},
                   "status": {"keyframes": [[0, "NOT_READY"], [20, "SUCCESS"]]},
                   "health_mask": {"keyframes": [[0, 0], [20, 1 << 2]]}}
    for at_s, (state, status, mask) in ((10, (2, 27, 0)), (30, (3, 0, 1 << 2))):
        _, _, hardware = open_backend(scenario(registering, freeze_at_s=at_s, devices=1))
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        old = pynvml.c_nvmlGpuFabricInfo_t()  # the deprecated call: no version, no mask
        pynvml.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(old))
        assert (old.state, old.status, old.cliqueId) == (state, status, 7)
        v2 = pynvml.c_nvmlGpuFabricInfo_v2_t()
        pynvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(v2))
        assert (v2.state, v2.status, v2.healthMask) == (state, status, mask)
        assert bytes(v2.clusterUuid).hex() == CLUSTER.replace("-", "")
        hardware.close()


def test_a_fabric_still_registering_has_its_state_and_no_summary(open_backend):
    backend, devices, _ = open_backend(scenario({"state": "IN_PROGRESS",
                                                 "status": "NOT_READY"}))
    got = fabric_readings(backend.sample(devices[0]))
    assert got[(m.FABRIC_STATE, ())] == 2
    assert got[(m.FABRIC_STATUS, ())] == 27  # NVML_ERROR_NOT_READY
    assert (m.FABRIC_HEALTH_SUMMARY, ()) not in got  # summary 0: not supported


def test_a_driver_without_the_v3_struct_is_read_with_v2_and_no_summary(open_backend):
    backend, devices, _ = open_backend(scenario({"max_version": 2, "health_summary": "HEALTHY",
                                                 "health_mask": HEALTHY_MASK}))
    for _ in range(2):  # the v3 refusal is remembered: no error in any cycle
        sample = backend.sample(devices[0])
        got = fabric_readings(sample)
        assert got[(m.FABRIC_STATE, ())] == 3
        assert (m.FABRIC_HEALTH_SUMMARY, ()) not in got
        assert issues(sample)["degraded_bandwidth"] == 0
        assert info(sample)["health_summary"] == "not_supported"
        assert not [name for name in sample.errors if "Fabric" in name]
    assert not [key for key in backend.errors.snapshot() if "Fabric" in str(key)]


def test_no_fabric_means_absent_not_zero(open_backend):
    backend, devices, _ = open_backend(scenario(None))
    sample = backend.sample(devices[0])
    assert sample.up and sample.readings
    assert fabric_readings(sample) == {}
    backend.close()
    backend, devices, _ = open_backend(scenario({"state": "NOT_SUPPORTED"}))
    assert fabric_readings(backend.sample(devices[0])) == {}


def test_a_failing_fabric_call_costs_only_the_fabric_values(open_backend):
    doc = scenario({"health_summary": "HEALTHY"}, errors=[
        {"function": "nvmlDeviceGetGpuFabricInfoV", "device": 0, "code": "TIMEOUT"}])
    backend, devices, _ = open_backend(doc)
    failing = backend.sample(devices[0])
    assert failing.up
    assert fabric_readings(failing) == {}
    assert any(r.metric == m.MEMORY_USAGE for r in failing.readings)
    assert fabric_readings(backend.sample(devices[1]))[(m.FABRIC_HEALTH_SUMMARY, ())] == 1


@pytest.mark.parametrize(("fabric", "where", "message"), [
    ({"health_mask": {"degraded_bandwidth": "true"}}, "fabric.health_mask",
     "unknown health mask field"),
    ({"health_mask": {"degraded_bw": "maybe"}}, "fabric.health_mask", "unknown value"),
    ({"health_summary": {"keyframes": [[0, 1], [5, 2]], "interpolate": "linear"}},
     "fabric.health_summary.interpolate", "step"),
    ({"state": {"keyframes": [[10, "COMPLETED"], [5, "IN_PROGRESS"]]}},
     "fabric.state.keyframes[1][0]", "must not decrease"),
    ({"health_summary": "GREAT"}, "fabric.health_summary", "fabric health summary"),
])
def test_bad_fabric_values_are_refused_with_their_path(fabric, where, message):
    with pytest.raises(ScenarioError) as raised:
        load_scenario(scenario(fabric))
    assert where in str(raised.value)
    assert message in str(raised.value)
