"""When a device's slow-cadence values are read, and what is exported in between.

The catalog says which metrics are read on the slow cadence (`Cadence.SLOW`:
energy, power limit, ECC and PCIe replay counts, remapped rows and retired
pages, NVLink error counters and link states); the probes that read them are
grouped apart (`SLOW_PROBES` in probes.py, the slow fields and link states in
interconnect.py). Each device reads them on its first cycle, then every
`interval_s`, offset by its place among the node's GPUs so that the costly calls
(energy is about 5 ms of driver CPU on an H200) spread over the interval instead
of landing in one cycle. In between, the last values are exported again with
their age (`SLOW_VALUES_AGE`), so none looks fresher than it is; a device that
goes down keeps them as counters like any other (exporter/carry.py).

The energy counter (`Cadence.RARE`, about 5 ms of a real H200's driver CPU per read)
is read the same way every `RARE_READ_EVERY` slow intervals, with an age of its own
(`RARE_VALUES_AGE`); `RARE_PROBES` in probes.py reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ... import catalog as m
from ...model import Reading

DEFAULT_INTERVAL_S = m.SLOW_READ_INTERVAL_S
RARE_READ_EVERY = m.RARE_READ_EVERY


def phase_of(index: str, gpus: int) -> float:
    """Where in the slow interval (0-1) the device `index` ("3", MIG "3/1/0") reads: spread
    over the node's `gpus`; a MIG instance shares its GPU's point."""
    gpu = index.partition("/")[0]
    if not gpu.isdigit() or gpus <= 0:
        return 0.0
    return (int(gpu) % gpus) / gpus


@dataclass
class SlowReads:
    """One device's schedule on one cadence (slow, or rare) and the values it last read."""

    interval_s: float = DEFAULT_INTERVAL_S
    phase: float = 0.0
    readings: tuple[Reading, ...] = ()
    read_at: float | None = None  # the backend's clock at the last slow read
    age_metric: str = m.SLOW_VALUES_AGE
    _next_at: float | None = None

    def due(self, now: float) -> bool:
        """Whether this cycle reads the slow values (always on the device's first cycle)."""
        return self._next_at is None or now >= self._next_at

    def done(self, now: float, readings: tuple[Reading, ...]) -> None:
        """Keep the values a slow read found, and schedule the next at the device's point."""
        self.readings, self.read_at = readings, now
        if self._next_at is None:  # the first read: the next at this device's point
            self._next_at = now + self.interval_s * (self.phase or 1.0)
            return
        self._next_at += self.interval_s
        if self._next_at <= now:  # fell behind (the device hung): one interval from now
            self._next_at = now + self.interval_s

    def age(self, now: float) -> Reading | None:
        """The age of the last slow values at `now`, as a reading; None before the first read."""
        if self.read_at is None:
            return None
        return Reading(self.age_metric, max(now - self.read_at, 0.0))


def rare_reads(slow_interval_s: float, phase: float) -> SlowReads:
    """The rare cadence's schedule of a device whose slow interval is `slow_interval_s`."""
    return SlowReads(slow_interval_s * RARE_READ_EVERY, phase, age_metric=m.RARE_VALUES_AGE)
