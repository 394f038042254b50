"""The Accelerators tab inside a real Ray dashboard, and Ray's dashboard when it breaks.

A Ray head on simulated H200s with RAY_ACCEL_DASHBOARD=1 (loaded through the
.pth bootstrap), the demo workload (one actor holding a GPU and doing nothing)
and an agent registered in the GCS. The module answers on the dashboard port
behind Ray's token; a browser clicks through every view. With the module
disabled or failing (RAY_ACCEL_DASHBOARD_FAIL), Ray's own pages still answer.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_process import AgentProcess
from dashboard_http import FRONTEND, get, wait_json
from prometheus_server import PrometheusServer
from ray_workload import start_driver

from ray_accel.dashboard_module.standalone import ray_dashboard_url, ray_facts
from ray_accel.demo.local_cluster import LocalRayCluster
from ray_accel.exporter.simulate import SimulatedHardware
from ray_accel.exporter.simulate.contexts import for_real_processes

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def hardware(tmp_path_factory) -> SimulatedHardware:
    return SimulatedHardware.start(for_real_processes("hgx-h200"),
                                   state_dir=tmp_path_factory.mktemp("hw"))


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory) -> Iterator[PrometheusServer]:
    """The cluster's Prometheus, named to Ray by RAY_PROMETHEUS_HOST; it scrapes the
    agents listed in its `targets.json` (written once the agent serves)."""
    folder = tmp_path_factory.mktemp("prometheus")
    (folder / "targets.json").write_text("[]")
    config = {"global": {"scrape_interval": "1s"}, "scrape_configs": [{
        "job_name": "ray-accel", "file_sd_configs": [{"files": [str(folder / "targets.json")]}]}]}
    with PrometheusServer(json.dumps(config), folder) as server:
        yield server


@pytest.fixture(scope="module")
def cluster(hardware, prometheus) -> Iterator[LocalRayCluster]:
    local = LocalRayCluster(prefix="rd-")
    try:
        local.start_head({**hardware.environ(), "RAY_ACCEL_DASHBOARD": "1",
                          "RAY_ACCEL_DASHBOARD_REFRESH_S": "1",
                          "RAY_PROMETHEUS_HOST": prometheus.url}, "--num-cpus=4")
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="module")
def dashboard(cluster) -> str:
    url = ray_dashboard_url(cluster.gcs_address)
    assert url, "the dashboard address is not in the GCS"
    return url


@pytest.fixture(scope="module")
def workload(cluster, tmp_path_factory):
    driver = start_driver(cluster, tmp_path_factory.mktemp("job"),
                          "trainer,idle,servers,task,spinner")
    yield driver
    driver.stop()


@pytest.fixture(scope="module")
def agent(cluster, hardware, workload) -> Iterator[AgentProcess]:
    args = ("--ray-address", cluster.gcs_address, "--interval", "0.5",
            "--attribution-interval", "0.5", "--register-interval", "1")
    with AgentProcess(*args, env=hardware.environ(), ray=True) as running:
        yield running


def test_served_on_the_dashboard_port_behind_rays_token(cluster, dashboard, agent, workload):
    token = cluster.token.read_text().strip()
    assert get(f"{dashboard}/accelerators/api/summary")[0] == 401
    assert get(f"{dashboard}/accelerators/api/summary", "wrong")[0] == 403
    summary = wait_json(f"{dashboard}/accelerators/api/summary", token,
                        lambda s: s["devices"]["total"] == 8
                        and s["devices"]["idle_allocations"] >= 1)
    assert summary["nodes"]["total"] == 1
    status, page = get(f"{dashboard}/accelerators/", token)
    assert status == 200 and b'<div id="root">' in page
    idle = workload.identities["idle"]
    actor = wait_json(f"{dashboard}/accelerators/api/actors/{idle['actor_id']}", token,
                      lambda a: a["idle"])
    assert actor["actor_class"] == "IdleHolder" and actor["pid"] == idle["pid"]
    assert [d["index"] for d in actor["devices"]] == idle["gpu_ids"]
    task = workload.identities["task"]
    # named once the task has run through two of the agent's attribution refreshes
    found = wait_json(f"{dashboard}/accelerators/api/tasks/{task['task_id']}", token,
                      lambda t: t["devices"] and t["task_name"])
    assert found["task_name"] == "preprocess"
    # Ray's own pages are untouched
    assert get(f"{dashboard}/api/version", token)[0] == 200
    assert get(f"{dashboard}/nodes?view=summary", token)[0] == 200


def test_history_from_the_prometheus_ray_names(cluster, dashboard, agent, prometheus):
    token = cluster.token.read_text().strip()
    (prometheus.folder / "targets.json").write_text(json.dumps(
        [{"targets": [agent.url.removeprefix("http://")]}]))
    sessions = prometheus.wait_until(
        lambda: prometheus.label_values("SessionName", "hw_power_watts"), "the agent scraped")
    node_id = wait_json(f"{dashboard}/accelerators/api/nodes", token,
                        lambda n: n["nodes"])["nodes"][0]["node_id"]
    history = wait_json(
        f"{dashboard}/accelerators/api/history?node_id={node_id}&range=1h", token,
        lambda h: h["source"] == "prometheus" and any(v is not None for v in h["power_watts"]))
    assert history["error"] == "" and history["step_s"] == 12
    assert len(history["devices"]) == 8  # scoped to Ray's session, which the agent labels
    assert sessions == [Path(cluster.session_dir()).name]
    # the standalone dashboard scopes by the same session, read from the GCS
    assert ray_facts(cluster.gcs_address) == (dashboard, sessions[0])
    config = wait_json(f"{dashboard}/accelerators/api/config", token, lambda c: True)
    assert config["history_source"] == "prometheus"


def test_browser_clicks_through_every_view(cluster, dashboard, agent, workload, tmp_path):
    token = cluster.token.read_text().strip()
    wait_json(f"{dashboard}/accelerators/api/summary", token,
              lambda s: s["devices"]["idle_allocations"] >= 1)
    # absolute: the browser runs in frontend/
    shots = str(Path(os.environ.get("RAY_ACCEL_SCREENSHOTS") or tmp_path / "shots").resolve())
    result = subprocess.run(
        ["node", "e2e/browser.mjs"], cwd=FRONTEND, capture_output=True, text=True, timeout=240,
        env={**os.environ, "BASE_URL": dashboard, "TOKEN": token, "SHOTS": shots,
             "EXPECT_DEVICES": "8", "EXPECT_IDLE_CLASS": "IdleHolder",
             "EXPECT_SPINNING_CLASS": "Spinner",
             "EXPECT_LINKS": "152"})  # 8 H200s x (18 NVLink + 1 PCIe)
    print(result.stdout, result.stderr)
    assert result.returncode == 0, result.stdout + result.stderr
    for view in ("cluster", "node", "node-devices", "workloads", "findings"):
        assert (Path(shots) / f"{view}.png").stat().st_size > 10_000


@pytest.mark.parametrize("environment,accelerators_status", [
    ({}, 404),  # not enabled: nothing of ours is loaded
    ({"RAY_ACCEL_DASHBOARD": "1", "RAY_ACCEL_DASHBOARD_FAIL": "install"}, 404),
    ({"RAY_ACCEL_DASHBOARD": "1", "RAY_ACCEL_DASHBOARD_FAIL": "import"}, 404),
    ({"RAY_ACCEL_DASHBOARD": "1", "RAY_ACCEL_DASHBOARD_FAIL": "run"}, 503),
], ids=["disabled", "bootstrap-fails", "import-fails", "run-fails"])
def test_rays_dashboard_survives(environment, accelerators_status):
    local = LocalRayCluster(prefix="rf-")
    try:
        local.start_head(environment, "--num-cpus=1")
        url = ray_dashboard_url(local.gcs_address)
        token = local.token.read_text().strip()
        assert get(f"{url}/api/version", token)[0] == 200
        assert get(f"{url}/nodes?view=summary", token)[0] == 200
        assert get(f"{url}/", token)[0] == 200
        status, body = get(f"{url}/accelerators/api/summary", token)
        assert status == accelerators_status, body
        if status == 503:
            assert b"failure injected" in body
        stage = environment.get("RAY_ACCEL_DASHBOARD_FAIL")
        if stage in ("install", "import"):  # said where operators look: Ray's dashboard log
            ray_log = Path(local.session_dir()) / "logs" / "dashboard.log"
            assert f"failure injected by RAY_ACCEL_DASHBOARD_FAIL={stage}" in \
                ray_log.read_text(errors="replace")
    finally:
        local.stop()
