"""What the agent reads from Ray, as plain records, and the conversions from Ray's replies.

Workers come from the raylet's `GetNodeStats` (protobuf `CoreWorkerStats`),
the tasks they run from their own `GetCoreWorkerStats`, and what a task is
(name, times) from the State API's JSON rows (`/api/v0/tasks`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from .ray_addresses import build_address
from .transfers import ActorTask

# Ray's placement-group resource names (ray._private.utils in Ray 2.60).
_INDEXED_BUNDLE_RESOURCE = re.compile(r"(.+)_group_(\d+)_([0-9a-zA-Z]+)")
_WILDCARD_BUNDLE_RESOURCE = re.compile(r"(.+)_group_([0-9a-zA-Z]+)")
_PLACEMENT_GROUP_BUNDLE_RESOURCE = "bundle"


@dataclass(frozen=True)
class ResourceGrant:
    """One slot of a resource held by a worker: `quantity` < 1 is a fractional share."""

    slot: int
    quantity: float


@dataclass(frozen=True)
class RayWorkerInfo:
    """A worker (or driver) process on this node and the resources it holds.

    `grants` maps a resource name ("GPU", "CPU", "memory", custom ones) to the
    slots held. Placement-group resources are folded into their base name:
    a GPU held through a placement group appears under "GPU". GPU slot i is the
    i-th entry of the raylet's CUDA_VISIBLE_DEVICES (physical index i if unset).
    `address` is the worker's own gRPC server (host:port), which names the tasks it
    runs; `task_counts` (tasks executed, tasks running) change whenever a task
    starts or ends there.
    """

    pid: int
    worker_id: str
    job_id: str
    actor_id: str
    worker_type: str
    grants: Mapping[str, tuple[ResourceGrant, ...]]
    actor_class: str = ""
    actor_name: str = ""
    address: str = ""
    task_counts: tuple[int, int] = (0, 0)


@dataclass(frozen=True)
class RunningTask:
    """A task running on this node and the pid of the worker running it; `name` is
    empty until the State API has named it."""

    task_id: str
    name: str
    job_id: str
    actor_id: str
    pid: int


@dataclass(frozen=True)
class LocalRayNode:
    """The Ray node on this host.

    `visible_devices` maps each of `VISIBLE_DEVICE_VARIABLES` to the raylet's
    entries (indices or UUIDs such as "GPU-…"/"MIG-…"), or None when unset.
    """

    node_id: str
    node_ip: str
    raylet_address: str
    gcs_address: str
    session_dir: str
    labels: Mapping[str, str]
    visible_devices: Mapping[str, tuple[str, ...] | None]
    is_head: bool = False


def _is_nil_id(raw: bytes) -> bool:
    # Ray encodes "no actor" as an ActorID of all 0xff bytes (hex "ffff…").
    return not raw or all(byte == 0xFF for byte in raw)


def _base_resource(name: str) -> str | None:
    """The resource a raw name is held as; None for names that only duplicate others.

    A worker in a placement group holds "GPU_group_<pg>" and, for a chosen
    bundle, also "GPU_group_<i>_<pg>" with the same slots, plus internal
    "bundle_group_…" markers. The wildcard form is kept as "GPU".
    """
    if _INDEXED_BUNDLE_RESOURCE.fullmatch(name):
        return None
    wildcard = _WILDCARD_BUNDLE_RESOURCE.fullmatch(name)
    if wildcard is None:
        return name
    base = wildcard.group(1)
    return None if base == _PLACEMENT_GROUP_BUNDLE_RESOURCE else base


def _grants(used_resources: Mapping[str, Any]) -> Mapping[str, tuple[ResourceGrant, ...]]:
    """`CoreWorkerStats.used_resources` as resource -> slots held, sorted by slot."""
    merged: dict[str, dict[int, float]] = {}
    for name, allocations in used_resources.items():
        base = _base_resource(name)
        if base is None:
            continue
        slots = merged.setdefault(base, {})
        for slot in allocations.resource_slots:
            slots[slot.slot] = slots.get(slot.slot, 0.0) + slot.allocation
    return MappingProxyType(
        {
            name: tuple(ResourceGrant(slot, quantity) for slot, quantity in sorted(slots.items()))
            for name, slots in merged.items()
            if slots
        }
    )


def worker_info(stats: Any, worker_type_name: str) -> RayWorkerInfo:
    """A `CoreWorkerStats` message as a record; `worker_type_name` is its enum's name."""
    return RayWorkerInfo(
        pid=stats.pid,
        worker_id=stats.worker_id.hex(),
        job_id=stats.job_id.hex(),
        actor_id="" if _is_nil_id(stats.actor_id) else stats.actor_id.hex(),
        worker_type=worker_type_name,
        grants=_grants(stats.used_resources),
        address=build_address(stats.ip_address, stats.port) if stats.port else "",
        task_counts=(stats.num_executed_tasks, stats.num_running_tasks),
    )


class WorkerRecords:
    """The workers of one `GetNodeStats` reply after another as records, a worker's made
    again only when its `CoreWorkerStats` changed (compared as serialized bytes).

    On a node of 120 idle actors, converting every worker (about 7 us each) and naming the
    actors (4.5 us each) was a third of the listing's CPU; most listings find every worker as
    it was. Only the workers of the last reply are remembered; one caller at a time."""

    def __init__(self, worker_type_name: Callable[[int], str]) -> None:
        self._type_name = worker_type_name
        self._by_stats: dict[bytes, RayWorkerInfo] = {}
        self._named: dict[bytes, tuple[tuple[str, str], RayWorkerInfo]] = {}

    def convert(self, all_stats: Iterable[Any]) -> list[tuple[bytes, RayWorkerInfo]]:
        """Each `CoreWorkerStats` of a reply as (its bytes, its record)."""
        known, kept, found = self._by_stats, {}, []
        for stats in all_stats:
            key = stats.SerializeToString(deterministic=True)
            record = known.get(key)
            if record is None:
                record = worker_info(stats, self._type_name(stats.worker_type))
            kept[key] = record
            found.append((key, record))
        self._by_stats = kept
        self._named = {key: named for key, named in self._named.items() if key in kept}
        return found

    def named(self, key: bytes, record: RayWorkerInfo,
              names: tuple[str, str] | None) -> RayWorkerInfo:
        """`record` (converted from the bytes `key`) with its actor's (class, name), if known."""
        if names is None:
            return record
        kept = self._named.get(key)
        if kept is not None and kept[0] == names:
            return kept[1]
        named = replace(record, actor_class=names[0], actor_name=names[1])
        self._named[key] = (names, named)
        return named


def _seconds(milliseconds: int | None) -> float | None:
    return milliseconds / 1000 if milliseconds else None


def _task_name(task: Mapping[str, Any]) -> str:
    return task.get("name") or task.get("func_or_class_name") or ""


def actor_task(task: Mapping[str, Any]) -> ActorTask:
    """A State API task row (detail) as a record: an actor task's for RDT transfer
    pairing, or any running task's looked up by id."""
    return ActorTask(
        task_id=task["task_id"], name=_task_name(task), state=str(task.get("state") or ""),
        job_id=task.get("job_id") or "", actor_id=task.get("actor_id") or "",
        parent_task_id=task.get("parent_task_id") or "", node_id=task.get("node_id") or "",
        pid=int(task.get("worker_pid") or 0),
        created_at=(_seconds(task.get("creation_time_ms"))
                    or _seconds(task.get("start_time_ms")) or 0.0),
        started_at=_seconds(task.get("start_time_ms")),
    )
