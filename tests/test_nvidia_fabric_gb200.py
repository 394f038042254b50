"""The gb200-nvl72 scenario end to end: one rack's trays as agents, tray 7's fabric degrading.

Two real agents run trays of the same NVLink domain (`gb200-nvl72?tray=N`), frozen
90 s into the run, after tray 7's fabric has degraded (degraded bandwidth, summary
unhealthy). A real Prometheus scrapes both with the generated alert rules: tray 7
sets off RayAcceleratorFabricUnhealthy on its four GPUs and nothing else; the healthy
tray fires nothing. The snapshots give the Accelerators tab's findings.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from agent_process import AgentProcess
from prometheus_server import PROMETHEUS, PrometheusServer

from ray_accel.dashboard_module.aggregate import NodeState, build_view
from ray_accel.exporter.node_view import reduce_snapshot
from ray_accel.exporter.simulate import load_scenario
from ray_accel.grafana.alerts import rules_file
from ray_accel.grafana.alerts.config import AlertConfig
from ray_accel.grafana.alerts.rules import groups
from ray_accel.grafana.thresholds import Thresholds

DEGRADED_TRAY, HEALTHY_TRAY = 7, 3
AFTER_DEGRADING_S = 90.0  # the scenario degrades tray 7 at 60 s
JOB = "ray-accel"
RULE = "RayAcceleratorFabricUnhealthy"


def test_the_rack_is_eighteen_trays_of_four_gpus_in_one_nvlink_domain():
    trays = [load_scenario(f"gb200-nvl72?tray={tray}") for tray in range(1, 19)]
    devices = [d for tray in trays for d in tray["devices"]]
    assert len(devices) == 72 and len({d["uuid"] for d in devices}) == 72
    assert {(d["fabric"]["cluster_uuid"], d["fabric"]["clique_id"]) for d in devices} == {
        ("c7a4e0d2-5b19-4f3e-8d61-2a9f0b7c4e15", 1)}
    assert all(d["name"] == "NVIDIA GB200" and len(d["nvlinks"]) == 18 for d in devices)
    assert all(link["remote_device_type"] == "switch" and link["version"] == 5
               for d in devices for link in d["nvlinks"])
    changing = {tray["name"] for tray in trays
                for d in tray["devices"] if "keyframes" in d["fabric"]["health_summary"]}
    assert changing == {f"gb200-nvl72?tray={DEGRADED_TRAY}"}
    assert load_scenario("gb200-nvl72")["devices"][0]["uuid"] == trays[0]["devices"][0]["uuid"]


def _frozen(tray: int, folder: Path) -> Path:
    """The shipped tray, frozen after the degradation, as a scenario file."""
    scenario = load_scenario(f"gb200-nvl72?tray={tray}")
    scenario["freeze_at_s"] = AFTER_DEGRADING_S
    path = folder / f"gb200-tray{tray}.json"
    path.write_text(json.dumps(scenario))
    return path


@pytest.fixture(scope="module")
def trays(tmp_path_factory) -> Iterator[dict[int, AgentProcess]]:
    folder = tmp_path_factory.mktemp("gb200")
    agents = {tray: AgentProcess("--simulate", str(_frozen(tray, folder)), "--interval", "0.5")
              for tray in (DEGRADED_TRAY, HEALTHY_TRAY)}
    started = []
    try:
        for agent in agents.values():
            started.append(agent.__enter__())
        for agent in agents.values():
            agent.wait_for(lambda d: len(d["devices"]) == 4 and all(x["up"] for x in d["devices"]),
                           timeout=60)
        yield agents
    finally:
        for agent in started:
            agent.__exit__(None, None, None)


def _series(text: str, name: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(name + "{")]


def test_a_degraded_tray_becomes_metrics(trays):
    _, _, body = trays[DEGRADED_TRAY].get("/metrics")
    text = body.decode()
    degraded = [s for s in _series(text, "ray_accelerator_fabric_health_issue")
                if 'field="degraded_bandwidth"' in s]
    assert len(degraded) == 4 and all(s.endswith(" 1.0") for s in degraded)
    summaries = _series(text, "ray_accelerator_fabric_health_summary")
    assert len(summaries) == 4 and all(s.endswith(" 2.0") for s in summaries)
    info = _series(text, "ray_accelerator_fabric_info")
    assert len(info) == 4 and all('health_summary="unhealthy"' in s and
                                  'cluster_uuid="c7a4e0d2-5b19-4f3e-8d61-2a9f0b7c4e15"' in s
                                  for s in info)
    _, _, healthy_body = trays[HEALTHY_TRAY].get("/metrics")
    healthy = healthy_body.decode()
    summaries = _series(healthy, "ray_accelerator_fabric_health_summary")
    assert len(summaries) == 4 and all(s.endswith(" 1.0") for s in summaries)
    issues = _series(healthy, "ray_accelerator_fabric_health_issue")
    assert len(issues) == 4 * 7 and all(s.endswith(" 0.0") for s in issues)


def test_a_degraded_tray_is_a_finding_in_the_tab_and_a_healthy_one_is_not(trays):
    nodes = [NodeState(f"node-{tray}", agent.url, f"tray-{tray}",
                       data=reduce_snapshot(agent.json("/api/v1/snapshot")))
             for tray, agent in trays.items()]
    view = build_view(nodes, refresh_s=5)
    fabric = [f for f in view.findings if f["kind"] == "fabric_unhealthy"]
    assert {f["node_id"] for f in fabric} == {f"node-{DEGRADED_TRAY}"}
    assert sorted(f["device_index"] for f in fabric) == ["0", "1", "2", "3"]
    assert all(f["severity"] == "critical" and "degraded_bandwidth" in f["message"]
               and "unhealthy" in f["message"] for f in fabric)
    assert not [f for f in view.findings if f["node_id"] == f"node-{HEALTHY_TRAY}"]
    # Both trays sit in the rack's one NVLink domain: the tab's heatmap groups them together.
    assert {n["nvlink_domain"] for n in view.heatmap} == {
        "c7a4e0d2-5b19-4f3e-8d61-2a9f0b7c4e15/1"}
    sick = next(d for d in nodes[0].data["devices"] if d["index"] == "0")
    assert view.health[sick["uuid"]] == "warning"
    assert sick["fabric"]["issues"] == ["degraded_bandwidth"]


@pytest.mark.skipif(not Path(PROMETHEUS).exists(), reason="prometheus is not installed")
def test_a_degraded_tray_fires_the_alert_in_prometheus_and_a_healthy_one_fires_nothing(
        trays, tmp_path):
    config = AlertConfig(Thresholds().with_overrides({"fabric_unhealthy_for": "2s"}), JOB)
    rules = rules_file.render(groups(config), rules_file.DEFAULT_RUNBOOK_BASE)
    targets = {tray: agent.url.removeprefix("http://") for tray, agent in trays.items()}
    prometheus_config = yaml.safe_dump({
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": ["alerts.yml"],
        "scrape_configs": [{"job_name": JOB, "static_configs": [
            {"targets": list(targets.values())}]}],
    })
    with PrometheusServer(prometheus_config, tmp_path, {"alerts.yml": rules}) as prometheus:
        firing = prometheus.wait_until(
            lambda: len(prometheus.firing(RULE)) == 4 and prometheus.firing(RULE),
            "the fabric alert firing on tray 7's four GPUs", timeout=90)
        assert {a["labels"]["instance"] for a in firing} == {targets[DEGRADED_TRAY]}
        assert sorted(a["labels"]["index"] for a in firing) == ["0", "1", "2", "3"]
        time.sleep(3)  # every rule has had time to fire (the shortest `for` is 2 s)
        by_instance = {}
        for alert in prometheus.alerts():
            by_instance.setdefault(alert["labels"].get("instance"), set()).add(
                alert["labels"]["alertname"])
        assert by_instance.get(targets[HEALTHY_TRAY], set()) == set()
        assert by_instance[targets[DEGRADED_TRAY]] == {RULE}
