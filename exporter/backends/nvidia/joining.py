"""The node's NVIDIA GPU topology, built up as GPUs are identified one by one.

See `backends/joining.py`; NVIDIA pairs are read through NVML (NVLink far ends,
common PCIe ancestor, P2P), and each GPU's NVLink peer map is rebuilt with them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from ...model import Device, Peer
from ..joining import PairTopology
from .interconnect import LinkLayout
from .topology import peer_uuid_by_link, peers_of


class Joining(Protocol):
    """What the topology needs of a tracked GPU (the backend's `_Tracked`)."""

    device: Device
    handle: Any
    links: LinkLayout | None


class NodeTopology(PairTopology):
    """How each pair of the node's NVIDIA GPUs is connected, filled in as GPUs join."""

    @staticmethod
    def _physical(tracked: Mapping[str, Joining]) -> list[Joining]:
        return sorted((t for t in tracked.values() if t.handle is not None
                       and t.links is not None and not t.device.parent_uuid),
                      key=lambda t: int(t.device.index))

    def _pair(self, a: Joining, b: Joining) -> tuple[Peer, Peer]:
        """The NVML calls take `a`'s handle first."""
        args = ([a.handle, b.handle], [a.device.pci_bus_id, b.device.pci_bus_id],
                [a.links.nvlinks, b.links.nvlinks], [a.device.index, b.device.index],
                [a.device.uuid, b.device.uuid],
                [a.device.facts.get("nvlink_domain", ""),
                 b.device.facts.get("nvlink_domain", "")])
        (b_from_a,) = peers_of(0, *args)
        (a_from_b,) = peers_of(1, *args)
        return b_from_a, a_from_b

    def _rebuilt(self, physical: list[Joining]) -> None:
        uuid_by_bus = {t.device.pci_bus_id.lower(): t.device.uuid for t in physical}
        for gpu in physical:
            gpu.links.peer_uuids = peer_uuid_by_link(gpu.links.nvlinks, uuid_by_bus)
