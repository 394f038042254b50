"""The alert rules: what each watches, how urgent it is, what to do about it.

Rules are built from a `Thresholds` (and the Prometheus job the agents are
scraped under), so every number in them is tunable. Each rule carries its
promtool cases: where it must fire and the near misses where it must not.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ray_accel.exporter import catalog as m

from ..promql import UP, duration, eq, matchers, metric, number, one_of
from ..thresholds import Thresholds
from .cases import Subject, appeared, dropping, increased, split, sustained
from .model import (
    Case,
    Group,
    Rule,
    Runbook,
    Series,
    Severity,
    held,
    last_index,
    series,
    steps,
    then,
    tick_for,
)

DEFAULT_AGENT_JOB = "ray-accel"

# Label values the rules select on (what the backends put in these labels).
GENERAL = "general"  # hw_gpu_utilization_ratio{task}: compute/graphics engines
ECC_UNCORRECTED = "ecc_uncorrected"
CURRENT, MAX = "current", "max"  # PCIe link state
THERMAL_REASONS = ("hw_thermal_slowdown", "sw_thermal_slowdown", "hw_slowdown")
POWER_REASONS = ("sw_power_cap", "hw_power_brake_slowdown")


@dataclass(frozen=True)
class AlertConfig:
    """Everything the rules depend on."""

    thresholds: Thresholds = field(default_factory=Thresholds)
    agent_job: str = DEFAULT_AGENT_JOB


# Synthetic label sets for the promtool cases: one agent, one GPU, one worker, one link.
_NODE = {"instance": "10.0.0.7:9478", "ray_node_id": "5f0c2a7e41b3", "SessionName":
         "session_2025_01_01_00-00-00_000000_1"}
_DEVICE = {**_NODE, "vendor": "nvidia", "model": "NVIDIA H200", "index": "3",
           "uuid": "GPU-09fc8680-7dde-5a52-b532-6b579b5f1a62"}
_WORKER = {**_DEVICE, "pid": "4242", "ray_job_id": "02000000", "ray_worker_id": "8c1e0d",
           "ray_actor_id": "a1b2c3d4", "actor_class": "IdleHolder"}
_LINK = {**_DEVICE, "link_type": "nvlink", "link": "4"}
_MEMORY_LIMIT = 100e9


def _on(labels: Mapping[str, str], job: str) -> dict[str, str]:
    return {"job": job, **labels}


def groups(config: AlertConfig | None = None) -> tuple[Group, ...]:
    """Every rule group, in the order the rules file lists them."""
    config = config or AlertConfig()
    found = (
        Group("ray-accel.allocation", _allocation(config)),
        Group("ray-accel.device-health", _device_health(config)),
        Group("ray-accel.interconnect", _interconnect(config)),
        Group("ray-accel.agent", _agent(config)),
        Group("ray-accel.transfers", transfer_rules(config)),
    )
    return tuple(g for g in found if g.rules)


def all_rules(config: AlertConfig | None = None) -> tuple[Rule, ...]:
    """Every rule of every group."""
    return tuple(rule for group in groups(config) for rule in group.rules)


_TRANSFER = {**_NODE, "ray_job_id": "02000000", "src_actor_id": "5e1d0c3b", "src_actor_class":
             "Producer", "src_node_id": _NODE["ray_node_id"], "src_devices": _DEVICE["uuid"],
             "dst_actor_id": "9a8b7c6d", "dst_actor_class": "Consumer", "dst_node_id":
             "7d2e9b1c04a5", "dst_devices": "GPU-1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901"}


def transfer_rules(config: AlertConfig) -> tuple[Rule, ...]:
    """Transfer and collective stalls (Ray Direct Transport), see docs/transfers.md."""
    t, job = config.thresholds, config.agent_job
    transfer, worker = _on(_TRANSFER, job), _on(_WORKER, job)
    stalled = metric(m.TRANSFERS_STALLED)

    def stalled_series(values: str) -> tuple[Series, ...]:
        count = last_index(values)
        return (series(m.TRANSFERS_STALLED, transfer, values),
                series(m.TRANSFERS_IN_FLIGHT, transfer, held(1, count)))

    return (
        Rule(
            name="RayAcceleratorTransferStalled",
            severity=Severity.CRITICAL,
            expr=f"{stalled} > 0",
            for_s=t.transfer_stalled_for,
            summary="RDT transfer from {{ $labels.src_actor_class }} {{ $labels.src_actor_id }} "
                    "to {{ $labels.dst_actor_class }} {{ $labels.dst_actor_id }} is stalled",
            description="A Ray Direct Transport transfer of job {{ $labels.ray_job_id }} from "
                        "actor {{ $labels.src_actor_id }} (devices {{ $labels.src_devices }}, "
                        "node {{ $labels.src_node_id }}) to actor {{ $labels.dst_actor_id }} "
                        "(devices {{ $labels.dst_devices }}, node {{ $labels.dst_node_id }}) "
                        "has been in flight past the agent's stall threshold. Ray kills both "
                        "actors when it reaches RAY_rdt_fetch_fail_timeout_milliseconds "
                        "(60 s by default).",
            runbook=Runbook(
                meaning="The send on the source actor and the receive on the destination, "
                        "which normally take milliseconds, have not finished. Unless they "
                        "do, Ray aborts the transfer by killing both actors (and destroys "
                        "their collective group), so whatever is caught now is lost then.",
                causes=("The destination's `_ray_system` thread is busy with something else "
                        "(a long `__ray_call__`, or an actor without that thread, created "
                        "without `enable_tensor_transport=True`): the receive waits behind it "
                        "while the send hangs.",
                        "A peer that died or hangs in the collective library (NCCL, gloo): a "
                        "hung kernel, a network partition between the nodes, a mismatched "
                        "collective group.",
                        "Both ends waiting on each other in user code (a consuming task that "
                        "holds what the receive needs)."),
                checks=("`ray-accel transfers --address <head>` lists the transfer with both "
                        "actors, their devices and its age.",
                        "`ray list tasks --filter actor_id=<id> --detail` on both actors: "
                        "which `__ray_call__` runs, which waits "
                        "(`PENDING_ACTOR_TASK_ORDERING_OR_CONCURRENCY`).",
                        "`ray stack` (py-spy) on the two actors' pids, or the Ray dashboard's "
                        "*Stack Trace* for the actors, before Ray kills them.",
                        "The workload board's *Transfers* panels and the devices' "
                        "*Suspected hung collectives* on the interconnect board."),
                tuning="The agent's `--transfer-stall-after` (10 s) decides when a transfer "
                       "counts as stalled; keep it well under Ray's 60 s. Raise "
                       "`transfer_stalled_for` to wait longer before paging."),
            thresholds=("transfer_stalled_for",),
            **split(sustained(t.transfer_stalled_for, stalled_series, bad=1, good=0, near=0)),
        ),
        Rule(
            name="RayAcceleratorCollectiveSuspectedStall",
            severity=Severity.CRITICAL,
            expr=f"{metric(m.COLLECTIVE_SUSPECTED_STALL)} == 1",
            for_s=t.collective_stall_for,
            summary="Device {{ $labels.index }} on node {{ $labels.ray_node_id }} spins busy with "
                    "no interconnect traffic: suspected hung collective "
                    "({{ $labels.actor_class }} {{ $labels.ray_actor_id }})",
            description="Device {{ $labels.index }} ({{ $labels.uuid }}), held by actor "
                        "{{ $labels.ray_actor_id }} of job {{ $labels.ray_job_id }} (pid "
                        "{{ $labels.pid }}), has been busy while its NVLink/PCIe byte "
                        "counters stayed flat, for the agent's detection window and "
                        f"{duration(t.collective_stall_for)} more.",
            runbook=Runbook(
                meaning="A collective kernel (all-reduce, all-gather, send/recv) spins on the "
                        "device waiting for peers that never answer: utilization stays high, "
                        "nothing moves over the interconnect. The job makes no progress and "
                        "holds its devices until someone kills it (or NCCL's watchdog does, "
                        "typically after 10-30 minutes).",
                causes=("One rank of the job died, hangs or took another code path (a "
                        "mismatched collective, a rank that skipped a step).",
                        "A failed NVLink, NVSwitch or network link between the ranks (see "
                        "link errors and link state on the interconnect board).",
                        "A deadlock in user code around the collective."),
                checks=("The interconnect board's *Suspected hung collectives* table: which "
                        "devices, which actors and job; are all ranks of the job there?",
                        "NVLink bytes per link and link errors for those devices.",
                        "`py-spy dump --pid <pid>` (or `ray stack`) on the actors; with NCCL, "
                        "`NCCL_DEBUG=INFO` logs of the ranks."),
                tuning="The agent's `--collective-stall-window`, "
                       "`--collective-busy-utilization` and `--collective-flat-rate` decide "
                       "when a device counts as suspected; raise `collective_stall_for` for "
                       "jobs with long compute phases between collectives."),
            thresholds=("collective_stall_for",),
            **split(sustained(t.collective_stall_for,
                              lambda v: (series(m.COLLECTIVE_SUSPECTED_STALL, worker, v),),
                              bad=1, good=0, near=0)),
        ),
        Rule(
            name="RayAcceleratorTransferAborted",
            severity=Severity.WARNING,
            expr=f"increase({metric(m.TRANSFER_ABORTS)}[{duration(t.transfer_abort_window)}]) "
                 "> 0",
            for_s=0,
            summary="Ray aborted a stalled RDT transfer of job {{ $labels.ray_job_id }} by "
                    "killing its actors",
            description="Within the last " + duration(t.transfer_abort_window) + ", a stalled "
                        "Ray Direct Transport transfer of job {{ $labels.ray_job_id }} ended "
                        "with both its actors dead: Ray's RDT timeout aborted it.",
            runbook=Runbook(
                meaning="A transfer the agent had reported stalled disappeared, and the GCS "
                        "reports both of its actors DEAD: Ray hit "
                        "RAY_rdt_fetch_fail_timeout_milliseconds and killed them. The job "
                        "lost those actors' state, and their collective group was destroyed.",
                causes=("The causes of a stalled transfer (see "
                        "RayAcceleratorTransferStalled), not resolved in time.",),
                checks=("The earlier RayAcceleratorTransferStalled alert names the two actors "
                        "and their devices.",
                        "`ray list actors --filter job_id=<job> --filter state=DEAD --detail`: "
                        "death causes; the driver's log has Ray's `RDT transfer ... failed. "
                        "Killing the actors.`"),
                tuning="Lengthen `transfer_abort_window` to keep the alert up longer."),
            thresholds=("transfer_abort_window",),
            **split(increased(t.transfer_abort_window,
                              lambda v: (series(m.TRANSFER_ABORTS, _on(_NODE, job), v,
                                                ray_job_id="02000000"),),
                              start=0, jump=1)),
        ),
    )


# ------------------------------------------------------------------ allocation


def _allocation(config: AlertConfig) -> tuple[Rule, ...]:
    t, job = config.thresholds, config.agent_job
    worker, device = _on(_WORKER, job), _on(_DEVICE, job)
    idle = metric(m.ALLOCATION_IDLE)
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
    return (
        Rule(
            name="RayAcceleratorAllocatedIdle",
            severity=Severity.WARNING,
            expr=f"{idle} == 1",
            for_s=t.idle_allocation_for,
            summary="Ray worker pid {{ $labels.pid }} ({{ $labels.actor_class }}"
                    "{{ $labels.task_name }}) holds device {{ $labels.index }} on node "
                    "{{ $labels.ray_node_id }} but does not use it",
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
        ),
        Rule(
            name="RayAcceleratorUnallocatedBusy",
            severity=Severity.WARNING,
            expr=f"({utilization} > {number(t.unallocated_busy_utilization)}) "
                 f"and ignoring(task) ({allocated} == 0)",
            for_s=t.unallocated_busy_for,
            summary="Device {{ $labels.index }} on node {{ $labels.ray_node_id }} is "
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
        ),
    )


# --------------------------------------------------------------- device health


def _device_health(config: AlertConfig) -> tuple[Rule, ...]:
    t, job = config.thresholds, config.agent_job
    device = _on(_DEVICE, job)
    xid = metric(m.XID_ERRORS)
    ecc = f"{metric(m.HW_ERRORS)}{matchers(eq('error_type', ECC_UNCORRECTED))}"
    throttle = metric(m.THROTTLE_ACTIVE)
    usage, limit = metric(m.MEMORY_USAGE), metric(m.MEMORY_LIMIT)

    def xid_series(values: str) -> tuple[Series, ...]:
        return (series(m.XID_ERRORS, device, values, xid="48"),)

    def ecc_series(values: str) -> tuple[Series, ...]:
        return (series(m.HW_ERRORS, device, values, error_type=ECC_UNCORRECTED),
                series(m.HW_ERRORS, device, values, error_type="ecc_corrected"))

    def throttled(reason: str, other: str) -> Subject:
        def build(values: str) -> tuple[Series, ...]:
            return (series(m.THROTTLE_ACTIVE, device, values, reason=reason),
                    series(m.THROTTLE_ACTIVE, device, held(1, last_index(values)), reason=other))
        return build

    def memory(values: str) -> tuple[Series, ...]:
        return (series(m.MEMORY_USAGE, device, values),
                series(m.MEMORY_LIMIT, device, held(_MEMORY_LIMIT, last_index(values))))

    xid_fires, xid_near = increased(t.xid_window, xid_series, start=1, jump=1)
    ecc_fires, ecc_near = increased(t.ecc_window, lambda v: ecc_series(v), start=2, jump=1)
    full = 0.97
    mem_fires, mem_near = sustained(
        t.memory_full_for, memory, bad=full * _MEMORY_LIMIT, good=0.5 * _MEMORY_LIMIT,
        near=t.memory_full_ratio * _MEMORY_LIMIT, value=full)
    return (
        Rule(
            name="RayAcceleratorXidError",
            severity=Severity.WARNING,
            expr=f"increase({xid}[{duration(t.xid_window)}]) > 0 "
                 f"or ({xid} unless {xid} offset {duration(t.xid_window)})",
            for_s=0,
            summary="XID {{ $labels.xid }} on device {{ $labels.index }} of node "
                    "{{ $labels.ray_node_id }}",
            description="The NVIDIA driver reported critical error XID {{ $labels.xid }} on "
                        "device {{ $labels.index }} ({{ $labels.uuid }}) within the last "
                        f"{duration(t.xid_window)}.",
            runbook=Runbook(
                meaning="The driver raised an XID event: a critical error it detected on the "
                        "device or in the work running on it. Some XIDs are caused by "
                        "application bugs, others mean the hardware needs attention.",
                causes=("Application errors: 13 (graphics engine exception), 31 (memory page "
                        "fault, usually an illegal address in a kernel), 43 (a channel "
                        "stopped), 45 (preemptive cleanup after another error).",
                        "Memory: 48 (double-bit ECC), 63/64 (row remapping recorded/failed), "
                        "94/95 (contained/uncontained ECC error), 92 (high single-bit rate).",
                        "Device or bus: 79 (fallen off the bus), 74 (NVLink error), 119/120 "
                        "(GSP firmware timeout or error), 61/62 (internal micro-controller)."),
                checks=("The device health board's *XID events* panel gives the code and "
                        "time; correlate with the workload board for who ran there.",
                        "`dmesg -T | grep -i xid` on the node for the full driver message.",
                        "NVIDIA's XID catalog for the code's recommended action (often: "
                        "reset the GPU or drain the node)."),
                tuning="`xid_window` sets how long the alert keeps firing after the last "
                       "event. To ignore application XIDs, silence with a matcher on "
                       "`xid=~\"13|31|43|45\"`."),
            thresholds=("xid_window",),
            fires=(*xid_fires, appeared(t.xid_window, xid_series)),
            near_misses=xid_near,
        ),
        Rule(
            name="RayAcceleratorEccUncorrectable",
            severity=Severity.CRITICAL,
            expr=f"increase({ecc}[{duration(t.ecc_window)}]) > 0",
            for_s=0,
            summary="Uncorrectable ECC errors on device {{ $labels.index }} of node "
                    "{{ $labels.ray_node_id }}",
            description="Device {{ $labels.index }} ({{ $labels.uuid }}) counted new "
                        f"uncorrectable memory errors within the last {duration(t.ecc_window)}. "
                        "Work on it may have read corrupted data.",
            runbook=Runbook(
                meaning="The device's memory returned data that ECC could detect but not "
                        "correct. The process that touched it is usually killed (XID 48/94/95), "
                        "and results computed on the device may be wrong.",
                causes=("A failing memory cell or HBM stack.",
                        "Rarely, cosmic-ray upsets; a single event that does not repeat."),
                checks=("The device health board: ECC errors, remapped rows, pending remap "
                        "and remap failure for this device.",
                        "`nvidia-smi -q -d ECC,ROW_REMAPPER -i <index>` on the node.",
                        "Whether a row remap is pending: the device then needs a reset "
                        "(drain the node's Ray workers first)."),
                tuning="`ecc_window` sets how long the alert fires after the last error. Do "
                       "not raise thresholds for this one: uncorrectable errors always need a "
                       "look."),
            thresholds=("ecc_window",),
            fires=ecc_fires,
            near_misses=ecc_near,
        ),
        Rule(
            name="RayAcceleratorRowRemapFailure",
            severity=Severity.CRITICAL,
            expr=f"{metric(m.ROW_REMAP_FAILURE)} == 1",
            for_s=0,
            summary="Row remapping failed on device {{ $labels.index }} of node "
                    "{{ $labels.ray_node_id }}: the device needs service",
            description="Device {{ $labels.index }} ({{ $labels.uuid }}) could not remap a "
                        "faulty memory row. It cannot repair its memory any further.",
            runbook=Runbook(
                meaning="The device ran out of spare rows (or the remap itself failed) while "
                        "retiring memory that produced errors. Further errors in that memory "
                        "cannot be contained.",
                causes=("Accumulated memory failures on the device.",),
                checks=("`nvidia-smi -q -d ROW_REMAPPER -i <index>` on the node.",
                        "The device health board: remapped rows by cause, ECC errors."),
                tuning="None: drain the node (cordon it for Ray, e.g. by not scheduling on "
                       "its GPUs) and have the device replaced. Silence by `uuid` until then."),
            thresholds=(),
            fires=sustained(0, lambda v: (series(m.ROW_REMAP_FAILURE, device, v),),
                            bad=1, good=0)[0],
            near_misses=(Case("no failure, but a remap pending",
                              (series(m.ROW_REMAP_FAILURE, device, held(0, 10)),
                               series(m.ROW_REMAP_PENDING, device, held(1, 10))), 150, 15),),
        ),
        Rule(
            name="RayAcceleratorRowRemapPending",
            severity=Severity.WARNING,
            expr=f"{metric(m.ROW_REMAP_PENDING)} == 1",
            for_s=t.row_remap_pending_for,
            summary="Device {{ $labels.index }} of node {{ $labels.ray_node_id }} needs a reset "
                    "to finish remapping memory rows",
            description="Device {{ $labels.index }} ({{ $labels.uuid }}) has a row remap waiting "
                        f"for the next device reset, for {duration(t.row_remap_pending_for)}.",
            runbook=Runbook(
                meaning="The device recorded memory rows to retire; the remap takes effect "
                        "only after a GPU reset. Until then the faulty rows stay in use.",
                causes=("Correctable or uncorrectable errors that crossed the driver's "
                        "retirement policy.",),
                checks=("`nvidia-smi -q -d ROW_REMAPPER -i <index>`.",
                        "The device health board's remapped rows and ECC panels."),
                tuning="Raise `row_remap_pending_for` to match your maintenance window; "
                       "reset the GPU (`nvidia-smi -r -i <index>`, with no processes on it) "
                       "when the node is drained."),
            thresholds=("row_remap_pending_for",),
            **split(sustained(t.row_remap_pending_for,
                       lambda v: (series(m.ROW_REMAP_PENDING, device, v),), bad=1, good=0)),
        ),
        Rule(
            name="RayAcceleratorThermalThrottling",
            severity=Severity.WARNING,
            expr=f"{throttle}{matchers(one_of('reason', *THERMAL_REASONS))} == 1",
            for_s=t.thermal_throttle_for,
            summary="Device {{ $labels.index }} of node {{ $labels.ray_node_id }} is held down by "
                    "{{ $labels.reason }}",
            description="Clock event reason {{ $labels.reason }} has been slowing device "
                        "{{ $labels.index }} ({{ $labels.uuid }}) for "
                        f"{duration(t.thermal_throttle_for)}.",
            runbook=Runbook(
                meaning="The device lowers its clocks to protect itself from heat (or, for "
                        "`hw_slowdown`, from a hardware protection signal). Work on it runs "
                        "slower, and in a multi-GPU job every other rank waits for it.",
                causes=("Cooling: a failed fan, blocked airflow, a hot aisle, a liquid-cooling "
                        "fault.",
                        "A neighbour device heating this one in a dense chassis.",
                        "For `hw_slowdown`: an external power brake or the board's power "
                        "supply protection."),
                checks=("The device health board: temperature, clocks vs maximum, and "
                        "throttle reasons for this device and its neighbours.",
                        "`nvidia-smi -q -d PERFORMANCE,TEMPERATURE -i <index>`; the BMC's "
                        "fan and inlet readings."),
                tuning="Raise `thermal_throttle_for` to ignore short spikes."),
            thresholds=("thermal_throttle_for",),
            **split(sustained(t.thermal_throttle_for,
                       throttled("hw_thermal_slowdown", "gpu_idle"), bad=1, good=0, near=0)),
        ),
        Rule(
            name="RayAcceleratorPowerThrottling",
            severity=Severity.INFO,
            expr=f"{throttle}{matchers(one_of('reason', *POWER_REASONS))} == 1",
            for_s=t.power_throttle_for,
            summary="Device {{ $labels.index }} of node {{ $labels.ray_node_id }} is held at its "
                    "power limit ({{ $labels.reason }})",
            description="Clock event reason {{ $labels.reason }} has been limiting device "
                        "{{ $labels.index }} ({{ $labels.uuid }}) for "
                        f"{duration(t.power_throttle_for)}.",
            runbook=Runbook(
                meaning="The device draws as much power as it is allowed and lowers its "
                        "clocks to stay within the limit (`sw_power_cap`), or an external "
                        "signal forces it down (`hw_power_brake_slowdown`).",
                causes=("A power limit set below the board's default (`nvidia-smi -pl`).",
                        "A workload that is heavy enough to reach the default limit: common "
                        "and often fine for training.",
                        "For the power brake: the chassis' power supplies or the rack's power "
                        "budget."),
                checks=("The device health board: power vs limit, clocks vs maximum.",
                        "`nvidia-smi -q -d POWER -i <index>` for the enforced and default "
                        "limits."),
                tuning="This is informational by default. Raise `power_throttle_for`, or "
                       "silence `reason=\"sw_power_cap\"`, where running at the power limit "
                       "is expected."),
            thresholds=("power_throttle_for",),
            **split(sustained(t.power_throttle_for,
                       throttled("sw_power_cap", "gpu_idle"), bad=1, good=0, near=0)),
        ),
        Rule(
            name="RayAcceleratorMemoryNearlyFull",
            severity=Severity.WARNING,
            expr=f"{usage} / {limit} > {number(t.memory_full_ratio)}",
            for_s=t.memory_full_for,
            summary="Device {{ $labels.index }} of node {{ $labels.ray_node_id }} has "
                    "{{ $value | humanizePercentage }} of its memory in use",
            description="More than "
                        f"{t.memory_full_ratio:.0%} of device {{{{ $labels.index }}}} "
                        "({{ $labels.uuid }})'s memory has been in use for "
                        f"{duration(t.memory_full_for)}; the next allocation may fail with "
                        "out-of-memory.",
            runbook=Runbook(
                meaning="Device memory is almost exhausted. Frameworks that cache memory "
                        "(PyTorch's caching allocator, JAX's preallocation) hold memory on "
                        "purpose, so this alone is not an error; an allocation beyond it is.",
                causes=("A model, batch or KV cache sized for the whole device.",
                        "JAX or TensorFlow preallocating most of the memory.",
                        "Several workers sharing one device (fractional `num_gpus`) that "
                        "together use more than their share.",
                        "A leak: memory that grows over time in one process."),
                checks=("The workload board's *Device memory by worker* panel: which pid, "
                        "actor or task holds it and whether it grows.",
                        "Ray's State API for the actor's restarts (out-of-memory kills)."),
                tuning="Raise `memory_full_ratio` (or silence by `actor_class`) for workloads "
                       "that preallocate; lower `memory_full_for` to hear of leaks sooner."),
            thresholds=("memory_full_ratio", "memory_full_for"),
            fires=mem_fires,
            near_misses=mem_near,
        ),
        Rule(
            name="RayAcceleratorDeviceLost",
            severity=Severity.CRITICAL,
            expr=f"{metric(m.DEVICE_UP)} == 0",
            for_s=t.device_lost_for,
            summary="Device {{ $labels.index }} of node {{ $labels.ray_node_id }} does not answer",
            description="Device {{ $labels.index }} ({{ $labels.uuid }}) has failed to answer "
                        f"the agent's sampling for {duration(t.device_lost_for)}: it is lost "
                        "(fallen off the bus) or its driver calls hang.",
            runbook=Runbook(
                meaning="The vendor library reports the device lost, or every read of it "
                        "fails or does not return. Ray still counts the device as a resource "
                        "and may schedule work onto it.",
                causes=("The GPU fell off the bus (XID 79), a PCIe or power fault.",
                        "A hung driver: calls for this device block (see the agent health "
                        "board's sample age).",
                        "A GPU reset in progress."),
                checks=("`nvidia-smi` on the node (a lost GPU shows `ERR!` or is missing); "
                        "`dmesg -T | grep -i -e xid -e nvrm`.",
                        "The agent health board: errors by function, sample age per device."),
                tuning="Raise `device_lost_for` to ride out planned GPU resets. A lost GPU "
                       "normally needs a node reboot; drain the node's Ray workers first."),
            thresholds=("device_lost_for",),
            **split(sustained(t.device_lost_for, lambda v: (series(m.DEVICE_UP, device, v),),
                       bad=0, good=1)),
        ),
    )


# ----------------------------------------------------------------- interconnect


def _interconnect(config: AlertConfig) -> tuple[Rule, ...]:
    t, job = config.thresholds, config.agent_job
    device, link = _on(_DEVICE, job), _on(_LINK, job)
    width, generation = metric(m.PCIE_WIDTH), metric(m.PCIE_GENERATION)
    utilization = f"{metric(m.GPU_UTILIZATION)}{matchers(eq('task', GENERAL))}"

    def pcie(name: str, maximum: float, busy: float = 0.9) -> Subject:
        def build(values: str) -> tuple[Series, ...]:
            count = last_index(values)
            return (series(name, device, values, state=CURRENT),
                    series(name, device, held(maximum, count), state=MAX),
                    series(m.GPU_UTILIZATION, device, held(busy, count), task=GENERAL))
        return build

    gen_fires, gen_near = dropping(sustained(t.pcie_downtrained_for,
                                             pcie(m.PCIE_GENERATION, 5), bad=4, good=5, near=5),
                                   "state")
    tick = tick_for(t.pcie_downtrained_for)
    count = int(gen_fires[0].at_s / tick)
    burst = t.link_error_burst
    return (
        Rule(
            name="RayAcceleratorPcieWidthDowntrained",
            severity=Severity.WARNING,
            expr=f"{width}{matchers(eq('state', CURRENT))} < ignoring(state) "
                 f"{width}{matchers(eq('state', MAX))}",
            for_s=t.pcie_downtrained_for,
            summary="PCIe link of device {{ $labels.index }} on node {{ $labels.ray_node_id }} "
                    "runs at x{{ $value | printf \"%.0f\" }}, below its maximum width",
            description="The PCIe link of device {{ $labels.index }} ({{ $labels.uuid }}) has "
                        "trained to fewer lanes than it and its slot support, for "
                        f"{duration(t.pcie_downtrained_for)}; host transfers are slower.",
            runbook=Runbook(
                meaning="The link negotiated fewer lanes than both ends support. Width does "
                        "not drop to save power, so a narrow link is a fault: copies between "
                        "host and device (data loading, checkpointing, CPU offload) slow down "
                        "in proportion.",
                causes=("A badly seated card or riser, a damaged connector or cable.",
                        "Signal-integrity problems that made the link retrain (see PCIe "
                        "replays on the device health board).",
                        "A BIOS lane bifurcation setting."),
                checks=("The interconnect board's *PCIe link state* table: current vs max "
                        "generation and width for every device.",
                        "`nvidia-smi -q -d PCIE -i <index>`; `lspci -vv -s <bus id>` "
                        "(LnkSta vs LnkCap)."),
                tuning="Raise `pcie_downtrained_for` if links retrain briefly after resets. "
                       "A persistently narrow link needs hardware service."),
            thresholds=("pcie_downtrained_for",),
            **split(dropping(sustained(t.pcie_downtrained_for, pcie(m.PCIE_WIDTH, 16),
                                       bad=8, good=16, near=16), "state")),
        ),
        Rule(
            name="RayAcceleratorPcieGenerationDowntrained",
            severity=Severity.WARNING,
            expr=f"({generation}{matchers(eq('state', CURRENT))} < ignoring(state) "
                 f"{generation}{matchers(eq('state', MAX))}) "
                 f"and ignoring(state, task) "
                 f"({utilization} > {number(t.pcie_busy_utilization)})",
            for_s=t.pcie_downtrained_for,
            summary="PCIe link of device {{ $labels.index }} on node {{ $labels.ray_node_id }} "
                    "runs at Gen{{ $value | printf \"%.0f\" }} while busy, below its maximum",
            description="The PCIe link of device {{ $labels.index }} ({{ $labels.uuid }}) has "
                        "run below its maximum generation while the device was busy, for "
                        f"{duration(t.pcie_downtrained_for)}.",
            runbook=Runbook(
                meaning="Devices drop to a lower PCIe generation when idle to save power and "
                        "return to the maximum under load. A busy device that stays at a "
                        "lower generation has a link that cannot train to full speed.",
                causes=("Signal-integrity problems (risers, retimers, cables).",
                        "A slot or BIOS setting limiting the generation.",
                        "Firmware that failed to retrain after a reset."),
                checks=("The interconnect board's *PCIe link state* table.",
                        "`nvidia-smi -q -d PCIE -i <index>`, `lspci -vv -s <bus id>`; PCIe "
                        "replays on the device health board."),
                tuning="Raise `pcie_busy_utilization` if light load does not make your "
                       "devices train up; raise `pcie_downtrained_for` to ignore brief dips."),
            thresholds=("pcie_busy_utilization", "pcie_downtrained_for"),
            fires=gen_fires,
            near_misses=(*gen_near, Case(
                "at a lower generation, but idle", pcie(m.PCIE_GENERATION, 5, busy=0)(
                    held(4, count)), count * tick, tick)),
        ),
        Rule(
            name="RayAcceleratorLinkDown",
            severity=Severity.WARNING,
            expr=f"{metric(m.LINK_UP)} == 0",
            for_s=t.link_down_for,
            summary="{{ $labels.link_type }} link {{ $labels.link }} of device {{ $labels.index }} "
                    "on node {{ $labels.ray_node_id }} is down",
            description="Link {{ $labels.link }} ({{ $labels.link_type }}) of device "
                        "{{ $labels.index }} ({{ $labels.uuid }}) has not been active for "
                        f"{duration(t.link_down_for)}. Traffic to its peers uses fewer links, "
                        "or falls back to PCIe.",
            runbook=Runbook(
                meaning="An interconnect link (NVLink, XGMI) that exists on the device is not "
                        "trained. Collective operations that use it lose bandwidth, and "
                        "peer-to-peer traffic may fall back to PCIe.",
                causes=("A failed link, NVSwitch port or bridge.",
                        "The Fabric Manager not running or failed (on NVSwitch systems "
                        "every link is down then).",
                        "A device reset that left links untrained."),
                checks=("The interconnect board: link state per link, link errors, and the "
                        "topology table.",
                        "`nvidia-smi nvlink --status -i <index>`; `systemctl status "
                        "nvidia-fabricmanager`."),
                tuning="Raise `link_down_for` to ride out resets; silence by `uuid` and "
                       "`link` for a link known to be disabled."),
            thresholds=("link_down_for",),
            **split(sustained(t.link_down_for, lambda v: (series(m.LINK_UP, link, v),),
                              bad=0, good=1)),
        ),
        Rule(
            name="RayAcceleratorLinkErrors",
            severity=Severity.WARNING,
            expr=f"increase({metric(m.LINK_ERRORS)}[{duration(t.link_error_window)}]) "
                 f"> {number(burst)}",
            for_s=0,
            summary="Burst of {{ $labels.error_type }} errors on {{ $labels.link_type }} link "
                    "{{ $labels.link }} of device {{ $labels.index }} on node "
                    "{{ $labels.ray_node_id }}",
            description=f"More than {burst:g} {{{{ $labels.error_type }}}} errors within "
                        f"{duration(t.link_error_window)} on link {{{{ $labels.link }}}} of "
                        "device {{ $labels.index }} ({{ $labels.uuid }}).",
            runbook=Runbook(
                meaning="The link retransmits (replay), recovers or detects corrupted flits "
                        "(CRC) at a high rate. A few errors are normal; a burst means a "
                        "marginal link that costs bandwidth and may go down.",
                causes=("A degraded connector, cable or NVSwitch port.",
                        "Thermal stress on the link's components."),
                checks=("The interconnect board's *Link errors* panel for the link and its "
                        "neighbours, and the bandwidth on the link.",
                        "`nvidia-smi nvlink -e -i <index>` for the error counters."),
                tuning="Raise `link_error_burst` (errors per window) or `link_error_window` "
                       "if your links report steady low rates."),
            thresholds=("link_error_window", "link_error_burst"),
            **split(increased(t.link_error_window,
                       lambda v: (series(m.LINK_ERRORS, link, v, error_type="replay"),),
                       start=5, jump=2 * burst + 1, small_jump=burst / 2)),
        ),
    )


# ------------------------------------------------------------------------ agent


def _agent(config: AlertConfig) -> tuple[Rule, ...]:
    t, job = config.thresholds, config.agent_job
    target = {"job": job, "instance": _NODE["instance"]}
    up = f"{UP}{matchers(eq('job', job))}"
    agent = _on(_NODE, job)
    backend = {**agent, "backend": "nvidia"}

    def up_series(values: str) -> tuple[Series, ...]:
        return (Series(UP, target, values),)

    backend_up, backend_devices = metric(m.BACKEND_UP), metric(m.BACKEND_DEVICES)
    backend_tick = tick_for(t.backend_down_for)
    hold = steps(t.backend_down_for, backend_tick)
    short, length = hold // 2, hold + 6
    down = then("_x3", held(0, length - 3))
    briefly_down = then("_x3", held(1, length - 4 - short), held(0, short))

    def backend_case(why: str, devices_before: float, now_up: str, fires: bool = False) -> Case:
        """An earlier agent process (another port) ended; the current one runs `now_up`."""
        earlier = {**agent, "instance": "10.0.0.7:9479", "backend": "nvidia"}
        found = (series(m.BACKEND_UP, backend, now_up),
                 series(m.BACKEND_UP, earlier, then(held(1, 2), "stale")),
                 series(m.BACKEND_DEVICES, earlier, then(held(devices_before, 2), "stale")))
        alerts = ({"ray_node_id": agent["ray_node_id"], "backend": "nvidia"},)
        return Case(why, found, length * backend_tick, backend_tick,
                    alerts if fires else ())

    fires, near = sustained(t.agent_down_for, up_series, bad=0, good=1, near=1)
    tick = tick_for(t.agent_down_for)
    count = int(fires[0].at_s / tick)
    missing = Case("no target of the job at all", (Series(UP, {"job": "ray", "instance":
                                                               "10.0.0.7:8080"},
                                                          held(1, count)),),
                   count * tick, tick, ({"job": job},))
    return (
        Rule(
            name="RayAcceleratorAgentDown",
            severity=Severity.CRITICAL,
            expr=f"{up} == 0 or absent({up})",
            for_s=t.agent_down_for,
            summary="ray-accel agent {{ $labels.instance }} is not being scraped",
            description="Prometheus has failed to scrape the ray-accel agent "
                        "{{ $labels.instance }} (job {{ $labels.job }}), or has no such target "
                        f"at all, for {duration(t.agent_down_for)}. Its node's accelerators "
                        "are unwatched.",
            runbook=Runbook(
                meaning="Either a target of the agents' scrape job fails (`up == 0`), or the "
                        "job has no targets at all (no agent registered, or the scrape "
                        "configuration lost them). Every other rule is blind for those nodes.",
                causes=("The agent process died or its node is down.",
                        "The agent's port is not reachable from Prometheus (firewall, "
                        "listening on 127.0.0.1 only).",
                        "Service discovery: the file written by `ray-accel deploy` / "
                        "`ray-accel sd-file` is missing or not read by Prometheus.",
                        "The job name differs: rules were generated for job "
                        f"`{job}` (`--agent-job`)."),
                checks=("Prometheus' *Targets* page for the job.",
                        "`ray-accel status` on the head: which nodes have an agent and "
                        "whether it answers.",
                        "On the node: `curl http://<agent>/healthz`."),
                tuning="Raise `agent_down_for` to tolerate restarts; generate the rules with "
                       "`--agent-job` matching your scrape job's name."),
            thresholds=("agent_down_for",),
            fires=(*fires, missing),
            near_misses=near,
        ),
        Rule(
            name="RayAcceleratorBackendDown",
            severity=Severity.CRITICAL,
            expr=f"(max by (ray_node_id, backend) ({backend_up}) == 0) "
                 f"and on (ray_node_id, backend) (max by (ray_node_id, backend) "
                 f"(max_over_time({backend_devices}[{duration(t.backend_seen_window)}])) > 0)",
            for_s=t.backend_down_for,
            summary="The {{ $labels.backend }} backend of the agent on node "
                    "{{ $labels.ray_node_id }} is down",
            description="The agent on node {{ $labels.ray_node_id }} cannot use its "
                        "{{ $labels.backend }} vendor library, for "
                        f"{duration(t.backend_down_for)}, although it found devices with it "
                        f"within the last {duration(t.backend_seen_window)}: none of the "
                        "node's devices are reported.",
            runbook=Runbook(
                meaning="The agent runs, but the vendor library (NVML, amdsmi) is not loaded "
                        "or does not answer, on a node where it did find devices before (an "
                        "earlier agent process, within the window). The agent retries every "
                        "30 s. A backend that never found devices on the node (the AMD "
                        "backend on an NVIDIA node) is not alerted on.",
                causes=("The driver was unloaded or crashed (an upgrade in progress).",
                        "A library/driver version mismatch after an upgrade without reboot, "
                        "seen by an agent that restarted.",
                        "The agent's container lost the driver libraries or device files."),
                checks=("`curl http://<agent>/healthz` shows the backend's message.",
                        "`nvidia-smi` (or `amd-smi`) on the node.",
                        "The agent health board's *Backends up* and *Devices found* panels. A "
                        "driver that was broken since boot never found devices and is not "
                        "alerted on: look for nodes with 0 devices there."),
                tuning="Raise `backend_down_for` to cover driver upgrades; "
                       "`backend_seen_window` sets how long a node is remembered as having "
                       "had devices."),
            thresholds=("backend_down_for", "backend_seen_window"),
            fires=(backend_case("the backend found devices before, is down now", 8, down,
                                fires=True),),
            near_misses=(backend_case("the backend never found devices (no such hardware)",
                                      0, down),
                         backend_case(f"down for only {short * backend_tick:g}s of the "
                                      f"{t.backend_down_for:g}s needed", 8, briefly_down)),
        ),
        Rule(
            name="RayAcceleratorSamplesStale",
            severity=Severity.WARNING,
            expr=f"{metric(m.DEVICE_SAMPLE_AGE)} > {number(t.sample_age_seconds)}",
            for_s=t.sample_stale_for,
            summary="Values of device {{ $labels.index }} on node {{ $labels.ray_node_id }} are "
                    "{{ $value | printf \"%.0f\" }} s old",
            description="The agent has not read device {{ $labels.index }} "
                        "({{ $labels.uuid }}) for more than "
                        f"{t.sample_age_seconds:g} s, for {duration(t.sample_stale_for)}: its "
                        "vendor calls hang or the agent is overloaded.",
            runbook=Runbook(
                meaning="The device's last values are older than they should be. The agent "
                        "reads every device in its own worker so that a hung call stalls only "
                        "that device; this alert is that stall.",
                causes=("A driver call that hangs on a sick device (often before it is lost).",
                        "An overloaded node: the agent gets no CPU time.",
                        "A sampling interval set longer than the threshold."),
                checks=("The agent health board: sample age per device, cycle duration, "
                        "errors by function.",
                        "`nvidia-smi` on the node: does it hang for this device too?"),
                tuning="Keep `sample_age_seconds` well above the agent's `--interval`; raise "
                       "`sample_stale_for` to ignore brief stalls."),
            thresholds=("sample_age_seconds", "sample_stale_for"),
            **split(sustained(t.sample_stale_for,
                       lambda v: (series(m.DEVICE_SAMPLE_AGE, _on(_DEVICE, job), v),),
                       bad=2 * t.sample_age_seconds + 1, good=1, near=t.sample_age_seconds)),
        ),
        Rule(
            name="RayAcceleratorAttributionStale",
            severity=Severity.WARNING,
            expr=f"{metric(m.ATTRIBUTION_AGE)} > {number(t.attribution_age_seconds)}",
            for_s=t.attribution_stale_for,
            summary="Ray attribution of the agent on node {{ $labels.ray_node_id }} is "
                    "{{ $value | printf \"%.0f\" }} s old",
            description="The agent at {{ $labels.instance }} has not refreshed which Ray "
                        f"workers hold which devices for more than {t.attribution_age_seconds:g}"
                        f" s, for {duration(t.attribution_stale_for)}: job, actor and task "
                        "labels and the allocation alerts may be out of date.",
            runbook=Runbook(
                meaning="The agent asks the raylet, the GCS and the State API who runs on its "
                        "devices; those answers are old. Series keep their last known "
                        "identities or lose them (see `ray_accelerator_attribution_up`).",
                causes=("The raylet or GCS is unreachable or overloaded.",
                        "The dashboard (State API) is down: task names go missing.",
                        "A token mismatch after the cluster's authentication token changed."),
                checks=("The agent health board: attribution up by source, attribution age.",
                        "The agent's log; `ray status` on the head."),
                tuning="Raise `attribution_age_seconds` above the agent's "
                       "`--attribution-interval` with headroom for slow GCS answers."),
            thresholds=("attribution_age_seconds", "attribution_stale_for"),
            **split(sustained(t.attribution_stale_for,
                       lambda v: (series(m.ATTRIBUTION_AGE, agent, v),),
                       bad=2 * t.attribution_age_seconds + 1, good=1,
                       near=t.attribution_age_seconds)),
        ),
    )
