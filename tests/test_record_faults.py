"""Recording a node whose calls fail or hang records the rule; the replay fails the same way.

Three nodes, each recorded in its own process at once: l4-pcie (NVIDIA),
mi300x-8 (AMD) and gaudi2-8 (Gaudi), card 1's power reading failing (TIMEOUT,
t = 2-12 s); on the GPU nodes GPU 2's temperature call hanging from t = 6 s
and a process on GPU 0 from t = 5 s to 11 s; on the AMD and Gaudi nodes device
3 lost at t = 12 s. The recorded file holds an `errors` rule for that function
on device 1 only, `delays` rules on GPU 2 only, the process with its window
and the loss at its time; an agent on the replay misses device 1's power
inside the window only, finds GPU 2 stale while the others answer, lists the
process only inside its window and device 3 down after its loss, as on the
original. (The Gaudi section has no delay rules, so a hung card is not
recorded, and HLML lists no processes.)
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
# node -> (source, failing power call, hanging temperature call or None)
NODES: dict[str, tuple[str, str, str | None]] = {
    "nvidia": ("l4-pcie", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetTemperature"),
    "amd": ("mi300x-8", "amdsmi_get_power_info", "amdsmi_get_temp_metric"),
    "gaudi": ("gaudi2-8", "hlmlDeviceGetPowerUsage", None),
}
GPU_NODES = ("nvidia", "amd")
LOSING_NODES = ("amd", "gaudi")


def _faulty(vendor: str) -> dict[str, Any]:
    source, power, temperature = NODES[vendor]
    scenario = load_scenario(source)
    failing = [{"function": power, "device": 1, "code": "TIMEOUT", "from_s": 2, "until_s": 12}]
    if vendor == "gaudi":
        scenario["gaudi"]["errors"] = failing
        scenario["gaudi"]["devices"][3]["lost_at_s"] = LOST_S
        return scenario
    scenario["errors"] = failing
    scenario["delays"] = [{"function": temperature, "device": 2, "seconds": 120, "from_s": 6}]
    scenario["devices"][0].setdefault("processes", []).append(dict(PROCESS))
    if vendor == "amd":
        scenario["devices"][3]["lost_at_s"] = LOST_S
    return scenario


@pytest.fixture(scope="module")
def trips(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    folder = tmp_path_factory.mktemp("faults")
    running = {}
    for vendor in NODES:
        source = folder / f"{vendor}.json"
        source.write_text(json.dumps(_faulty(vendor)))
        out = folder / f"{vendor}-trip.json"
        hang = {"RECORD_ROUNDTRIP_STALE_AT_S": str(HUNG_S)} if vendor in GPU_NODES else {}
        running[vendor] = (out, subprocess.Popen(
            [sys.executable, str(HELPER), str(source), str(DURATION_S), str(out),
             str(BEFORE_S), str(INSIDE_S), str(AFTER_S)],
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


@pytest.mark.parametrize("vendor", GPU_NODES)
def test_hang_recorded_as_delay_and_replayed_as_stale(trips: dict, vendor: str) -> None:
    trip = trips[vendor]
    delays = [r for r in trip["scenario"].get("delays", []) if "device" in r]
    assert delays and {r["device"] for r in delays} == {2}
    assert abs(delays[0]["from_s"] + trip["offset_s"] - 6) <= WINDOW_TOLERANCE_S + 2
    uuids = _uuids(trip)
    for which in ("stale_original", "stale_replay"):
        stale = trip[which]
        assert stale[uuids[2]] is True, which
        lost = uuids[3] if vendor == "amd" else None
        assert not any(stale[u] for u in uuids if u not in (uuids[2], lost)), which


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
