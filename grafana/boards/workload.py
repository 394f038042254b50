"""Workload: which Ray job, actor and task holds which device, uses it, or leaves it idle."""

from __future__ import annotations

from ray_accel.exporter import catalog as m

from ..promql import eq, number
from ..thresholds import Thresholds
from . import uids
from .common import (
    BOARD_FILTERS,
    Board,
    Query,
    Section,
    board_link,
    label_variable,
    sel,
    selector,
    table,
    timeseries,
)

GENERAL = eq("task", m.TASK_GENERAL)
# Ray workers of the selected job(s); processes outside Ray have no job.
in_job = selector(*BOARD_FILTERS, 'ray_job_id=~"$ray_job_id"')
WORKER = "{{actor_class}}{{task_name}} pid {{pid}} {{vendor}} {{index}}"
HIDDEN = ("Time", "SessionName", "simulated", "vendor", "model")
# ray_node_id keeps its name: the node-detail data link reads that field.
NAMES = {"index": "GPU", "ray_job_id": "Job", "actor_class": "Actor class",
         "actor_name": "Actor name", "ray_actor_id": "Actor id", "task_name": "Task",
         "ray_task_id": "Task id", "pid": "pid", "ray_worker_id": "Worker id"}
NODE_DETAIL = board_link(uids.NODE, "Node detail", "var-node=${__data.fields.ray_node_id}")


