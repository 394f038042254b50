"""The raylet's workers as records, made again only for a worker whose stats changed
(exporter/attribution/ray_records.py: `WorkerRecords`).

Built from Ray's own `CoreWorkerStats` protobuf messages, as `GetNodeStats` returns them;
tests/test_attribution_ray_sources.py asks a real raylet.
"""

from __future__ import annotations

from typing import Any

from ray_accel.exporter.attribution.ray_generated import generated
from ray_accel.exporter.attribution.ray_records import ResourceGrant, WorkerRecords

COMMON = generated("common_pb2")


def _stats(pid: int, executed: int = 0, resources: tuple[tuple[str, int], ...] = ()) -> Any:
    stats = COMMON.CoreWorkerStats(
        pid=pid, worker_id=bytes([pid % 256]) * 28, job_id=b"\x02\x00\x00\x00",
        actor_id=bytes([pid % 256]) * 16, worker_type=COMMON.WorkerType.Value("WORKER"),
        ip_address="10.0.0.1", port=20_000 + pid, num_executed_tasks=executed)
    for name, slot in resources:
        stats.used_resources[name].resource_slots.add(slot=slot, allocation=1.0)
    return stats


def _records() -> WorkerRecords:
    return WorkerRecords(COMMON.WorkerType.Name)


def test_a_worker_as_it_was_keeps_its_record_and_a_changed_one_gets_a_new_one() -> None:
    records = _records()
    first = records.convert([_stats(1, resources=(("GPU", 1),)), _stats(2)])
    again = records.convert([_stats(1, resources=(("GPU", 1),)), _stats(2, executed=5)])
    assert again[0][1] is first[0][1]
    assert again[1][1] is not first[1][1]
    gpu_worker, changed = again[0][1], again[1][1]
    assert (gpu_worker.pid, gpu_worker.worker_type) == (1, "WORKER")
    assert gpu_worker.grants["GPU"] == (ResourceGrant(1, 1.0),)
    assert gpu_worker.address == "10.0.0.1:20001"
    assert changed.task_counts == (5, 0)
    assert first[1][1].task_counts == (0, 0)


def test_the_same_resources_listed_in_another_order_are_the_same_stats() -> None:
    records = _records()
    first = records.convert([_stats(3, resources=(("GPU", 0), ("CPU", 2)))])
    again = records.convert([_stats(3, resources=(("CPU", 2), ("GPU", 0)))])
    assert again[0][1] is first[0][1]
    assert set(again[0][1].grants) == {"GPU", "CPU"}


def test_only_the_last_replys_workers_are_remembered() -> None:
    records = _records()
    first = records.convert([_stats(1), _stats(2)])
    records.convert([_stats(1)])
    back = records.convert([_stats(1), _stats(2)])
    assert back[0][1] is first[0][1]
    assert back[1][1] is not first[1][1]
    assert back[1][1] == first[1][1]


def test_actors_are_named_once_per_name_and_renamed_when_the_name_changes() -> None:
    records = _records()
    (key, record), = records.convert([_stats(4)])
    assert records.named(key, record, None) is record
    named = records.named(key, record, ("Trainer", "trainer-0"))
    assert (named.actor_class, named.actor_name, named.pid) == ("Trainer", "trainer-0", 4)
    (key, record), = records.convert([_stats(4)])
    assert records.named(key, record, ("Trainer", "trainer-0")) is named
    renamed = records.named(key, record, ("Trainer", "trainer-1"))
    assert renamed.actor_name == "trainer-1"
    (key, record), = records.convert([_stats(4, executed=1)])
    assert records.named(key, record, ("Trainer", "trainer-1")).task_counts == (1, 0)
