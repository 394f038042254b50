"""Interconnect and topology through the real binding against the simulated boards."""

from __future__ import annotations

import copy
import os
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families as parse_text

from ray_accel.exporter import catalog as m
from ray_accel.exporter.model import Device
from ray_accel.exporter.nics import nearest_nics
from ray_accel.exporter.placement import node_placement
from ray_accel.exporter.sampler import Sampler
from ray_accel.exporter.simulate import load_scenario
from ray_accel.exporter.sinks.json import snapshot_document
from ray_accel.exporter.sinks.prometheus import PrometheusRenderer
from ray_accel.exporter.store import SnapshotStore
from ray_accel.exporter.topology import matrix, render

# What `nvidia-smi topo -m` prints for these boards (GPU columns, CPU and NUMA affinity).
HGX_H200 = [
    ["GPU0", "X", *["NV18"] * 7, "0-55,112-167", "0"],
    ["GPU1", "NV18", "X", *["NV18"] * 6, "0-55,112-167", "0"],
    ["GPU2", *["NV18"] * 2, "X", *["NV18"] * 5, "0-55,112-167", "0"],
    ["GPU3", *["NV18"] * 3, "X", *["NV18"] * 4, "0-55,112-167", "0"],
    ["GPU4", *["NV18"] * 4, "X", *["NV18"] * 3, "56-111,168-223", "1"],
    ["GPU5", *["NV18"] * 5, "X", *["NV18"] * 2, "56-111,168-223", "1"],
    ["GPU6", *["NV18"] * 6, "X", "NV18", "56-111,168-223", "1"],
    ["GPU7", *["NV18"] * 7, "X", "56-111,168-223", "1"],
]
L4_PCIE = [
    ["GPU0", "X", "PIX", "NODE", "NODE", "0-31,64-95", "0"],
    ["GPU1", "PIX", "X", "NODE", "NODE", "0-31,64-95", "0"],
    ["GPU2", "NODE", "NODE", "X", "PIX", "0-31,64-95", "0"],
    ["GPU3", "NODE", "NODE", "PIX", "X", "0-31,64-95", "0"],
]


@pytest.mark.parametrize(("scenario", "expected"), [("hgx-h200", HGX_H200),
                                                   ("l4-pcie", L4_PCIE)])
def test_matrix_is_what_nvidia_smi_topo_prints(open_backend, scenario, expected):
    _, devices, _ = open_backend(scenario)
    rows = matrix(devices)
    assert rows[0][:len(expected) + 1] == ["", *(f"GPU{i}" for i in range(len(expected)))]
    assert [row[:-1] for row in rows[1:]] == expected
    text = render(devices)
    assert text.splitlines()[1].split()[:3] == ["GPU0", "X", expected[0][2]]
    assert "NV#  = Connection traversing a bonded set of # NVLinks" in text


def test_peers_say_nvlink_domain_and_p2p(open_backend):
    _, devices, _ = open_backend("hgx-h200")
    first = devices[0]
    assert first.facts["nvlink_domain"] == "29db9a08-13d3-5c97-a4fe-ddd7908adcd0/1"
    assert {p.p2p for p in first.peers} == {"OK"}
    assert [p.index for p in first.peers] == [str(i) for i in range(1, 8)]


def _traffic_scenario() -> dict:
    """Two H200s, NVLink 0-1 direct, constant traffic: 1,000,000 KiB/s per link each way."""
    doc = copy.deepcopy(load_scenario("hgx-h200"))
    doc["devices"] = doc["devices"][:2]
    for index, device in enumerate(doc["devices"]):
        other = doc["devices"][1 - index]["pci_bus_id"]
        device["nvlinks"] = [
            {"state": True, "version": 4, "remote_device_type": "gpu", "remote_pci_bus_id": other}
            for _ in range(4)
        ]
        device["pcie_link"] = {"gen_current": 5, "gen_max": 5, "width_current": 16,
                               "width_max": 16}
        device["topology"] = {str(1 - index): "SYSTEM"}
        device["fields"] = {
            "138": {"*": {"start": 1000, "rate_per_s": 1_000_000}},
            "139": {"*": {"start": 2000, "rate_per_s": 500_000}},
            "163": {"*": 0},
            "197": {"start": 0, "rate_per_s": 3_000_000_000},
            "198": {"start": 0, "rate_per_s": 1_000_000_000},
        }
    doc.pop("freeze_at_s", None)
    return doc


