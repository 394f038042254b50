"""The built wheel, installed into a fresh virtualenv, works without the source tree.

Package data drifts silently: a scenario's fake library left out of the wheel
makes `--simulate` run with no devices while every test of the source tree
passes. This builds the wheel, installs it (with its dependencies, as a user
would) into a new virtualenv and runs the commands from a folder outside the
checkout, with nothing of the checkout on any path.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from loopback_ray import LoopbackCluster

from ray_accel.exporter.simulate import available_scenarios, load_scenario

REPO = pathlib.Path(__file__).resolve().parents[1]
INSTALL_TIMEOUT_S = 900


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Iterator[dict[str, Any]]:
    """The fresh virtualenv's bin folder, a clean environment and a work folder outside the repo."""
    root = tmp_path_factory.mktemp("wheel")
    source = _checkout_copy(root / "source")
    dist = root / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist),
                    str(source)], check=True, timeout=INSTALL_TIMEOUT_S, cwd=root)
    (wheel,) = dist.glob("ray_accel-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                    "--disable-pip-version-check", str(wheel)], check=True,
                   timeout=INSTALL_TIMEOUT_S, cwd=root)
    work = root / "work"
    work.mkdir()
    temp = root / "tmp"
    temp.mkdir()
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("PYTHON", "VIRTUAL_ENV", "RAY_ACCEL", "LD_"))}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", TMPDIR=str(temp),
               XDG_CACHE_HOME=str(root / "cache"))
    yield {"bin": venv / "bin", "env": env, "work": work, "temp": temp}


def _checkout_copy(target: pathlib.Path) -> pathlib.Path:
    """The files git would commit (tracked, or new and not ignored), copied to `target`.

    The wheel is built from this copy: a build of the checkout itself leaves a
    build/ folder there whose stale files a later build would package.
    """
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=REPO, capture_output=True, check=True,
                            timeout=60).stdout.decode().split("\0")
    for name in filter(None, listed):
        origin = REPO / name
        if origin.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(origin, target / name)
    return target


