"""The Accelerators tab at 10,000 nodes x 8 devices, in a real browser.

The fleet: 10,000 fake agents (copies of one real snapshot of the simulated 8x H200
node, served over loopback HTTP by a process of their own: summaries with ETags,
full snapshots for the node page), in racks of 16, three node pools, every 97th
node with one GPU down. The head: the standalone dashboard's real HTTP stack and
collector, one round (its refresh interval is longer than the test). The browser:
Debian's Chromium through playwright-core (frontend/e2e/scale.mjs) checks that the
cluster page renders, that its overview places all 80,000 devices, that filtering
to "down" keeps exactly the down ones, and that a group and then a node open.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from ray_accel.dashboard_module.api import AcceleratorsApi
from ray_accel.dashboard_module.collector import Collector
from ray_accel.dashboard_module.fleet_agents import FleetProcess, FleetShape, discovery
from ray_accel.dashboard_module.standalone import build_app

FRONTEND = Path(__file__).resolve().parent.parent / "frontend"
NODES = 10_000
DEVICES_PER_NODE = 8
SHAPE = FleetShape(down_every=97, spread=True)
ROUND_WAIT_S = 240  # a limit for a hung round, not a speed target


class DashboardThread:
    """The standalone dashboard on its own event loop in a thread, over `fleet`."""

    def __init__(self, fleet: FleetProcess) -> None:
        self.fleet = fleet
        self.url = ""
        self.collector: Collector | None = None
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="scale-dashboard", daemon=True)

    def _run(self) -> None:
        try:
            self._loop.run_until_complete(self._serve())
        except BaseException as error:  # reported by start()
            self._failure = error
            self._ready.set()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        # one round: the first starts at once, the next after the test is over
        self.collector = Collector(discovery(self.fleet.targets()), refresh_s=3600,
                                   fetch_timeout_s=60, spread=0.0)
        runner = web.AppRunner(build_app(AcceleratorsApi(self.collector, "standalone"), None),
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

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(60)
        if self._failure is not None or not self.url:
            raise RuntimeError(f"the dashboard did not start: {self._failure}")

    def wait_for_round(self, timeout_s: float) -> float:
        """Seconds until the collector's first round is in (raises after `timeout_s`)."""
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            if self.collector is not None and self.collector.rounds >= 1:
                return time.monotonic() - started
            time.sleep(0.2)
        raise AssertionError(f"no round within {timeout_s} s")

    def close(self) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(60)


@pytest.fixture(scope="module")
def fleet() -> Iterator[FleetProcess]:
    started = time.monotonic()
    with FleetProcess(NODES, shape=SHAPE) as agents:
        print(f"fleet of {NODES} agents serving after {time.monotonic() - started:.1f} s")
        yield agents


@pytest.fixture(scope="module")
def dashboard(fleet) -> Iterator[DashboardThread]:
    head = DashboardThread(fleet)
    head.start()
    try:
        print(f"first round in after {head.wait_for_round(ROUND_WAIT_S):.1f} s")
        yield head
    finally:
        head.close()


def test_the_heatmap_columns_of_ten_thousand_nodes(dashboard):
    summary = dashboard.collector.view.summary
    down = sum(SHAPE.has_down_device(n) for n in range(NODES))
    assert summary["nodes"]["ok"] == NODES
    assert summary["devices"]["total"] == NODES * DEVICES_PER_NODE
    assert summary["devices"]["down"] == down
    with urllib.request.urlopen(f"{dashboard.url}/accelerators/api/heatmap?form=columns",
                                timeout=60) as reply:
        body = reply.read()
    doc = json.loads(body)
    assert sum(doc["nodes"]["devices"]) == NODES * DEVICES_PER_NODE
    assert len(set(doc["nodes"]["rack"])) == NODES // 16
    assert set(doc["nodes"]["node_pool"]) == {"h200-train", "h200-serve", "h200-batch"}
    print(f"columns form: {len(body) / 1e6:.1f} MB for {NODES} nodes")


def test_browser_at_ten_thousand_nodes(dashboard, tmp_path):
    shots = str(Path(os.environ.get("RAY_ACCEL_SCREENSHOTS") or tmp_path / "shots").resolve())
    down = sum(SHAPE.has_down_device(n) for n in range(NODES))
    result = subprocess.run(
        ["node", "e2e/scale.mjs"], cwd=FRONTEND, capture_output=True, text=True, timeout=280,
        env={**os.environ, "BASE_URL": dashboard.url, "SHOTS": shots,
             "EXPECT_NODES": str(NODES), "EXPECT_DEVICES": str(NODES * DEVICES_PER_NODE),
             "EXPECT_DOWN": str(down)})
    print(result.stdout, result.stderr)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "checks passed" in result.stdout
    for view in ("cluster-scale", "cluster-group", "node-scale"):
        assert (Path(shots) / f"{view}.png").stat().st_size > 10_000
