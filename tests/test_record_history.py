"""The agent's recent history: bounded by age and bytes, served at /api/v1/record behind auth."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest
from agent_process import AgentProcess

from ray_accel.exporter import catalog as m
from ray_accel.exporter.carry import carried
from ray_accel.exporter.model import Device, DeviceSample, NodeSnapshot, Reading
from ray_accel.exporter.record.history import AGED_DROPPED_TOGETHER, History
from ray_accel.exporter.record.scenario_file import build_scenario, recording_start
from ray_accel.exporter.simulate import load_scenario
from ray_accel.exporter.simulate.scenario import SCENARIO_DIR

TOKEN = "ray-cluster-token-for-record-tests"
CLI = [sys.executable, "-m", "ray_accel.exporter.cli"]


def _snapshot(cycle: int, taken_at: float, series: int = 10) -> NodeSnapshot:
    device = Device("nvidia", "0", "GPU-00000000-0000-0000-0000-000000000000", "Test GPU")
    readings = tuple(Reading("hw.power", float(cycle + i), (("n", str(i)),))
                     for i in range(series))
    return NodeSnapshot(cycle=cycle, taken_at=taken_at, interval_s=1.0, node_labels={},
                        backends=(), devices=(DeviceSample(device, True, taken_at,
                                                           readings=readings),))


def test_history_keeps_only_its_age() -> None:
    history = History(max_age_s=10)
    for cycle in range(30):
        history.add(_snapshot(cycle, 1000.0 + cycle))
    taken = [f.taken_at for f in history.recording().frames]
    assert taken == [1000.0 + c for c in range(19, 30)]
    assert [f.taken_at for f in history.recording(last_s=3).frames] == taken[-4:]


def test_frames_past_their_age_dropped_together_leave_the_rest_exact() -> None:
    history = History(max_age_s=5)
    for cycle in range(AGED_DROPPED_TOGETHER * 3 + 4):
        history.add(_snapshot(cycle, 1000.0 + cycle))
        frames = history.recording().frames
        # whatever is still held past its age, the recording is the last 5 s, value for value
        first = max(cycle - 5, 0)
        assert [f.taken_at for f in frames] == [1000.0 + c for c in range(first, cycle + 1)]
        assert [list(f.devices[0].values) for f in frames] == [
            [float(c + i) for i in range(10)] for c in range(first, cycle + 1)]
    assert len(history) < 6 + AGED_DROPPED_TOGETHER  # the aged ones do go, in batches


def test_history_keeps_only_its_bytes() -> None:
    one = History()
    one.add(_snapshot(0, 1000.0, series=100))
    frame_bytes = one.nbytes
    history = History(max_bytes=5 * frame_bytes)
    for cycle in range(20):
        history.add(_snapshot(cycle, 1000.0 + cycle, series=100))
        assert history.nbytes <= 5 * frame_bytes
    # Frames after the oldest are packed against the one before them: no bigger than it.
    assert len(history) >= 5
    assert [f.taken_at for f in history.recording().frames] == [
        1000.0 + c for c in range(20 - len(history), 20)]


def test_the_newest_frame_stays_though_alone_beyond_the_cap() -> None:
    history = History(max_bytes=100)  # less than any frame
    for cycle in range(3):
        history.add(_snapshot(cycle, 1000.0 + cycle, series=100))
        assert len(history) == 1
        assert [f.taken_at for f in history.recording().frames] == [1000.0 + cycle]


def test_history_refuses_bad_bounds() -> None:
    with pytest.raises(ValueError, match="positive"):
        History(max_age_s=0)


def test_a_device_lost_long_before_does_not_move_the_recordings_start() -> None:
    # GPU 1 is lost at the 5th cycle of 40; its samples since hold its last answer's time
    # (carry.py). The last 10 s start at GPU 0's sample in their first cycle: its power
    # climbs over those 10 s from t = 0, and GPU 1 was lost from the start.
    gpus = [Device("nvidia", str(i), f"GPU-00000000-0000-0000-0000-00000000000{i}",
                   "Test GPU") for i in range(2)]
    history, last = History(), None
    for cycle in range(40):
        now = 1000.0 + cycle
        healthy = DeviceSample(gpus[0], True, now - 0.2,
                               readings=(Reading(m.POWER, 100.0 + cycle),))
        if cycle < 5:
            last = other = DeviceSample(gpus[1], True, now - 0.2,
                                        readings=(Reading(m.POWER, 50.0),))
        else:
            other = carried(last, DeviceSample(
                gpus[1], False, now - 0.2,
                errors={"nvmlDeviceGetUtilizationRates": "gpu_is_lost"}))
        history.add(NodeSnapshot(cycle=cycle, taken_at=now, interval_s=1.0, node_labels={},
                                 backends=(), devices=(healthy, other)))
    recording = history.recording(last_s=10)
    assert recording.frames[0].taken_at == 1029.0 and recording_start(recording) == 1028.8
    scenario = build_scenario(recording, keep_identities=True)
    assert scenario["description"].startswith("Recorded for 10 s")
    assert scenario["recorded_until_s"] == round(recording.frames[-1].taken_at - 1028.8, 3)
    power, lost = scenario["devices"][0]["power_mw"], scenario["devices"][1]["lost_at_s"]
    assert power["keyframes"] == [[0.0, 129000], [10.0, 139000]] and lost == 0.0


MEASURE = """
import json, os, sys, time
from ray_accel.exporter.simulate import SimulatedHardware
hw = SimulatedHardware.start("hgx-h200"); hw.activate()
from ray_accel.exporter.backends import load_backends
from ray_accel.exporter.record.history import History
from ray_accel.exporter.sampler import Sampler
from ray_accel.exporter.store import SnapshotStore
sampler = Sampler(load_backends(["nvidia"]), SnapshotStore(), interval_s=1.0)
kept, capped = History(), History(max_bytes=10_000)
for _ in range(12):
    snapshot = sampler.run_cycle()
    kept.add(snapshot); capped.add(snapshot)
    assert capped.nbytes <= 10_000 or len(capped) == 1  # the newest frame always stays
