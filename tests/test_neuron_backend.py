"""The Neuron backend against the simulated neuron-monitor (exporter/simulate/fake_neuron).

Every test runs the real backend, which runs the fake ``neuron-monitor``
executable as a subprocess and reads its JSON stream. Waits poll for a
condition; nothing asserts on timing.
"""

from __future__ import annotations

import copy
import json
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from simulated_worker import simulated_worker

from ray_accel.exporter import catalog as m
from ray_accel.exporter.attribution.slots import slot_devices
from ray_accel.exporter.backends.base import BackendUnavailable
from ray_accel.exporter.backends.neuron import NeuronBackend
from ray_accel.exporter.backends.neuron.locate import MONITOR_ENV
from ray_accel.exporter.model import Device, DeviceSample
from ray_accel.exporter.simulate import ScenarioError, SimulatedHardware, load_scenario
from ray_accel.exporter.simulate.neuron_fake import driven_by_processes, parse_cores

PERIOD_S = 0.1
GIB = 2**30

SCENARIO: dict[str, Any] = {
    "name": "neuron-test",
    "devices": [],
    "neuron": {
        "neuron_device_count": 4,
        "neuroncore_per_device_count": 2,
        "neuron_device_memory_size": 32 * GIB,
        "instance": {"instance_id": "i-0123456789abcdef0", "instance_type": "trn1.32xlarge"},
        "ecc": {"1": {"mem_ecc_corrected": {"start": 0, "rate_per_s": 50},
                      "sram_ecc_uncorrected": 3}},
        "runtimes": [
            {"pid": 501, "tag": "trainer", "cores": [2, 3, 4], "utilization_percent": 60,
             "core_memory_bytes": {"constants": GIB, "tensors": 2 * GIB},
             "host_memory_bytes": 4 * GIB, "vcpu_user_percent": 30, "vcpu_system_percent": 5,
             "executions_per_s": 100, "errors_per_s": {"transient": 20}, "latency_s": 0.5},
            {"pid": 502, "cores": [3], "utilization_percent": 50,
             "core_memory_bytes": {"tensors": GIB}},
        ],
    },
}


