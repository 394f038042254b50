"""The Gaudi backend: Intel Gaudi accelerators through ``pyhlml`` (HLML, Habana's NVML-like API).

HLML is initialised once and its device handles kept for the backend's life.
A device's index is HLML's index; its `module_id` fact is the HLML module id
(the OAM slot), which is what HABANA_VISIBLE_MODULES and so Ray's "HPU" slots
name. HLML lists no processes, so samples carry none: Ray attribution comes
from Ray's own allocation. Its RoCE ports are the device's links.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from ...model import UNKNOWN_MODEL, Device, Reading
from ...nics import nearest_nics
from ..base import (
    BackendUnavailable,
    DeviceReads,
    HandleBackend,
    HandleDevice,
    Undiscovered,
    unavailable,
)
from .calls import BACKEND_NAME, DeviceCalls, DeviceDown, error_kind, number, text
from .library import load_pyhlml, start_hlml
from .nic import PortReader, ports_of
from .probes import PROBES

# The habanalabs driver's device files (/dev/accel/accel<N> on recent kernels, /dev/hl<N> before).
_DEVICE_NODES = ("/dev/accel/accel[0-9]*", "/dev/hl[0-9]*")


@dataclass
class _Tracked(HandleDevice):
    """What the Gaudi backend keeps per device, besides its handle and calls."""

    calls: DeviceCalls
    nic: PortReader = field(default_factory=lambda: PortReader(()))


def _bus_id(info: Any) -> str:
    return text(getattr(info, "bus_id", b"")).lower()


class GaudiBackend(HandleBackend[_Tracked]):
    """Reads Intel Gaudi devices through pyhlml."""

    name = BACKEND_NAME
    vendor = "intel"

    def __init__(self) -> None:
        super().__init__()
        self._library: ModuleType | None = None

    def open(self) -> Sequence[Device]:
        return self._open_in_turn()

    def open_library(self) -> Sequence[Undiscovered]:
        """HLML, its facts, and the devices it counts, each to be identified on its own."""
        try:
            library = load_pyhlml()
            start_hlml(library)
        except BackendUnavailable as error:  # absent, unless the host has Gaudi cards
            raise unavailable(str(error), _DEVICE_NODES) from None
        self._library = library
        try:
            count = library.hlmlDeviceGetCount()
        except library.HLMLError as error:
            self.close()
            raise BackendUnavailable(f"HLML lists no devices: {error_kind(error)}") from None
        if not count:
            self.close()
            raise unavailable("HLML found no Gaudi devices", _DEVICE_NODES)
        self._facts = self._read_facts(library)
        self._tracked = {}
        return [Undiscovered(Device(self.vendor, str(index), f"gaudi-index-{index}",
                                    UNKNOWN_MODEL)) for index in range(count)]

    def discover(self, pending: Undiscovered) -> Sequence[Device]:
        """Identify one device and its RoCE ports; raises DeviceDown when it does not answer."""
        if self._library is None:
            raise BackendUnavailable("HLML is not open")
        index = int(pending.placeholder.index)
        calls = DeviceCalls(self._library, self.errors)
        handle = calls.call("hlmlDeviceGetHandleByIndex", index)
        if handle is None:
            raise DeviceDown("hlmlDeviceGetHandleByIndex", "no_handle")
        device = self._identify(calls, handle, index)
        self._tracked[device.uuid] = _Tracked(device, handle, calls,
                                              nic=PortReader(ports_of(calls, handle)))
        return [device]

    def _without_handle(self, device: Device) -> _Tracked:
        return _Tracked(device, None, DeviceCalls(self._library, self.errors))

    def close(self) -> None:
        library, self._library = self._library, None
        if library is not None:
            with contextlib.suppress(Exception):
                library.hlmlShutdown()

    # -- sampling --------------------------------------------------------------

    @staticmethod
    def _read(tracked: _Tracked) -> DeviceReads:
        readings: list[Reading] = []
        for probe in PROBES:
            readings.extend(probe(tracked.calls, tracked.handle))
        links = tracked.nic.read(tracked.calls, tracked.handle)
        return DeviceReads(tuple(readings), links, processes_listed=False)

    # -- discovery -------------------------------------------------------------

    def _read_facts(self, library: ModuleType) -> dict[str, str]:
        facts: dict[str, str] = {}
        for key, function in (("driver_version", "hlmlGetDriverVersion"),
                              ("hlml_version", "hlmlGetHLMLVersion"),
                              ("nic_driver_version", "hlmlGetNicDriverVersion")):
            with contextlib.suppress(Exception):
                value = text(getattr(library, function)())
                if value:
                    facts[key] = value
        return facts

    def _identify(self, calls: DeviceCalls, handle: Any, index: int) -> Device:
        uuid = text(calls.call("hlmlDeviceGetUUID", handle))
        if not uuid:  # a card without a UUID at all (not supported) keeps its stand-in
            calls.raise_if_failed("hlmlDeviceGetUUID")
        bus = _bus_id(calls.call("hlmlDeviceGetPCIInfo", handle))
        facts = {"driver_version": self._facts.get("driver_version", "")}
        module = number(calls.call("hlmlDeviceGetModuleID", handle))
        if module is not None:
            facts["module_id"] = str(int(module))
        serial = text(calls.call("hlmlDeviceGetSerial", handle))
        if serial:
            facts["serial"] = serial
        revision = number(calls.call("hlmlDeviceGetHLRevision", handle))
        if revision is not None:
            facts["hl_revision"] = str(int(revision))
        if bus:
            facts["nearest_nics"] = ",".join(nearest_nics(bus))
        model = text(calls.call("hlmlDeviceGetName", handle)) or UNKNOWN_MODEL
        return Device(self.vendor, str(index), uuid or f"gaudi-index-{index}", model, bus,
                      facts=facts)