print(json.dumps({"frame_bytes": kept.nbytes / len(kept), "capped_frames": len(capped),
                  "series": sum(len(f.keys) for f in kept.recording().frames[-1].devices)}))
sys.stdout.flush(); os._exit(0)
"""


def test_hgx_h200_history_bytes_per_node_minute() -> None:
    done = subprocess.run([sys.executable, "-c", MEASURE], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    per_minute = found["frame_bytes"] * 60
    print(f"hgx-h200: {found['series']} series, {found['frame_bytes']:.0f} bytes per frame, "
          f"{per_minute / 1e6:.2f} MB per node-minute")
    # The values are kept packed (at most 8-byte floats) plus a small frame: not objects per
    # reading; the capped history keeps at least as many frames as their average size allows
    # (its oldest frame, packed on its own, is the biggest).
    assert found["frame_bytes"] < 8 * found["series"] * 1.5
    assert found["capped_frames"] >= 10_000 // int(found["frame_bytes"]) - 1


def _get(url: str, token: str | None = None) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers),
                                    timeout=30) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_record_endpoint_behind_the_token_and_saved_by_the_cli(tmp_path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    with AgentProcess("--simulate", "l4-pcie", "--token-file", str(token_file),
                      "--metrics-auth", "token") as agent:
        record = agent.url + "/api/v1/record"
        assert _get(record + "?last=1m")[0] == 401
        deadline = time.monotonic() + 30
        while True:
            code, body = _get(record + "?last=1m", TOKEN)
            if code == 200 and "keyframes" in body.decode():
                break
            assert time.monotonic() < deadline, (code, body[:300])
            time.sleep(1)
        scenario = load_scenario(json.loads(body))
        assert len(scenario["devices"]) == 4
        original = {d["uuid"] for d in load_scenario("l4-pcie")["devices"]}
        assert not {d["uuid"] for d in scenario["devices"]} & original
        kept = json.loads(_get(record + "?last=1m&identities=keep", TOKEN)[1])
        assert {d["uuid"] for d in kept["devices"]} == original
        for query, message in (("?last=ten", "not a duration"), ("?last=2h", "outside"),
                               ("?identities=some", "identities"), ("?x=1", "unknown query")):
            code, body = _get(record + query, TOKEN)
            assert code == 400 and message in json.loads(body)["error"], query
        out = tmp_path / "incident.json"
        with_token = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": TOKEN}
        done = subprocess.run([*CLI, "record", "--from-agent", agent.url, "--last", "1m",
                               "--out", str(out)], capture_output=True, text=True,
                              timeout=120, env=with_token)
        assert done.returncode == 0, done.stderr[-2000:]
        assert len(load_scenario(out)["devices"]) == 4
        refused = tmp_path / "refused.json"
        without = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
        done = subprocess.run([*CLI, "record", "--from-agent", agent.url, "--out",
                               str(refused)], capture_output=True, text=True, timeout=120,
                              env=without)
        assert done.returncode == 1 and "401" in done.stderr and not refused.exists()
        assert "credentials required" in done.stderr  # the agent's own reason


NOT_AN_AGENT = {  # what a server answers for /api/v1/record, and what the command says of it
    b"<html>a login page</html>": "not JSON (is it an agent?)",
    b"[1, 2, 3]": "not a scenario document",
    b'{"name": "x"}': "not a scenario document",
    b"[" * 100_000: "not JSON",
}


def test_recording_from_something_that_is_not_an_agent_says_so_and_writes_nothing(tmp_path):
    answers = list(NOT_AN_AGENT)

    class NotAnAgent(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = answers.pop(0)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotAnAgent)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        for message in NOT_AN_AGENT.values():
            out = tmp_path / "out.json"
            done = subprocess.run([*CLI, "record", "--from-agent",
                                   f"http://127.0.0.1:{server.server_port}", "--out", str(out)],
                                  capture_output=True, text=True, timeout=120)
            assert done.returncode == 1, done.stderr
            assert message in done.stderr and "Traceback" not in done.stderr, done.stderr
            assert not out.exists() and list(tmp_path.iterdir()) == []
    finally:
        server.shutdown()


def test_an_agent_replaying_a_recording_says_where_it_ends_and_when_it_gets_there(tmp_path):
    doc = json.loads((SCENARIO_DIR / "l4-pcie.json").read_text())
    doc.update(name="short-recording", recorded_until_s=1.5)
    path = tmp_path / "short-recording.json"
    path.write_text(json.dumps(doc))
    with AgentProcess("--simulate", str(path), "--interval", "0.5") as agent:
        agent.wait_for(lambda health: health["cycle"] >= 6, path="/healthz")
    output = "".join(agent.output) + agent.proc.stdout.read()
    assert "replaying short-recording, a recording that ends at t = 1.5 s" in output
    assert "the recording short-recording has ended (t = 1.5 s)" in output
