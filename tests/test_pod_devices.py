"""A KubeRay pod given some of its node's GPUs: its agent exports those GPUs alone.

The sidecar sees every GPU of its Kubernetes node (`NVIDIA_VISIBLE_DEVICES=all`),
while its Ray container was given some of them (the raylet's
`NVIDIA_VISIBLE_DEVICES` names their UUIDs). Each pod's agent exports its own
pod's GPUs under its own Ray node, so no GPU is exported twice under two nodes.
The real NVIDIA backend reads the fake NVML's 8x H200 (and A100 with MIG) node.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator

import pytest

from ray_accel.exporter.attribution.model import Attribution
from ray_accel.exporter.backends import load_backends
from ray_accel.exporter.model import UNKNOWN_MODEL, NodeSnapshot
from ray_accel.exporter.sampler import Sampler
from ray_accel.exporter.simulate import SimulatedHardware
from ray_accel.exporter.sinks.prometheus import snapshot_text
from ray_accel.exporter.store import SnapshotStore

MAX_CYCLES = 20


@pytest.fixture
def node(request, tmp_path) -> Iterator[SimulatedHardware]:
    hardware = SimulatedHardware.start(request.param, state_dir=tmp_path)
    hardware.activate()
    yield hardware
    hardware.close()


def _sampled(container_gpus: tuple[str, ...] | None) -> list[NodeSnapshot]:
    """Snapshots of an agent attributing to a raylet whose NVIDIA_VISIBLE_DEVICES is
    `container_gpus`, until every GPU is identified, and one more."""
    attribution = Attribution(node_id="ab" * 28,
                              visible_devices={"NVIDIA_VISIBLE_DEVICES": container_gpus})
    sampler = Sampler(load_backends(["nvidia"]), SnapshotStore(), interval_s=1.0,
                      attribution=lambda: attribution)
    snapshots: list[NodeSnapshot] = []
    try:
        for _ in range(MAX_CYCLES):
            snapshots.append(sampler.run_cycle())
            if len(snapshots) > 1 and all(s.device.model != UNKNOWN_MODEL
                                          for s in snapshots[-2].devices):
                break
    finally:
        sampler.stop()
    return snapshots


def _uuids(node: SimulatedHardware) -> list[str]:
    return [device["uuid"] for device in node.scenario["devices"]]


@pytest.mark.parametrize("node", ["hgx-h200"], indirect=True)
def test_a_pod_given_two_gpus_exports_those_two(node, caplog):
    every = _uuids(node)
    given = (every[5], every[2])
    with caplog.at_level(logging.INFO, logger="ray_accel.exporter.sampler"):
        snapshot = _sampled(given)[-1]
    assert sorted(s.device.uuid for s in snapshot.devices) == sorted(given)
    assert [b.device_count for b in snapshot.backends] == [2]
    # series of a device carry its `uuid`; another pod's GPUs are named only as the peers
    # of these two (their topology: `peer_uuid`)
    exported = set(re.findall(r'[{,]uuid="([^"]+)"', snapshot_text(snapshot).decode()))
    assert exported == set(given)
    assert "exporting the 2 of 8 devices" in caplog.text


@pytest.mark.parametrize(("node", "container_gpus"), [
    ("hgx-h200", ("all",)),
    ("hgx-h200", None),  # no container runtime: a host's raylet
    ("hgx-h200", ("/var/run/nvidia-container-devices",)),  # names no GPU: the host's
], indirect=["node"])
def test_a_raylet_given_every_gpu_or_not_naming_them_leaves_every_gpu_exported(node,
                                                                             container_gpus):
    snapshot = _sampled(container_gpus)[-1]
    assert sorted(s.device.uuid for s in snapshot.devices) == sorted(_uuids(node))
    assert [b.device_count for b in snapshot.backends] == [8]


@pytest.mark.parametrize("node", ["hgx-h200"], indirect=True)
def test_a_pod_given_no_gpu_exports_none(node):
    snapshot = _sampled(("void",))[-1]
    assert snapshot.devices == ()
    assert [b.device_count for b in snapshot.backends] == [0]


@pytest.mark.parametrize("node", ["a100-mig"], indirect=True)
def test_a_pod_given_a_gpu_in_mig_mode_exports_its_instances_too(node):
    (gpu,) = _uuids(node)
    snapshot = _sampled((gpu,))[-1]
    uuids = {s.device.uuid for s in snapshot.devices}
    instances = [d["uuid"] for d in node.scenario["devices"][0]["mig_devices"]]
    assert uuids == {gpu, *instances}
