"""The AMD-only panels against a real Prometheus scraping a real agent on the mi355x-8 node.

tests/test_grafana_prometheus.py leaves the panels of metrics only AMD GPUs
report (per-XCC busy, clock-below-host-limit and throttle residency) to this
test; each must return data, and the shared compute panel must show the GPUs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from agent_process import AgentProcess
from board_queries import JOB, amd_only
from prometheus_server import PROMETHEUS, PrometheusServer

from ray_accel.grafana import queries
from ray_accel.grafana.boards import board_json, boards

pytestmark = pytest.mark.skipif(not Path(PROMETHEUS).exists(),
                                reason="prometheus is not installed (tools/system-deps.sh)")

VARIABLES = {"SessionName": ".*", "Cluster": ".*", "node": ".*", "ray_job_id": ".*", "job": JOB}


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory) -> Iterator[PrometheusServer]:
    folder = tmp_path_factory.mktemp("grafana-amd")
    with AgentProcess("--simulate", "mi355x-8", "--interval", "0.5") as agent:
        agent.wait_for(lambda d: len(d["devices"]) == 15, timeout=60)
        config = yaml.safe_dump({
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [{"job_name": JOB, "honor_labels": True, "static_configs": [
                {"targets": [agent.url.removeprefix("http://")]}]}]})
        with PrometheusServer(config, folder / "prometheus") as server:
            yield server


def _panels() -> dict[tuple[str, str, str], str]:
    return {(p.board, p.panel, p.ref_id): queries.expand(p.expr, VARIABLES)
            for board in boards() for p in queries.panel_queries(board_json(board))}


def test_amd_only_panels_return_data(prometheus):
    panels = {key: expr for key, expr in _panels().items() if amd_only(expr)}
    assert {panel for _, panel, _ in panels} >= {
        "XCC graphics busy", "Graphics clock below the host limit", "Throttle residency"}

    def empty() -> list[str]:
        return [f"{key}: {expr}" for key, expr in panels.items() if not prometheus.query(expr)]

    try:
        prometheus.wait_until(lambda: not empty(), "every AMD panel returns data", timeout=90)
    except AssertionError:
        missing = empty()
        pytest.fail(f"{len(missing)} panel queries return no data:\n" + "\n".join(missing))
    held = prometheus.query(panels[("ray-accel-node", "Graphics clock below the host limit",
                                    "A")])
    idle = {s["metric"]["reason"]: float(s["value"][1]) for s in held
            if s["metric"]["index"] == "5"}
    assert idle["low_utilization"] == 1.0  # the idle holder's GPU: no work, clock held down


def test_the_compute_panel_shows_the_amd_gpus(prometheus):
    expr = _panels()[("ray-accel-node", "Compute utilization", "A")]
    prometheus.wait_until(lambda: len(prometheus.query(expr)) == 15, "15 AMD devices",
                          timeout=60)
    assert {s["metric"]["vendor"] for s in prometheus.query(expr)} == {"amd"}
