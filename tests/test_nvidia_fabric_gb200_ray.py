"""Three trays of one GB200 NVL72 rack as the nodes of one real Ray cluster.

Three nodes on 127.0.0.1 run `gb200-nvl72?tray=1`, `?tray=2` and `?tray=7` (frozen
after tray 7's fabric degraded). `ray-accel deploy` starts an agent on each;
`ray-accel dashboard` finds them through the GCS registry, as the module does
inside Ray: its heatmap puts the three nodes in the rack's one NVLink domain, and
its findings name tray 7's four GPUs, and only those, as fabric_unhealthy.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from loopback_ray import LoopbackCluster, deployed_cluster, standalone_dashboard

from ray_accel.exporter.simulate import load_scenario

TRAYS = (1, 2, 7)
DEGRADED_TRAY = 7
DOMAIN = "c7a4e0d2-5b19-4f3e-8d61-2a9f0b7c4e15/1"


pytestmark = pytest.mark.ray


def _tray(tray: int) -> dict:
    scenario = load_scenario(f"gb200-nvl72?tray={tray}")
    scenario["freeze_at_s"] = 90.0  # after tray 7's fabric degraded (at 60 s)
    return scenario


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[LoopbackCluster, dict[str, int]]]:
    with deployed_cluster([(tray, _tray(tray)) for tray in TRAYS], prefix="nvl-") as running:
        yield running



def _dashboard_answers(cluster: LoopbackCluster) -> tuple[dict, dict]:
    """`ray-accel dashboard` on the cluster: its heatmap and findings once every tray is in."""
    def ready(nodes: list) -> bool:
        return len(nodes) == len(TRAYS) and all(
            n["status"] == "ok" and n["device_count"] == 4 for n in nodes)

    with standalone_dashboard(cluster, ready) as get:
        return get("heatmap"), get("findings")


def test_three_trays_of_one_rack_share_a_domain_and_only_tray_7_is_a_finding(cluster):
    ray_cluster, tray_of = cluster
    heatmap, findings = _dashboard_answers(ray_cluster)
    assert {row["node_id"]: row["nvlink_domain"] for row in heatmap["nodes"]} == dict.fromkeys(
        tray_of, DOMAIN)
    uuids = {cell["uuid"] for row in heatmap["nodes"] for cell in row["devices"]}
    assert len(uuids) == 4 * len(TRAYS)
    fabric = [f for f in findings["findings"] if f["kind"] == "fabric_unhealthy"]
    assert {tray_of[f["node_id"]] for f in fabric} == {DEGRADED_TRAY}
    assert sorted(f["device_index"] for f in fabric) == ["0", "1", "2", "3"]
    assert all("degraded_bandwidth" in f["message"] for f in fabric)
