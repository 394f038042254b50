"""The NVIDIA backend through the real nvidia-ml-py binding against the fake NVML library."""

from __future__ import annotations

import os
import time

import pytest
from nvml_scenarios import scenario

from ray_accel.exporter import catalog as m
from ray_accel.exporter.backends import load_backends
from ray_accel.exporter.backends.base import BackendUnavailable
from ray_accel.exporter.backends.nvidia import NvidiaBackend
from ray_accel.exporter.model import DeviceSample, Reading
from ray_accel.exporter.simulate import (
    STATE_ENV,
    SimulatedHardware,
    available_scenarios,
    load_scenario,
)


def values(sample: DeviceSample) -> dict[tuple[str, tuple], float]:
    return {(r.metric, r.labels): r.value for r in sample.readings}


def test_values_round_trip_in_base_units(open_backend):
    backend, devices, _ = open_backend(scenario())
    sample = backend.sample(devices[0])
    got = values(sample)
    assert sample.up
    assert got[(m.GPU_UTILIZATION, (("task", "general"),))] == 0.55
    assert got[(m.GPU_UTILIZATION, (("task", "encoder"),))] == 0.04
    assert got[(m.GPU_UTILIZATION, (("task", "decoder"),))] == 0.07
    assert got[(m.MEMORY_BANDWIDTH_UTILIZATION, ())] == 0.31
    assert got[(m.MEMORY_USAGE, ())] == 40 * 2**30
    assert got[(m.MEMORY_LIMIT, ())] == 150754820096
    assert got[(m.MEMORY_RESERVED, ())] == 500 * 2**20
    assert got[(m.POWER, ())] == 350.0
    assert got[(m.POWER_LIMIT, ())] == 700.0
    # energy = start + power integrated over the 10 frozen seconds: 9000 J + 350 W * 10 s
    assert got[(m.ENERGY, ())] == pytest.approx(9000 + 3500)
    assert got[(m.TEMPERATURE, (("sensor", "gpu"),))] == 61
    assert got[(m.CLOCK_FREQUENCY, (("clock", "sm"),))] == 1980e6
    assert got[(m.CLOCK_FREQUENCY, (("clock", "memory"),))] == 2619e6
    assert got[(m.CLOCK_MAX_FREQUENCY, (("clock", "sm"),))] == 1980e6
    assert got[(m.THROTTLE_ACTIVE, (("reason", "sw_power_cap"),))] == 1
    assert got[(m.THROTTLE_ACTIVE, (("reason", "hw_thermal_slowdown"),))] == 1
    assert got[(m.THROTTLE_ACTIVE, (("reason", "gpu_idle"),))] == 0
    assert got[(m.PERFORMANCE_STATE, ())] == 0
    assert got[(m.HW_ERRORS, (("error_type", "ecc_corrected"),))] == 12
    assert got[(m.HW_ERRORS, (("error_type", "ecc_uncorrected"),))] == 1
    assert got[(m.HW_ERRORS, (("error_type", "pcie_replay"),))] == 5
    assert got[(m.REMAPPED_ROWS, (("cause", "correctable"),))] == 2
    assert got[(m.REMAPPED_ROWS, (("cause", "uncorrectable"),))] == 1
    assert got[(m.ROW_REMAP_PENDING, ())] == 1
    assert got[(m.ROW_REMAP_FAILURE, ())] == 0


def test_identity_and_facts(open_backend):
    backend, devices, _ = open_backend(scenario())
    assert [d.index for d in devices] == ["0", "1", "2"]
    first = devices[0]
    assert first.uuid == "GPU-00000000-0000-0000-0000-000000000000"
    assert first.model == "NVIDIA H200"
    assert first.pci_bus_id == "00000000:18:00.0"
    assert first.facts["architecture"] == "hopper"
    assert backend.facts()["driver_version"] == "570.124.06"
    assert backend.facts()["cuda_driver_version"] == "12080"