def board() -> Board:
    busy = Thresholds().unallocated_busy_utilization
    idle_share = f"{in_job(m.ALLOCATION_IDLE)} * {in_job(m.ALLOCATION)}"
    return Board(
        uid=uids.WORKLOAD,
        title="Accelerators: workload",
        description="Ray jobs, actors and tasks on accelerators: what Ray assigned to whom, "
                    "who uses it, who holds it idle, and what runs outside Ray's accounting.",
        variables=[label_variable(
            "ray_job_id", "ray_job_id", sel(m.ALLOCATION),
            "Ray jobs holding devices.", multi=True, title="Job")],
        sections=[
            Section("Who holds which device", [
                table("Allocations", "Every device share Ray's scheduler assigned to a worker, "
                      "and whether the worker used it in the last cycle (1 = idle).",
                      Query(in_job(m.ALLOCATION)), Query(in_job(m.ALLOCATION_IDLE)),
                      hidden=HIDDEN, names={**NAMES, "Value #A": "Share", "Value #B": "Idle"},
                      links=[NODE_DETAIL]),
                table("Idle allocations", "Workers holding a device without using it: the "
                      "RayAcceleratorAllocatedIdle alert's candidates.",
                      Query(f"{in_job(m.ALLOCATION_IDLE)} == 1"),
                      hidden=(*HIDDEN, "Value"), names=NAMES, height=6, links=[NODE_DETAIL]),
                timeseries("Devices assigned by job", "Device shares Ray assigned, per job.",
                           Query(f"sum by (ray_job_id) ({in_job(m.ALLOCATION)})",
                                 "{{ray_job_id}}"), stacked=True),
                timeseries("Devices held idle by actor class", "Device shares held by workers "
                           "that do not use them, per job and actor class.",
                           Query(f"sum by (ray_job_id, actor_class) ({idle_share})",
                                 "{{actor_class}} (job {{ray_job_id}})"), stacked=True),
            ]),
            Section("Use", [
                timeseries("SM utilization by worker", "Fraction of time each process kept the "
                           "compute engines busy.",
                           Query(in_job(m.PROCESS_UTILIZATION, eq("engine", m.ENGINE_SM)), WORKER),
                           unit="percentunit", low=0, high=1),
                table("Holders of spinning devices", "Workers holding a device that is busy "
                      "by its utilization while its SMs and tensor pipes do nothing (1 = "
                      "spinning): a collective waiting on peers, not work.",
                      Query(f"{sel(m.DEVICE_SPINNING)} * on (ray_node_id, uuid) group_right "
                            f"{in_job(m.ALLOCATION)}"),
                      hidden=HIDDEN, names={**NAMES, "Value": "Spinning x share"},
                      links=[NODE_DETAIL]),
                timeseries("Device memory by worker", "Device memory each process uses.",
                           Query(in_job(m.PROCESS_MEMORY_USAGE), WORKER), unit="bytes"),
                timeseries("Compute use by job", "Sum of the SM utilization of each job's "
                           "processes: how many devices' worth of compute the job keeps busy.",
                           Query("sum by (ray_job_id) "
                                 f"({in_job(m.PROCESS_UTILIZATION, eq('engine', 'sm'))})",
                                 "{{ray_job_id}}"), stacked=True),
                table("Tasks on devices", "Processes on a device that run a Ray task now.",
                      Query(in_job(m.PROCESS_MEMORY_USAGE, 'task_name!=""')),
                      hidden=HIDDEN, names={**NAMES, "Value": "Memory"}, unit="bytes",
                      width=12),
            ]),
            Section("Transfers (Ray Direct Transport)", [
                table("Stalled transfers", "RDT transfers in flight past the agent's stall "
                      "threshold (10 s by default), with both actors and their devices; Ray "
                      "kills both actors at 60 s. The RayAcceleratorTransferStalled alert's "
                      "candidates.",
                      Query(f"{in_job(m.TRANSFERS_STALLED)} > 0"),
                      Query(f"{in_job(m.TRANSFER_OLDEST_AGE)} and "
                            f"{in_job(m.TRANSFERS_STALLED)} > 0"),
                      hidden=(*HIDDEN, "src_node_id", "dst_node_id"),
                      names={**NAMES, "src_actor_class": "Source", "src_actor_id":
                             "Source actor", "src_devices": "Source devices",
                             "dst_actor_class": "Destination", "dst_actor_id":
                             "Destination actor", "dst_devices": "Destination devices",
                             "Value #A": "Stalled", "Value #B": "Oldest age"},
                      height=6),
                timeseries("Transfers in flight by job", "RDT transfers in flight (healthy "
                           "ones last milliseconds and are rarely caught) and stalled ones.",
                           Query(f"sum by (ray_job_id) ({in_job(m.TRANSFERS_IN_FLIGHT)})",
                                 "in flight (job {{ray_job_id}})"),
                           Query(f"sum by (ray_job_id) ({in_job(m.TRANSFERS_STALLED)})",
                                 "stalled (job {{ray_job_id}})")),
                timeseries("Oldest transfer age", "Seconds since the oldest in-flight transfer "
                           "between two actors was submitted.",
                           Query(in_job(m.TRANSFER_OLDEST_AGE),
                                 "{{src_actor_class}} {{src_actor_id}} → {{dst_actor_class}} "
                                 "{{dst_actor_id}}"), unit="s"),
                table("Long-running system calls", "`__ray_call__` tasks (RDT sends and "
                      "receives, collective set-up) running or waiting for more than a second, "
                      "per actor, with the devices the actor holds.",
                      Query(in_job(m.RDT_CALL_AGE)),
                      hidden=HIDDEN, names={**NAMES, "state": "State", "devices": "Devices",
                                            "Value": "Age"}, unit="s", width=12),
                timeseries("Transfers aborted by Ray", "Stalled transfers that ended with both "
                           "actors killed (Ray's RDT timeout), per job, over the last hour.",
                           Query(f"sum by (ray_job_id) (increase("
                                 f"{in_job(m.TRANSFER_ABORTS)}[1h]))", "{{ray_job_id}}"),
                           stacked=True),
            ]),
            Section("Outside Ray's accounting", [
                table("Processes outside Ray", "Processes on a device that are not Ray "
                      "workers (no Ray worker id).",
                      Query(sel(m.PROCESS_MEMORY_USAGE, eq("ray_worker_id", ""))),
                      hidden=(*HIDDEN, "ray_job_id", "ray_worker_id", "ray_actor_id",
                              "actor_class", "actor_name", "ray_task_id", "task_name"),
                      names={**NAMES, "Value": "Memory"}, unit="bytes", width=12),
                table("Busy devices Ray has not assigned", "Devices more than "
                      f"{busy:.0%} busy that no Ray worker holds.",
                      Query(f"({sel(m.GPU_UTILIZATION, GENERAL)} > {number(busy)})"
                            f" and ignoring(task) ({sel(m.DEVICE_ALLOCATED)} == 0)"),
                      hidden=(*HIDDEN, "task"), names={**NAMES, "Value": "Utilization"},
                      unit="percentunit", width=12, links=[NODE_DETAIL]),
            ]),
        ],
    )
