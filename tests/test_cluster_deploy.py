"""`ray-accel deploy` across a real Ray cluster, scraped by a real Prometheus.

Three nodes on 127.0.0.1, each on simulated hardware of its own (every raylet,
and so every worker it starts, inherits its node's fake NVML): an HGX H200
head, an L4 node and an A100 split into MIG instances. Prometheus runs the
shipped deploy/prometheus/prometheus.yml, pointed at this cluster's temp dir
and scraping every second. The tests run in order on one deployment: the
agents come up and are scraped, a fourth node joins and gets an agent with no
command, a SIGKILLed agent comes back (Ray restarts it), an agent ended for
good comes back (the supervisor starts another), `status` lists them and
`undeploy` removes them. Every process started here is stopped by pid at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from loopback_ray import LoopbackCluster
from ray._common.network_utils import find_free_port

from ray_accel.exporter.agent import agent_version
from ray_accel.exporter.simulate import SimulatedHardware

ROOT = Path(__file__).resolve().parent.parent
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
SCENARIOS = ("hgx-h200", "l4-pcie", "a100-mig")
JOINING_SCENARIO = "l4-pcie"
DEPLOY_FLAGS = ("--interval", "0.5", "--register-interval", "1", "--watch-interval", "1",
                "--wait", "90", "--metrics-auth", "token")

KILL_FOR_GOOD = """
import sys, ray
ray.init(address=sys.argv[1], namespace="ray-accel", logging_level="ERROR", log_to_driver=False)
ray.kill(ray.get_actor("ray-accel-agent-" + sys.argv[2]), no_restart=True)
"""

pytestmark = [
    pytest.mark.ray,
    pytest.mark.skipif(not Path(PROMETHEUS).exists(),
                       reason="prometheus is not installed (tools/system-deps.sh)"),
]


@dataclass
class Deployment:
    cluster: LoopbackCluster
    scenarios: dict[str, str]  # node id -> scenario
    hardware: list[SimulatedHardware]
    prometheus_url: str = ""

    def cli(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "ray_accel.exporter.cli", *args],
                              env=self.cluster.env, capture_output=True, text=True,
                              timeout=timeout)

    def status(self) -> dict[str, dict]:
        result = self.cli("status", "--address", self.cluster.gcs_address, "--json")
        assert result.returncode == 0, result.stderr
        return {row["node_id"]: row for row in json.loads(result.stdout)}

    def add_node(self, scenario: str) -> str:
        hardware = SimulatedHardware.start(scenario)
        self.hardware.append(hardware)
        node_id = self.cluster.add_node(hardware.environ(), "--num-cpus=0")
        self.scenarios[node_id] = scenario
        return node_id

    def query(self, promql: str) -> list[dict]:
        url = f"{self.prometheus_url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        return _get_json(url)["data"]["result"]

    def targets(self) -> list[dict]:
        targets = _get_json(f"{self.prometheus_url}/api/v1/targets")["data"]["activeTargets"]
        return [t for t in targets if t["labels"].get("job") == "ray-accel"]


def _get(url: str, token: str | None = None) -> bytes:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers),
                                timeout=5) as response:
        return response.read()


def _get_json(url: str, token: str | None = None) -> Any:
    return json.loads(_get(url, token))


def wait_until(check: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    """Poll `check` until it returns something truthy; fail naming `what`."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (OSError, ValueError, AssertionError) as error:
            last = error
        else:
            if last:
                return last
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout:g} s (last: {last!r})")


def devices_per_node(deployment: Deployment) -> dict[str, int]:
    """What Prometheus holds: count of device-up series per Ray node."""
    result = deployment.query('count by (ray_node_id) (ray_accelerator_device_up{job="ray-accel"})')
    return {r["metric"]["ray_node_id"]: int(r["value"][1]) for r in result}


def expected_devices(deployment: Deployment, row: dict) -> int:
    snapshot = row["url"] + "/api/v1/snapshot"
    with pytest.raises(urllib.error.HTTPError, match="401"):  # deployed agents need the token
        _get(snapshot)
    return len(_get_json(snapshot, deployment.cluster.token.read_text())["devices"])


