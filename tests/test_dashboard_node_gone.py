"""A node page whose node the head stops knowing, in a real browser.

A real agent on simulated hardware, the standalone dashboard's real HTTP stack and
collector (refreshing every second) over a discovery the test controls, Debian's
Chromium through playwright-core (frontend/e2e/node_gone.mjs): the page fits the window
though the devices' model name is as long as NVML allows; once the node's record is gone,
its page must say the node is unknown, not keep its last values on screen.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_process import AgentProcess, write_scenario
from standalone_head import StandaloneHead

from ray_accel.dashboard_module.collector import AgentTarget, Collector
from ray_accel.exporter.simulate import load_scenario

FRONTEND = Path(__file__).resolve().parent.parent / "frontend"
NODE_ID = "ab" * 28


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
    async def discover() -> list[AgentTarget]:
        return list(targets)

    with StandaloneHead(lambda: Collector(discover, refresh_s=1.0)) as head:
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
