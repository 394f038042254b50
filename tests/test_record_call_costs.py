"""Call costs and faults of every family, as the recorder writes them and the fakes replay them.

- amdsmi and pyhlml calls are timed into the wrapper's `CALL_CPU_S` like NVML's, so a
  costly one becomes a `busy` delay of its own library;
- the Python fakes play a `busy` delay on the calling thread's CPU (a plain delay
  sleeps), only for the device the rule names;
- the Gaudi section's `delays` rules are checked like the others' (bad input names the key);
- TPU runtime failures become `unsupported_metrics` and `errors`, a call past its
  deadline a `delays` rule (the fake answers it late); neuron-monitor groups missing or
  failing in every report become `faults`, one that came and went does not.
"""

from __future__ import annotations

import copy
import json
import pathlib
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from amd_support import amd_scenario, amdsmi_modules, simulation

from ray_accel.exporter.backends.calls import CALL_CPU_S, ErrorTally
from ray_accel.exporter.backends.tpu import runtime
from ray_accel.exporter.model import Device
from ray_accel.exporter.record import neuron, tpu
from ray_accel.exporter.record.events import busy_rules
from ray_accel.exporter.record.series import DeviceSeries
from ray_accel.exporter.simulate import STATE_ENV, ScenarioError, SimulatedHardware, load_scenario
from ray_accel.exporter.simulate.gaudi_fake import SCENARIO_ENV

DELAY_S = 0.05


def _thread_cpu(call: Callable[[], Any]) -> float:
    """Seconds of this thread's CPU time `call()` took."""
    before = time.thread_time()
    call()
    return time.thread_time() - before


def _spent(function: str) -> list[float]:
    """[calls, CPU seconds] counted for `function` so far."""
    return list(CALL_CPU_S.get(function, [0, 0.0]))


@pytest.fixture
def pyhlml(tmp_path, monkeypatch) -> Iterator[Callable[[dict], Any]]:
    """`start(section)`: the simulated pyhlml on gaudi2-8 with `section`'s keys, initialised."""
    for name in (STATE_ENV, SCENARIO_ENV):
        monkeypatch.delenv(name, raising=False)  # restored after the test
    monkeypatch.setattr(sys, "path", list(sys.path))  # activate() puts the fake first on it
    started: list[SimulatedHardware] = []

    def start(section: dict) -> Any:
        doc = load_scenario("gaudi2-8")
        doc["gaudi"].update(section)
        hardware = SimulatedHardware.start(doc, state_dir=tmp_path / "hw")
        started.append(hardware)
        hardware.activate()
        import pyhlml

        pyhlml.hlmlInit()
        return pyhlml

    yield start
    for hardware in started:
        hardware.close()
    for name in [n for n in sys.modules if n == "pyhlml" or n.startswith("pyhlml.")]:
        del sys.modules[name]


def test_pyhlml_busy_delay_spins_the_cpu_of_its_card_only(pyhlml) -> None:
    from ray_accel.exporter.backends.gaudi.calls import DeviceCalls

    module = pyhlml({"delays": [
        {"function": "hlmlDeviceGetMemoryInfo", "device": 1, "seconds": DELAY_S, "busy": True},
        {"function": "hlmlDeviceGetPowerUsage", "device": 1, "seconds": DELAY_S}]})
    first, second = (module.hlmlDeviceGetHandleByIndex(i) for i in (0, 1))
    assert _thread_cpu(lambda: module.hlmlDeviceGetPowerUsage(second)) < DELAY_S / 2  # slept
    assert _thread_cpu(lambda: module.hlmlDeviceGetMemoryInfo(first)) < DELAY_S / 2
    before = _spent("hlmlDeviceGetMemoryInfo")
    calls = DeviceCalls(module, ErrorTally())
    assert calls.call("hlmlDeviceGetMemoryInfo", second).total > 0  # answers after its delay
    after = _spent("hlmlDeviceGetMemoryInfo")
    assert after[0] == before[0] + 1 and after[1] - before[1] >= DELAY_S
    costs = {"hlmlDeviceGetMemoryInfo": [1, after[1] - before[1]]}
    assert [r["function"] for r in busy_rules(costs, "hlml")] == ["hlmlDeviceGetMemoryInfo"]
    assert busy_rules(costs, "amdsmi_") == []


