"""Who uses which device: Ray's actors, tasks and workers ("units") and their jobs.

Each node's devices are walked once (`Workloads.add_device`); the units of all nodes
merge into the cluster's (`merge_units`), and the jobs are counted from them (`jobs_of`).
A unit and each of its device uses are plain records (`Unit`, `DeviceUse`) the API
serves as JSON as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict

from .node_state import NodeState


class DeviceUse(TypedDict):
    """One device a unit holds (or uses without holding it)."""

    node_id: str
    hostname: str
    uuid: str
    index: str
    model: str
    fraction: float | None  # None: used but not allocated by Ray
    allocated: bool
    idle: bool
    utilization: float | None
    memory_used_bytes: float | None
    memory_total_bytes: float | None
    process_memory_bytes: float | None
    process_sm_utilization: float | None
    spinning: NotRequired[bool]
    shared: NotRequired[bool]
    activity: NotRequired[dict[str, float]]  # the device's, for a whole-device holder


class Unit(TypedDict):
    """An actor, a task or a plain worker, and the devices it uses."""

    key: str  # "actor:<id>", "task:<id>" or "worker:<node>:<pid>"
    kind: str
    job_id: str
    actor_id: str
    actor_class: str
    actor_name: str
    task_id: str
    task_name: str
    worker_id: str
    pid: int
    node_id: str
    hostname: str
    devices: list[DeviceUse]
    gpus: float
    idle: bool


def unit_key(identity: Mapping[str, Any], node_id: str) -> tuple[str, str]:
    """(kind, id) of the unit an identity belongs to: its actor, else its task, else its worker."""
    if identity["ray_actor_id"]:
        return "actor", identity["ray_actor_id"]
    if identity["ray_task_id"]:
        return "task", identity["ray_task_id"]
    return "worker", f"{node_id}:{identity['pid']}"


class Workloads:
    """Collects one node's actor/task/worker entries while its devices are walked."""

    def __init__(self) -> None:
        self.units: dict[str, Unit] = {}

    def _unit(self, identity: Mapping[str, Any], node: NodeState) -> Unit:
        kind, ident = unit_key(identity, node.node_id)
        key = f"{kind}:{ident}"
        unit = self.units.get(key)
        if unit is None:
            unit = self.units[key] = {
                "key": key, "kind": kind, "job_id": identity["ray_job_id"],
                "actor_id": identity["ray_actor_id"], "actor_class": identity["actor_class"],
                "actor_name": identity["actor_name"], "task_id": identity["ray_task_id"],
                "task_name": identity["task_name"], "worker_id": identity["ray_worker_id"],
                "pid": identity["pid"], "node_id": node.node_id, "hostname": node.hostname,
                "devices": [], "gpus": 0.0, "idle": False,
            }
        return unit

    def add_device(self, node: NodeState, device: dict[str, Any]) -> None:
        processes = {p["pid"]: p for p in device["processes"]}
        seen = set()
        for holder in device["holders"]:
            unit = self._unit(holder, node)
            process = processes.get(holder["pid"], {})
            seen.add(holder["pid"])
            use = self._use(node, device, holder["fraction"], holder["idle"], process)
            use.update(spinning=holder["spinning"], shared=holder["shared"])
            if not holder["shared"] and device["activity"]:
                # a whole-device holder's activity is the device's (GPM measures per device)
                use["activity"] = shown_activity({**device["activity"], **_tensor(device)})
            unit["devices"].append(use)
            unit["gpus"] += holder["fraction"]
            unit["idle"] = unit["idle"] or holder["idle"]
            if holder["ray_task_id"] and not unit["task_id"]:
                unit["task_id"], unit["task_name"] = holder["ray_task_id"], holder["task_name"]
        # Ray workers using a device they were not assigned (busy but unallocated).
        for pid, process in processes.items():
            if pid in seen or not process["ray_job_id"]:
                continue
            unit = self._unit(process, node)
            unit["devices"].append({**self._use(node, device, None, False, process),
                                    "spinning": False})

    @staticmethod
    def _use(node: NodeState, device: dict[str, Any], fraction: float | None, idle: bool,
             process: Mapping[str, Any]) -> DeviceUse:
        return {"node_id": node.node_id, "hostname": node.hostname, "uuid": device["uuid"],
                "index": device["index"], "model": device["model"], "fraction": fraction,
                "allocated": fraction is not None, "idle": idle,
                "utilization": device["utilization"],
                "memory_used_bytes": device["memory_used_bytes"],
                "memory_total_bytes": device["memory_total_bytes"],
                "process_memory_bytes": process.get("memory_bytes"),
                "process_sm_utilization": process.get("sm_utilization")}


def shown_activity(activity: dict[str, float]) -> dict[str, float]:
    """Engine activity as the views show it: to the percent, as agents' summaries carry it."""
    return {engine: round(ratio, 2) for engine, ratio in activity.items()}


def _tensor(device: dict[str, Any]) -> dict[str, float]:
    """The device's any-tensor pipe activity as an engine of its activity, where measured."""
    tensor = (device.get("pipe_activity") or {}).get("tensor")
    return {} if tensor is None else {"tensor": tensor}


def merge_units(into: dict[str, Unit], units: Mapping[str, Unit]) -> None:
    """Add one node's units to the cluster's; a unit seen on two nodes is merged in a copy
    (the node's own entries are cached between rounds and never changed)."""
    for key, unit in units.items():
        have = into.get(key)
        if have is None:
            into[key] = unit
        else:
            into[key] = {**have, "devices": have["devices"] + unit["devices"],
                         "gpus": have["gpus"] + unit["gpus"],
                         "idle": have["idle"] or unit["idle"]}


def jobs_of(units: Mapping[str, Unit]) -> dict[str, dict[str, Any]]:
    """Per job: how many actors, tasks and workers, GPUs, devices, idle holdings, nodes."""
    jobs: dict[str, dict[str, Any]] = {}
    for unit in units.values():
        job = jobs.setdefault(unit["job_id"], {
            "job_id": unit["job_id"], "actors": 0, "tasks": 0, "workers": 0,
            "gpus": 0.0, "devices": 0, "idle_allocations": 0, "nodes": 0,
            "units": [], "_devices": set(), "_nodes": set()})
        job[{"actor": "actors", "task": "tasks", "worker": "workers"}[unit["kind"]]] += 1
        job["gpus"] += unit["gpus"]
        job["idle_allocations"] += sum(1 for d in unit["devices"] if d["idle"])
        job["units"].append(unit["key"])
        job["_devices"].update(d["uuid"] for d in unit["devices"])
        job["_nodes"].update(d["node_id"] for d in unit["devices"])
    for job in jobs.values():
        job["devices"] = len(job.pop("_devices"))
        job["nodes"] = len(job.pop("_nodes"))
    return dict(sorted(jobs.items()))
