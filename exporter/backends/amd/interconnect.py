"""XGMI links of an AMD GPU: per-link byte counters, state and the peer at the far end.

`amdsmi_get_link_metrics` gives each link's peer (by PCI bus id) and its
cumulative read and write data in KB; an amdsmi release without it still has
the per-link accumulators of the GPU metrics table (without peers). Reads are
what the GPU received over the link, writes what it sent: they become the
`receive` and `transmit` directions of `hw.gpu.io`, like NVLink's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ... import catalog as m
from ...model import Link, Reading
from ..base import read_timed
from .calls import DeviceCalls, number
from .probes import reading

XGMI = m.LINK_XGMI
# amdsmi's "KB" of link data, taken as KiB like NVML's NVLink counters and
# amdsmi's own "MB" of VRAM (MiB).
KB = 1024
_LINK_TYPE_XGMI = 2  # AMDSMI_LINK_TYPE_XGMI
_UP = {"U": 1, "D": 0, "X": 0}  # amdsmi_get_gpu_xgmi_link_status: up, down, disabled


def bus_key(pci_bus_id: str) -> str:
    """A PCI bus id in one comparable form ("0000:05:00.0"), whichever tool wrote it."""
    try:
        head, function = pci_bus_id.strip().lower().rsplit(".", 1)
        domain, bus, device = head.split(":")
        return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}.{int(function)}"
    except ValueError:
        return pci_bus_id.strip().lower()


def _link(index: int, read_kb: Any, write_kb: Any, state: str | None,
          facts: Mapping[str, str], counters_at: float | None = None) -> Link:
    readings: list[Reading] = []
    for value, direction in ((write_kb, m.TRANSMIT), (read_kb, m.RECEIVE)):
        if number(value) is not None:
            readings.append(reading(m.LINK_IO, number(value) * KB, direction=direction))
    if state in _UP:
        readings.append(reading(m.LINK_UP, _UP[state]))
    return Link(XGMI, index, tuple(readings), dict(facts), counters_at=counters_at)


def read_xgmi(amd: DeviceCalls, handle: Any, uuid_by_bus: Mapping[str, str]) -> tuple[Link, ...]:
    """This cycle's XGMI links of a physical GPU; none when it has no XGMI."""
    status = amd.call("amdsmi_get_gpu_xgmi_link_status", handle)
    states: Sequence[str] = (status or {}).get("status") or ()
    metrics, read_at = read_timed(lambda: amd.call("amdsmi_get_link_metrics", handle))
    if metrics is not None:
        links = []
        count = int(number(metrics.get("num_links")) or 0)
        for index, link in enumerate((metrics.get("links") or [])[:count]):
            if link.get("link_type") != _LINK_TYPE_XGMI:
                continue
            bus = bus_key(str(link.get("bdf", "")))
            facts = {"version": "", "remote_type": "gpu", "remote_pci_bus_id": bus,
                     "peer_uuid": uuid_by_bus.get(bus, "")}
            links.append(_link(index, link.get("read"), link.get("write"),
                               states[index] if index < len(states) else None, facts, read_at))
        return tuple(links)
    # shared with other probes, read once a cycle: its counters go with the sample's time
    table = amd.once("amdsmi_get_gpu_metrics_info", handle) or {}
    reads = table.get("xgmi_read_data_acc")
    writes = table.get("xgmi_write_data_acc")
    if not isinstance(reads, list) or not isinstance(writes, list):
        return ()
    return tuple(
        _link(index, read, write, states[index] if index < len(states) else None,
              {"version": "", "remote_type": "gpu"})
        for index, (read, write) in enumerate(zip(reads, writes, strict=False))
        if number(read) is not None or number(write) is not None
    )
