"""Devices Ray assigned but nobody uses, and devices used that Ray did not assign."""

from __future__ import annotations

from ray_accel.exporter import catalog as m

from ...promql import duration, eq, matchers, metric, number
from ..cases import split, sustained
from ..config import AlertConfig
from ..fixtures import DEVICE, WORKER, on
from ..label_values import GENERAL
from ..model import Case, Rule, Runbook, Series, Severity, held, last_index, series, tick_for


def rules(config: AlertConfig) -> tuple[Rule, ...]:
    """Allocation: idle holders and busy devices no Ray worker holds."""
    return (_allocated_idle(config), _unallocated_busy(config))


def _allocated_idle(config: AlertConfig) -> Rule:
    t, worker = config.thresholds, on(WORKER, config.agent_job)
    idle = metric(m.ALLOCATION_IDLE)
    return Rule(
        name="RayAcceleratorAllocatedIdle",
        severity=Severity.WARNING,
        expr=f"{idle} == 1",
        for_s=t.idle_allocation_for,
        summary="Ray worker pid {{ $labels.pid }} ({{ $labels.actor_class }}"
                "{{ $labels.task_name }}) holds device {{ $labels.index }} on node "
                "{{ or $labels.ray_node_id $labels.instance }} but does not use it",
        description="Ray assigned device {{ $labels.index }} ({{ $labels.uuid }}) to worker "
                    "pid {{ $labels.pid }} (job {{ $labels.ray_job_id }}, actor "
                    "{{ $labels.ray_actor_id }}), which has shown no activity on it for "
                    f"{duration(t.idle_allocation_for)}. Ray cannot give that share of "
                    "the device to other work.",
        runbook=Runbook(
            meaning="A Ray worker holds a device that Ray's scheduler assigned to it "
                    "(`num_gpus`) but has no context on it, or none of its engines was "
                    "busy, for the whole period. The device is reserved and wasted.",
            causes=("An actor that requested `num_gpus` for work that never reaches the "
                    "device (a CPU fallback, a wrong `CUDA_VISIBLE_DEVICES` or device "
                    "index in user code).",
                    "An actor waiting on input: an empty queue, a stalled data loader, a "
                    "driver that stopped sending requests.",
                    "A serving replica that is scaled for peak load and idle now.",
                    "An actor kept alive by a lingering handle after its work ended."),
            checks=("The workload board's *Idle allocations* table names the job, actor, "
                    "task and pid; open the actor in the Ray dashboard.",
                    "Ray's State API: `ray list actors --filter actor_id=<id> --detail`.",
                    "Whether the process has a device context at all: the workload "
                    "board's *Device memory by worker* panel, or `nvidia-smi` on the node."),
            tuning="Raise `idle_allocation_for` for workloads that legitimately idle "
                   "between bursts (interactive notebooks, bursty serving). Silence per "
                   "actor class with an Alertmanager matcher on `actor_class`."),
        thresholds=("idle_allocation_for",),
        **split(sustained(t.idle_allocation_for,
                          lambda v: (series(m.ALLOCATION_IDLE, worker, v),), bad=1, good=0,
                          near=0)),
    )


def _unallocated_busy(config: AlertConfig) -> Rule:
    t, device = config.thresholds, on(DEVICE, config.agent_job)
    utilization = f"{metric(m.GPU_UTILIZATION)}{matchers(eq('task', GENERAL))}"
    allocated = metric(m.DEVICE_ALLOCATED)

    def busy_unassigned(values: str, share: float = 0) -> tuple[Series, ...]:
        return (series(m.GPU_UTILIZATION, device, values, task=GENERAL),
                series(m.DEVICE_ALLOCATED, device, held(share, last_index(values))))

    busy_fires, busy_near = sustained(
        t.unallocated_busy_for, busy_unassigned, bad=0.9, good=0,
        near=t.unallocated_busy_utilization)
    tick = tick_for(t.unallocated_busy_for)
    count = int(busy_fires[0].at_s / tick)
    return Rule(
        name="RayAcceleratorUnallocatedBusy",
        severity=Severity.WARNING,
        expr=f"({utilization} > {number(t.unallocated_busy_utilization)}) "
             f"and ignoring(task) ({allocated} == 0)",
        for_s=t.unallocated_busy_for,
        summary="Device {{ $labels.index }} on node "
                "{{ or $labels.ray_node_id $labels.instance }} is "
                "{{ $value | humanizePercentage }} busy but Ray has not assigned it",
        description="Device {{ $labels.index }} ({{ $labels.uuid }}) has been more than "
                    f"{t.unallocated_busy_utilization:.0%} busy for "
                    f"{duration(t.unallocated_busy_for)} although Ray's scheduler has "
                    "assigned it to no worker: something outside Ray's accounting uses it.",
        runbook=Runbook(
            meaning="The device's engines are busy, yet no Ray worker holds it. Ray will "
                    "schedule work onto it as if it were free, and that work will compete "
                    "for it.",
            causes=("A process started outside Ray on the node (a stray training run, a "
                    "benchmark, another scheduler's job).",
                    "A Ray task or actor that requested no GPU (`num_gpus=0`) but uses one "
                    "anyway, e.g. because `CUDA_VISIBLE_DEVICES` was overridden.",
                    "A worker that outlived its lease (a zombie after a driver crash)."),
            checks=("The workload board's *Processes outside Ray* table lists pids on the "
                    "device with no Ray identity.",
                    "On the node: `nvidia-smi --query-compute-apps=pid,process_name "
                    "--format=csv` and `ps -o pid,user,cmd -p <pid>`."),
            tuning="Raise `unallocated_busy_utilization` or `unallocated_busy_for` on "
                   "nodes shared with work Ray does not schedule; silence by "
                   "`ray_node_id` for nodes that are shared on purpose."),
        thresholds=("unallocated_busy_utilization", "unallocated_busy_for"),
        fires=busy_fires,
        near_misses=(*busy_near, Case(
            "busy, but Ray assigned half of it", busy_unassigned(held(0.9, count), 0.5),
            count * tick, tick)),
    )
