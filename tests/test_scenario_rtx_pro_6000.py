"""The rtx-pro-6000 scenario read by the NVIDIA backend: PCIe-only Blackwell, one card in MIG.

What a user of such a node needs to see: no NVLink anywhere, the PCIe pairs and
NUMA halves in the topology, the partitioned card's instances as devices of
their own with their own activity, and batch jobs busy without tensor activity.
"""

from __future__ import annotations

import time

from ray_accel.exporter import catalog as m
from ray_accel.exporter.model import DeviceSample


def activity(sample: DeviceSample, engine: str, metric: str = m.ACTIVITY) -> float | None:
    label = "engine" if metric == m.ACTIVITY else "pipe"
    for reading in sample.readings:
        if reading.metric == metric and dict(reading.labels).get(label) == engine:
            return reading.value
    return None


def test_a_pcie_node_with_one_partitioned_card(open_backend):
    backend, devices, _ = open_backend("rtx-pro-6000")
    physical = [d for d in devices if not d.parent_uuid]
    migs = [d for d in devices if d.parent_uuid]
    assert len(physical) == 8
    assert {d.model for d in physical} == {"NVIDIA RTX PRO 6000 Blackwell Server Edition"}
    assert [d.index for d in migs] == ["7/3/0", "7/4/0", "7/5/0", "7/6/0"]
    assert {d.parent_uuid for d in migs} == {physical[7].uuid}
    assert all(d.facts["architecture"] == "blackwell" for d in physical)
    connections = {peer.index: peer.connection for peer in physical[0].peers}
    assert connections["1"] == "PIX"
    assert connections["2"] == "NODE"
    assert connections["4"] == "SYS"
    samples = {d.uuid: backend.sample(d) for d in devices}
    assert all(s.up for s in samples.values())
    assert not any(link.link_type == "nvlink" for s in samples.values() for link in s.links)


def test_activity_tells_batch_jobs_from_tensor_work_and_instances_apart(open_backend):
    backend, devices, _ = open_backend("rtx-pro-6000")
    for device in devices:  # GPM metrics span two samples: this is the first
        backend.sample(device)
    time.sleep(0.2)
    samples = {d.index: backend.sample(d) for d in devices}
    inference, batch = samples["0"], samples["4"]
    assert activity(batch, "sm") > 0.8
    assert activity(batch, "any_tensor", m.PIPE_ACTIVITY) in (None, 0.0)
    assert activity(inference, "sm") is not None
    serving, empty = samples["7/3/0"], samples["7/5/0"]
    assert activity(serving, "graphics") > 0
    assert activity(empty, "graphics") == 0.0