def run(installed: dict[str, Any], *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([str(installed["bin"] / "ray-accel"), *args], cwd=installed["work"],
                          env=installed["env"], capture_output=True, text=True, timeout=timeout)


def test_the_package_comes_from_the_wheel(installed):
    probe = subprocess.run(
        [str(installed["bin"] / "python"), "-c",
         "import json, sys, ray_accel; print(json.dumps([list(ray_accel.__path__), sys.path]))"],
        cwd=installed["work"], env=installed["env"], capture_output=True, text=True, timeout=60,
        check=True)
    package_paths, search_path = json.loads(probe.stdout)
    assert all(pathlib.Path(p).is_relative_to(installed["bin"].parent) for p in package_paths)
    assert not any(str(REPO) in entry for entry in search_path)


def _expected_backends(name: str) -> set[str]:
    """The backends a shipped scenario's simulated hardware gives devices to."""
    scenario = load_scenario(name)
    vendors = {device.get("vendor") or "nvidia" for device in scenario["devices"]}
    return vendors | {family for family in ("tpu", "neuron", "gaudi") if family in scenario}


def _get_json(url: str, token: str | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def _serving_url(process: subprocess.Popen, timeout: float = 60) -> str:
    """The agent's URL, from the line it prints once it listens."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if "serving" in line:
            return line.split()[-1].removesuffix("/metrics")
        if not line and process.poll() is not None:
            break
    raise AssertionError(f"the agent did not start (exit {process.poll()})")


def _start_agent(installed: dict[str, Any], *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [str(installed["bin"] / "ray-accel"), "agent", "--port", "0", *args],
        cwd=installed["work"], env=installed["env"], stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True)


def _wait_for_backends(url: str, wanted: set[str], timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    health: dict[str, Any] = {}
    while time.monotonic() < deadline:
        _, health = _get_json(f"{url}/healthz")
        backends = (health or {}).get("backends", {})
        if all(backends.get(b, {}).get("up") and backends[b].get("devices") for b in wanted):
            return health
        time.sleep(0.5)
    raise AssertionError(f"backends {sorted(wanted)} not up with devices: {health}")


@pytest.mark.parametrize("name", available_scenarios())
def test_every_shipped_scenario_serves_its_devices(installed, name):
    agent = _start_agent(installed, "--simulate", name, "--no-ray")
    try:
        url = _serving_url(agent)
        health = _wait_for_backends(url, _expected_backends(name))
        assert health["backends"]
        with urllib.request.urlopen(f"{url}/metrics", timeout=5) as response:
            metrics = response.read().decode()
        assert 'simulated="true"' in metrics
        assert "ray_accelerator_device_up{" in metrics
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=30)
    assert agent.returncode == 0
    assert not list(installed["temp"].glob("fakenvml-*")), "the agent left its temporary folder"


def test_the_wheel_agent_builds_a_recording_in_a_process_of_its_own(installed):
    # the build runs as `python -m ray_accel.exporter.record.apart` with the agent's own
    # interpreter (exporter/record/apart.py): it must find the package as installed
    agent = _start_agent(installed, "--simulate", "l4-pcie", "--no-ray", "--interval", "0.5")
    try:
        url = _serving_url(agent)
        _wait_for_backends(url, {"nvidia"})
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/v1/record?last=1m",
                                            timeout=60) as response:
                    scenario = json.loads(response.read())
                break
            except urllib.error.HTTPError as error:  # 404 until its first samples
                assert error.code == 404 and time.monotonic() < deadline, error.read()
                time.sleep(0.5)
        assert len(load_scenario(scenario)["devices"]) == 4
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=30)
    assert agent.returncode == 0


def test_topo_grafana_and_scenarios_commands(installed, tmp_path):
    topology = run(installed, "topo", "--simulate", "hgx-h200")
    assert topology.returncode == 0, topology.stderr
    rows = [line.split() for line in topology.stdout.splitlines() if line.startswith("GPU")]
    assert len(rows) == 8
    assert all(row[1 + other] == "NV18" for i, row in enumerate(rows) for other in range(8)
               if other != i)
    boards = run(installed, "grafana", "--out", str(tmp_path / "grafana"))
    assert boards.returncode == 0, boards.stderr
    assert len(list((tmp_path / "grafana").rglob("*.json"))) >= 6
    assert list((tmp_path / "grafana").rglob("ray-accel-alerts.yml"))
    listed = run(installed, "scenarios")
    assert listed.stdout.split() == available_scenarios()


@pytest.mark.ray
def test_the_standalone_dashboard_shows_a_token_protected_wheel_agent(installed):
    cluster = LoopbackCluster()
    agent = dashboard = None
    try:
        cluster.start_head()
        env = {**installed["env"], **cluster.env}
        token = cluster.token.read_text().strip()
        installed_env = {**installed, "env": env}
        # An agent as deployed ones are: every endpoint but /healthz needs the cluster token.
        agent = _start_agent(installed_env, "--simulate", "l4-pcie", "--ray-address",
                             cluster.gcs_address, "--register-interval", "1",
                             "--token-file", str(cluster.token), "--metrics-auth", "token")
        agent_url = _serving_url(agent)
        assert _get_json(f"{agent_url}/api/v1/snapshot")[0] == 401
        port = cluster_free_port()
        dashboard = subprocess.Popen(
            [str(installed["bin"] / "ray-accel"), "dashboard", "--address", cluster.gcs_address,
             "--port", str(port), "--refresh", "1"],
            cwd=installed["work"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True)
        base = f"http://127.0.0.1:{port}/accelerators"
        deadline, summary = time.monotonic() + 90, None
        while time.monotonic() < deadline:
            try:
                status, summary = _get_json(f"{base}/api/summary", token)
            except OSError:
                status = 0
            if status == 200 and summary["devices"]["total"] == 4:
                break
            time.sleep(1)
        assert summary and summary["devices"]["total"] == 4, summary
        request = urllib.request.Request(f"{base}/", headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=5) as page:
            html = page.read().decode()
        (script,) = re.findall(r'src="\./(assets/[^"]+\.js)"', html)
        bundle = urllib.request.Request(f"{base}/{script}",
                                        headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(bundle, timeout=5) as served:
            assert len(served.read()) > 100_000  # the built tab, from the wheel's package data
        unauthorised, _ = _get_json(f"{base}/api/summary")
        assert unauthorised == 401
    finally:
        for process in (dashboard, agent):
            if process is not None:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=30)
        cluster.stop()


def cluster_free_port() -> int:
    from ray._common.network_utils import find_free_port

    return find_free_port()
