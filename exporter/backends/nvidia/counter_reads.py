"""When an NVIDIA GPU's link byte counters are read: every cycle, or when due where GPM measures.

The per-cycle link rates (the collective-stall detector's input, the snapshot's
`rates`) need either two readings of the byte counters or a measurement of the
rates themselves. A GPU with GPM measures each NVLink's and its PCIe link's
throughput every cycle (gpm.py); there the field-value call that reads the byte
counters (about 0.4 ms of a real H200's driver CPU) is made only when due:

- at the device's slow-cadence point (cadence.py), so the counters are at most
  one slow interval old; their age is exported
  (`ray.accelerator.device.link_counters.age`);
- whenever GPM did not measure every link this cycle (the first cycle, GPM
  failing or suspended, a link it does not report): the counters are then
  what the rates come from;
- while PCIe moves: its 32-bit byte counters (fields 197/198) wrap every 4 GiB,
  and how many times they wrapped between two reads is told by the PCIe bytes
  GPM measured since the last read (`moved`, per direction; interconnect.py's
  `CounterUnwrapper`), which is right while the two agree within 2 GiB. The
  PCIe counters alone are therefore read once those bytes, plus one more cycle
  at the current rate, reach `WRAP_GUARD_BYTES` (8 GiB): GPM and the counters
  then need to agree within a quarter. The NVLink counters (64-bit) need no
  such guard; they stay as last read.

No fixed interval could replace the guard: the counters count bytes, and at a
PCIe 5.0 x16 link's most (about 63 GB/s a direction) 2^32 of them pass in
under 70 ms, so only the traffic GPM measured says how long a read may wait.
Above 8 GiB a cycle a read every cycle is the most the guard can do, and the
agreement needed grows tighter (within a tenth at 20 GB/s and 1 s).

A counter read less often is still the driver's count at its read, exported as
such (and kept by a device that goes down, as every counter), with the age of
its link type's last read (`age`).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from ... import catalog as m
from ...model import Reading
from .gpm import PCIE_LINK, MeasuredLinks

WRAP_GUARD_BYTES = float(2**33)  # two wraps of a 32-bit byte counter
# What a cycle reads (`CounterSchedule.due`): nothing, every byte counter, or PCIe's alone.
READ_NONE, READ_ALL, READ_PCIE = 0, 1, 2
_AGE_LABELS = {m.LINK_NVLINK: (("link_type", m.LINK_NVLINK),),
               m.LINK_PCIE: (("link_type", m.LINK_PCIE),)}


@dataclass
class CounterSchedule:
    """One GPU's link-counter reads: when the last ones were, and GPM's PCIe bytes since."""

    read_at: float | None = None  # the backend's clock at the last read of every counter
    pcie_read_at: float | None = None  # ... and at the last read of the PCIe counters
    #: The PCIe bytes GPM measured since the PCIe counters' last read, (transmit, receive);
    #: None where some cycle since went unmeasured (or before the first read).
    moved: tuple[float, float] | None = None
    pcie_measured: bool = False  # whether GPM has ever measured the PCIe link both ways
    _seen_at: float | None = None  # the backend's clock at the last cycle

    def due(self, now: float, measured: MeasuredLinks | None,
            links: Collection[tuple[str, int]]) -> int:
        """What this cycle (at `now`) reads of the counters of `links` (`READ_NONE`,
        `READ_ALL`, or `READ_PCIE`: the PCIe counters alone), given the rates GPM measured
        this cycle (`measured`; None: none). Call once per cycle."""
        elapsed = 0.0 if self._seen_at is None else max(now - self._seen_at, 0.0)
        self._seen_at = now
        pcie = None if measured is None else measured.pcie
        self.pcie_measured = self.pcie_measured or pcie is not None
        self.moved = (None if pcie is None or self.moved is None
                      else (self.moved[0] + pcie[0] * elapsed, self.moved[1] + pcie[1] * elapsed))
        if measured is None or self.read_at is None or not measured.links.issuperset(links):
            return READ_ALL  # a link (or one direction of it) GPM did not measure this cycle
        if PCIE_LINK not in links or self.moved is None or pcie is None:
            return READ_NONE  # no PCIe counters to guard
        if max(self.moved) + max(pcie) * elapsed >= WRAP_GUARD_BYTES:
            return READ_PCIE
        return READ_NONE

    def done(self, now: float, pcie_only: bool = False) -> None:
        """The counters (with `pcie_only`, the PCIe ones alone) were read at `now`."""
        self.pcie_read_at, self.moved = now, (0.0, 0.0)
        if not pcie_only:
            self.read_at = now

    def failed(self) -> None:
        """The read failed: no counters to age, and the next cycle reads them all again."""
        self.read_at = self.pcie_read_at = self.moved = None

    def age(self, now: float, nvlinks: bool = True) -> tuple[Reading, ...]:
        """How old the counters are at `now`, per link type (the NVLinks' only with `nvlinks`),
        as readings; none before the first read."""
        found = []
        if nvlinks and self.read_at is not None:
            found.append(Reading(m.LINK_COUNTERS_AGE, max(now - self.read_at, 0.0),
                                 _AGE_LABELS[m.LINK_NVLINK]))
        if self.pcie_read_at is not None:
            found.append(Reading(m.LINK_COUNTERS_AGE, max(now - self.pcie_read_at, 0.0),
                                 _AGE_LABELS[m.LINK_PCIE]))
        return tuple(found)
