"""The boards for TPU, Neuron and Gaudi devices, against a real Prometheus scraping a real agent.

One simulated node carries the devices of the shipped `tpu-v5e-8`, `trn1-32xl`
and `gaudi2-8` scenarios (no machine mixes them; this puts every family's
series in one Prometheus). Every panel query that tests/test_grafana_prometheus.py
leaves to this test (those of family-only metrics) must return data, and the
panels every device shares show these devices under the same names as GPUs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from agent_process import AgentProcess
from board_queries import JOB, family_only
from prometheus_server import PROMETHEUS, PrometheusServer

from ray_accel.exporter.simulate import SimulatedHardware
from ray_accel.grafana import queries
from ray_accel.grafana.boards import board_json, boards

pytestmark = pytest.mark.skipif(not Path(PROMETHEUS).exists(),
                                reason="prometheus is not installed (tools/system-deps.sh)")

SCENARIOS = Path(__file__).resolve().parents[1] / "exporter" / "simulate" / "scenarios"
SECTIONS = {"tpu": "tpu-v5e-8", "neuron": "trn1-32xl", "gaudi": "gaudi2-8"}
VARIABLES = {"SessionName": ".*", "Cluster": ".*", "node": ".*", "ray_job_id": ".*", "job": JOB}
SHARED_PANELS = {("ray-accel-node", "Compute utilization", "A"),
                 ("ray-accel-node", "Memory in use", "A")}


def families_node() -> dict:
    scenario = {"name": "families", "description": "TPU, Neuron and Gaudi devices on one node",
                "devices": []}
    for section, name in SECTIONS.items():
        scenario[section] = json.loads((SCENARIOS / f"{name}.json").read_text())[section]
    return scenario


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory) -> Iterator[PrometheusServer]:
    folder = tmp_path_factory.mktemp("grafana-families")
    with SimulatedHardware.start(families_node(), state_dir=folder / "hw") as hardware, \
            AgentProcess("--interval", "0.5", env=hardware.environ()) as agent:
        agent.wait_for(lambda d: {x["vendor"] for x in d["devices"]} == {
            "google", "aws", "intel"}, timeout=60)
        config = yaml.safe_dump({
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [{"job_name": JOB, "honor_labels": True, "static_configs": [
                {"targets": [agent.url.removeprefix("http://")]}]}]})
        with PrometheusServer(config, folder / "prometheus") as server:
            yield server


def _panels() -> dict[tuple[str, str, str], tuple[queries.PanelQuery, str]]:
    return {(p.board, p.panel, p.ref_id): (p, queries.expand(p.expr, VARIABLES))
            for board in boards() for p in queries.panel_queries(board_json(board))}


def test_family_only_panels_return_data(prometheus):
    panels = {key: expr for key, (_, expr) in _panels().items() if family_only(expr)}
    assert len(panels) >= 10

    def empty() -> list[str]:
        return [f"{key}: {expr}" for key, expr in panels.items() if not prometheus.query(expr)]

    try:
        prometheus.wait_until(lambda: not empty(), "every family panel returns data", timeout=90)
    except AssertionError:
        missing = empty()
        pytest.fail(f"{len(missing)} panel queries return no data:\n" + "\n".join(missing))


def test_shared_panels_show_every_family_under_the_same_names(prometheus):
    for key, (_, expr) in _panels().items():
        if key in SHARED_PANELS:
            vendors = {s["metric"].get("vendor") for s in prometheus.query(expr)}
            assert vendors >= {"google", "aws", "intel"}, key
