"""The RoCE ports of a Gaudi: one link each, with its state and byte counters.

Gaudi cards talk to each other and to the network over on-chip 100GbE RoCE
ports (24 on a Gaudi 2). `hlmlDeviceGetMacAddrInfo` gives two port masks: the
ports that exist and, among them, the external ones (scale-out); the others
are wired to the node's other cards. HLML does not say which card a port
reaches, so an internal port's peer stays unknown. `hlmlDeviceNicGetStatistics`
returns the port's counters as a buffer of names (fixed-size, NUL-padded
slots) and a buffer of values; `rx_Octets` and `tx_Octets` are the bytes.

That statistics call is a firmware query of about 0.1 s a port on real
hardware, 2.4 s for a Gaudi 2's 24 ports: more than a cycle. `PortReader`
reads every port's state each cycle, but counters only from as many ports as
fit in `STATS_BUDGET_S`, taking up each cycle where the last one stopped;
the other ports keep the counters last read, stamped with when
(`Link.counters_at`), so rates span the time between real readings.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from ... import catalog as m
from ...model import Link, Reading
from ..base import read_timed
from .calls import DeviceCalls
from .probes import reading

ROCE = m.LINK_ROCE
BYTE_COUNTERS = (("tx_Octets", m.TRANSMIT), ("rx_Octets", m.RECEIVE))
# pyhlml's default name buffer: HABANA_LINK_CNT_MAX_NUM (256) names x 32 bytes
_NAME_BUFFER = 256 * 32
STATS_BUDGET_S = 0.25  # of a device's sampling thread per cycle, for NIC counters


@dataclass(frozen=True)
class Port:
    """One NIC port of a device."""

    number: int
    external: bool


def ports_of(hlml: DeviceCalls, handle: Any) -> tuple[Port, ...]:
    """The device's NIC ports, from its port masks; none when HLML cannot say."""
    masks = hlml.call("hlmlDeviceGetMacAddrInfo", handle)
    try:
        (low, high), (ext_low, ext_high) = masks
        present, external = low | high << 64, ext_low | ext_high << 64
    except (TypeError, ValueError):
        return ()
    return tuple(Port(bit, bool(external >> bit & 1))
                 for bit in range(128) if present >> bit & 1)


def counters(stats: Any) -> dict[str, int]:
    """Counter name -> value from a c_hlml_nic_stats_info; {} when it cannot be read."""
    try:
        count = int(stats.num_of_counters_out[0])
        raw = stats.str_buf[0:_NAME_BUFFER]
        names = [name.decode(errors="replace") for name in raw.split(b"\0") if name][:count]
        return {name: int(stats.val_buf[i]) for i, name in enumerate(names)}
    except (AttributeError, TypeError, ValueError, IndexError):
        return {}


@dataclass(frozen=True)
class _Counted:
    """A port's byte counters (direction -> bytes) and the wall-clock time they were read."""

    at: float
    bytes_by_direction: dict[str, int]


class PortReader:
    """Reads one device's ports: state every cycle, counters within a time budget."""

    def __init__(self, ports: Sequence[Port], budget_s: float = STATS_BUDGET_S) -> None:
        self.ports = tuple(ports)
        self._budget_s = budget_s
        self._next = 0  # where the next cycle starts reading counters
        self._counted: dict[int, _Counted] = {}

    def read(self, hlml: DeviceCalls, handle: Any) -> tuple[Link, ...]:
        """This cycle's links; counters read this cycle, or last read, where a port has any."""
        self._read_counters(hlml, handle)
        links = []
        for port in self.ports:
            readings: list[Reading] = []
            up = hlml.call("hlmlDeviceNicGetLink", handle, port.number, key=str(port.number))
            if isinstance(up, bool):
                readings.append(reading(m.LINK_UP, 1 if up else 0))
            counted = self._counted.get(port.number)
            if counted is not None:
                readings.extend(reading(m.LINK_IO, value, direction=direction)
                                for direction, value in counted.bytes_by_direction.items())
            facts = {"version": "", "remote_type": "network" if port.external else "gpu"}
            links.append(Link(ROCE, port.number, tuple(readings), facts,
                              counters_at=counted.at if counted else None))
        return tuple(links)

    def _read_counters(self, hlml: DeviceCalls, handle: Any) -> None:
        """Reads ports' counters in turn until the budget is spent (at least one port)."""
        started = time.monotonic()
        for _ in range(len(self.ports)):
            port = self.ports[self._next]
            self._next = (self._next + 1) % len(self.ports)
            stats, read_at = read_timed(partial(hlml.call, "hlmlDeviceNicGetStatistics",
                                                handle, port.number, key=str(port.number)))
            found = counters(stats) if stats is not None else {}
            bytes_by_direction = {direction: found[name] for name, direction in BYTE_COUNTERS
                                  if name in found}
            if bytes_by_direction:
                self._counted[port.number] = _Counted(read_at, bytes_by_direction)
            else:
                self._counted.pop(port.number, None)
            if time.monotonic() - started >= self._budget_s:
                break
