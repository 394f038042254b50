"""The demo's holder table: who holds each device, and what a device without a holder is."""

from __future__ import annotations

from ray_accel.demo.run import holder_table
from ray_accel.exporter import catalog as m
from ray_accel.exporter.attribution.model import Holder, RayIdentity
from ray_accel.exporter.model import (
    Device,
    DeviceSample,
    NodeSnapshot,
    ProcessSample,
    Reading,
    labels_of,
)

TRAINER_PID = 7


def _sample(index: str, uuid: str, utilization: float, parent: str = "") -> DeviceSample:
    busy = Reading(m.GPU_UTILIZATION, utilization, labels_of({"task": "general"}))
    return DeviceSample(Device("aws", index, uuid, "trainium", parent_uuid=parent), True, 1.0,
                        readings=(busy,), processes=(ProcessSample(TRAINER_PID),))


def test_split_devices_point_to_their_parts_and_free_ones_say_not_allocated():
    devices = (_sample("0", "nd0", 0.5), _sample("0.0", "nd0-c0", 0.9, parent="nd0"),
               _sample("0.1", "nd0-c1", 0.1, parent="nd0"), _sample("1", "nd1", 0.0))
    trainer = Holder(RayIdentity(pid=TRAINER_PID, job_id="01000000", actor_class="Trainer"), 1.0)
    snapshot = NodeSnapshot(cycle=1, taken_at=1.0, interval_s=1.0, node_labels={}, backends=(),
                            devices=devices, holders={"nd0-c0": (trainer,)})
    rows = [line.split() for line in holder_table(snapshot).splitlines()[1:]]
    assert rows == [
        ["0", "50%", "(split", "into", "2", "parts)"],
        ["0.0", "90%", "Trainer", "01000000", "1", "busy"],
        ["0.1", "10%", "(not", "allocated)"],
        ["1", "0%", "(not", "allocated)"],
    ]
