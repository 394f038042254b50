"""Device handles of the Python fakes (amdsmi, pyhlml) that stay bound to their device.

A vendor library's handle names one device for its life: when the scenario's
device list changes (a device removed with `SimulatedHardware.update`), a
handle the agent holds must not start answering for the device that moved
into its place. Each device gets a slot the first time the fake sees it (by
its UUID, else its PCI bus id); a handle carries the slot, and is resolved by
looking the slot up in the devices as they are now.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any


class HandleSlots:
    """Slot numbers (from 0) of the devices a fake has seen, by their identity; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._slots: dict[str, int] = {}

    def slot(self, device: Mapping[str, Any]) -> int:
        """The device's slot, given on first sight."""
        with self._lock:
            return self._slots.setdefault(_key(device), len(self._slots))

    def assign(self, devices: Sequence[Mapping[str, Any]]) -> None:
        """Give every device not seen before its slot, in their order: until the device list
        changes, slots follow positions, whichever device a caller asks for first."""
        with self._lock:
            for device in devices:
                self._slots.setdefault(_key(device), len(self._slots))

    def issued(self, slot: int) -> bool:
        """Whether a device was ever given `slot` (a handle to it was handed out)."""
        with self._lock:
            return 0 <= slot < len(self._slots)

    def find(self, devices: Sequence[Mapping[str, Any]], slot: int) -> int | None:
        """The position in `devices` of the device holding `slot`; None where it is gone."""
        for position, device in enumerate(devices):
            if self.slot(device) == slot:
                return position
        return None


def _key(device: Mapping[str, Any]) -> str:
    return str(device.get("uuid") or device.get("pci_bus_id") or "")
