"""The TPU backend against the simulated TPU host (real gRPC service, device plugin, /dev)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import pytest

from ray_accel.exporter import catalog as m
from ray_accel.exporter.backends.base import BackendUnavailable, ErrorTally
from ray_accel.exporter.backends.tpu import TpuBackend
from ray_accel.exporter.backends.tpu.chips import DEV_DIR_ENV, SYSFS_DIR_ENV
from ray_accel.exporter.backends.tpu.device_plugin import parse
from ray_accel.exporter.backends.tpu.latency import quantile
from ray_accel.exporter.backends.tpu.probes import Readout, chip_map, chip_readings, plugin_values
from ray_accel.exporter.model import Device, DeviceSample
from ray_accel.exporter.simulate import ScenarioError, SimulatedHardware, load_scenario
from ray_accel.exporter.validation import OUT_OF_RANGE, ReadingValidator

GIB = 2**30
TPU_ENV = (DEV_DIR_ENV, SYSFS_DIR_ENV, "TPU_RUNTIME_METRICS_PORTS", "TPU_DEVICE_PLUGIN_ADDR",
           "TPU_NAME", "TPU_WORKER_ID", "TPU_TOPOLOGY", "TPU_ACCELERATOR_TYPE")


def host(**changes) -> dict:
    """A frozen 4-chip v5e host: values fixed, so samples can be compared exactly."""
    scenario = {
        "name": "tpu-test", "freeze_at_s": 10, "devices": [],
        "tpu": {
            "accelerator_type": "v5litepod-16", "slice_name": "slice-a", "worker_id": 1,
            "topology": "4x4", "device_plugin": True,
            "chip_defaults": {"hbm_total_bytes": 16 * GIB, "hbm_used_bytes": 3 * GIB,
                              "duty_cycle_percent": 80, "hbm_bandwidth_percent": 40,
                              "tensorcore_utilization_percent": 30},
            "chips": [{"pci_bus_id": f"0000:00:0{4 + i}.0", "duty_cycle_percent": 10 * i}
                      for i in range(4)],
            "latencies": {"collective_e2e": {"count": 1000, "latency_us": 300},
                          "host_to_device": {"count": 10, "latency_us": 2000}},
        },
    }
    scenario["tpu"].update(changes)
    return scenario


@pytest.fixture
def tpu_host(monkeypatch):
    """Starts a simulated host from a scenario dict; its variables are set for this test."""
    started = []

    def start(scenario: dict) -> SimulatedHardware:
        for name in TPU_ENV:
            monkeypatch.delenv(name, raising=False)
        hw = SimulatedHardware.start(scenario)
        started.append(hw)
        for name, value in hw.environ().items():
            if name in TPU_ENV:
                monkeypatch.setenv(name, value)
        return hw

    yield start
    for hw in started:
        hw.close()


@pytest.fixture
def opened(tpu_host):
    def open_backend(scenario: dict | None = None):
        hw = tpu_host(scenario or host())
        backend = TpuBackend()
        return hw, backend, backend.open()

    return open_backend


def values(sample) -> dict[tuple[str, tuple], float]:
    return {(r.metric, r.labels): r.value for r in sample.readings}


def test_discovery_names_chips_like_ray_and_tpu_info(opened):
    _, backend, devices = opened()
    assert [d.index for d in devices] == ["0", "1", "2", "3"]
    assert {d.model for d in devices} == {"TPU v5 lite"}
    assert {d.vendor for d in devices} == {"google"}
    assert [d.pci_bus_id for d in devices] == [f"0000:00:0{4 + i}.0" for i in range(4)]
    assert len({d.uuid for d in devices}) == 4 and all(d.uuid.startswith("TPU-") for d in devices)
    facts = devices[0].facts
    assert facts["architecture"] == "v5e"
    assert facts["device_file"].endswith("/dev/vfio/0")
    assert (facts["tpu_slice_name"], facts["tpu_worker_id"], facts["tpu_topology"],
            facts["accelerator_type"]) == ("slice-a", "1", "4x4", "v5litepod-16")
    assert backend.facts()["tpu_slice_name"] == "slice-a"
    # uuids are derived, so a second backend on the same host names the chips alike
    assert [d.uuid for d in TpuBackend().open()] == [d.uuid for d in devices]


def test_accel_device_files_are_found_too(opened):
    _, _, devices = opened(host(device_files="accel", pci_device_id="0x005e"))
    assert [d.facts["device_file"].rsplit("/", 1)[1] for d in devices] == [
        f"accel{i}" for i in range(4)]
    assert {d.model for d in devices} == {"TPU v4"}
    assert devices[2].pci_bus_id == "0000:00:06.0"


def test_every_runtime_metric_in_base_units(opened):
    _, backend, devices = opened()
    sample = backend.sample(devices[2])
    got = values(sample)
    assert sample.up and sample.errors == {}
    assert got[(m.MEMORY_USAGE, ())] == 3 * GIB
    assert got[(m.MEMORY_LIMIT, ())] == 16 * GIB
    assert got[(m.GPU_UTILIZATION, (("task", "general"),))] == pytest.approx(0.2)
    assert got[(m.MEMORY_BANDWIDTH_UTILIZATION, ())] == pytest.approx(0.4)
    assert got[(m.TENSORCORE_UTILIZATION, ())] == pytest.approx(0.3)  # device plugin only
    # 90% of the collectives in [256, 512) us, the tail in [512, 1024) us
    p50 = got[(m.COLLECTIVE_LATENCY, (("quantile", "0.5"),))]
    p99 = got[(m.COLLECTIVE_LATENCY, (("quantile", "0.99"),))]
    assert 256e-6 <= p50 < 512e-6 and 512e-6 <= p99 < 1024e-6
    h2d = got[(m.TRANSFER_LATENCY, (("path", "host_to_device"), ("quantile", "0.5")))]
    assert 1024e-6 <= h2d < 2048e-6
    assert not any(metric == m.POWER for metric, _ in got)  # TPUs report no power here


def test_latencies_cover_only_new_observations(opened):
    hw, backend, devices = opened()
    backend.sample(devices[0])
    again = values(backend.sample(devices[0]))  # a new cycle, frozen clock: nothing new
    assert not any(metric == m.COLLECTIVE_LATENCY for metric, _ in again)
    hw.modify(lambda s: s.update(freeze_at_s=20) or s["tpu"]["latencies"]["collective_e2e"]
              .update(count=2000, latency_us=5000))
    later = values(backend.sample(devices[0]))
    assert 4096e-6 <= later[(m.COLLECTIVE_LATENCY, (("quantile", "0.5"),))] < 8192e-6


def test_values_follow_scenario_updates(opened):
    hw, backend, devices = opened()
    hw.modify(lambda s: s["tpu"]["chips"][1].update(duty_cycle_percent=95))
    got = values(backend.sample(devices[1]))
    assert got[(m.GPU_UTILIZATION, (("task", "general"),))] == pytest.approx(0.95)


def test_unsupported_metric_is_absent_not_zero_and_not_asked_again(opened):
    scenario = host(unsupported_metrics=["tpu.runtime.hbm.utilization.percent"],
                    device_plugin=False)
    hw, backend, devices = opened(scenario)
    first = backend.sample(devices[0])
    assert (m.MEMORY_BANDWIDTH_UTILIZATION, ()) not in values(first)
    assert (m.MEMORY_USAGE, ()) in values(first)
    key = "GetRuntimeMetric[tpu.runtime.hbm.utilization.percent]"
    assert first.errors[key] == "not_found"
    backend.sample(devices[0])
    backend.sample(devices[0])  # three cycles: the unsupported metric was asked once
    asked = hw._family_fakes[0].service.asked
    assert asked["tpu.runtime.hbm.utilization.percent"] == 1
    assert asked["tpu.runtime.hbm.memory.usage.bytes"] == 3
    assert backend.errors.snapshot()[("not_found", "GetRuntimeMetric")] == 1


def test_a_failing_metric_costs_only_its_value_for_that_cycle(opened):
    rule = {"metric": "tpu.runtime.tensorcore.dutycycle.percent", "status": "INTERNAL",
            "from_s": 5, "until_s": 15}
    hw, backend, devices = opened(host(errors=[rule], device_plugin=False))
    failing = backend.sample(devices[3])
    assert (m.GPU_UTILIZATION, (("task", "general"),)) not in values(failing)
    assert (m.MEMORY_USAGE, ()) in values(failing)
    assert failing.errors == {"GetRuntimeMetric[tpu.runtime.tensorcore.dutycycle.percent]":
                              "internal"}
    hw.modify(lambda s: s.update(freeze_at_s=16))
    healed = backend.sample(devices[3])
    assert values(healed)[(m.GPU_UTILIZATION, (("task", "general"),))] == pytest.approx(0.3)
    assert healed.errors == {}


def test_a_service_that_answers_no_metric_makes_the_chips_down_with_why(opened):
    """libtpu's service answers every metric with an error: no chip can be read, so each is
    down with why (not up with no values); once it answers, they are up again."""
    rule = {"metric": "*", "status": "INTERNAL", "from_s": 5, "until_s": 15}
    hw, backend, devices = opened(host(errors=[rule], device_plugin=False))
    for device in devices:
        silent = backend.sample(device)
        assert not silent.up and silent.readings == ()
        assert silent.errors == {"every metric": "internal"}
    hw.modify(lambda s: s.update(freeze_at_s=16))
    healed = backend.sample(devices[3])
    assert healed.up and healed.errors == {}
    assert values(healed)[(m.GPU_UTILIZATION, (("task", "general"),))] == pytest.approx(0.3)


def test_service_down_falls_back_to_the_device_plugin(opened):
    hw, backend, devices = opened(host(runtime_service=False))
    sample = backend.sample(devices[1])
    got = values(sample)
    assert sample.up
    assert sample.errors["GetRuntimeMetric"] == "unavailable"
    assert got[(m.MEMORY_USAGE, ())] == 3 * GIB
    assert got[(m.MEMORY_LIMIT, ())] == 16 * GIB
    assert got[(m.GPU_UTILIZATION, (("task", "general"),))] == pytest.approx(0.1)
    assert got[(m.TENSORCORE_UTILIZATION, ())] == pytest.approx(0.3)
    assert not any(metric == m.COLLECTIVE_LATENCY for metric, _ in got)
    hw.modify(lambda s: s["tpu"].update(runtime_service=True))  # a workload starts
    back = backend.sample(devices[1])
    assert "GetRuntimeMetric" not in back.errors
    assert any(r.metric == m.COLLECTIVE_LATENCY for r in back.readings)


def test_no_workload_and_no_plugin_leaves_chips_up_without_values(opened):
    _, backend, devices = opened(host(runtime_service=False, device_plugin=False))
    sample = backend.sample(devices[0])
    assert sample.up and sample.readings == ()
    assert sample.errors == {"GetRuntimeMetric": "unavailable"}


def test_lost_device_file_marks_only_that_chip_down(opened):
    _, backend, devices = opened()
    os.unlink(devices[1].facts["device_file"])
    assert not backend.sample(devices[1]).up
    assert backend.sample(devices[0]).up


def test_no_chips_makes_the_backend_unavailable(tmp_path, monkeypatch):
    (tmp_path / "dev" / "vfio").mkdir(parents=True)
    (tmp_path / "dev" / "vfio" / "96").touch()  # a vfio group that is not a TPU
    (tmp_path / "dev" / "accel").mkdir()  # NVIDIA's accel directory, no TPU either
    monkeypatch.setenv(DEV_DIR_ENV, str(tmp_path / "dev"))
    monkeypatch.setenv(SYSFS_DIR_ENV, str(tmp_path / "sys"))
    with pytest.raises(BackendUnavailable, match="no TPU chips found"):
        TpuBackend().open()


def test_process_holding_a_chip_file_is_attributed(opened):
    _, backend, devices = opened()
    path = devices[2].facts["device_file"]
    code = "import sys; f = open(sys.argv[1]); print('ready', flush=True); sys.stdin.read()"
    with subprocess.Popen([sys.executable, "-c", code, path], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as child:
        try:
            assert child.stdout.readline().strip() == "ready"
            held = backend.sample(devices[2])
            free = backend.sample(devices[1])
        finally:
            child.stdin.close()
    assert [p.pid for p in held.processes] == [child.pid]
    assert held.processes[0].readings == ()
    assert free.processes == ()
    assert backend.sample(devices[2]).processes == ()  # the child has exited


def test_scenario_errors_name_the_offending_key():
    bad = host()
    bad["tpu"]["chips"][3]["duty_cycle_percent"] = 120
    with pytest.raises(ScenarioError, match=r"tpu\.chips\[3\]\.duty_cycle_percent"):
        load_scenario(bad)
    worse = copy.deepcopy(host(errors=[{"metric": "*", "status": "BROKEN"}]))
    with pytest.raises(ScenarioError, match=r"tpu\.errors\[0\]\.status"):
        load_scenario(worse)


def test_shipped_scenario_is_a_v5e_8_host_in_a_slice():
    scenario = load_scenario("tpu-v5e-8")
    assert scenario["devices"] == []
    tpu = scenario["tpu"]
    assert len(tpu["chips"]) == 8 and {c["hbm_total_bytes"] for c in tpu["chips"]} == {16 * GIB}
    assert tpu["slice_name"] and tpu["topology"] == "4x4"
    json.dumps(scenario)


def test_chip_numbers_map_like_ray_does():
    assert chip_map([0, 1, 2, 3], 4) == {0: 0, 1: 1, 2: 2, 3: 3}
    assert chip_map([8, 9, 10, 11], 4) == {8: 0, 9: 1, 10: 2, 11: 3}
    assert chip_map([8, 9], 4) == {}


def test_device_plugin_runtime_numbers_are_reindexed_onto_the_host():
    text = "\n".join([
        'tensorcore_utilization{accelerator_id="7-0",model="m",tpu_topology="2x4"} 50',
        'tensorcore_utilization{accelerator_id="7-1",model="m",tpu_topology="2x4"} 60',
        'duty_cycle{accelerator_id="7-8",model="m",tpu_topology="2x4"} 70',
        'duty_cycle{accelerator_id="7-9",model="m",tpu_topology="2x4"} 80',
        ""])
    readout = parse(text)
    assert readout.chips == {0: {"tensorcore_utilization": 50, "duty_cycle": 70},
                             1: {"tensorcore_utilization": 60, "duty_cycle": 80}}
    assert (readout.model, readout.topology) == ("m", "2x4")


def test_a_percent_the_plugin_reports_past_100_is_refused_with_why():
    """A duty cycle of 250 % reaches the reading checks (refused, counted, named), not a
    silent drop; the chip's other values stand."""
    text = "\n".join([
        'tensorcore_utilization{accelerator_id="7-0",model="m",tpu_topology="2x4"} 40',
        'duty_cycle{accelerator_id="7-8",model="m",tpu_topology="2x4"} 250', ""])
    readout = Readout()
    plugin_values(parse(text), readout)
    tally = ErrorTally()
    chip = Device("google", "0", "tpu-0", "TPU v5e")
    sample = DeviceSample(chip, up=True, taken_at=0.0, readings=tuple(chip_readings(readout, 0)))
    checked = ReadingValidator(tally, "tpu").check(sample)
    assert [(r.metric, r.value) for r in checked.readings] == [(m.TENSORCORE_UTILIZATION, 0.4)]
    assert checked.errors[m.GPU_UTILIZATION].startswith(OUT_OF_RANGE)
    assert tally.snapshot() == {(OUT_OF_RANGE, m.GPU_UTILIZATION): 1}


def test_quantile_interpolates_within_a_bucket():
    bounds = [1.0, 2.0, 4.0, 8.0]  # underflow, [1,2), [2,4), [4,8), overflow
    assert quantile([0, 0, 10, 0, 0], bounds, 0.5) == pytest.approx(3.0)
    assert quantile([0, 0, 0, 0, 5], bounds, 0.5) == 8.0
    assert quantile([0, 0, 0, 0, 0], bounds, 0.5) is None


def test_ray_tpu_slots_map_to_chips(opened):
    from ray_accel.exporter.attribution.slots import slot_devices

    _, _, devices = opened()
    uuids = [d.uuid for d in devices]
    assert slot_devices(devices, {})[("TPU", 1)] == uuids[1]
    # a raylet that sees chips 2 and 3 hands out slots 0 and 1
    visible = {"TPU_VISIBLE_CHIPS": ("2", "3")}
    assert slot_devices(devices, visible) == {("TPU", 0): uuids[2], ("TPU", 1): uuids[3]}