def test_amdsmi_busy_delay_spins_the_cpu(tmp_path) -> None:
    from ray_accel.exporter.backends.amd.calls import DeviceCalls

    source = amd_scenario(delays=[
        {"function": "amdsmi_get_gpu_vram_usage", "device": 0, "seconds": DELAY_S,
         "busy": True},
        {"function": "amdsmi_get_gpu_activity", "device": 0, "seconds": DELAY_S}])
    with simulation(tmp_path) as start, amdsmi_modules(start) as run:
        module, hardware = run(source)
        try:
            handle = module.amdsmi_get_processor_handles()[0]
            assert _thread_cpu(lambda: module.amdsmi_get_gpu_activity(handle)) < DELAY_S / 2
            before = _spent("amdsmi_get_gpu_vram_usage")
            calls = DeviceCalls(module, ErrorTally())
            assert calls.call("amdsmi_get_gpu_vram_usage", handle)["vram_used"] > 0
            after = _spent("amdsmi_get_gpu_vram_usage")
            assert after[1] - before[1] >= DELAY_S
        finally:
            hardware.close()


@pytest.mark.parametrize(("rule", "key", "reason"), [
    ({"function": "hlmlDeviceGetPowerUsage", "seconds": "long"}, "seconds", "finite number"),
    ({"function": "hlmlDeviceGetPowerUsage", "seconds": 1e6}, "seconds", "<= 86400"),
    ({"function": "hlmlDeviceGetPowerUsage", "seconds": 1, "busy": "yes"}, "busy",
     "true or false"),
    ({"function": "hlmlDeviceGetPowerUsage", "seconds": 1, "device": 8}, "device",
     "no Gaudi device 8"),
    ({"function": "nvmlDeviceGetPowerUsage", "seconds": 1}, "function", "unknown pyhlml"),
    ({"function": "hlmlDeviceGetPowerUsage"}, "seconds", "required"),
    ({"function": "hlmlDeviceGetPowerUsage", "seconds": 1, "from_s": 5, "until_s": 5},
     "until_s", "after from_s"),
])
def test_bad_gaudi_delay_is_refused_naming_the_key(rule: dict, key: str, reason: str) -> None:
    doc = load_scenario("gaudi2-8")
    doc["gaudi"]["delays"] = [{"device": 0, **rule}]
    with pytest.raises(ScenarioError) as refused:
        load_scenario(copy.deepcopy(doc))
    message = str(refused.value)
    assert "gaudi.delays[0]" in message and key in message and reason in message, message


def _series(up_times: list[float], errors: dict[float, dict[str, str]]) -> DeviceSeries:
    return DeviceSeries(up_times=list(up_times), errors=sorted(errors.items()))


def test_tpu_failures_become_unsupported_metrics_and_error_rules() -> None:
    assert tpu.FUNCTION == runtime.FUNCTION
    duty, hbm = "tpu.runtime.tensorcore.dutycycle.percent", "tpu.runtime.hbm.utilization.percent"
    unserved = {f"GetRuntimeMetric[{hbm}]": "not_found"}
    errors = {t: dict(unserved) for t in range(10)}
    for t in (2, 3, 4):
        errors[t][f"GetRuntimeMetric[{duty}]"] = "cancelled"  # no such status in the section
    errors[7]["GetRuntimeMetric"] = "unavailable"  # the service went away for a cycle
    chip = Device("google", "0", "TPU-x", "TPU v5 lite", "0000:00:04.0")
    keys = tpu.host_keys([chip], [_series(list(range(10)), errors)], {}, {}, 1.0)
    assert keys["unsupported_metrics"] == [hbm]
    assert keys["errors"] == [
        {"metric": "*", "status": "UNAVAILABLE", "from_s": 6.5, "until_s": 7.5},
        {"metric": duty, "status": "UNKNOWN", "from_s": 1.5, "until_s": 4.5}]
    section = {**keys, "chips": [{"pci_bus_id": chip.pci_bus_id, "hbm_total_bytes": 2**34}]}
    assert load_scenario({"name": "t", "devices": [], "tpu": section})["tpu"]["errors"]


