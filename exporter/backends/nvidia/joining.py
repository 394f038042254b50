"""The node's GPU topology, built up as GPUs are identified one by one.

Each GPU is discovered on its own thread and may join late (one that hung at
start joins when it answers). A joining GPU reads how it reaches every GPU
already known, in both directions, on its own thread (those NVML calls may
hang too); then, under a lock and without vendor calls, every GPU's peers and
NVLink peer map are rebuilt, so the GPUs already known see the new one as well.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from ...model import Device, Peer
from .interconnect import LinkLayout
from .topology import peer_uuid_by_link, peers_of


class Joining(Protocol):
    """What the topology needs of a tracked device (the backend's `_Tracked`)."""

    device: Device
    handle: Any
    links: LinkLayout | None


def _pair(a: Joining, b: Joining) -> tuple[Peer, Peer]:
    """How `a` reaches `b`, and `b` reaches `a` (the NVML calls take `a`'s handle first)."""
    args = ([a.handle, b.handle], [a.device.pci_bus_id, b.device.pci_bus_id],
            [a.links.nvlinks, b.links.nvlinks], [a.device.index, b.device.index],
            [a.device.uuid, b.device.uuid],
            [a.device.facts.get("nvlink_domain", ""), b.device.facts.get("nvlink_domain", "")])
    (b_from_a,) = peers_of(0, *args)
    (a_from_b,) = peers_of(1, *args)
    return b_from_a, a_from_b


def _physical(tracked: Mapping[str, Joining]) -> list[Joining]:
    """Identified physical GPUs, by index."""
    return sorted((t for t in tracked.values()
                   if t.handle is not None and t.links is not None and not t.device.parent_uuid),
                  key=lambda t: int(t.device.index))


class NodeTopology:
    """How each pair of the node's GPUs is connected, filled in as GPUs join."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._peers: dict[tuple[str, str], Peer] = {}  # (from uuid, to uuid) -> to, seen from

    def join(self, gpu: Joining, partitions: Sequence[Joining],
             tracked: MutableMapping[str, Joining]) -> None:
        """Add `gpu` (and its MIG `partitions`) to `tracked`, with the pairs it forms.

        Runs on the joining GPU's thread; `gpu.device` and every other GPU's
        `device` and NVLink peer map are replaced by ones that include the pairs.
        """
        known: set[str] = set()
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
                b_from_a, a_from_b = _pair(gpu, other)
                self._peers[(gpu.device.uuid, other.device.uuid)] = b_from_a
                self._peers[(other.device.uuid, gpu.device.uuid)] = a_from_b
                known.add(other.device.uuid)

    def _rebuild(self, physical: list[Joining]) -> None:
        uuid_by_bus = {t.device.pci_bus_id.lower(): t.device.uuid for t in physical}
        for gpu in physical:
            peers = tuple(self._peers[key] for other in physical
                          if (key := (gpu.device.uuid, other.device.uuid)) in self._peers)
            gpu.device = replace(gpu.device, peers=peers)
            gpu.links.peer_uuids = peer_uuid_by_link(gpu.links.nvlinks, uuid_by_bus)