def test_values_follow_the_scenario_over_time(open_backend):
    doc = scenario(devices=1, freeze_at_s=None)
    doc["device_defaults"]["power_mw"] = {"keyframes": [[0, 100_000], [3600, 100_000]]}
    doc["device_defaults"]["utilization_gpu_percent"] = {
        "keyframes": [[0, 0], [3600, 100]], "period_s": 3600}
    backend, devices, hardware = open_backend(doc)
    first = values(backend.sample(devices[0]))
    time.sleep(0.3)
    second = values(backend.sample(devices[0]))
    # energy grows by power x time; utilization ramps up with the keyframes
    assert second[(m.ENERGY, ())] > first[(m.ENERGY, ())]
    elapsed = hardware.elapsed_s()
    assert second[(m.ENERGY, ())] == pytest.approx(9000 + 100 * elapsed, abs=100 * 0.2)
    assert second[(m.GPU_UTILIZATION, (("task", "general"),))] == pytest.approx(
        elapsed / 3600, abs=0.01)


def test_unsupported_values_are_absent_not_zero(open_backend):
    doc = scenario(devices=2)
    doc["devices"][1].update({"power_mw": None, "energy_start_mj": None, "ecc_mode": None,
                              "remapped_rows": None})
    backend, devices, _ = open_backend(doc)
    for _ in range(3):
        sample = backend.sample(devices[1])
    got = values(sample)
    assert sample.up
    assert (m.POWER, ()) not in got
    assert (m.ENERGY, ()) not in got
    assert not any(metric == m.HW_ERRORS and "ecc" in labels[0][1] for metric, labels in got)
    assert (m.REMAPPED_ROWS, (("cause", "correctable"),)) not in got
    assert got[(m.TEMPERATURE, (("sensor", "gpu"),))] == 61
    assert sample.errors["nvmlDeviceGetPowerUsage"] == "not_supported"
    # the other device still reports everything
    assert values(backend.sample(devices[0]))[(m.POWER, ())] == 350.0
    # an unsupported function is asked once, not every cycle
    assert backend.errors.snapshot()[("not_supported", "nvmlDeviceGetPowerUsage")] == 1


def test_injected_error_codes_are_scoped(open_backend):
    doc = scenario(devices=2)
    doc["errors"] = [
        {"function": "nvmlDeviceGetPowerUsage", "device": 0, "code": "NO_PERMISSION"},
        {"function": "nvmlDeviceGetTemperature", "device": 0, "code": "FUNCTION_NOT_FOUND"},
        {"function": "nvmlDeviceGetClockInfo", "device": 0, "code": "TIMEOUT"},
    ]
    backend, devices, _ = open_backend(doc)
    sample = backend.sample(devices[0])
    got = values(sample)
    assert sample.up
    assert (m.POWER, ()) not in got
    assert (m.TEMPERATURE, (("sensor", "gpu"),)) not in got
    assert (m.CLOCK_FREQUENCY, (("clock", "sm"),)) not in got
    assert got[(m.MEMORY_USAGE, ())] == 40 * 2**30
    assert sample.errors["nvmlDeviceGetPowerUsage"] == "no_permission"
    assert sample.errors["nvmlDeviceGetTemperature"] == "function_not_found"
    assert sample.errors["nvmlDeviceGetClockInfo[sm]"] == "timeout"
    assert values(backend.sample(devices[1]))[(m.POWER, ())] == 350.0


def test_transient_error_costs_one_cycle_only(open_backend):
    doc = scenario(devices=1, freeze_at_s=None)
    doc["errors"] = [{"function": "nvmlDeviceGetPowerUsage", "device": 0, "code": "TIMEOUT",
                      "from_s": 0, "until_s": 0.5}]
    backend, devices, hardware = open_backend(doc)
    assert (m.POWER, ()) not in values(backend.sample(devices[0]))
    while hardware.elapsed_s() < 0.6:
        time.sleep(0.05)
    assert values(backend.sample(devices[0]))[(m.POWER, ())] == 350.0


