"""A mixed cluster in one view: GPU, TPU and Neuron nodes of one real Ray cluster.

Three nodes on 127.0.0.1, each on simulated hardware of its own: an HGX H200
head (fake NVML), a TPU v5e-8 host (fake runtime metric service over gRPC) and a
trn1.32xlarge-like node (fake neuron-monitor). `ray-accel deploy` starts an
agent on each; `ray-accel dashboard` finds them through the GCS registry, as the
module does inside Ray, and its API shows the three kinds of devices side by side.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest
from loopback_ray import LoopbackCluster, deployed_cluster, standalone_dashboard

SCENARIOS = ("hgx-h200", "tpu-v5e-8", "trn1-32xl")


pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[LoopbackCluster, dict[str, str]]]:
    with deployed_cluster([(s, s) for s in SCENARIOS], prefix="mx-") as running:
        yield running



def _api_answers(cluster: LoopbackCluster) -> tuple[dict, dict, dict]:
    """`ray-accel dashboard` on the cluster: its summary, nodes and heatmap once all are in."""
    def ready(nodes: list) -> bool:
        return len(nodes) == len(SCENARIOS) and all(
            n["status"] == "ok" and n["device_count"] for n in nodes)

    with standalone_dashboard(cluster, ready) as get:
        return get("summary"), get("nodes"), get("heatmap")


def test_gpu_tpu_and_neuron_nodes_in_one_view(cluster):
    ray_cluster, scenario_of = cluster
    summary, nodes, heatmap = _api_answers(ray_cluster)
    assert {n["node_id"]: n["status"] for n in nodes["nodes"]} == dict.fromkeys(
        scenario_of, "ok"), summary["refresh"]
    count = {scenario_of[n["node_id"]]: n["device_count"] for n in nodes["nodes"]}
    assert count == {"hgx-h200": 8, "tpu-v5e-8": 8, "trn1-32xl": 16 + 32}  # chips + NeuronCores
    assert summary["devices"]["total"] == 8 + 8 + 48
    vendors = Counter(m["vendor"] for m in summary["by_model"])
    assert set(vendors) == {"nvidia", "google", "aws"}
    # The heatmap, the one view of every device, has each with its utilization.
    cells = {scenario_of[row["node_id"]]: row["devices"] for row in heatmap["nodes"]}
    for scenario, devices in cells.items():
        assert any(cell["util"] is not None and cell["mem"] is not None for cell in devices), \
            scenario
