"""A node page whose node the head stops knowing, in a real browser.

A real agent on simulated hardware, the standalone dashboard's real HTTP stack and
collector (refreshing every second) over a discovery the test controls, Debian's
Chromium through playwright-core (frontend/e2e/node_gone.mjs): the page fits the window
though the devices' model name is as long as NVML allows; once the node's record is gone,
its page must say the node is unknown, not keep its last values on screen.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_process import AgentProcess, write_scenario
from aiohttp import web

from ray_accel.dashboard_module.api import AcceleratorsApi
from ray_accel.dashboard_module.collector import AgentTarget, Collector
from ray_accel.dashboard_module.standalone import build_app
from ray_accel.exporter.simulate import load_scenario

FRONTEND = Path(__file__).resolve().parent.parent / "frontend"
NODE_ID = "ab" * 28


class Head:
    """The standalone dashboard on its own event loop in a thread, following `targets`."""

    def __init__(self, targets: list[AgentTarget]) -> None:
        self.targets = targets
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._loop.run_until_complete,
                                        args=(self._serve(),), daemon=True)

    async def _discover(self) -> list[AgentTarget]:
        return list(self.targets)

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        collector = Collector(self._discover, refresh_s=1.0)
        runner = web.AppRunner(build_app(AcceleratorsApi(collector, "standalone"), None),
                               access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await runner.cleanup()

    def __enter__(self) -> Head:
        self._thread.start()
        assert self._ready.wait(60), "the dashboard did not start"
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)


@pytest.fixture
def agent(tmp_path) -> Iterator[AgentProcess]:
    doc = load_scenario("l4-pcie")
    for device in doc["devices"]:  # the longest name NVML has room for, with no space to wrap
        device["name"] = "NVIDIA-L4-" + "x" * 85
    with AgentProcess("--simulate", write_scenario(tmp_path, doc)) as running:
        yield running


def test_a_node_page_says_when_its_node_is_gone(agent, tmp_path):
    shots = str(Path(os.environ.get("RAY_ACCEL_SCREENSHOTS") or tmp_path / "shots").resolve())
    targets = [AgentTarget(NODE_ID, agent.url, "gpu-node-1", "127.0.0.1", True)]
    with Head(targets) as head:
        browser = subprocess.Popen(
            ["node", "e2e/node_gone.mjs"], cwd=FRONTEND, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "BASE_URL": head.url, "NODE_ID": NODE_ID, "SHOTS": shots})
        try:
            first = browser.stdout.readline()
            assert first.strip() == "shown", first + browser.stdout.read()
            targets.clear()  # the node's record is gone (its node left the cluster)
            browser.stdin.write("gone\n")
            browser.stdin.close()
            output = browser.stdout.read()
            assert browser.wait(timeout=120) == 0, output
        finally:
            if browser.poll() is None:
                browser.kill()
    assert "checks passed" in output