def _neuron_keys(errors: dict[float, dict[str, str]], up: list[float]) -> dict[str, Any]:
    device = Device("aws", "0", "neuron-i-0abc-nd0", "Trainium")
    return neuron.host_keys([device], [_series(up, errors)], {}, {}, 1.0)


def test_neuron_groups_failing_in_every_report_become_faults() -> None:
    every = {t: {"neuron_hw_counters": "missing", "vcpu_usage": "error"} for t in range(5)}
    every[5] = {"neuron_monitor": "stale"}  # a down sample's own error: not a report
    faults = _neuron_keys(every, list(range(5)))["faults"]
    assert faults["missing_groups"] == ["neuron_hw_counters"]
    assert list(faults["group_errors"]) == ["vcpu_usage"]
    assert load_scenario({"name": "n", "devices": [], "neuron": {"faults": faults}})


def test_neuron_group_that_came_and_went_is_no_fault() -> None:
    some = {t: {"neuron_hw_counters": "missing"} for t in range(3)}  # reports 3, 4 had it
    assert "faults" not in _neuron_keys(some, list(range(5)))
    changing = {t: {"vcpu_usage": "missing" if t < 2 else "error"} for t in range(5)}
    assert "faults" not in _neuron_keys(changing, list(range(5)))



@pytest.mark.parametrize(("section", "tamper", "key"), [
    ("tpu", lambda s: s["errors"][0].update(status="BROKEN"), "tpu.errors[0].status"),
    ("tpu", lambda s: s["errors"][0].update(until_s=-1), "tpu.errors[0].until_s"),
    ("tpu", lambda s: s.update(unsupported_metrics=[7]), "tpu.unsupported_metrics[0]"),
    ("neuron", lambda s: s["faults"].update(missing_groups=["gpu"]),
     "neuron.faults.missing_groups[0]"),
    ("neuron", lambda s: s["faults"]["group_errors"].update(memory_used=3),
     "neuron.faults.group_errors.memory_used"),
    ("gaudi", lambda s: s["delays"][0].update(seconds=-1), "gaudi.delays[0].seconds"),
    ("tpu", lambda s: s.update(delays=[{"metric": "*", "seconds": "late"}]),
     "tpu.delays[0].seconds"),
    ("tpu", lambda s: s.update(delays=[{"seconds": 3}]), "tpu.delays[0]"),
])
def test_tampered_recorded_failures_are_refused_naming_the_key(section: str, tamper, key: str
                                                                ) -> None:
    recorded = {
        "tpu": {"chips": [{"pci_bus_id": "0000:00:04.0", "hbm_total_bytes": 2**34}],
                "unsupported_metrics": ["tpu.runtime.hbm.utilization.percent"],
                "errors": [{"metric": "*", "status": "UNAVAILABLE", "from_s": 1, "until_s": 2}]},
        "neuron": {"faults": {"missing_groups": ["neuron_hw_counters"],
                              "group_errors": {"memory_used": "error"}}},
        "gaudi": {**load_scenario("gaudi2-8")["gaudi"],
                  "delays": [{"function": "hlmlDeviceGetTemperature", "device": 2,
                              "from_s": 4.6, "seconds": 3611.1}]},
    }[section]
    load_scenario({"name": "recorded", "devices": [], section: copy.deepcopy(recorded)})
    tamper(recorded)
    with pytest.raises(ScenarioError) as refused:
        load_scenario({"name": "recorded", "devices": [], section: recorded})
    assert key in str(refused.value)