def up_targets(deployment: Deployment) -> dict[str, str]:
    """ray_node_id -> host:port of every ray-accel target Prometheus scraped successfully."""
    return {t["labels"]["ray_node_id"]: t["labels"]["instance"]
            for t in deployment.targets() if t["health"] == "up"}


def prometheus_config(cluster: LoopbackCluster, folder: Path) -> Path:
    """The shipped example, pointed at this cluster's temp dir and scraping every second."""
    config = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    config["global"] = {"scrape_interval": "1s", "scrape_timeout": "1s",
                        "evaluation_interval": "1s"}
    for job in config["scrape_configs"]:
        for sd in job["file_sd_configs"]:
            sd["files"] = [f.replace("/tmp/ray", str(cluster.root / "ray")) for f in sd["files"]]
            sd["refresh_interval"] = "1s"
        if "authorization" in job:  # the agents require the cluster's token on /metrics
            job["authorization"]["credentials_file"] = str(cluster.token)
    path = folder / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def deployment(tmp_path_factory) -> Iterator[Deployment]:
    folder = tmp_path_factory.mktemp("deploy")
    cluster = LoopbackCluster(prefix="dp-")
    hardware = [SimulatedHardware.start(s) for s in SCENARIOS]
    deployment = Deployment(cluster, {}, hardware)
    prometheus = None
    try:
        head = cluster.start_head(hardware[0].environ(), "--num-cpus=1")
        deployment.scenarios[head] = SCENARIOS[0]
        for hw, scenario in zip(hardware[1:], SCENARIOS[1:], strict=True):
            deployment.scenarios[cluster.add_node(hw.environ(), "--num-cpus=0")] = scenario
        started = time.monotonic()
        result = deployment.cli("deploy", "--address", cluster.gcs_address, *DEPLOY_FLAGS)
        print(f"deploy took {time.monotonic() - started:.1f} s:\n{result.stdout}")
        assert result.returncode == 0, result.stdout + result.stderr

        port = find_free_port()
        prometheus = subprocess.Popen(
            [PROMETHEUS, f"--config.file={prometheus_config(cluster, folder)}",
             f"--storage.tsdb.path={folder / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}",
             "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=open(folder / "prometheus.log", "w"))  # noqa: SIM115
        deployment.prometheus_url = f"http://127.0.0.1:{port}"
        wait_until(lambda: _get(deployment.prometheus_url + "/-/ready"),
                   "Prometheus ready", timeout=30)
        yield deployment
    finally:
        if prometheus is not None:
            prometheus.terminate()
            try:
                prometheus.wait(timeout=15)
            except subprocess.TimeoutExpired:
                prometheus.kill()
        cluster.stop()  # the agents are Ray workers: they go with their raylets
        for hw in deployment.hardware:
            hw.close()


def test_every_node_gets_an_agent_that_prometheus_scrapes(deployment: Deployment):
    nodes = set(deployment.scenarios)
    up = wait_until(lambda: (t := up_targets(deployment)).keys() == nodes and t,
                    "all three agents scraped")
    status = deployment.status()
    assert up == {node: status[node]["url"].removeprefix("http://") for node in nodes}

    expected = {node: expected_devices(deployment, status[node]) for node in nodes}
    assert sorted(expected.values()) == sorted([8, 4, 4])  # H200s, L4s, A100 + 3 MIG
    wait_until(lambda: devices_per_node(deployment) == expected, "device counts in Prometheus")

    # Series carry the node they come from and the simulation flag, as scraped.
    models = deployment.query('count by (ray_node_id, model, simulated) '
                              '(ray_accelerator_device_info{job="ray-accel"})')
    seen = {(m["metric"]["ray_node_id"], m["metric"]["model"]) for m in models}
    assert (_node_of(deployment, "hgx-h200"), "NVIDIA H200") in seen
    assert {m["metric"]["simulated"] for m in models} == {"true"}
    assert not deployment.query('{job="ray-accel", exported_ray_node_id!=""}')


def test_deploy_again_changes_nothing(deployment: Deployment):
    before = deployment.status()
    result = deployment.cli("deploy", "--address", deployment.cluster.gcs_address, *DEPLOY_FLAGS)
    assert result.returncode == 0, result.stderr
    assert "already deployed" in result.stdout
    after = deployment.status()
    assert {n: r["pid"] for n, r in after.items()} == {n: r["pid"] for n, r in before.items()}

    other = deployment.cli("deploy", "--address", deployment.cluster.gcs_address,
                           "--interval", "2", "--wait", "0")
    assert other.returncode == 1
    assert "already deployed on this cluster with other settings" in other.stderr
    assert "interval_s" in other.stderr


def test_a_node_that_joins_gets_an_agent(deployment: Deployment):
    node = deployment.add_node(JOINING_SCENARIO)
    wait_until(lambda: node in up_targets(deployment), "the new node's agent scraped", 90)
    wait_until(lambda: devices_per_node(deployment).get(node) == 4,
               "the new node's devices in Prometheus")


def test_a_killed_agent_comes_back(deployment: Deployment):
    node = _node_of(deployment, "l4-pcie")
    old = deployment.status()[node]
    os.kill(old["pid"], signal.SIGKILL)
    new = wait_until(
        lambda: (row := deployment.status()[node])["pid"] != old["pid"] and row["health"] == "ok"
        and row, "the agent restarted", 90)
    assert new["url"] != old["url"]  # a new process on a new port
    target = new["url"].removeprefix("http://")
    wait_until(lambda: up_targets(deployment).get(node) == target,
               "the restarted agent scraped", 60)
    wait_until(lambda: deployment.query(
        f'ray_accelerator_device_up{{job="ray-accel", instance="{target}"}}'),
        "series from the restarted agent")


def test_an_agent_ray_gave_up_on_is_started_again(deployment: Deployment):
    # Ended for good (as after a failed start): Ray will not restart it, the supervisor does.
    node = _node_of(deployment, "a100-mig")
    old = deployment.status()[node]
    driver = subprocess.run(
        [sys.executable, "-c", KILL_FOR_GOOD, deployment.cluster.gcs_address, node],
        env=deployment.cluster.env, capture_output=True, text=True, timeout=120)
    assert driver.returncode == 0, driver.stderr
    wait_until(lambda: (row := deployment.status()[node])["pid"] != old["pid"]
               and row["health"] == "ok", "the supervisor started a new agent", 90)


def test_status_lists_every_agent(deployment: Deployment):
    # Health is a moment's: on a loaded machine a device read late at the agents' 0.5 s
    # interval is stale (degraded, and named) until its next answer.
    rows = wait_until(lambda: (r := deployment.status()) and all(
        row["health"] == "ok" for row in r.values()) and r, "every agent ok")
    assert rows.keys() == deployment.scenarios.keys()
    for row in rows.values():
        assert row["not_answering"] == []
        assert row["simulated"] is True and row["deployed"] is True
        assert row["node_ip"] == "127.0.0.1" and row["url"].startswith("http://127.0.0.1:")
        assert row["version"] == agent_version()
    table = deployment.cli("status", "--address", deployment.cluster.gcs_address)
    assert table.returncode == 0
    header, *lines = table.stdout.splitlines()
    assert header.split()[:4] == ["NODE", "ID", "NODE", "IP"]
    assert len(lines) == len(rows)
    assert all(" ok " in line and "deployed" in line for line in lines), table.stdout
    assert "VERSION" in header and all(f" {agent_version()} " in line for line in lines)


def test_undeploy_removes_agents_and_registrations(deployment: Deployment):
    pids = [row["pid"] for row in deployment.status().values()]
    result = deployment.cli("undeploy", "--address", deployment.cluster.gcs_address)
    assert result.returncode == 0, result.stderr
    assert f"{len(pids)} agent(s) stopped" in result.stdout
    rows = deployment.status()
    assert all(row["health"] == "no agent" and row["url"] == "" for row in rows.values())
    wait_until(lambda: not any(_alive(pid) for pid in pids), "agent processes gone", 30)
    session = deployment.cluster.root / "ray" / "session_latest"
    assert json.loads((session / "ray_accel_service_discovery.json").read_text()) == []
    wait_until(lambda: not deployment.targets(), "Prometheus dropped the targets", 30)
    # Nothing left to undeploy: still fine.
    again = deployment.cli("undeploy", "--address", deployment.cluster.gcs_address)
    assert again.returncode == 0 and "0 agent(s) stopped" in again.stdout


def _node_of(deployment: Deployment, scenario: str) -> str:
    return next(node for node, name in deployment.scenarios.items() if name == scenario)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"