@pytest.mark.parametrize("code", ["GPU_IS_LOST", "UNKNOWN"])
def test_lost_or_failing_gpu_is_down_while_others_report(open_backend, code):
    doc = scenario(devices=3)
    doc["errors"] = [{"function": "nvmlDeviceGetUtilizationRates", "device": 1, "code": code}]
    backend, devices, _ = open_backend(doc)
    down = backend.sample(devices[1])
    assert not down.up and down.readings == ()
    for index in (0, 2):
        assert backend.sample(devices[index]).up


def test_gpu_that_falls_off_the_bus(open_backend):
    doc = scenario(devices=2, freeze_at_s=None)
    doc["devices"][1]["lost_at_s"] = 0.5
    backend, devices, hardware = open_backend(doc)
    assert backend.sample(devices[1]).up
    while hardware.elapsed_s() < 0.6:
        time.sleep(0.05)
    lost = backend.sample(devices[1])
    assert not lost.up
    assert lost.errors == {"nvmlDeviceGetUtilizationRates": "gpu_is_lost"}
    assert backend.sample(devices[0]).up


def test_gpu_lost_before_discovery_is_listed_down(open_backend):
    doc = scenario(devices=2)
    doc["devices"][1]["lost_at_s"] = 5.0  # the frozen clock reads 10 s
    backend, devices, _ = open_backend(doc)
    assert [d.uuid for d in devices] == ["GPU-00000000-0000-0000-0000-000000000000",
                                         "nvidia-index-1"]
    assert not backend.sample(devices[1]).up
    assert backend.sample(devices[0]).up


def test_xid_events_become_counter_increments(open_backend):
    doc = scenario(devices=2, freeze_at_s=None)
    doc["devices"][1]["xid_events"] = [{"at_s": 0.2, "xid": 79}, {"at_s": 0.3, "xid": 48},
                                       {"at_s": 0.4, "xid": 79}]
    backend, devices, _ = open_backend(doc)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        got = values(backend.sample(devices[1]))
        if got.get((m.XID_ERRORS, (("xid", "79"),))) == 2:
            break
        time.sleep(0.1)
    assert got[(m.XID_ERRORS, (("xid", "79"),))] == 2
    assert got[(m.XID_ERRORS, (("xid", "48"),))] == 1
    assert not any(metric == m.XID_ERRORS for metric, _ in values(backend.sample(devices[0])))


def test_the_xid_of_a_gpus_loss_counts_in_the_read_that_finds_it_lost(open_backend):
    doc = scenario(devices=1, freeze_at_s=None)
    doc["devices"][0]["xid_events"] = [{"at_s": 0.6, "xid": 79}]
    doc["devices"][0]["lost_at_s"] = 0.6
    backend, (device,), _ = open_backend(doc)
    assert backend.sample(device).up
    deadline = time.monotonic() + 10
    while (sample := backend.sample(device)).up:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert sample.errors == {"nvmlDeviceGetUtilizationRates": "gpu_is_lost"}
    assert backend.event_readings(device) == (
        Reading(m.XID_ERRORS, 1.0, (("xid", "79"),)),)


def test_processes_with_memory_and_utilization(open_backend):
    doc = scenario(devices=1)
    doc["devices"][0]["processes"] = [
        {"pid": 1111, "used_memory_bytes": 2 * 2**30, "sm_percent": 40, "memory_percent": 10},
        {"pid": 2222, "used_memory_bytes": 2**30, "sm_percent": 0, "memory_percent": 0},
    ]
    backend, devices, _ = open_backend(doc)
    sample = backend.sample(devices[0])
    by_pid = {p.pid: {(r.metric, r.labels): r.value for r in p.readings}
              for p in sample.processes}
    assert set(by_pid) == {1111, 2222}
    assert by_pid[1111][(m.PROCESS_MEMORY_USAGE, ())] == 2 * 2**30
    assert by_pid[1111][(m.PROCESS_UTILIZATION, (("engine", "sm"),))] == 0.40
    assert by_pid[2222][(m.PROCESS_MEMORY_USAGE, ())] == 2**30


def test_processes_follow_scenario_updates(open_backend):
    backend, devices, hardware = open_backend(scenario(devices=1))
    assert backend.sample(devices[0]).processes == ()
    hardware.set_processes(0, [{"pid": os.getpid(), "used_memory_bytes": 2**20}])
    deadline = time.monotonic() + 5
    while not (pids := [p.pid for p in backend.sample(devices[0]).processes]):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert pids == [os.getpid()]