def test_tpu_chip_model_recorded_as_its_pci_device_id() -> None:
    v4 = Device("google", "0", "TPU-y", "TPU v4", "0000:00:05.0")
    keys = tpu.host_keys([v4], [_series([0.0], {})], {}, {}, 1.0)
    assert keys["pci_device_id"] == "0x005e"
    chips = [{"pci_bus_id": v4.pci_bus_id, "hbm_total_bytes": 2**35}]
    assert load_scenario({"name": "v4", "devices": [],
                          "tpu": {**keys, "chips": chips}})["tpu"]["pci_device_id"] == "0x005e"
    unknown = Device("google", "0", "TPU-z", "TPU", "0000:00:05.0")
    assert "pci_device_id" not in tpu.host_keys([unknown], [_series([0.0], {})], {}, {}, 1.0)


def test_tpu_delay_makes_the_backend_call_time_out_for_that_metric_only() -> None:
    from ray_accel.exporter.backends.tpu import proto

    doc = load_scenario("tpu-v5e-8")
    doc["tpu"]["delays"] = [{"metric": proto.HBM_USAGE, "seconds": 1.0}]
    with SimulatedHardware.start(doc) as hardware:
        port = int(hardware.environ()[runtime.PORTS_ENV])
        calls = runtime.RuntimeCalls([port], ErrorTally(), timeout_s=0.3)
        try:
            assert calls.metric(proto.HBM_USAGE) is None
            assert calls.cycle_errors == {f"GetRuntimeMetric[{proto.HBM_USAGE}]":
                                          "deadline_exceeded"}
            assert len(calls.metric(proto.HBM_TOTAL) or ()) == 8
        finally:
            calls.close()


def test_tpu_call_past_its_deadline_recorded_as_a_late_answer() -> None:
    assert tpu.LATE_ANSWER_S > runtime.CALL_TIMEOUT_S
    usage = "tpu.runtime.hbm.memory.usage.bytes"
    late = {f"GetRuntimeMetric[{usage}]": "deadline_exceeded"}
    # cycles three seconds apart while the call waited out its deadline: one run
    errors = {0.0: {}, 1.0: dict(late), 4.0: dict(late), 7.0: dict(late), 8.0: {}}
    chip = Device("google", "0", "TPU-x", "TPU v5 lite", "0000:00:04.0")
    series = _series([0.0, 1.0, 4.0, 7.0, 8.0], {t: e for t, e in errors.items() if e})
    keys = tpu.host_keys([chip], [series], {}, {}, 1.0)
    assert "errors" not in keys
    assert keys["delays"] == [{"metric": usage, "seconds": tpu.LATE_ANSWER_S, "from_s": 0.5,
                               "until_s": 7.5}]
    section = {**keys, "chips": [{"pci_bus_id": chip.pci_bus_id, "hbm_total_bytes": 2**34}]}
    assert load_scenario({"name": "t", "devices": [], "tpu": section})["tpu"]["delays"]


def test_neuron_runtime_that_came_and_went_keeps_its_window() -> None:
    from ray_accel.exporter import catalog as m
    from ray_accel.exporter.simulate.fake_neuron.reports import ReportBuilder
    from ray_accel.exporter.simulate.neuron_scenario import RUNTIME_GROUPS, SYSTEM_GROUPS

    chip = Device("aws", "0", "neuron-i-0abc-nd0", "Trainium")
    core = Device("aws", "0/0", "neuron-i-0abc-nc0", "Trainium NeuronCore-v2",
                  parent_uuid=chip.uuid, facts={"neuroncore": "0"})
    busy = ("p", 4242, m.PROCESS_UTILIZATION, (("engine", m.ENGINE_SM),))
    core_series = DeviceSeries(up_times=[float(t) for t in range(10)],
                               points={busy: [(float(t), 0.5) for t in range(3, 7)]})
    keys = neuron.host_keys([chip], [_series([float(t) for t in range(10)], {})], {},
                            {chip.uuid: [(core, core_series)]}, 1.0)
    [runtime] = keys["runtimes"]
    assert (runtime["from_s"], runtime["until_s"]) == (2.5, 6.5)
    section = load_scenario({"name": "n", "devices": [], "neuron": keys})["neuron"]
    reports = ReportBuilder(RUNTIME_GROUPS, SYSTEM_GROUPS, None, 0.0)
    listed = [[r["pid"] for r in reports.build(section, t, 1.0, lambda pid: True)
               ["neuron_runtime_data"]] for t in (2.0, 4.0, 7.0)]
    assert listed == [[], [4242], []]


