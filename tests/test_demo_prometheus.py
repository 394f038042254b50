"""`ray-accel demo`, headless: the tab in Ray's dashboard, Prometheus, a firing alert, Ctrl-C.

The demo's own entry (`ray-accel demo --ready-file`, what `make demo` runs, without the
make target) is started as a subprocess and writes its endpoints once everything serves.
The test signs in the way the demo tells a person to, reads the tab and its API behind the
cluster's token, asks the demo's Prometheus for its targets and waits for the
idle-allocation alert on the idle actor to fire; then Ctrl-C must stop everything the demo
started and remove its files.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from prometheus_server import PROMETHEUS, wait_until

pytestmark = [
    pytest.mark.ray,
    pytest.mark.skipif(not Path(PROMETHEUS).exists(),
                       reason="prometheus is not installed (tools/system-deps.sh)"),
]

READY_S = 300
FIRING_S = 150


def request(url: str, token: str | None = None, method: str = "GET",
            cookie: str | None = None) -> tuple[int, dict[str, str], bytes]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if cookie:
        headers["Cookie"] = cookie
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method, headers=headers),
                                    timeout=10) as reply:
            return reply.status, dict(reply.headers), reply.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def api(url: str) -> dict:
    status, _, body = request(url)
    assert status == 200, body
    return json.loads(body)["data"]


class RunningDemo:
    """`ray-accel demo --ready-file`, its output collected as it comes."""

    def __init__(self, folder: Path) -> None:
        self.ready_file = folder / "ready.json"
        self.output: list[str] = []
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ray_accel.exporter.cli", "demo", "--port", "0",
             "--ready-file", str(self.ready_file)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=self._collect, daemon=True).start()

    def _collect(self) -> None:
        for line in self.process.stdout:
            self.output.append(line.rstrip("\n"))

    def endpoints(self) -> dict:
        def ready() -> dict | None:
            assert self.process.poll() is None, "demo exited:\n" + "\n".join(self.output)
            return json.loads(self.ready_file.read_text()) if self.ready_file.exists() else None

        return wait_until(ready, "the demo serving", timeout=READY_S, every=1)

    def interrupt(self) -> int:
        self.process.send_signal(signal.SIGINT)
        return self.process.wait(timeout=120)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    running = RunningDemo(tmp_path_factory.mktemp("demo"))
    try:
        yield running
    finally:
        if running.process.poll() is None:
            running.interrupt()


@pytest.fixture(scope="module")
def endpoints(demo) -> dict:
    return demo.endpoints()


def test_it_prints_the_tab_and_sign_in_then_rays_dashboard_prometheus_and_the_agent(
        demo, endpoints):
    text = "\n".join(demo.output)
    order = [text.index(f"Accelerators tab:  {endpoints['tab_url']}"),
             text.index(f"cat {endpoints['token_file']}"),
             text.index(f"{endpoints['dashboard_url']}/api/authenticate"),
             text.index(f"Ray's dashboard:   {endpoints['dashboard_url']}/"),
             text.index(f"Prometheus alerts: {endpoints['prometheus_url']}/alerts"),
             text.index(f"Metrics:  {endpoints['agent_url']}/metrics")]
    assert order == sorted(order), text
    assert "Traceback" not in text


def test_the_tab_is_in_rays_dashboard_behind_the_clusters_token(endpoints):
    token = Path(endpoints["token_file"]).read_text().strip()
    assert request(endpoints["tab_url"])[0] == 401
    status, _, page = request(endpoints["tab_url"], token)
    assert status == 200 and b'<div id="root">' in page
    summary_url = f"{endpoints['tab_url']}api/summary"

    def with_idle_allocation() -> dict | None:
        summary = json.loads(request(summary_url, token)[2])
        return summary if summary["devices"]["idle_allocations"] >= 1 else None

    summary = wait_until(with_idle_allocation, "an idle allocation in the tab")
    assert summary["devices"]["total"] == 8 and summary["nodes"]["total"] == 1
    # Signing in as the demo says: Ray's dashboard sets its cookie, and the tab takes it.
    status, headers, _ = request(f"{endpoints['dashboard_url']}/api/authenticate", token,
                                 method="POST")
    assert status == 200, headers
    cookie = headers["Set-Cookie"].split(";")[0]
    assert cookie.startswith("ray-authentication-token=")
    assert request(summary_url, cookie=cookie)[0] == 200


def test_prometheus_scrapes_ray_and_the_agent_through_the_discovery_files(endpoints):
    prometheus = endpoints["prometheus_url"]
    assert request(f"{prometheus}/-/ready")[0] == 200

    def up(job: str) -> list[dict]:
        targets = [t for t in api(f"{prometheus}/api/v1/targets")["activeTargets"]
                   if t["labels"]["job"] == job]
        healthy = [t for t in targets if t["health"] == "up"]
        assert healthy, f"{job}: {[(t['scrapeUrl'], t['lastError']) for t in targets]}"
        return healthy

    (agent,) = wait_until(lambda: up("ray-accel"), "the agent's target up", timeout=60)
    assert agent["scrapeUrl"] == f"{endpoints['agent_url']}/metrics"
    assert agent["labels"]["ray_node_id"]
    wait_until(lambda: up("ray"), "a target of Ray's up", timeout=60)

    def series(query: str) -> list[dict]:
        return api(f"{prometheus}/api/v1/query?query={urllib.parse.quote(query)}")["result"]

    # Ray's own node metrics, and the agent's, side by side
    assert wait_until(lambda: series('ray_node_mem_used{job="ray"}'), "Ray's node metrics")
    assert len(series('ray_accelerator_device_up{job="ray-accel"} == 1')) == 8


def test_the_tabs_history_comes_from_the_demos_prometheus(endpoints):
    token = Path(endpoints["token_file"]).read_text().strip()

    def from_prometheus() -> dict | None:
        history = json.loads(request(f"{endpoints['tab_url']}api/history", token)[2])
        answered = history["source"] == "prometheus" and any(
            v is not None for v in history["power_watts"])
        return history if answered else None

    history = wait_until(from_prometheus, "the tab's history from Prometheus", timeout=90)
    assert history["prometheus_url"] == endpoints["prometheus_url"]
    assert history["error"] == "" and history["range"] == "1h"


def test_the_idle_allocation_alert_fires_for_the_idle_actor(endpoints):
    prometheus = endpoints["prometheus_url"]

    def firing() -> list[dict]:
        return [a for a in api(f"{prometheus}/api/v1/alerts")["alerts"]
                if a["labels"]["alertname"] == "RayAcceleratorAllocatedIdle"
                and a["state"] == "firing"]

    alerts = wait_until(firing, "RayAcceleratorAllocatedIdle firing", timeout=FIRING_S, every=2)
    assert [a["labels"]["actor_class"] for a in alerts] == ["IdleHolder"]


def test_ctrl_c_stops_everything_and_removes_its_files(demo, endpoints):
    assert demo.interrupt() == 0, "\n".join(demo.output)
    assert Path(endpoints["token_file"]).parent in [Path(f) for f in endpoints["folders"]]
    assert [f for f in endpoints["folders"] if Path(f).exists()] == []
    for url in (endpoints["prometheus_url"], endpoints["agent_url"], endpoints["dashboard_url"]):
        with pytest.raises(OSError):
            urllib.request.urlopen(url, timeout=5)
