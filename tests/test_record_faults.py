"""Recording a node whose calls fail or hang records the rule; the replay fails the same way.

l4-pcie with GPU 1's power reading failing (TIMEOUT, t = 2-12 s) and GPU 2's
temperature call hanging from t = 6 s: the recorded file holds an `errors`
rule for that function on GPU 1 only and a `delays` rule on GPU 2 only, and
an agent on the replay misses GPU 1's power inside the window only and finds
GPU 2 stale while the others answer, as on the original.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from ray_accel.exporter.simulate import load_scenario

HELPER = pathlib.Path(__file__).with_name("record_roundtrip.py")
DURATION_S = 16
INSIDE_S, AFTER_S, HUNG_S = 6.0, 14.0, 12.0
WINDOW_TOLERANCE_S = 1.5


@pytest.fixture(scope="module")
def trip(tmp_path_factory: pytest.TempPathFactory) -> dict:
    folder = tmp_path_factory.mktemp("faults")
    scenario = load_scenario("l4-pcie")
    scenario["errors"] = [{"function": "nvmlDeviceGetPowerUsage", "device": 1,
                           "code": "TIMEOUT", "from_s": 2, "until_s": 12}]
    scenario["delays"] = [{"function": "nvmlDeviceGetTemperature", "device": 2,
                           "seconds": 120, "from_s": 6}]
    source = folder / "faulty.json"
    source.write_text(json.dumps(scenario))
    out = folder / "trip.json"
    done = subprocess.run(
        [sys.executable, str(HELPER), str(source), str(DURATION_S), str(out), str(INSIDE_S),
         str(AFTER_S)], capture_output=True, text=True, timeout=600,
        env={**os.environ, "RECORD_ROUNDTRIP_STALE_AT_S": str(HUNG_S)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return json.loads(out.read_text())


def _power(series: dict[str, float], uuid: str) -> float | None:
    return series.get(json.dumps([uuid, "d", "hw.power", []]))


def test_error_rule_recorded_for_its_device_and_window(trip: dict) -> None:
    offset = trip["offset_s"]
    rules = [r for r in trip["scenario"].get("errors", [])
             if r["function"] == "nvmlDeviceGetPowerUsage"]
    assert [(r["device"], r["code"]) for r in rules] == [(1, "TIMEOUT")]
    assert abs(rules[0]["from_s"] + offset - 2) <= WINDOW_TOLERANCE_S
    assert abs(rules[0]["until_s"] + offset - 12) <= WINDOW_TOLERANCE_S


def test_replay_misses_the_failing_value_only_in_its_window(trip: dict) -> None:
    uuids = [d["uuid"] for d in trip["scenario"]["devices"]]
    for which in ("original", "replay"):
        inside = trip[which][f"{INSIDE_S}+0" if which == "original" else str(INSIDE_S)]
        after = trip[which][f"{AFTER_S}+0" if which == "original" else str(AFTER_S)]
        assert _power(inside, uuids[1]) is None, which
        assert _power(inside, uuids[0]) is not None, which
        assert _power(after, uuids[1]) is not None, which


def test_hang_recorded_as_delay_and_replayed_as_stale(trip: dict) -> None:
    delays = [r for r in trip["scenario"].get("delays", []) if "device" in r]
    assert delays and {r["device"] for r in delays} == {2}
    assert abs(delays[0]["from_s"] + trip["offset_s"] - 6) <= WINDOW_TOLERANCE_S + 2
    uuids = [d["uuid"] for d in trip["scenario"]["devices"]]
    for which in ("stale_original", "stale_replay"):
        stale = trip[which]
        assert stale[uuids[2]] is True, which
        assert not any(stale[u] for u in uuids if u != uuids[2]), which
