"""A node with one of everything the findings look for, made from a real agent's snapshot."""

from __future__ import annotations

import copy
import time

from ray_accel.dashboard_module.fleet import node_id

TOKEN = "s3cret-token"
JOB = "02000000"
IDLE_ACTOR = "a" * 32
TRAINER_ACTOR = "b" * 32
TASK = "c" * 48


def set_value(values: dict, metric: str, labels: dict, value: float) -> None:
    """Set the reading of `metric` with `labels` in a snapshot's values (adding it if absent)."""
    entries = values.setdefault(metric, [])
    for entry in entries:
        if entry["labels"] == labels:
            entry["value"] = value
            return
    entries.append({"labels": labels, "value": value})


def holder(pid: int, actor_id: str = "", actor_class: str = "", task_id: str = "",
           task_name: str = "", fraction: float = 1.0, idle: bool = False) -> dict:
    """A holder entry of a snapshot's device: a Ray worker of job JOB."""
    return {"pid": pid, "ray_job_id": JOB, "ray_worker_id": "f" * 56, "ray_actor_id": actor_id,
            "actor_class": actor_class, "actor_name": "", "ray_task_id": task_id,
            "task_name": task_name, "fraction": fraction, "idle": idle}


def doctored(template: dict, number: int = 1) -> dict:
    """A node with one of everything the findings look for."""
    doc = copy.deepcopy(template)
    doc["taken_at"] = time.time()
    doc["attribution"]["node_id"] = node_id(number)
    devices = doc["devices"]
    for device in devices:
        device.update(allocated=0.0, holders=[])
    devices[0].update(allocated=1.0, holders=[holder(101, TRAINER_ACTOR, "Trainer")])
    devices[1].update(up=False, values={}, links=[], processes=[])
    devices[2].update(allocated=1.0, holders=[holder(102, IDLE_ACTOR, "IdleHolder",
                                                      idle=True)])
    set_value(devices[3]["values"], "ray.accelerator.throttle.active", {"reason": "hw_slowdown"}, 1)
    set_value(devices[4]["links"][3]["values"], "ray.accelerator.link.up", {}, 0)
    set_value(devices[5]["values"], "ray.accelerator.pcie.link.width", {"state": "current"}, 8)
    set_value(devices[6]["values"], "ray.accelerator.xid.errors", {"xid": "79"}, 2)
    set_value(devices[7]["values"], "hw.errors", {"error_type": "ecc_uncorrected"}, 3)
    devices[7].update(allocated=1.0, holders=[holder(103, task_id=TASK, task_name="preprocess")])
    return doc
