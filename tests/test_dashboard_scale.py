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

import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from standalone_head import StandaloneHead

from ray_accel.dashboard_module.collector import Collector
from ray_accel.dashboard_module.fleet_agents import FleetProcess, FleetShape, discovery

FRONTEND = Path(__file__).resolve().parent.parent / "frontend"
NODES = 10_000
DEVICES_PER_NODE = 8
SHAPE = FleetShape(down_every=97, spread=True)
ROUND_WAIT_S = 240  # a limit for a hung round, not a speed target


@pytest.fixture(scope="module")
def fleet() -> Iterator[FleetProcess]:
    started = time.monotonic()
    with FleetProcess(NODES, shape=SHAPE) as agents:
        print(f"fleet of {NODES} agents serving after {time.monotonic() - started:.1f} s")
        yield agents


@pytest.fixture(scope="module")
def dashboard(fleet) -> Iterator[StandaloneHead]:
    # one round: the first starts at once, the next after the test is over
    head = StandaloneHead(lambda: Collector(discovery(fleet.targets()), refresh_s=3600,
                                            fetch_timeout_s=60, spread=0.0))
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