def test_mig_instances_are_devices_with_their_parent_named(open_backend):
    backend, devices, _ = open_backend("a100-mig")
    parents = [d for d in devices if not d.parent_uuid]
    migs = [d for d in devices if d.parent_uuid]
    assert len(parents) == 1 and len(migs) >= 2
    for mig in migs:
        assert mig.parent_uuid == parents[0].uuid
        assert mig.uuid.startswith("MIG-")
        assert mig.index.startswith("0/")
        assert mig.pci_bus_id == parents[0].pci_bus_id
        sample = backend.sample(mig)
        got = values(sample)
        assert sample.up
        assert got[(m.MEMORY_LIMIT, ())] > 0
        # MIG instances do not report engine utilization, like real ones
        assert (m.GPU_UTILIZATION, (("task", "general"),)) not in got


@pytest.mark.parametrize("name", [
    n for n in available_scenarios()
    if any(d.get("vendor", "nvidia") == "nvidia" for d in load_scenario(n)["devices"])
])
def test_every_shipped_scenario_samples(open_backend, name):
    backend, devices, _ = open_backend(name)
    assert devices
    samples = [backend.sample(d) for d in devices]
    assert any(s.up and s.readings for s in samples)
    for sample in samples:
        if sample.up and not sample.device.parent_uuid:
            assert values(sample)[(m.MEMORY_LIMIT, ())] > 0


def test_missing_driver_leaves_the_backend_unavailable(open_backend, tmp_path):
    hardware = SimulatedHardware.start(scenario(devices=1), state_dir=tmp_path)
    hardware.activate()
    os.environ.pop(STATE_ENV)
    with pytest.raises(BackendUnavailable, match="NVML"):
        NvidiaBackend().open()


def test_backend_is_found_through_its_entry_point():
    (backend,) = load_backends(["nvidia"])
    assert isinstance(backend, NvidiaBackend)
    with pytest.raises(ValueError, match="unknown backend"):
        load_backends(["nope"])


def test_32_bit_counters_that_wrap_become_monotonic_totals():
    from ray_accel.exporter.backends.nvidia.interconnect import CounterUnwrapper

    unwrapper = CounterUnwrapper()
    assert unwrapper.total(0, 2**32 - 10) == 2**32 - 10
    assert unwrapper.total(0, 5) == 2**32 + 5          # wrapped once between reads
    assert unwrapper.total(0, 20) == 2**32 + 20
    assert unwrapper.total(1, 7) == 7                  # each counter on its own


def test_slow_calls_are_answered_from_their_last_result_for_ten_seconds(tmp_path, monkeypatch):
    # A call read every cycle that turns slow (energy, slow on a real H200, is read on the
    # slow cadence instead: tests/test_nvidia_cadence.py); power ramps up meanwhile.
    doc = scenario(devices=1, freeze_at_s=None)
    doc["device_defaults"]["power_mw"] = {"keyframes": [[0, 100_000], [3600, 700_000]]}
    doc["delays"] = [{"function": "nvmlDeviceGetPowerUsage", "seconds": 0.002,
                      "busy": True}]  # 2 ms of CPU, like a real H200's energy counter
    monkeypatch.setenv(STATE_ENV, "")  # restored after the test
    now = [0.0]
    with SimulatedHardware.start(doc, state_dir=tmp_path) as hardware:
        hardware.activate()
        backend = NvidiaBackend(clock=lambda: now[0])
        devices = backend.open()
        power = []
        try:
            for seconds in (0, 1, 2, 3, 12):
                now[0] = seconds
                time.sleep(0.05)  # the simulated power moves on meanwhile
                power.append(values(backend.sample(devices[0]))[(m.POWER, ())])
        finally:
            backend.close()
    assert power[0] < power[1]  # slow twice in a row: read both times
    assert power[1] == power[2] == power[3]  # then the last answer, for 10 s
    assert power[4] > power[3]  # and read again after that
