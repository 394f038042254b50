"""The Transfers view in a real Ray dashboard, on a real cluster with a stalled RDT transfer.

The stalled-transfer test's cluster (tests/support/rdt_cluster.py: a Ray head on
simulated H200s, a gloo producer and consumer holding one GPU each, the head's agent
pairing), with the Accelerators module loaded into Ray's dashboard. While the
consumer's `_ray_system` thread is held, the producer's send hangs: the API and a
real Chromium (frontend/e2e/transfers.mjs) must show the stalled transfer with its two
actors, their devices and node, its age and the job's counts, and the finding.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import rdt_cluster
from agent_process import AgentProcess
from dashboard_http import FRONTEND, wait_json
from rdt_cluster import STALL_AFTER_S, RdtDriver, rdt_head, transfer_agent

from ray_accel.dashboard_module.standalone import ray_dashboard_url
from ray_accel.demo.local_cluster import LocalRayCluster

pytest.importorskip("torch")
hardware = rdt_cluster.hardware  # a shared fixture
pytestmark = pytest.mark.ray

# Long enough for a browser on a loaded machine to look. Ray's timeout, which would abort
# the transfer by killing both actors at 60 s, is raised past it where it runs: in the
# owner (the driver) and in the actors (workers inherit the raylet's environment).
STALL_S = 75
RAY_TIMEOUT = {"RAY_rdt_fetch_fail_timeout_milliseconds": "300000"}


@pytest.fixture(scope="module")
def cluster(hardware) -> Iterator[LocalRayCluster]:
    with rdt_head(hardware, "dt-", {"RAY_ACCEL_DASHBOARD": "1",
                                    "RAY_ACCEL_DASHBOARD_REFRESH_S": "1", **RAY_TIMEOUT}) as local:
        yield local


@pytest.fixture(scope="module")
def agent(cluster, hardware) -> Iterator[AgentProcess]:
    with transfer_agent(cluster, hardware, "--register-interval", "1") as running:
        yield running


@pytest.fixture(scope="module")
def driver(cluster, agent, tmp_path_factory) -> Iterator[RdtDriver]:
    running = RdtDriver(cluster, tmp_path_factory.mktemp("rdt"), env=RAY_TIMEOUT)
    yield running
    running.stop()


@pytest.mark.timeout(600)  # a limit for a hang: the cluster, a 75 s stall, a browser
def test_the_stalled_transfer_in_the_tab(cluster, agent, driver, tmp_path):
    dashboard = ray_dashboard_url(cluster.gcs_address)
    assert dashboard, "the dashboard address is not in the GCS"
    token = cluster.token.read_text().strip()
    producer, consumer = driver.identities["producer"], driver.identities["consumer"]
    job = producer["job_id"]
    # the head sees both actors on their devices before the stall
    wait_json(f"{dashboard}/accelerators/api/jobs/{job}", token,
              lambda j: {u["actor_id"] for u in j["units"]} >= {producer["actor_id"],
                                                                 consumer["actor_id"]})
    shots = str(Path(os.environ.get("RAY_ACCEL_SCREENSHOTS") or tmp_path / "shots").resolve())
    end = lambda identity, cls: json.dumps({  # noqa: E731
        "actor_id": identity["actor_id"], "actor_class": cls, "device": identity["gpu_ids"][0]})
    # The browser starts first (it waits up to a minute for the stalled transfer to show).
    browser = subprocess.Popen(
        ["node", "e2e/transfers.mjs"], cwd=FRONTEND, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "BASE_URL": dashboard, "TOKEN": token, "SHOTS": shots, "JOB": job,
             "NODE": producer["node_id"], "MIN_AGE_S": str(STALL_AFTER_S),
             "PRODUCER": end(producer, "Producer"), "CONSUMER": end(consumer, "Consumer")})
    try:
        driver.send(f"stall {STALL_S}")
        driver.expect("stalled")
        body = wait_json(f"{dashboard}/accelerators/api/transfers", token,
                         lambda b: b["stalled"] >= 1, timeout=40)
        (transfer,) = [t for t in body["transfers"] if t["stalled"]]
        source, destination = transfer["source"], transfer["destination"]
        assert (source["actor_id"], source["actor_class"]) == (producer["actor_id"], "Producer")
        assert (destination["actor_id"], destination["actor_class"]) == (
            consumer["actor_id"], "Consumer")
        assert [d["index"] for d in source["devices"]] == producer["gpu_ids"]
        assert [d["index"] for d in destination["devices"]] == consumer["gpu_ids"]
        assert source["node_id"] == destination["node_id"] == producer["node_id"]
        assert transfer["age_s"] > STALL_AFTER_S and transfer["job_id"] == job
        (by_job,) = [j for j in body["by_job"] if j["job_id"] == job]
        assert by_job["in_flight"] >= 1 and by_job["stalled"] >= 1
        assert body["pairing_nodes"][0]["node_id"] == producer["node_id"]
        output, _ = browser.communicate(timeout=240)
    finally:
        if browser.poll() is None:
            browser.kill()
            browser.wait()
    print(output)
    assert browser.returncode == 0, output
    assert (Path(shots) / "transfers.png").stat().st_size > 10_000
    # the block ends, the transfer completes, and the view empties
    assert driver.expect("unstalled", timeout=STALL_S + 30) == "unstalled"
    wait_json(f"{dashboard}/accelerators/api/transfers", token,
              lambda b: b["in_flight"] == 0, timeout=30)
