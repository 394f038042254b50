"""A head node and a worker node with transfers between them, as their agents' snapshot documents.

Producer actors on the head node send to consumer actors on the worker node (the State
API's view of a Ray Direct Transport transfer); the head's agent pairs them.
"""

from __future__ import annotations

import time

from ray_accel.dashboard_module.fleet import node_id
from ray_accel.exporter import catalog as m
from ray_accel.exporter.attribution.model import Attribution, Holder, RayIdentity, SourceStatus
from ray_accel.exporter.attribution.transfers import Abort, ActorTask, pair_transfers
from ray_accel.exporter.model import Device, DeviceSample, NodeSnapshot, Reading, labels_of
from ray_accel.exporter.sinks.json import snapshot_document

NOW = time.time()
JOB, OTHER_JOB = "01000000", "02000000"
HEAD, WORKER = node_id(0), node_id(1)


def actor(kind: str, number: int) -> str:
    return f"{kind}{number:031x}"


def transfer_tasks(number: int, age: float, job: str = JOB) -> list[ActorTask]:
    """One transfer as the State API shows it: the send running on the producer (head
    node), the receive pending on the consumer (no node yet), its consuming task running
    on the worker node."""
    t0 = NOW - age
    parent = f"{number:040x}{job}"
    producer, consumer = actor("a", number), actor("b", number)

    def call(task_id: str, who: str, name: str, node: str, started: float | None,
             created: float = t0) -> ActorTask:
        return ActorTask(task_id=f"{task_id}{number:044x}", name=name,
                         state="RUNNING" if started else "PENDING_ACTOR_TASK_ORDERING",
                         job_id=job, actor_id=who, parent_task_id=parent, node_id=node,
                         pid=100 + number, created_at=created, started_at=started)

    return [call("5e4d", producer, "Producer.__ray_call__", HEAD, t0),
            call("4ecf", consumer, "Consumer.__ray_call__", "", None),
            call("c045", consumer, "Consumer.consume", WORKER, t0, t0 - 0.003)]


def device(uuid: str, index: str) -> DeviceSample:
    return DeviceSample(Device("nvidia", index, uuid, "NVIDIA H200"), True, NOW, readings=(
        Reading(m.GPU_UTILIZATION, 0.0, labels_of({"task": "general"})),))


def holder(actor_id: str, actor_class: str) -> tuple[Holder, ...]:
    return (Holder(RayIdentity(pid=7, job_id=JOB, actor_id=actor_id, actor_class=actor_class),
                   1.0),)


def head_snapshot(tasks: list[ActorTask], aborts: tuple[Abort, ...] = (),
                  collective_stall: bool = False, held: bool = True,
                  report_after_s: float = 1.0) -> dict:
    """The head node's snapshot document: GPU 0 held by producer 0 (unless not `held`),
    the pairing agent."""
    transfers = pair_transfers(tasks, NOW, stall_after_s=10, report_after_s=report_after_s)
    attribution = Attribution(
        node_id=HEAD, sources=(SourceStatus("raylet", True),), transfers=transfers,
        pairs_transfers=True, transfer_aborts={JOB: len(aborts), OTHER_JOB: 0},
        recent_aborts=aborts, refreshed_at=NOW)
    return snapshot_document(NodeSnapshot(
        cycle=1, taken_at=NOW, interval_s=1, node_labels={}, backends=(),
        devices=(device("GPU-head-0", "0"),), attribution=attribution,
        holders={"GPU-head-0": holder(actor("a", 0), "Producer")} if held else {},
        collective_stalls={"GPU-head-0": collective_stall}))


def worker_snapshot(held: bool = True) -> dict:
    """The worker node: its GPU 3 held by consumer 0 (unless not `held`); it pairs nothing."""
    attribution = Attribution(node_id=WORKER, sources=(SourceStatus("raylet", True),),
                              refreshed_at=NOW)
    return snapshot_document(NodeSnapshot(
        cycle=1, taken_at=NOW, interval_s=1, node_labels={}, backends=(),
        devices=(device("GPU-worker-3", "3"),), attribution=attribution,
        holders={"GPU-worker-3": holder(actor("b", 0), "Consumer")} if held else {}))


def abort(number: int, ago: float) -> Abort:
    send, recv, _ = transfer_tasks(number, 30)
    return Abort(JOB, send, recv, age_s=25.0, at=NOW - ago)
