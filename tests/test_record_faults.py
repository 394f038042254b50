"""A node whose calls fail, hang or cost CPU records the rule; its replay fails the same way.

Three nodes, each recorded in its own process at once: l4-pcie (NVIDIA),
mi300x-8 (AMD) and gaudi2-8 (Gaudi), card 1's power reading failing (TIMEOUT,
t = 2-12 s) and card 2's temperature call hanging from t = 6 s; on the GPU
nodes a process on GPU 0 from t = 5 s to 11 s; on the AMD and Gaudi nodes
device 3 lost at t = 12 s and one call spending 1 ms of CPU (a `busy` delay); on the
NVIDIA node GPU 3 answering every call GPU_IS_LOST from 5 s to 12 s, then again.
The recorded file holds an `errors` rule for that function on device 1 only,
`delays` rules on card 2 only, the costly call as a `busy` delay, the process
with its window, the loss at its time and the outage GPU 3 came back from as an
`errors` rule (not a loss); an agent on the replay misses device
1's power inside the window only (the call's error counted on it alone), finds
card 2 stale while the others answer, lists the process only inside its window
and device 3 down after its loss (GPU 3 down in its outage only), as on the original.
(HLML lists no processes.)
Beside them a TPU host whose libtpu does not serve HBM bandwidth and fails the
duty cycle (INTERNAL, t = 2-12 s), and a Neuron node whose monitor leaves out the
hardware counters and reports the runtime's memory with an error: recorded as
`unsupported_metrics`, a `tpu.errors` rule and `neuron.faults`, and the replay
misses the same values and counts the same failures.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest

from ray_accel.exporter.simulate import load_scenario

HELPER = pathlib.Path(__file__).resolve().parent / "support" / "record_roundtrip.py"
DURATION_S = 16
# Recording times; the scenario's are later by when the recording started (offset_s,
# a second or two on a busy machine): the windows leave room for up to 3.5 s of it.
BEFORE_S, INSIDE_S, AFTER_S, HUNG_S = 1.5, 6.0, 14.0, 12.0
WINDOW_TOLERANCE_S = 1.5
PROCESS = {"pid": 4242, "used_memory_bytes": 2**30, "from_s": 5, "until_s": 11}
LOST_S = 12.0
# an outage the NVIDIA node's GPU 3 comes back from (its discovery done before it)
OUTAGE = {"function": "*", "device": 3, "code": "GPU_IS_LOST", "from_s": 5, "until_s": 12}
# node -> (source, failing power call, hanging temperature call)
NODES: dict[str, tuple[str, str, str]] = {
    "nvidia": ("l4-pcie", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetTemperature"),
    "amd": ("mi300x-8", "amdsmi_get_power_info", "amdsmi_get_temp_metric"),
    "gaudi": ("gaudi2-8", "hlmlDeviceGetPowerUsage", "hlmlDeviceGetTemperature"),
}
GPU_NODES = ("nvidia", "amd")
LOSING_NODES = ("amd", "gaudi")
# node -> a call made to spend CPU on every device (NVIDIA's own costs are recorded as they are)
BUSY_CALLS = {"amd": "amdsmi_get_gpu_vram_usage", "gaudi": "hlmlDeviceGetMemoryInfo"}
BUSY_S = 0.001
# a TPU host whose libtpu does not serve one metric and fails another for a while; a Neuron
# node whose monitor leaves one group out and reports another with an error
TPU_UNSERVED = "tpu.runtime.hbm.utilization.percent"
TPU_FAILING = "tpu.runtime.tensorcore.dutycycle.percent"
NEURON_MISSING, NEURON_FAILING = "neuron_hw_counters", "memory_used"


def _faulty(vendor: str) -> dict[str, Any]:
    source, power, temperature = NODES[vendor]
    scenario = load_scenario(source)
    failing = [{"function": power, "device": 1, "code": "TIMEOUT", "from_s": 2, "until_s": 12}]
    delays: list[dict[str, Any]] = [
        {"function": temperature, "device": 2, "seconds": 120, "from_s": 6}]
    if vendor in BUSY_CALLS:
        delays.append({"function": BUSY_CALLS[vendor], "seconds": BUSY_S, "busy": True})
    if vendor == "gaudi":
        scenario["gaudi"]["errors"] = failing
        scenario["gaudi"]["delays"] = delays
        scenario["gaudi"]["devices"][3]["lost_at_s"] = LOST_S
        return scenario
    scenario["errors"] = failing + ([OUTAGE] if vendor == "nvidia" else [])
    scenario["delays"] = delays
    scenario["devices"][0].setdefault("processes", []).append(dict(PROCESS))
    if vendor == "amd":
        scenario["devices"][3]["lost_at_s"] = LOST_S
    return scenario


def _failing_tpu_host() -> dict[str, Any]:
    """Two chips of tpu-v5e-8 (no device plugin) whose libtpu does not serve HBM bandwidth
    and fails the duty cycle (INTERNAL) from t = 2 s to 12 s."""
    scenario = load_scenario("tpu-v5e-8")
    section = scenario["tpu"]
    section["chips"] = section["chips"][:2]
    section["device_plugin"] = False  # it serves the duty cycle too
    section["unsupported_metrics"] = [TPU_UNSERVED]
    section["errors"] = [{"metric": TPU_FAILING, "status": "INTERNAL", "from_s": 2,
                          "until_s": 12}]
    return scenario


def _faulty_neuron_node() -> dict[str, Any]:
    """Two Trainium devices, one runtime, whose neuron-monitor never reports the hardware
    counters and reports the runtime's memory with an error."""
    scenario = load_scenario("trn1-32xl")
    section = scenario["neuron"]
    runtime = {**section["runtimes"][0], "cores": [0, 1, 2, 3]}
    section.update(neuron_device_count=2, ecc={}, runtimes=[runtime],
                   faults={"missing_groups": [NEURON_MISSING],
                           "group_errors": {NEURON_FAILING: "simulated failure"}})
    return scenario


