"""Devices that are busy by their utilization but do no work (exporter/activity.py)."""

from __future__ import annotations

from dataclasses import replace

from ray_accel.exporter import catalog as m

from ...promql import duration, metric
from ..cases import sustained
from ..config import AlertConfig
from ..fixtures import DEVICE, WORKER, on
from ..model import Rule, Runbook, Series, Severity, held, last_index, series

DEVICE_KEYS = "ray_node_id, uuid"


def rules(config: AlertConfig) -> tuple[Rule, ...]:
    """Activity: spinning devices, named by their holders."""
    return (_device_spinning(config),)


def _device_spinning(config: AlertConfig) -> Rule:
    t = config.thresholds
    device, worker = on(DEVICE, config.agent_job), on(WORKER, config.agent_job)
    spinning = f"({metric(m.DEVICE_SPINNING)} == 1)"
    held_by = f"{metric(m.ALLOCATION)} > 0"

    def spinning_held(values: str, share: float = 1.0) -> tuple[Series, ...]:
        return (series(m.ALLOCATION, worker, held(share, last_index(values))),
                series(m.DEVICE_SPINNING, device, values))

    def spinning_unheld(values: str) -> tuple[Series, ...]:
        return (series(m.DEVICE_SPINNING, device, values),)

    held_fires, held_near = sustained(t.device_spinning_for, spinning_held, bad=1, good=0,
                                      near=0)
    unheld_fires, _ = sustained(t.device_spinning_for, spinning_unheld, bad=1, good=0)
    return Rule(
        name="RayAcceleratorDeviceSpinning",
        severity=Severity.WARNING,
        # One alert per holder (its Ray labels); a device no Ray worker holds alerts
        # on its own labels.
        expr=f"({spinning} * on ({DEVICE_KEYS}) group_right {metric(m.ALLOCATION)} > 0) "
             f"or ({spinning} unless on ({DEVICE_KEYS}) ({held_by}))",
        for_s=t.device_spinning_for,
        summary="Device {{ $labels.index }} on node "
                "{{ or $labels.ray_node_id $labels.instance }} spins without "
                "computing ({{ $labels.actor_class }} {{ $labels.ray_actor_id }})",
        description="Device {{ $labels.index }} ({{ $labels.uuid }}), held by pid "
                    "{{ $labels.pid }} (job {{ $labels.ray_job_id }}, actor "
                    "{{ $labels.ray_actor_id }}), has read busy by NVML's utilization while "
                    "its SMs and tensor pipes stayed nearly idle, for the agent's spinning "
                    f"window and {duration(t.device_spinning_for)} more.",
        runbook=Runbook(
            meaning="A kernel stays resident on the device without computing: NVML counts "
                    "the time as busy (utilization at or above 80 %) while GPM shows SM and "
                    "tensor activity at most 5 %. The holder looks busy on every "
                    "utilization chart but makes no progress, and the device is lost to "
                    "other work.",
            causes=("A collective (NCCL all-reduce, send/recv) waiting on a peer rank that "
                    "died, hangs or took another code path; with flat NVLink counters, "
                    "RayAcceleratorCollectiveSuspectedStall fires too.",
                    "A busy-wait loop in a kernel (a spin lock, a polling kernel waiting "
                    "for host data that never comes).",
                    "A very small kernel launched in a tight loop, e.g. a benchmark or a "
                    "warm-up left running."),
            checks=("The workload board's *Holders of spinning devices* table names the job, "
                    "actor and pid; the node board's *Spinning* and activity panels show "
                    "since when.",
                    "NVLink bytes per link on the interconnect board: flat means a hung "
                    "collective, moving means the kernel polls while data flows.",
                    "`py-spy dump --pid <pid>` (or `ray stack`) on the holder; with NCCL, "
                    "`NCCL_DEBUG=INFO` logs of all ranks."),
            tuning="Raise `device_spinning_for` for jobs that wait in collectives for long "
                   "stretches on purpose (pipeline bubbles, a rank waiting for a slow "
                   "checkpoint). The thresholds of the verdict itself (80 %, 5 %, 10 s) "
                   "are the agent's, defined in exporter/activity.py."),
        thresholds=("device_spinning_for",),
        fires=(*held_fires, replace(unheld_fires[0], why="spinning, held by no Ray worker")),
        near_misses=held_near,
    )