def test_neuron_runtime_busy_differently_per_core_keeps_each_core() -> None:
    from ray_accel.exporter import catalog as m
    from ray_accel.exporter.simulate.fake_neuron.reports import ReportBuilder
    from ray_accel.exporter.simulate.neuron_scenario import RUNTIME_GROUPS, SYSTEM_GROUPS

    chip = Device("aws", "0", "neuron-i-0abc-nd0", "Trainium")
    busy = ("p", 4242, m.PROCESS_UTILIZATION, (("engine", m.ENGINE_SM),))
    cores = [(Device("aws", f"0/{n}", f"neuron-i-0abc-nc{n}", "NeuronCore-v2",
                     parent_uuid=chip.uuid, facts={"neuroncore": str(n)}),
              DeviceSeries(up_times=[0.0, 1.0], points={busy: [(0.0, share), (1.0, share)]}))
             for n, share in ((0, 0.9), (1, 0.2))]
    keys = neuron.host_keys([chip], [_series([0.0, 1.0], {})], {}, {chip.uuid: cores}, 1.0)
    [runtime] = keys["runtimes"]
    assert runtime["utilization_percent"] == [90.0, 20.0]
    section = load_scenario({"name": "n", "devices": [], "neuron": keys})["neuron"]
    report = ReportBuilder(RUNTIME_GROUPS, SYSTEM_GROUPS, None, 0.0).build(
        section, 1.0, 1.0, lambda pid: True)
    in_use = report["neuron_runtime_data"][0]["report"]["neuroncore_counters"][
        "neuroncores_in_use"]
    assert {core: v["neuroncore_utilization"] for core, v in in_use.items()} == {
        "0": 90.0, "1": 20.0}
    runtime["utilization_percent"] = [90.0]  # tampered: one value for two cores
    with pytest.raises(ScenarioError) as refused:
        load_scenario({"name": "n", "devices": [], "neuron": keys})
    assert "neuron.runtimes[0].utilization_percent" in str(refused.value)


def test_tpu_chip_lost_during_the_recording_is_lost_in_the_replay(tmp_path) -> None:
    from ray_accel.exporter.backends.tpu import proto
    from ray_accel.exporter.backends.tpu.chips import DEV_DIR_ENV
    from ray_accel.exporter.simulate.tpu_fake import chip_file

    doc = load_scenario("tpu-v5e-8")
    doc["tpu"]["chips"] = doc["tpu"]["chips"][:2]
    doc["tpu"]["chips"][1]["lost_at_s"] = 2.0
    source = tmp_path / "lost.json"
    source.write_text(json.dumps(doc))
    out = tmp_path / "recorded.json"
    done = subprocess.run([sys.executable, "-m", "ray_accel.exporter.cli", "record", "--simulate",
                           str(source), "--duration", "3", "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    chips = json.loads(out.read_text())["tpu"]["chips"]
    assert "lost_at_s" not in chips[0] and 0 <= chips[1]["lost_at_s"] <= 2.0
    replay = load_scenario(str(out))
    replay["freeze_at_s"] = chips[1]["lost_at_s"] - 0.01 if chips[1]["lost_at_s"] else 0.0
    with SimulatedHardware.start(replay) as hardware:
        calls = runtime.RuntimeCalls([int(hardware.environ()[runtime.PORTS_ENV])], ErrorTally())
        root, section = pathlib.Path(hardware.environ()[DEV_DIR_ENV]).parent, replay["tpu"]
        try:
            calls.metric(proto.HBM_TOTAL)  # each request brings the device files up to date
            before = [chip_file(root, section, i).exists() for i in (0, 1)]
            hardware.modify(lambda s: s.update(freeze_at_s=chips[1]["lost_at_s"] + 1))
            calls.metric(proto.HBM_TOTAL)
            after = [chip_file(root, section, i).exists() for i in (0, 1)]
        finally:
            calls.close()
    assert before == [True, chips[1]["lost_at_s"] > 0] and after == [True, False]