def _by_key(doc: dict, index: str) -> dict:
    device = next(d for d in doc["devices"] if d["index"] == index)
    return {(link["link_type"], link["index"]): link for link in device["links"]}


def test_direct_nvlinks_name_their_peer_and_count(open_backend):
    _, devices, _ = open_backend(_traffic_scenario())
    assert [p.connection for p in devices[0].peers] == ["NV4"]


def test_link_counters_advance_and_snapshot_rates_match_the_scenario(open_backend):
    backend, _, _ = open_backend(_traffic_scenario())
    sampler = Sampler([backend], SnapshotStore(), interval_s=0.5)
    sampler.run_cycle()  # opens the backend
    first = sampler.run_cycle()
    time.sleep(0.5)
    second = sampler.run_cycle()
    links = _by_key(snapshot_document(second), "0")
    sample = next(d for d in second.devices if d.device.index == "0")
    assert all(sample.taken_at <= link.counters_at <= sample.taken_at + sample.duration_s
               for link in sample.links)  # rates span the counters' own reading times
    nvlink = links[("nvlink", 0)]
    assert nvlink["rates_bytes_per_s"]["transmit"] == pytest.approx(1_000_000 * 1024, rel=0.02)
    assert nvlink["rates_bytes_per_s"]["receive"] == pytest.approx(500_000 * 1024, rel=0.02)
    assert nvlink["facts"]["remote_type"] == "gpu"
    assert nvlink["facts"]["peer_uuid"] == second.devices[1].device.uuid
    pcie = links[("pcie", 0)]
    assert pcie["rates_bytes_per_s"]["transmit"] == pytest.approx(3e9, rel=0.02)
    before = _by_key(snapshot_document(first), "0")[("nvlink", 0)]
    io_before = before["values"][m.LINK_IO][0]["value"]
    assert nvlink["values"][m.LINK_IO][0]["value"] > io_before


def _series(renderer: PrometheusRenderer, snapshot) -> list:
    body, _ = renderer.render(snapshot, False)
    return [s for f in parse_text(body.decode()) for s in f.samples]


def test_link_down_and_downtrained_pcie_are_visible(open_backend):
    doc = _traffic_scenario()
    backend, _, hardware = open_backend(doc)
    sampler = Sampler([backend], SnapshotStore(), interval_s=0.2)
    sampler.run_cycle()
    renderer = PrometheusRenderer(include_process_metrics=False)
    healthy = _series(renderer, sampler.run_cycle())
    assert {s.value for s in healthy if s.name == "ray_accelerator_link_up"} == {1.0}

    doc["devices"][0]["nvlinks"][2]["state"] = False
    doc["devices"][0]["pcie_link"] = {"gen_current": 4, "gen_max": 5, "width_current": 8,
                                      "width_max": 16}
    hardware.update(doc)
    time.sleep(0.05)
    series = _series(renderer, sampler.run_cycle())

    def on_gpu0(name):
        return [s for s in series if s.name == name and s.labels["index"] == "0"]

    down = {s.labels["link"]: s.value for s in on_gpu0("ray_accelerator_link_up")}
    assert down == {"0": 1, "1": 1, "2": 0, "3": 1}
    generation = {s.labels["state"]: s.value for s in on_gpu0(
        "ray_accelerator_pcie_link_generation")}
    width = {s.labels["state"]: s.value for s in on_gpu0("ray_accelerator_pcie_link_width")}
    assert generation == {"current": 4, "max": 5}
    assert width == {"current": 8, "max": 16}
    crc = [s for s in on_gpu0("ray_accelerator_link_errors_total")
           if s.labels["error_type"] == "crc"]
    assert len(crc) == 4 and all(s.value == 0 for s in crc)
    io = [s for s in on_gpu0("hw_gpu_io_bytes_total") if s.labels["link_type"] == "pcie"]
    assert {s.labels["direction"] for s in io} == {"transmit", "receive"}
    topology = [s for s in on_gpu0("ray_accelerator_topology_info")]
    assert topology[0].labels["connection"] == "NV4"


