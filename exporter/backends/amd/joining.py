"""The node's AMD GPU topology, built up as GPUs are identified one by one.

Each GPU is discovered on its own thread and may join late (one that hung at
start joins when it answers). A joining GPU asks amdsmi how it reaches every GPU
already known, on its own thread (those calls may hang too); then, under a lock
and without vendor calls, every GPU's peers are rebuilt, so the GPUs already
known see the new one as well.
"""

from __future__ import annotations

import threading
from collections.abc import MutableMapping, Sequence
from dataclasses import replace
from types import ModuleType
from typing import Any, Protocol

from ...model import Device, Peer
from .interconnect import bus_key
from .topology import Placed, peers_of


class Joining(Protocol):
    """What the topology needs of a tracked device (the backend's `_Tracked`)."""

    device: Device
    handle: Any
    board: bool


def _placed(gpu: Joining) -> Placed:
    return Placed(gpu.handle, gpu.device.uuid, gpu.device.index, gpu.device.pci_bus_id)


def _physical(tracked: MutableMapping[str, Joining]) -> list[Joining]:
    """Identified physical GPUs, by index."""
    return sorted((t for t in tracked.values() if t.handle is not None and t.board),
                  key=lambda t: int(t.device.index))


class GpuTopology:
    """How each pair of the node's AMD GPUs is connected, filled in as GPUs join."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._peers: dict[tuple[str, str], Peer] = {}  # (from uuid, to uuid) -> to, seen from
        self.uuid_by_bus: dict[str, str] = {}  # XGMI far ends -> the GPU there

    def join(self, library: ModuleType, gpu: Joining, partitions: Sequence[Joining],
             tracked: MutableMapping[str, Joining]) -> None:
        """Add `gpu` (and its compute `partitions`) to `tracked`, with the pairs it forms."""
        known: set[str] = set()
        numa = gpu.device.facts.get("numa_node", "")
        while True:
            with self._lock:
                others = [t for t in _physical(tracked)
                          if t.device.uuid not in known and t.device.uuid != gpu.device.uuid]
                if not others:
                    tracked[gpu.device.uuid] = gpu
                    for partition in partitions:
                        tracked[partition.device.uuid] = partition
                    self._rebuild(_physical(tracked))
                    return
            for other in others:  # vendor calls: outside the lock
                (b_from_a,), (a_from_b,) = peers_of(
                    library, [_placed(gpu), _placed(other)],
                    [numa, other.device.facts.get("numa_node", "")])
                self._peers[(gpu.device.uuid, other.device.uuid)] = b_from_a
                self._peers[(other.device.uuid, gpu.device.uuid)] = a_from_b
                known.add(other.device.uuid)

    def _rebuild(self, physical: list[Joining]) -> None:
        self.uuid_by_bus = {bus_key(t.device.pci_bus_id): t.device.uuid
                            for t in physical if t.device.pci_bus_id}
        for gpu in physical:
            peers = tuple(self._peers[(gpu.device.uuid, other.device.uuid)]
                          for other in physical
                          if (gpu.device.uuid, other.device.uuid) in self._peers)
            gpu.device = replace(gpu.device, peers=peers)
