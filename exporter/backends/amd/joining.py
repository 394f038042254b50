"""The node's AMD GPU topology, built up as GPUs are identified one by one.

See `backends/joining.py`; AMD pairs are read through amdsmi (XGMI or PCIe,
NUMA, P2P), and the XGMI far ends are mapped to the GPUs there.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any, Protocol

from ...model import Device, Peer
from ..joining import PairTopology
from .interconnect import bus_key
from .topology import Placed, peers_of


class Joining(Protocol):
    """What the topology needs of a tracked GPU (the backend's `_Tracked`)."""

    device: Device
    handle: Any
    board: bool


def _placed(gpu: Joining) -> Placed:
    return Placed(gpu.handle, gpu.device.uuid, gpu.device.index, gpu.device.pci_bus_id)


class GpuTopology(PairTopology):
    """How each pair of the node's AMD GPUs is connected, filled in as GPUs join."""

    def __init__(self, library: ModuleType | None = None) -> None:
        """`library` is the amdsmi module the pairs are asked through."""
        super().__init__()
        self._library = library
        self.uuid_by_bus: dict[str, str] = {}  # XGMI far ends -> the GPU there

    @staticmethod
    def _physical(tracked: Mapping[str, Joining]) -> list[Joining]:
        return sorted((t for t in tracked.values() if t.handle is not None and t.board),
                      key=lambda t: int(t.device.index))

    def _pair(self, a: Joining, b: Joining) -> tuple[Peer, Peer]:
        (b_from_a,), (a_from_b,) = peers_of(
            self._library, [_placed(a), _placed(b)],
            [a.device.facts.get("numa_node", ""), b.device.facts.get("numa_node", "")])
        return b_from_a, a_from_b

    def _rebuilt(self, physical: list[Joining]) -> None:
        self.uuid_by_bus = {bus_key(t.device.pci_bus_id): t.device.uuid
                            for t in physical if t.device.pci_bus_id}
