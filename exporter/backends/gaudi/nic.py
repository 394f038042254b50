"""The RoCE ports of a Gaudi: one link each, with its state and byte counters.

Gaudi cards talk to each other and to the network over on-chip 100GbE RoCE
ports (24 on a Gaudi 2). `hlmlDeviceGetMacAddrInfo` gives two port masks: the
ports that exist and, among them, the external ones (scale-out); the others
are wired to the node's other cards. HLML does not say which card a port
reaches, so an internal port's peer stays unknown. `hlmlDeviceNicGetStatistics`
returns the port's counters as a buffer of names (fixed-size, NUL-padded
slots) and a buffer of values; `rx_Octets` and `tx_Octets` are the bytes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ... import catalog as m
from ...model import Link, Reading
from .calls import DeviceCalls
from .probes import reading

ROCE = "roce"
BYTE_COUNTERS = (("tx_Octets", "transmit"), ("rx_Octets", "receive"))
# pyhlml's default name buffer: HABANA_LINK_CNT_MAX_NUM (256) names x 32 bytes
_NAME_BUFFER = 256 * 32


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


def read_ports(hlml: DeviceCalls, handle: Any, ports: Sequence[Port]) -> tuple[Link, ...]:
    """This cycle's links: state and byte counters of each port that answers."""
    links = []
    for port in ports:
        key = str(port.number)
        readings: list[Reading] = []
        up = hlml.call("hlmlDeviceNicGetLink", handle, port.number, key=key)
        if isinstance(up, bool):
            readings.append(reading(m.LINK_UP, 1 if up else 0))
        stats = hlml.call("hlmlDeviceNicGetStatistics", handle, port.number, key=key)
        found = counters(stats) if stats is not None else {}
        for name, direction in BYTE_COUNTERS:
            with contextlib.suppress(KeyError):
                readings.append(reading(m.LINK_IO, found[name], direction=direction))
        facts = {"version": "", "remote_type": "network" if port.external else "gpu"}
        links.append(Link(ROCE, port.number, tuple(readings), facts))
    return tuple(links)