# family -> its faulty node, recorded beside the others (compared inside and after the window)
FAMILY_NODES = {"tpu": _failing_tpu_host, "neuron": _faulty_neuron_node}


@pytest.fixture(scope="module")
def trips(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    folder = tmp_path_factory.mktemp("faults")
    running = {}
    # BEFORE_S only where a process comes and goes (HLML lists none)
    nodes = {**{vendor: (_faulty(vendor), (BEFORE_S, INSIDE_S, AFTER_S)
                         if vendor in GPU_NODES else (INSIDE_S, AFTER_S), True)
                for vendor in NODES},
             **{family: (faulty(), (INSIDE_S, AFTER_S), False)
                for family, faulty in FAMILY_NODES.items()}}
    for vendor, (scenario, times, hangs) in nodes.items():
        source = folder / f"{vendor}.json"
        source.write_text(json.dumps(scenario))
        out = folder / f"{vendor}-trip.json"
        hang = {"RECORD_ROUNDTRIP_STALE_AT_S": str(HUNG_S)} if hangs else {}
        running[vendor] = (out, subprocess.Popen(
            [sys.executable, str(HELPER), str(source), str(DURATION_S), str(out),
             *map(str, times)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, **hang}))
    found = {}
    for vendor, (out, process) in running.items():
        output, _ = process.communicate(timeout=600)
        assert process.returncode == 0, f"{vendor}: {output[-3000:]}"
        found[vendor] = json.loads(out.read_text())
    return found


def _at(trip: dict, which: str, t: float) -> dict[str, float]:
    return trip[which][f"{t}+0" if which == "original" else str(t)]


def _power(series: dict[str, float], uuid: str) -> float | None:
    return series.get(json.dumps([uuid, "d", "hw.power", []]))


def _pids(series: dict[str, float], uuid: str) -> set[int]:
    return {json.loads(name)[2] for name in series
            if json.loads(name)[:2] == [uuid, "p"]}


def _recorded(trip: dict) -> dict[str, Any]:
    """The part of the recorded scenario holding the node's devices and error rules."""
    return trip["scenario"].get("gaudi") or trip["scenario"]


def _uuids(trip: dict) -> list[str]:
    return [d["uuid"] for d in _recorded(trip)["devices"]]


@pytest.mark.parametrize("vendor", NODES)
def test_error_rule_recorded_for_its_device_and_window(trips: dict, vendor: str) -> None:
    trip = trips[vendor]
    offset = trip["offset_s"]
    rules = [r for r in _recorded(trip).get("errors", []) if r["function"] == NODES[vendor][1]]
    assert [(r["device"], r["code"]) for r in rules] == [(1, "TIMEOUT")]
    assert abs(rules[0]["from_s"] + offset - 2) <= WINDOW_TOLERANCE_S
    assert abs(rules[0]["until_s"] + offset - 12) <= WINDOW_TOLERANCE_S


@pytest.mark.parametrize("vendor", NODES)
def test_replay_misses_the_failing_value_only_in_its_window(trips: dict, vendor: str) -> None:
    trip = trips[vendor]
    uuids = _uuids(trip)
    for which in ("original", "replay"):
        inside, after = _at(trip, which, INSIDE_S), _at(trip, which, AFTER_S)
        assert _power(inside, uuids[1]) is None, which
        assert _power(inside, uuids[0]) is not None, which
        assert _power(after, uuids[1]) is not None, which
        failed = trip["errors"][str(INSIDE_S)][which]
        assert _failed_calls(failed, uuids[1], NODES[vendor][1]) == {"timeout"}, which
        assert not _failed_calls(failed, uuids[0], NODES[vendor][1]), which


def _failed_calls(errors: dict[str, dict[str, str]], uuid: str, function: str) -> set[str]:
    """The kinds `function` failed with on the device (calls named with their key too)."""
    return {kind for call, kind in errors.get(uuid, {}).items()
            if call.partition("[")[0] == function}


@pytest.mark.parametrize("vendor", NODES)
def test_hang_recorded_as_delay_and_replayed_as_stale(trips: dict, vendor: str) -> None:
    trip = trips[vendor]
    delays = [r for r in _recorded(trip).get("delays", []) if "device" in r]
    assert delays and {r["device"] for r in delays} == {2}
    assert abs(delays[0]["from_s"] + trip["offset_s"] - 6) <= WINDOW_TOLERANCE_S + 2
    uuids = _uuids(trip)
    for which in ("stale_original", "stale_replay"):
        stale = trip[which]
        assert stale[uuids[2]] is True, which
        lost = uuids[3] if vendor in LOSING_NODES else None
        assert not any(stale[u] for u in uuids if u not in (uuids[2], lost)), which


@pytest.mark.parametrize("vendor", BUSY_CALLS)
def test_costly_call_recorded_as_busy_delay(trips: dict, vendor: str) -> None:
    rules = [r for r in _recorded(trips[vendor]).get("delays", [])
             if r["function"] == BUSY_CALLS[vendor] and r.get("busy")]
    # on every device, spinning at least what the node's call spent on the CPU
    assert [("device" in r, r["seconds"] >= BUSY_S) for r in rules] == [(False, True)]
    cheap = {r["function"] for r in _recorded(trips[vendor]).get("delays", [])
             if r.get("busy")} - {BUSY_CALLS[vendor]}
    assert NODES[vendor][1] not in cheap  # a call that cost nothing is no rule


@pytest.mark.parametrize("vendor", GPU_NODES)
def test_process_that_came_and_went_does_so_in_the_replay(trips: dict, vendor: str) -> None:
    trip = trips[vendor]
    offset = trip["offset_s"]
    entries = [p for p in trip["scenario"]["devices"][0]["processes"]
               if p["pid"] == PROCESS["pid"]]
    assert len(entries) == 1
    assert abs(entries[0]["from_s"] + offset - PROCESS["from_s"]) <= WINDOW_TOLERANCE_S
    assert abs(entries[0]["until_s"] + offset - PROCESS["until_s"]) <= WINDOW_TOLERANCE_S
    assert entries[0]["used_memory_bytes"] == PROCESS["used_memory_bytes"]
    gpu = _uuids(trip)[0]
    for which in ("original", "replay"):
        listed = [PROCESS["pid"] in _pids(_at(trip, which, t), gpu)
                  for t in (BEFORE_S, INSIDE_S, AFTER_S)]
        assert listed == [False, True, False], which
    # the processes that stayed throughout have no window
    assert all("from_s" not in p and "until_s" not in p
               for p in trip["scenario"]["devices"][0]["processes"]
               if p["pid"] != PROCESS["pid"])


@pytest.mark.parametrize("vendor", LOSING_NODES)
def test_lost_device_at_its_time_and_down_in_the_replay(trips: dict, vendor: str) -> None:
    trip = trips[vendor]
    devices = _recorded(trip)["devices"]
    assert [i for i, d in enumerate(devices) if "lost_at_s" in d] == [3]
    assert abs(devices[3]["lost_at_s"] + trip["offset_s"] - LOST_S) <= WINDOW_TOLERANCE_S
    lost, kept = (json.dumps([devices[i]["uuid"], "up"]) for i in (3, 0))
    for which in ("original", "replay"):
        started = f"{which}: the recording started {trip['offset_s']:.1f} s in"
        assert _at(trip, which, INSIDE_S).get(lost) == 1.0, started
        after = _at(trip, which, AFTER_S)
        assert after.get(lost, 0.0) == 0.0 and after[kept] == 1.0, started


def test_outage_the_gpu_came_back_from_is_an_error_window_not_a_loss(trips: dict) -> None:
    trip = trips["nvidia"]
    offset = trip["offset_s"]
    assert not any("lost_at_s" in d for d in trip["scenario"]["devices"])
    rules = [r for r in trip["scenario"]["errors"] if r["device"] == 3]
    assert {r["code"] for r in rules} == {OUTAGE["code"]}
    assert abs(min(r["from_s"] for r in rules) + offset - OUTAGE["from_s"]) <= WINDOW_TOLERANCE_S
    assert abs(max(r["until_s"] for r in rules) + offset - OUTAGE["until_s"]) <= WINDOW_TOLERANCE_S
    # down inside (an agent started then cannot even identify it), up again after
    gpu = json.dumps([_uuids(trip)[3], "up"])
    for which in ("original", "replay"):
        assert _at(trip, which, INSIDE_S).get(gpu, 0.0) == 0.0, which
        assert _at(trip, which, AFTER_S)[gpu] == 1.0, which


def test_tpu_metric_failures_recorded_and_replayed(trips: dict) -> None:
    trip = trips["tpu"]
    section = trip["scenario"]["tpu"]
    assert section["unsupported_metrics"] == [TPU_UNSERVED]
    rules = [r for r in section.get("errors", []) if r["metric"] == TPU_FAILING]
    assert [r["status"] for r in rules] == ["INTERNAL"]
    assert abs(rules[0]["from_s"] + trip["offset_s"] - 2) <= WINDOW_TOLERANCE_S
    assert abs(rules[0]["until_s"] + trip["offset_s"] - 12) <= WINDOW_TOLERANCE_S
    chips = [name for name in trip["replay"][str(AFTER_S)]
             if json.loads(name)[1:3] == ["d", "hw.gpu.utilization"]
             and json.loads(name)[0].startswith("TPU-")]
    assert len(chips) == 2
    for which in ("original", "replay"):
        assert not any(name in _at(trip, which, INSIDE_S) for name in chips), which
        assert all(name in _at(trip, which, AFTER_S) for name in chips), which
        failed = trip["errors"][str(INSIDE_S)][which]
        chip = json.loads(chips[0])[0]
        assert failed[chip][f"GetRuntimeMetric[{TPU_FAILING}]"] == "internal", which
        assert failed[chip][f"GetRuntimeMetric[{TPU_UNSERVED}]"] == "not_found", which


def test_neuron_monitor_faults_recorded_and_replayed(trips: dict) -> None:
    trip = trips["neuron"]
    faults = trip["scenario"]["neuron"]["faults"]
    assert faults["missing_groups"] == [NEURON_MISSING]
    assert list(faults["group_errors"]) == [NEURON_FAILING]
    for which in ("original", "replay"):
        failed = trip["errors"][str(AFTER_S)][which]
        devices = [u for u in failed if u.startswith("neuron-")]
        assert devices, which
        assert all(failed[u].get(NEURON_MISSING) == "missing"
                   and failed[u].get(NEURON_FAILING) == "error" for u in devices), which
