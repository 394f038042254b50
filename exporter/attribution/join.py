"""Joins a device's sample with the Ray workers holding it: who holds it, and idly or not.

A holder of a whole device is judged by the device's engine activity where the
device measures it (exporter/activity.py); a fractional holder shares the device
with others and is judged by its own process's NVML figures, as is every holder
where the device measures no activity.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .. import catalog as m
from ..activity import RULE_ACTIVITY, RULE_UTILIZATION, ActivityView, activity_of
from ..model import DeviceSample, ProcessSample, Reading
from .model import Holder

RULE_NO_CONTEXT = "no_context"  # the worker never created a context on the device
WHOLE = 1.0 - 1e-9


@dataclass(frozen=True, slots=True)
class Allocation:
    """A holder of a device, whether it did anything on it in the last cycle, and by which rule.

    `rule` is `activity` (the device's engine activity), `utilization` (NVML
    utilization, the process's or the device's) or `no_context`. `spinning`: the
    holder has the whole device, and the device spins (busy, not computing).
    `activity`: the device's engine activity, for a holder of the whole device.
    """

    holder: Holder
    idle: bool
    rule: str = RULE_UTILIZATION
    spinning: bool = False
    activity: ActivityView | None = None

    @property
    def shared(self) -> bool:
        """The holder has a fraction of the device: others may use the rest."""
        return self.holder.fraction < WHOLE


def _value(readings: tuple[Reading, ...], metric: str, **labels: str) -> float | None:
    wanted = tuple(labels.items())
    return next((r.value for r in readings if r.metric == metric and r.labels == wanted), None)


def _judge(holder: Holder, process: ProcessSample | None, sample: DeviceSample,
           activity: ActivityView) -> Allocation:
    if process is None and sample.processes_listed:
        # assigned by Ray, but the worker never created a context here
        return Allocation(holder, idle=True, rule=RULE_NO_CONTEXT)
    if holder.fraction >= WHOLE and activity.rule == RULE_ACTIVITY:
        spinning = _value(sample.readings, m.DEVICE_SPINNING) == 1.0
        return Allocation(holder, idle=bool(activity.idle), rule=RULE_ACTIVITY,
                          spinning=spinning, activity=activity)
    return Allocation(holder, idle=not _busy(process, sample))


def _busy(process: ProcessSample | None, sample: DeviceSample) -> bool:
    sm = _value(process.readings, m.PROCESS_UTILIZATION, engine=m.ENGINE_SM) if process else None
    if sm is not None:
        return sm > 0
    device = _value(sample.readings, m.GPU_UTILIZATION, task=m.TASK_GENERAL)
    # Without per-process figures (or, on Gaudi, without a process list), a
    # holder of a busy device counts as busy, and one of a device that reports
    # no utilization at all (MIG) cannot be called idle.
    return device is None or device > 0


def allocations(sample: DeviceSample,
                holders: Mapping[str, tuple[Holder, ...]]) -> list[Allocation]:
    """The device's holders with their idle state; empty for a device that is down."""
    if not sample.up:
        return []
    processes = {p.pid: p for p in sample.processes}
    activity = activity_of(sample)
    return [_judge(holder, processes.get(holder.identity.pid), sample, activity)
            for holder in holders.get(sample.device.uuid, ())]
