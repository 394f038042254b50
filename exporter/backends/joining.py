"""A node's device topology, built up as devices are identified one by one.

Each device is discovered on its own thread and may join late (one that hung at
start joins when it answers). A joining device asks the vendor library how it
reaches every device already known, in both directions, on its own thread (those
calls may hang too); then, under a lock and without vendor calls, every device's
peers are rebuilt, so the devices already known see the new one as well. Each
vendor says how a pair is read and which tracked devices take part.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import MutableMapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from ..model import Device, Peer


class Joining(Protocol):
    """What the topology needs of a tracked device (a backend's `_Tracked`)."""

    device: Device
    handle: Any


class PairTopology(abc.ABC):
    """How each pair of a node's devices is connected, filled in as devices join."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._peers: dict[tuple[str, str], Peer] = {}  # (from uuid, to uuid) -> to, seen from

    def join(self, device: Joining, partitions: Sequence[Joining],
             tracked: MutableMapping[str, Joining]) -> None:
        """Add `device` (and its `partitions`) to `tracked`, with the pairs it forms.

        Runs on the joining device's thread; `device.device` and every other
        device's `device` are replaced by ones whose peers include the new pairs.
        """
        known: set[str] = set()
        while True:
            with self._lock:
                others = [t for t in self._physical(tracked)
                          if t.device.uuid not in known and t.device.uuid != device.device.uuid]
                if not others:
                    tracked[device.device.uuid] = device
                    for partition in partitions:
                        tracked[partition.device.uuid] = partition
                    self._rebuild(self._physical(tracked))
                    return
            for other in others:  # vendor calls: outside the lock
                b_from_a, a_from_b = self._pair(device, other)
                self._peers[(device.device.uuid, other.device.uuid)] = b_from_a
                self._peers[(other.device.uuid, device.device.uuid)] = a_from_b
                known.add(other.device.uuid)

    def _rebuild(self, physical: list[Any]) -> None:
        for device in physical:
            peers = tuple(self._peers[key] for other in physical
                          if (key := (device.device.uuid, other.device.uuid)) in self._peers)
            device.device = replace(device.device, peers=peers)
        self._rebuilt(physical)

    @staticmethod
    @abc.abstractmethod
    def _physical(tracked: MutableMapping[str, Any]) -> list[Any]:
        """The identified physical devices that form pairs, by index."""

    @abc.abstractmethod
    def _pair(self, a: Any, b: Any) -> tuple[Peer, Peer]:
        """How `a` reaches `b`, and `b` reaches `a` (vendor calls)."""

    def _rebuilt(self, physical: list[Any]) -> None:  # noqa: B027 - optional hook
        """After every device's peers are rebuilt, under the lock: what else follows."""
