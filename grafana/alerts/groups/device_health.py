"""Sick devices: XID events, ECC, row remapping, throttling, full memory, lost devices."""

from __future__ import annotations

from dataclasses import replace

from ray_accel.exporter import catalog as m

from ...promql import duration, eq, matchers, metric, number, one_of
from ..cases import Cases, Subject, appeared, fired_on, increased, split, sustained
from ..config import AlertConfig
from ..fixtures import DEVICE, MEMORY_LIMIT, NO_RAY_DEVICE, on
from ..label_values import ECC_UNCORRECTED, POWER_REASONS, THERMAL_REASONS
from ..model import (
    Case,
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


def rules(config: AlertConfig) -> tuple[Rule, ...]:
    """Device health, most urgent first within each kind."""
    return (_xid_error(config), _ecc_uncorrectable(config), _row_remap_failure(config),
            _row_remap_pending(config), _thermal_throttling(config), _power_throttling(config),
            _memory_nearly_full(config), _device_lost(config))


def _throttled(device: dict[str, str], reason: str, other: str) -> Subject:
    """`reason` following the timeline, while `other` holds throughout (not selected)."""
    def build(values: str) -> tuple[Series, ...]:
        return (series(m.THROTTLE_ACTIVE, device, values, reason=reason),
                series(m.THROTTLE_ACTIVE, device, held(1, last_index(values)), reason=other))
    return build


def _either(first: Cases, second: Cases) -> Cases:
    """The firing cases and near misses of both."""
    return first[0] + second[0], first[1] + second[1]


def _xid_error(config: AlertConfig) -> Rule:
    t, device = config.thresholds, on(DEVICE, config.agent_job)
    xid, window = metric(m.XID_ERRORS), duration(t.xid_window)
    # the count as last seen before the window, looking past scrape gaps
    before = f"last_over_time({xid}[{duration(t.xid_seen_window)}] offset {window})"

    def xid_series(values: str) -> tuple[Series, ...]:
        return (series(m.XID_ERRORS, device, values, xid="48"),)

    xid_fires, xid_near = increased(t.xid_window, xid_series, start=1, jump=1)
    gap_fires, gap_near = _xid_gap_cases(t.xid_window, xid_series)
    return Rule(
        name="RayAcceleratorXidError",
        severity=Severity.WARNING,
        expr=f"increase({xid}[{window}]) > 0 or ({xid} unless {before}) "
             f"or ({xid} != {before})",
        for_s=0,
        summary="XID {{ $labels.xid }} on device {{ $labels.index }} of node "
                "{{ or $labels.ray_node_id $labels.instance }}",
        description="The NVIDIA driver reported critical error XID {{ $labels.xid }} on "
                    "device {{ $labels.index }} ({{ $labels.uuid }}) within the last "
                    f"{window}.",
        runbook=Runbook(
            meaning="The driver raised an XID event: a critical error it detected on the "
                    "device or in the work running on it. Some XIDs are caused by "
                    "application bugs, others mean the hardware needs attention. The "
                    "agent counts each device's XIDs by code since it started; the alert "
                    "fires when a count grows within the window, when a code's count first "
                    "appears (its first event), or when a count differs from its value "
                    "before the window (it grew, or the agent restarted and counted anew, "
                    "while its target was not scraped). A count that comes back at the value "
                    "it had within `xid_seen_window` before the window, after a scrape gap "
                    "(an unreachable agent, a Prometheus restart), is an old event and does "
                    "not fire again.",
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
                   "event. `xid_seen_window` (default 6h) is how far back before the window "
                   "a count is remembered: a scrape gap longer than both makes old XIDs "
                   "fire once more; an agent restart that counts exactly as many new XIDs "
                   "of a code as before within it is missed (it looks unchanged). To ignore "
                   "application XIDs, silence with a matcher on `xid=~\"13|31|43|45\"`."),
        thresholds=("xid_window", "xid_seen_window"),
        fires=(*xid_fires, appeared(t.xid_window, xid_series), *gap_fires),
        near_misses=(*xid_near, *gap_near),
    )


def _xid_gap_cases(window_s: float, subject: Subject) -> Cases:
    """A count not scraped for longer than the window: back at its value (quiet), grown or
    counted anew by a restarted agent (fires)."""
    tick = tick_for(window_s)
    window = steps(window_s, tick)

    def gap(before: float, after: float) -> str:
        return then(held(before, 2), "stale", f"_x{window + 2}", held(after, 4))

    at = (window + 8) * tick
    same = subject(gap(1, 1))
    grown, anew = subject(gap(1, 2)), subject(gap(5, 1))
    return ((Case("grew while its agent was not scraped", grown, at, tick, fired_on(grown)),
             Case("the agent restarted and counts a new event", anew, at, tick,
                  fired_on(anew))),
            (Case("the same count again after a scrape gap longer than the window", same,
                  at, tick),))


def _ecc_uncorrectable(config: AlertConfig) -> Rule:
    t, device = config.thresholds, on(DEVICE, config.agent_job)
    ecc = f"{metric(m.HW_ERRORS)}{matchers(eq('error_type', ECC_UNCORRECTED))}"

    def ecc_series(values: str) -> tuple[Series, ...]:
        return (series(m.HW_ERRORS, device, values, error_type=ECC_UNCORRECTED),
                series(m.HW_ERRORS, device, values, error_type=m.ECC_CORRECTED))

    ecc_fires, ecc_near = increased(t.ecc_window, ecc_series, start=2, jump=1)
    return Rule(
        name="RayAcceleratorEccUncorrectable",
        severity=Severity.CRITICAL,
        expr=f"increase({ecc}[{duration(t.ecc_window)}]) > 0",
        for_s=0,
        summary="Uncorrectable ECC errors on device {{ $labels.index }} of node "
                "{{ or $labels.ray_node_id $labels.instance }}",
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
    )


def _row_remap_failure(config: AlertConfig) -> Rule:
    device = on(DEVICE, config.agent_job)
    return Rule(
        name="RayAcceleratorRowRemapFailure",
        severity=Severity.CRITICAL,
        expr=f"{metric(m.ROW_REMAP_FAILURE)} == 1",
        for_s=0,
        summary="Row remapping failed on device {{ $labels.index }} of node "
                "{{ or $labels.ray_node_id $labels.instance }}: the device needs service",
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
    )


def _row_remap_pending(config: AlertConfig) -> Rule:
    t, device = config.thresholds, on(DEVICE, config.agent_job)
    return Rule(
        name="RayAcceleratorRowRemapPending",
        severity=Severity.WARNING,
        expr=f"{metric(m.ROW_REMAP_PENDING)} == 1",
        for_s=t.row_remap_pending_for,
        summary="Device {{ $labels.index }} of node "
                "{{ or $labels.ray_node_id $labels.instance }} needs a reset "
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
    )


def _thermal_throttling(config: AlertConfig) -> Rule:
    t, device = config.thresholds, on(DEVICE, config.agent_job)
    throttle = metric(m.THROTTLE_ACTIVE)
    return Rule(
        name="RayAcceleratorThermalThrottling",
        severity=Severity.WARNING,
        expr=f"{throttle}{matchers(one_of('reason', *THERMAL_REASONS))} == 1",
        for_s=t.thermal_throttle_for,
        summary="Device {{ $labels.index }} of node "
                "{{ or $labels.ray_node_id $labels.instance }} is held down by "
                "{{ $labels.reason }}",
        description="Clock event reason {{ $labels.reason }} has been slowing device "
                    "{{ $labels.index }} ({{ $labels.uuid }}) for "
                    f"{duration(t.thermal_throttle_for)}.",
        runbook=Runbook(
            meaning="The device lowers its clocks to protect itself from heat (or, for "
                    "`hw_slowdown`, from a hardware protection signal; on AMD GPUs the "
                    "limiter is named: `socket_thermal`, `vr_thermal` for the voltage "
                    "regulators, `hbm_thermal` for the memory, `prochot`). Work on it runs "
                    "slower, and in a multi-GPU job every other rank waits for it.",
            causes=("Cooling: a failed fan, blocked airflow, a hot aisle, a liquid-cooling "
                    "fault.",
                    "A neighbour device heating this one in a dense chassis.",
                    "For `hw_slowdown`: an external power brake or the board's power "
                    "supply protection."),
            checks=("The device health board: temperature, clocks vs maximum, and "
                    "throttle reasons for this device and its neighbours.",
                    "`nvidia-smi -q -d PERFORMANCE,TEMPERATURE -i <index>` (AMD: "
                    "`amd-smi metric --temperature -g <index>`); the BMC's "
                    "fan and inlet readings."),
            tuning="Raise `thermal_throttle_for` to ignore short spikes."),
        thresholds=("thermal_throttle_for",),
        **split(_either(
            sustained(t.thermal_throttle_for,
                      _throttled(device, m.REASON_HW_THERMAL_SLOWDOWN, m.REASON_GPU_IDLE),
                      bad=1, good=0, near=0),
            sustained(t.thermal_throttle_for,  # an AMD GPU's own limiter
                      _throttled(device, m.REASON_HBM_THERMAL, m.REASON_SW_POWER_CAP),
                      bad=1, good=0))),
    )


def _power_throttling(config: AlertConfig) -> Rule:
    t, device = config.thresholds, on(DEVICE, config.agent_job)
    throttle = metric(m.THROTTLE_ACTIVE)
    return Rule(
        name="RayAcceleratorPowerThrottling",
        severity=Severity.INFO,
        expr=f"{throttle}{matchers(one_of('reason', *POWER_REASONS))} == 1",
        for_s=t.power_throttle_for,
        summary="Device {{ $labels.index }} of node "
                "{{ or $labels.ray_node_id $labels.instance }} is held at its "
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
                   _throttled(device, m.REASON_SW_POWER_CAP, m.REASON_GPU_IDLE),
                   bad=1, good=0, near=0)),
    )