def wait_until(condition: Callable[[], Any], timeout: float = 20.0) -> Any:
    """Poll `condition` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"condition not met within {timeout} s")


def values(sample: DeviceSample, metric: str) -> dict[tuple, float]:
    return {r.labels: r.value for r in sample.readings if r.metric == metric}


def value(sample: DeviceSample, metric: str, **labels: str) -> float | None:
    return values(sample, metric).get(tuple(labels.items()))


@pytest.fixture
def start(tmp_path, monkeypatch) -> Iterator[Callable[..., tuple]]:
    """Start simulated hardware and open a backend on it (both closed afterwards)."""
    opened: list[tuple[NeuronBackend, SimulatedHardware]] = []

    def run(scenario: dict[str, Any] = SCENARIO, **backend_args: Any):
        hardware = SimulatedHardware.start(scenario, state_dir=tmp_path / f"hw{len(opened)}")
        for name, text in hardware.environ().items():
            monkeypatch.setenv(name, text)
        backend = NeuronBackend(period_s=PERIOD_S, **backend_args)
        opened.append((backend, hardware))
        return backend, backend.open(), hardware

    yield run
    for backend, hardware in opened:
        backend.close()
        hardware.close()


def by_index(devices: list[Device]) -> dict[str, Device]:
    return {d.index: d for d in devices}


def set_faults(hardware: SimulatedHardware, **faults: Any) -> None:
    def change(scenario: dict[str, Any]) -> None:
        scenario["neuron"]["faults"] = faults

    hardware.modify(change)


# -- discovery -------------------------------------------------------------------------


def test_chips_and_their_neuroncores_are_devices(start):
    backend, devices, _ = start()
    assert len(devices) == 4 + 8
    chips = [d for d in devices if not d.parent_uuid]
    cores = [d for d in devices if d.parent_uuid]
    assert [c.index for c in chips] == ["0", "1", "2", "3"]
    assert {c.vendor for c in devices} == {"aws"}
    assert {c.model for c in chips} == {"Trainium"}
    assert {c.model for c in cores} == {"Trainium NeuronCore-v2"}
    assert chips[1].uuid == "neuron-i-0123456789abcdef0-nd1"
    core3 = by_index(devices)["1/1"]
    assert core3.uuid == "neuron-i-0123456789abcdef0-nc3"
    assert core3.parent_uuid == chips[1].uuid
    assert core3.facts["neuroncore"] == "3"
    assert sorted(int(c.facts["neuroncore"]) for c in cores) == list(range(8))
    assert len({d.uuid for d in devices}) == len(devices)
    assert backend.facts()["instance_type"] == "trn1.32xlarge"
    assert backend.facts()["neuroncore_version"] == "v2"


def test_uuids_are_stable_across_opens(start):
    _, first, _ = start()
    _, second, _ = start()
    assert [d.uuid for d in first] == [d.uuid for d in second]


def test_no_monitor_means_unavailable(monkeypatch, tmp_path):
    monkeypatch.delenv(MONITOR_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    if os.path.exists("/opt/aws/neuron/bin/neuron-monitor"):
        pytest.skip("a real neuron-monitor is installed")
    with pytest.raises(BackendUnavailable, match="neuron-monitor not found"):
        NeuronBackend().open()
    monkeypatch.setenv(MONITOR_ENV, str(tmp_path / "missing"))
    with pytest.raises(BackendUnavailable, match="not an executable"):
        NeuronBackend().open()


def test_a_driver_error_or_no_devices_means_unavailable(start):
    broken = copy.deepcopy(SCENARIO)
    broken["neuron"]["hardware_error"] = "Neuron driver is not loaded"
    with pytest.raises(BackendUnavailable, match="Neuron driver is not loaded"):
        start(broken)
    empty = copy.deepcopy(SCENARIO)
    empty["neuron"].update(neuron_device_count=0, runtimes=[], ecc={})
    with pytest.raises(BackendUnavailable, match="no Neuron devices"):
        start(empty)


def test_a_monitor_that_never_reports_means_unavailable(start):
    dead = copy.deepcopy(SCENARIO)
    dead["neuron"]["faults"] = {"exit_after_reports": 0}
    with pytest.raises(BackendUnavailable, match="gave no report"):
        start(dead, open_timeout_s=2.0)


# -- values ----------------------------------------------------------------------------


def test_utilization_and_memory_of_cores_and_chips(start):
    backend, devices, _ = start()
    d = by_index(devices)
    core2, core3, core4 = (backend.sample(d[i]) for i in ("1/0", "1/1", "2/0"))
    assert core2.up and not core2.errors
    assert value(core2, m.GPU_UTILIZATION, task="general") == pytest.approx(0.6)
    assert value(core3, m.GPU_UTILIZATION, task="general") == pytest.approx(1.0)  # 60 % + 50 %
    assert value(core2, m.MEMORY_USAGE) == 3 * GIB
    assert value(core3, m.MEMORY_USAGE) == 4 * GIB
    assert value(core3, m.NEURON_CORE_MEMORY_USAGE, category="tensors") == 3 * GIB
    assert value(core3, m.NEURON_CORE_MEMORY_USAGE, category="constants") == GIB
    assert value(core4, m.MEMORY_USAGE) == 3 * GIB
    idle_core = backend.sample(d["0/0"])
    assert value(idle_core, m.GPU_UTILIZATION, task="general") == 0.0
    assert value(idle_core, m.MEMORY_USAGE) == 0.0
    chip1 = backend.sample(d["1"])
    assert value(chip1, m.GPU_UTILIZATION, task="general") == pytest.approx(0.8)
    assert value(chip1, m.MEMORY_USAGE) == 7 * GIB
    assert value(chip1, m.MEMORY_LIMIT) == 32 * GIB
    assert value(core2, m.MEMORY_LIMIT) is None  # the cores share their chip's memory
    assert value(backend.sample(d["0"]), m.GPU_UTILIZATION, task="general") == 0.0


def test_ecc_counters_add_up_the_per_period_counts(start):
    backend, devices, _ = start()
    chip1, chip0 = by_index(devices)["1"], by_index(devices)["0"]
    first = wait_until(lambda: value(backend.sample(chip1), m.HW_ERRORS,
                                     error_type="ecc_corrected"))
    later = wait_until(lambda: (v := value(backend.sample(chip1), m.HW_ERRORS,
                                            error_type="ecc_corrected")) > first and v)
    assert later > first
    sample = backend.sample(chip1)
    assert value(sample, m.HW_ERRORS, error_type="ecc_uncorrected") == 0
    # a constant counter never grows: no events in any period
    assert value(sample, m.HW_ERRORS, error_type="sram_ecc_uncorrected") == 0
    assert value(sample, m.HW_ERRORS, error_type="sram_ecc_corrected") == 0
    assert value(backend.sample(chip0), m.HW_ERRORS, error_type="ecc_corrected") == 0
    core = by_index(devices)["1/0"]
    assert value(backend.sample(core), m.HW_ERRORS, error_type="ecc_corrected") is None


def test_processes_carry_pid_memory_and_utilization(start):
    backend, devices, _ = start()
    d = by_index(devices)
    core3 = backend.sample(d["1/1"])
    procs = {p.pid: {(r.metric, r.labels): r.value for r in p.readings}
             for p in core3.processes}
    assert set(procs) == {501, 502}
    assert procs[501][(m.PROCESS_MEMORY_USAGE, ())] == 3 * GIB
    assert procs[501][(m.PROCESS_UTILIZATION, (("engine", "sm"),))] == pytest.approx(0.6)
    assert procs[502][(m.PROCESS_MEMORY_USAGE, ())] == GIB
    assert procs[502][(m.PROCESS_UTILIZATION, (("engine", "sm"),))] == pytest.approx(0.5)
    chip2 = backend.sample(d["2"])
    assert [p.pid for p in chip2.processes] == [501]
    assert {r.metric for r in chip2.processes[0].readings} == {
        m.PROCESS_MEMORY_USAGE, m.PROCESS_UTILIZATION}  # runtime figures live on chip 1
    assert backend.sample(d["0/0"]).processes == ()


def test_runtime_figures_sit_on_the_chip_of_its_first_core(start):
    backend, devices, _ = start()
    chip1 = by_index(devices)["1"]

    def trainer() -> dict:
        sample = backend.sample(chip1)
        (proc,) = [p for p in sample.processes if p.pid == 501]
        return {(r.metric, r.labels): r.value for r in proc.readings}

    found = wait_until(lambda: (t := trainer()).get(
        (m.NEURON_EXECUTIONS, (("outcome", "completed"),)), 0) > 0 and t)
    assert found[(m.NEURON_RUNTIME_HOST_MEMORY, ())] == 4 * GIB
    assert found[(m.NEURON_RUNTIME_VCPU_UTILIZATION, (("mode", "user"),))] == pytest.approx(0.3)
    assert found[(m.NEURON_RUNTIME_VCPU_UTILIZATION, (("mode", "system"),))] == pytest.approx(0.05)
    assert (m.NEURON_EXECUTION_ERRORS, (("error_type", "transient"),)) in found
    assert (m.NEURON_EXECUTION_ERRORS, (("error_type", "hardware"),)) in found
    executed = found[(m.NEURON_EXECUTIONS, (("outcome", "completed"),))]
    wait_until(lambda: trainer()[(m.NEURON_EXECUTIONS, (("outcome", "completed"),))]
               > executed)
    latency = wait_until(lambda: {k: v for k, v in trainer().items()
                                  if k[0] == m.NEURON_EXECUTION_LATENCY})
    assert latency[(m.NEURON_EXECUTION_LATENCY,
                    (("stage", "total"), ("quantile", "0.5")))] == pytest.approx(0.5)
    assert (m.NEURON_EXECUTION_LATENCY, (("stage", "device"), ("quantile", "0.99"))) in latency


# -- faults ----------------------------------------------------------------------------


def test_a_missing_group_makes_only_its_values_absent(start):
    backend, devices, hardware = start()
    chip1, core2 = by_index(devices)["1"], by_index(devices)["1/0"]
    assert value(backend.sample(chip1), m.HW_ERRORS, error_type="ecc_corrected") is not None
    set_faults(hardware, missing_groups=["neuron_hw_counters", "neuroncore_counters"])
    sample = wait_until(lambda: (s := backend.sample(chip1)).errors and s)
    assert sample.up
    assert sample.errors == {"neuron_hw_counters": "missing", "neuroncore_counters": "missing"}
    assert values(sample, m.HW_ERRORS) == {}
    assert values(sample, m.GPU_UTILIZATION) == {}
    assert value(sample, m.MEMORY_USAGE) == 7 * GIB
    core = backend.sample(core2)
    assert values(core, m.GPU_UTILIZATION) == {}
    assert value(core, m.MEMORY_USAGE) == 3 * GIB
    (proc,) = [p for p in core.processes if p.pid == 501]
    assert {r.metric for r in proc.readings} == {m.PROCESS_MEMORY_USAGE}
    assert backend.errors.snapshot()[("missing", "neuron_hw_counters")] >= 1


def test_a_group_reporting_an_error_is_absent(start):
    backend, devices, hardware = start()
    chip1 = by_index(devices)["1"]
    set_faults(hardware, group_errors={"memory_used": "cannot read the runtime's memory"})
    sample = wait_until(lambda: (s := backend.sample(chip1)).errors and s)
    assert sample.errors == {"memory_used": "error"}
    assert value(sample, m.MEMORY_USAGE) is None
    assert value(sample, m.MEMORY_LIMIT) == 32 * GIB
    assert value(sample, m.GPU_UTILIZATION, task="general") == pytest.approx(0.8)


def test_malformed_lines_are_skipped_and_counted(start):
    backend, devices, hardware = start()
    set_faults(hardware, malformed_lines=True)
    wait_until(lambda: backend.errors.snapshot().get(("malformed", "neuron-monitor")))
    sample = backend.sample(by_index(devices)["1/0"])
    assert sample.up
    assert value(sample, m.GPU_UTILIZATION, task="general") == pytest.approx(0.6)


def test_a_monitor_that_exits_is_restarted(start):
    backend, devices, hardware = start(backoff_s=0.1)
    starts = backend.monitor.starts
    set_faults(hardware, exit_after_reports=3)
    wait_until(lambda: backend.monitor.starts >= starts + 2)
    assert backend.errors.snapshot()[("exited", "neuron-monitor")] >= 2
    set_faults(hardware)
    # the last restart keeps running; its reports keep the devices up
    first = backend.monitor.latest().received_at
    wait_until(lambda: backend.monitor.latest().received_at > first)
    sample = backend.sample(by_index(devices)["1/0"])
    assert sample.up
    assert value(sample, m.GPU_UTILIZATION, task="general") == pytest.approx(0.6)


def test_a_stale_report_marks_devices_down_until_reports_resume(start):
    backend, devices, hardware = start(stale_after_s=0.5)
    core = by_index(devices)["1/0"]
    assert backend.sample(core).up
    set_faults(hardware, silent=True)
    down = wait_until(lambda: s if not (s := backend.sample(core)).up else None)
    assert down.readings == () and down.processes == ()
    assert down.errors["neuron-monitor"].startswith("stale")
    assert not backend.sample(by_index(devices)["2"]).up
    assert backend.errors.snapshot()[("stale", "neuron-monitor")] >= 1
    set_faults(hardware)
    back = wait_until(lambda: s if (s := backend.sample(core)).up else None)
    assert value(back, m.GPU_UTILIZATION, task="general") == pytest.approx(0.6)


def test_a_device_the_host_stops_reporting_is_down_with_why(start):
    """After start the monitor reports a device not responding, then one device fewer: the
    devices it no longer vouches for are down with its reason, not up and idle."""
    backend, devices, hardware = start()
    d = by_index(devices)
    assert backend.sample(d["3"]).up and backend.sample(d["3/1"]).up

    def report(change):
        def apply(scenario: dict[str, Any]) -> None:
            change(scenario["neuron"])
            scenario["neuron"]["runtimes"] = [r for r in scenario["neuron"]["runtimes"]
                                              if max(r["cores"]) < 6]
        hardware.modify(apply)

    report(lambda neuron: neuron.update(hardware_error="neuron device 3 is not responding"))
    failing = wait_until(lambda: s if not (s := backend.sample(d["0"])).up else None)
    assert failing.errors == {"neuron_hardware_info": "neuron-monitor: neuron device 3 is "
                                                      "not responding"}
    report(lambda neuron: neuron.update(hardware_error="", neuron_device_count=3))
    wait_until(lambda: backend.sample(d["0"]).up)
    for index in ("3", "3/0", "3/1"):
        gone = backend.sample(d[index])
        assert not gone.up and gone.readings == ()
        assert gone.errors == {"neuron_hardware_info":
                               "not reported (the host reports 3 devices)"}
    assert backend.sample(d["2/1"]).up


# -- real processes and Ray slots -------------------------------------------------------


def test_a_real_process_shows_up_on_its_visible_cores(start, tmp_path):
    backend, devices, hardware = start(driven_by_processes(SCENARIO))
    d = by_index(devices)
    assert backend.sample(d["1/1"]).processes == ()
    with simulated_worker("ray_accel.exporter.simulate.neuron_fake",
                          "open_runtime(memory_bytes=2**30, utilization_percent=40)",
                          {**hardware.environ(), "NEURON_RT_VISIBLE_CORES": "3-4"}
                          ) as (worker, printed):
        assert printed == "2"
        on_core = wait_until(lambda: backend.sample(d["1/1"]).processes)
        assert [p.pid for p in on_core] == [worker.pid]
        assert {(r.metric, r.labels): r.value for r in on_core[0].readings} == {
            (m.PROCESS_MEMORY_USAGE, ()): GIB,
            (m.PROCESS_UTILIZATION, (("engine", "sm"),)): pytest.approx(0.4)}
        assert [p.pid for p in backend.sample(d["2/0"]).processes] == [worker.pid]
        assert backend.sample(d["1/0"]).processes == ()
    wait_until(lambda: backend.sample(d["1/1"]).processes == ())


def test_neuron_core_slots_map_to_neuroncores(start):
    _, devices, _ = start()
    gpus = [Device("nvidia", str(i), f"GPU-{i}{i}{i}{i}-aaaa", "H200") for i in range(2)]
    core = {int(d.facts["neuroncore"]): d.uuid for d in devices if d.parent_uuid}
    mapping = slot_devices([*gpus, *devices], {"NEURON_RT_VISIBLE_CORES": None})
    assert {k: v for k, v in mapping.items() if k[0] == "neuron_cores"} == {
        ("neuron_cores", i): core[i] for i in range(8)}
    assert mapping[("GPU", 1)] == "GPU-1111-aaaa"  # NVIDIA unchanged beside Neuron
    ranged = slot_devices(devices, {"NEURON_RT_VISIBLE_CORES": ("4-6", "1", "9")})
    assert ranged == {("neuron_cores", 0): core[4], ("neuron_cores", 1): core[5],
                      ("neuron_cores", 2): core[6], ("neuron_cores", 3): core[1]}


def test_parse_cores_reads_lists_and_ranges():
    assert parse_cores("0-3,6, 8-9") == [0, 1, 2, 3, 6, 8, 9]
    assert parse_cores("") == []
    with pytest.raises(ValueError):
        parse_cores("a-3")


# -- the scenario section ----------------------------------------------------------------


@pytest.mark.parametrize(("change", "path"), [
    (lambda n: n["runtimes"][0]["cores"].append(99), "neuron.runtimes[0].cores[3]"),
    (lambda n: n["runtimes"][1].update(utilization_percent=120),
     "neuron.runtimes[1].utilization_percent"),
    (lambda n: n.update(faults={"missing_groups": ["nope"]}), "neuron.faults.missing_groups[0]"),
    (lambda n: n["ecc"].update({"9": {}}), "neuron.ecc.9"),
    (lambda n: n["ecc"]["1"].update(bad=1), "neuron.ecc.1"),
    (lambda n: n.update(neuroncore_per_device_count=0), "neuron.neuroncore_per_device_count"),
    (lambda n: n["runtimes"][1].update(pid=501), "neuron.runtimes[1].pid"),
])
def test_invalid_sections_name_the_offending_key(change, path):
    scenario = copy.deepcopy(SCENARIO)
    change(scenario["neuron"])
    with pytest.raises(ScenarioError) as raised:
        load_scenario(scenario)
    assert path in str(raised.value)


def test_the_shipped_trn1_scenario_is_a_trn1_32xlarge():
    section = load_scenario("trn1-32xl")["neuron"]
    assert section["neuron_device_count"] == 16
    assert section["neuroncore_per_device_count"] == 2
    assert load_scenario("trn1-32xl")["devices"] == []
    json.dumps(section)  # what the fake reads back
