"""The agent builds one recording at a time: askers of one window share its build, a few
other windows wait their turn, and a flood of windows is refused with 503 and Retry-After."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from types import MappingProxyType

import pytest
from agent_process import AgentProcess

from ray_accel.exporter.httpd import Response
from ray_accel.exporter.model import Device, DeviceSample, NodeSnapshot, Reading
from ray_accel.exporter.record.apart import BuildFailed, build_apart, scenario_answer
from ray_accel.exporter.record.endpoint import MOST_BUILDS_WAITING, Busy, OneBuildAtATime
from ray_accel.exporter.record.history import History


class Builds:
    """Builds that each take a while on their worker thread, counted as they run."""

    def __init__(self, seconds: float = 0.2) -> None:
        self.seconds = seconds
        self.started: list[str] = []
        self.running = 0
        self.most_running = 0
        self._lock = threading.Lock()

    def of(self, key: str):
        def build() -> Response:
            with self._lock:
                self.started.append(key)
                self.running += 1
                self.most_running = max(self.most_running, self.running)
            time.sleep(self.seconds)
            with self._lock:
                self.running -= 1
            return Response(body=key.encode())
        return build


def test_askers_of_one_window_share_its_build() -> None:
    builds = Builds()

    async def scenario() -> list[Response]:
        one = OneBuildAtATime()
        return await asyncio.gather(*(one.run("10m", builds.of("10m")) for _ in range(8)))

    answers = asyncio.run(scenario())
    assert builds.started == ["10m"]
    assert all(answer is answers[0] for answer in answers) and answers[0].body == b"10m"


def test_windows_are_built_one_at_a_time_and_a_flood_is_refused() -> None:
    builds = Builds()

    async def scenario() -> tuple[list, Response]:
        one = OneBuildAtATime()
        keys = [f"{n}m" for n in range(1, MOST_BUILDS_WAITING + 4)]
        answers = await asyncio.gather(*(one.run(key, builds.of(key)) for key in keys),
                                       return_exceptions=True)
        # once they are done, a new window is taken again
        return answers, await one.run("later", builds.of("later"))

    answers, later = asyncio.run(scenario())
    built = [a for a in answers if isinstance(a, Response)]
    refused = [a for a in answers if isinstance(a, Busy)]
    assert len(built) == MOST_BUILDS_WAITING + 1 and len(refused) == 2, answers
    assert builds.most_running == 1
    assert builds.started == [a.body.decode() for a in built] + ["later"]
    assert later.body == b"later"


def test_an_asker_that_goes_away_leaves_the_build_to_the_others() -> None:
    builds = Builds(seconds=0.3)

    async def scenario() -> Response:
        one = OneBuildAtATime()
        leaving = asyncio.ensure_future(one.run("10m", builds.of("10m")))
        staying = asyncio.ensure_future(one.run("10m", builds.of("10m")))
        await asyncio.sleep(0.05)
        leaving.cancel()
        return await staying

    assert asyncio.run(scenario()).body == b"10m"
    assert builds.started == ["10m"]


def test_a_real_agent_shares_builds_keeps_answering_and_refuses_a_flood() -> None:
    # 8 GPUs and 100 cycles: each build takes a moment, so the asks below overlap
    with AgentProcess("--simulate", "hgx-h200", "--interval", "0.1") as agent:
        agent.wait_for(lambda d: d["cycle"] >= 100, path="/healthz", timeout=90)
        windows = [f"{n}s" for n in range(2, 2 + 3 * (MOST_BUILDS_WAITING + 1))]
        health: list[int] = []
        done = threading.Event()

        def ask_health() -> None:
            while not done.is_set():
                health.append(agent.get("/healthz", timeout=30)[0])
                time.sleep(0.05)

        watcher = threading.Thread(target=ask_health)
        watcher.start()
        try:
            with ThreadPoolExecutor(len(windows) + 4) as pool:
                same = [pool.submit(agent.get, "/api/v1/record?last=60s", timeout=120)
                        for _ in range(4)]
                each = [pool.submit(agent.get, f"/api/v1/record?last={w}", timeout=120)
                        for w in windows]
                same, each = [f.result() for f in same], [f.result() for f in each]
        finally:
            done.set()
            watcher.join()
    # the four askers of one window were answered from one build
    assert {status for status, _, _ in same} == {200}
    assert len({body for _, _, body in same}) == 1
    statuses = [status for status, _, _ in each]
    assert set(statuses) <= {200, 503} and 503 in statuses and 200 in statuses, statuses
    for status, headers, body in each:
        if status == 503:
            assert headers["Retry-After"].isdigit() and "ask again" in json.loads(body)["error"]
        else:
            assert json.loads(body)["devices"]
    assert health and set(health) == {200}


def _snapshot(cycle: int, taken_at: float) -> NodeSnapshot:
    device = Device("nvidia", "0", "GPU-00000000-0000-0000-0000-000000000000", "Test GPU",
                    facts=MappingProxyType({"architecture": "hopper"}))  # as backends keep them
    readings = (Reading("hw.power", 100.0 + cycle), Reading("hw.gpu.utilization", 0.5,
                                                            (("task", "general"),)))
    return NodeSnapshot(cycle=cycle, taken_at=taken_at, interval_s=1.0, node_labels={},
                        backends=(), devices=(DeviceSample(device, True, taken_at,
                                                           readings=readings),))


def _kept_history(cycles: int = 5) -> History:
    history = History()
    for cycle in range(cycles):
        history.add(_snapshot(cycle, 1000.0 + cycle))
    return history


def test_a_build_apart_answers_what_a_build_here_would() -> None:
    packed = _kept_history().packed()
    apart = build_apart(packed, 60.0, True, {})
    here = scenario_answer(packed, 60.0, True, {})
    assert apart[0] == 200 and apart == here
    assert len(json.loads(apart[1])["devices"]) == 1
    status, why = build_apart(History().packed(), 60.0, True, {})
    assert status == 404 and b"in the last 60 s" in why


def test_a_build_is_made_here_where_no_process_can_start_and_fails_clearly_where_it_dies(
        monkeypatch, caplog) -> None:
    packed = _kept_history().packed()
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    assert build_apart(packed, 60.0, True, {})[0] == 200
    assert "no process for it" in caplog.text
    monkeypatch.setattr(sys, "executable", shutil.which("false"))
    with pytest.raises(BuildFailed, match="ended with status 1"):
        build_apart(packed, 60.0, True, {})