def _memory_nearly_full(config: AlertConfig) -> Rule:
    t, device = config.thresholds, on(DEVICE, config.agent_job)
    usage, limit = metric(m.MEMORY_USAGE), metric(m.MEMORY_LIMIT)

    def memory(values: str) -> tuple[Series, ...]:
        return (series(m.MEMORY_USAGE, device, values),
                series(m.MEMORY_LIMIT, device, held(MEMORY_LIMIT, last_index(values))))

    full = 0.97
    mem_fires, mem_near = sustained(
        t.memory_full_for, memory, bad=full * MEMORY_LIMIT, good=0.5 * MEMORY_LIMIT,
        near=t.memory_full_ratio * MEMORY_LIMIT, value=full)
    return Rule(
        name="RayAcceleratorMemoryNearlyFull",
        severity=Severity.WARNING,
        expr=f"{usage} / {limit} > {number(t.memory_full_ratio)}",
        for_s=t.memory_full_for,
        summary="Device {{ $labels.index }} of node "
                "{{ or $labels.ray_node_id $labels.instance }} has "
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
    )


def _device_lost(config: AlertConfig) -> Rule:
    t, device = config.thresholds, on(DEVICE, config.agent_job)
    no_ray = on(NO_RAY_DEVICE, config.agent_job)
    lost_fires, lost_near = sustained(
        t.device_lost_for, lambda v: (series(m.DEVICE_UP, device, v),), bad=0, good=1)
    no_ray_fires = tuple(replace(c, why=f"{c.why}, on a --no-ray agent (named by instance)")
                         for c in sustained(t.device_lost_for,
                                            lambda v: (series(m.DEVICE_UP, no_ray, v),),
                                            bad=0, good=1)[0])
    return Rule(
        name="RayAcceleratorDeviceLost",
        severity=Severity.CRITICAL,
        expr=f"{metric(m.DEVICE_UP)} == 0",
        for_s=t.device_lost_for,
        summary="Device {{ $labels.index }} of node "
                "{{ or $labels.ray_node_id $labels.instance }} does not answer",
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
        fires=(*lost_fires, *no_ray_fires),
        near_misses=lost_near,
    )