def _make_pci_tree(root, devices: dict[str, list[str]], nics: dict[str, list[str]]) -> None:
    """A fake sysfs: each device/NIC at the end of a chain of PCI bridges."""
    def place(chain: list[str]) -> os.PathLike:
        path = root / "devices" / "pci0000:00"
        for element in chain:
            path = path / element
        path.mkdir(parents=True, exist_ok=True)
        return path

    (root / "bus" / "pci" / "devices").mkdir(parents=True)
    for address, chain in devices.items():
        (root / "bus" / "pci" / "devices" / address).symlink_to(place([*chain, address]))
    (root / "class" / "net").mkdir(parents=True)
    for name, chain in nics.items():
        (root / "class" / "net" / name).mkdir()
        (root / "class" / "net" / name / "device").symlink_to(place(chain))


def test_nearest_nics_share_the_deepest_pcie_switch(tmp_path):
    switch_a = ["0000:00:01.0", "0000:01:00.0", "0000:02:00.0"]
    switch_b = ["0000:00:02.0", "0000:11:00.0", "0000:12:00.0"]
    _make_pci_tree(
        tmp_path,
        devices={"0000:18:00.0": switch_a, "0000:28:00.0": switch_b, "0000:38:00.0": []},
        nics={"mlx5_0": [*switch_a, "0000:19:00.0"], "mlx5_1": [*switch_b, "0000:29:00.0"],
              "eno1": ["0000:00:1f.6"]},
    )
    assert nearest_nics("00000000:18:00.0", sysfs=tmp_path) == ["mlx5_0"]
    assert nearest_nics("00000000:28:00.0", sysfs=tmp_path) == ["mlx5_1"]
    assert nearest_nics("00000000:38:00.0", sysfs=tmp_path) == []  # only the root is shared
    assert nearest_nics("00000000:99:00.0", sysfs=tmp_path) == []


def test_placement_prefers_ray_labels_then_environment_then_fabric():
    gpus = [Device("nvidia", "0", "GPU-a", "H200", facts={"nvlink_domain": "c1/1"}),
            Device("nvidia", "1", "GPU-b", "H200", facts={"nvlink_domain": "c1/1"})]
    labels = {"ray.io/availability-zone": "us-central1-a", "rack": "r12",
              "ray.io/tpu-slice-name": ""}
    placement = node_placement(labels, gpus, environ={"RAY_NODE_REGION": "us-central1",
                                                      "RAY_NODE_ZONE": "ignored"})
    assert placement == {"zone": "us-central1-a", "region": "us-central1", "rack": "r12",
                         "slice": "", "nvlink_domain": "c1/1", "node_pool": ""}
    assert node_placement({}, [], environ={})["nvlink_domain"] == ""


def test_node_pool_from_rays_node_group_then_the_clouds_label_then_the_environment():
    assert node_placement({"ray.io/node-group": "h200-workers",
                           "cloud.google.com/gke-nodepool": "pool-a"}, [],
                          environ={})["node_pool"] == "h200-workers"
    assert node_placement({"karpenter.sh/nodepool": "gpu"}, [], environ={})["node_pool"] == "gpu"
    assert node_placement({}, [], environ={"RAY_NODE_TYPE_NAME": "gpu-group"})[
        "node_pool"] == "gpu-group"


def test_tpu_chips_name_the_slice_when_no_label_or_variable_does():
    chips = [Device("google", str(i), f"tpu-{i}", "TPU v5 lite",
                    facts={"tpu_slice_name": "slice-a", "tpu_worker_id": "1"}) for i in range(2)]
    assert node_placement({}, chips, environ={})["slice"] == "slice-a"
    labelled = node_placement({"ray.io/tpu-slice-name": "from-ray"}, chips, environ={})
    assert labelled["slice"] == "from-ray"
    assert node_placement({}, chips, environ={"RAY_ACCEL_SLICE": "from-env"})["slice"] == "from-env"
