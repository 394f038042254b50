"""Transfer and collective stalls (Ray Direct Transport), see docs/transfers.md."""

from __future__ import annotations

from ray_accel.exporter import catalog as m

from ...promql import duration, metric
from ..cases import increased, split, sustained
from ..config import AlertConfig
from ..fixtures import NODE, TRANSFER, WORKER, on
from ..model import Rule, Runbook, Series, Severity, held, last_index, series


def rules(config: AlertConfig) -> tuple[Rule, ...]:
    """Transfer and collective stalls (Ray Direct Transport), see docs/transfers.md."""
    return (_transfer_stalled(config), _collective_suspected_stall(config),
            _transfer_aborted(config))


def _transfer_stalled(config: AlertConfig) -> Rule:
    t, transfer = config.thresholds, on(TRANSFER, config.agent_job)
    stalled = metric(m.TRANSFERS_STALLED)

    def stalled_series(values: str) -> tuple[Series, ...]:
        count = last_index(values)
        return (series(m.TRANSFERS_STALLED, transfer, values),
                series(m.TRANSFERS_IN_FLIGHT, transfer, held(1, count)))

    return Rule(
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
    )


def _collective_suspected_stall(config: AlertConfig) -> Rule:
    t, worker = config.thresholds, on(WORKER, config.agent_job)
    return Rule(
        name="RayAcceleratorCollectiveSuspectedStall",
        severity=Severity.CRITICAL,
        expr=f"{metric(m.COLLECTIVE_SUSPECTED_STALL)} == 1",
        for_s=t.collective_stall_for,
        summary="Device {{ $labels.index }} on node "
                "{{ or $labels.ray_node_id $labels.instance }} spins busy with "
                "no interconnect traffic: suspected hung collective "
                "({{ $labels.actor_class }} {{ $labels.ray_actor_id }})",
        description="Device {{ $labels.index }} ({{ $labels.uuid }}), held by actor "
                    "{{ $labels.ray_actor_id }} of job {{ $labels.ray_job_id }} (pid "
                    "{{ $labels.pid }}), has been busy while its NVLink/PCIe byte "
                    "counters stayed flat (and, where GPM measures them, its SMs and "
                    "tensor pipes nearly idle), for the agent's detection window and "
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
    )


def _transfer_aborted(config: AlertConfig) -> Rule:
    t, job = config.thresholds, config.agent_job
    return Rule(
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
                          lambda v: (series(m.TRANSFER_ABORTS, on(NODE, job), v,
                                            ray_job_id="02000000"),),
                          start=0, jump=1)),
    )
