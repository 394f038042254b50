"""Joins a device's sample with the Ray workers holding it: who holds it, and idly or not."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .. import catalog as m
from ..model import DeviceSample, ProcessSample, Reading
from .model import Holder


@dataclass(frozen=True, slots=True)
class Allocation:
    """A holder of a device and whether it did anything on it in the last cycle."""

    holder: Holder
    idle: bool


def _value(readings: tuple[Reading, ...], metric: str, **labels: str) -> float | None:
    wanted = tuple(labels.items())
    return next((r.value for r in readings if r.metric == metric and r.labels == wanted), None)


def _busy(process: ProcessSample | None, sample: DeviceSample) -> bool:
    if process is None and sample.processes_listed:
        return False  # assigned by Ray, but the worker never created a context here
    sm = _value(process.readings, m.PROCESS_UTILIZATION, engine="sm") if process else None
    if sm is not None:
        return sm > 0
    device = _value(sample.readings, m.GPU_UTILIZATION, task="general")
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
    return [
        Allocation(holder, idle=not _busy(processes.get(holder.identity.pid), sample))
        for holder in holders.get(sample.device.uuid, ())
    ]
