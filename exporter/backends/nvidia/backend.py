"""The NVIDIA backend: NVML through the `nvidia-ml-py` binding.

NVML is initialised once and device handles are kept for the backend's life,
unlike Ray's reporter, which initialises and shuts NVML down on every poll.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pynvml

from ... import catalog as m
from ...model import Device, Link, Reading, labels_of
from ...nics import nearest_nics
from ..base import BackendUnavailable, DeviceReads, HandleBackend, HandleDevice
from .calls import BACKEND_NAME, DeviceCalls, DeviceDown
from .interconnect import LinkLayout, discover_nvlinks, pcie_max_readings, read_links
from .probes import DEVICE_PROBES, DeviceState, processes
from .topology import peer_uuid_by_link, peers_of, placement_facts
from .xid import XidWatcher

_ARCHITECTURES = {
    getattr(pynvml, name): name.removeprefix("NVML_DEVICE_ARCH_").lower()
    for name in dir(pynvml)
    if name.startswith("NVML_DEVICE_ARCH_") and name != "NVML_DEVICE_ARCH_UNKNOWN"
}


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


@dataclass
class _Tracked(HandleDevice):
    """What the NVIDIA backend keeps per device, besides its handle and calls."""

    calls: DeviceCalls
    state: DeviceState = field(default_factory=DeviceState)
    links: LinkLayout | None = None  # physical GPUs only


class NvidiaBackend(HandleBackend[_Tracked]):
    """Reads NVIDIA GPUs and MIG instances through NVML."""

    name = BACKEND_NAME
    vendor = "nvidia"

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        """`clock` times the reuse of slow calls' answers (see calls.py)."""
        super().__init__()
        self._clock = clock
        self._xid: XidWatcher | None = None
        self._initialised = False

    def open(self) -> Sequence[Device]:
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as error:
            raise BackendUnavailable(f"NVML could not be initialised: {error}") from None
        self._initialised = True
        self._facts = self._read_facts()
        self._tracked = {}
        for index in range(pynvml.nvmlDeviceGetCount()):
            self._discover(index)
        self._read_topology()
        physical = {
            uuid: t.handle for uuid, t in self._tracked.items() if not t.device.parent_uuid
        }
        self._xid = XidWatcher(physical)
        self._xid.start()
        return [t.device for t in self._tracked.values()]

    def close(self) -> None:
        if self._xid is not None:
            self._xid.stop()
            self._xid = None
        if self._initialised:
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlShutdown()
            self._initialised = False

    def _read(self, tracked: _Tracked) -> DeviceReads:
        calls, handle, state = tracked.calls, tracked.handle, tracked.state
        readings: list[Reading] = []
        for probe in DEVICE_PROBES:
            readings.extend(probe(calls, handle, state))
        links: tuple[Link, ...] = ()
        if tracked.links is not None:
            links, pcie = read_links(calls, handle, tracked.links)
            readings.extend(pcie)
        procs = processes(calls, handle, state)
        readings.extend(self._xid_readings(tracked.device.uuid))
        return DeviceReads(tuple(readings), links, procs)

    def _xid_readings(self, uuid: str) -> list[Reading]:
        if self._xid is None or uuid not in self._xid.watched:
            return []
        return [
            Reading(m.XID_ERRORS, float(count), labels_of({"xid": str(code)}))
            for code, count in sorted(self._xid.counts(uuid).items())
        ]

    def _read_facts(self) -> dict[str, str]:
        facts: dict[str, str] = {}
        for key, fn in (("driver_version", pynvml.nvmlSystemGetDriverVersion),
                        ("nvml_version", pynvml.nvmlSystemGetNVMLVersion),
                        ("cuda_driver_version", pynvml.nvmlSystemGetCudaDriverVersion)):
            try:
                facts[key] = _text(fn())
            except pynvml.NVMLError:
                continue
        return facts

    def _read_topology(self) -> None:
        """Links, device pairs, NUMA and fabric of the physical GPUs; MIG devices inherit."""
        physical = [t for t in self._tracked.values()
                    if t.handle is not None and not t.device.parent_uuid]
        nvlinks = [discover_nvlinks(t.handle) for t in physical]
        facts = [{**t.device.facts, **placement_facts(t.handle),
                  "nearest_nics": ",".join(nearest_nics(t.device.pci_bus_id))} for t in physical]
        buses = [t.device.pci_bus_id for t in physical]
        uuid_by_bus = {bus.lower(): t.device.uuid for bus, t in zip(buses, physical, strict=True)}
        args = ([t.handle for t in physical], buses, nvlinks, [t.device.index for t in physical],
                [t.device.uuid for t in physical], [f.get("nvlink_domain", "") for f in facts])
        for position, tracked in enumerate(physical):
            tracked.device = replace(tracked.device, facts=facts[position],
                                     peers=peers_of(position, *args))
            tracked.links = LinkLayout(nvlinks[position],
                                       peer_uuid_by_link(nvlinks[position], uuid_by_bus),
                                       pcie_max_readings(tracked.handle))
        inherited = ("numa_node", "cpu_affinity", "nvlink_domain", "nearest_nics")
        for tracked in self._tracked.values():
            if tracked.device.parent_uuid in self._tracked:
                parent = self._tracked[tracked.device.parent_uuid].device
                extra = {k: parent.facts[k] for k in inherited if k in parent.facts}
                tracked.device = replace(tracked.device, facts={**tracked.device.facts, **extra})

    def _discover(self, index: int) -> None:
        calls = DeviceCalls(self.errors, clock=self._clock)
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            device = self._identify(calls, handle, str(index))
            mig_handles = self._mig_handles(calls, handle)
        except (pynvml.NVMLError, DeviceDown) as error:
            # A device that cannot even be identified is still listed, as down.
            uuid = f"nvidia-index-{index}"
            self._tracked[uuid] = _Tracked(
                Device(self.vendor, str(index), uuid, "unknown"), None, calls
            )
            calls.cycle_errors["discovery"] = str(error)
            return
        self._tracked[device.uuid] = _Tracked(device, handle, calls)
        for mig_handle in mig_handles:
            mig_calls = DeviceCalls(self.errors, clock=self._clock)
            try:
                mig = self._identify(mig_calls, mig_handle, str(index), parent=device)
            except DeviceDown:
                continue
            self._tracked[mig.uuid] = _Tracked(mig, mig_handle, mig_calls)

    def _identify(
        self, calls: DeviceCalls, handle: Any, index: str, parent: Device | None = None
    ) -> Device:
        """Read a device's identity; a MIG instance inherits its parent's PCI and architecture."""
        name = calls.call(pynvml.nvmlDeviceGetName, handle)
        uuid = calls.call(pynvml.nvmlDeviceGetUUID, handle)
        facts = {"driver_version": self._facts.get("driver_version", "")}
        serial = calls.call(pynvml.nvmlDeviceGetSerial, handle)
        if serial is not None:
            facts["serial"] = _text(serial)
        if parent is not None:
            gpu_instance = calls.call(pynvml.nvmlDeviceGetGpuInstanceId, handle)
            compute_instance = calls.call(pynvml.nvmlDeviceGetComputeInstanceId, handle)
            index = f"{index}/{gpu_instance}/{compute_instance}"
            facts["architecture"] = parent.facts.get("architecture", "")
            pci_bus_id = parent.pci_bus_id
        else:
            architecture = calls.call(pynvml.nvmlDeviceGetArchitecture, handle)
            if architecture is not None:
                facts["architecture"] = _ARCHITECTURES.get(architecture, str(architecture))
            pci = calls.call(pynvml.nvmlDeviceGetPciInfo, handle)
            pci_bus_id = _text(pci.busId) if pci is not None else ""
        return Device(
            vendor=self.vendor,
            index=index,
            uuid=_text(uuid) if uuid is not None else f"nvidia-index-{index}",
            model=_text(name) if name is not None else "unknown",
            pci_bus_id=pci_bus_id,
            parent_uuid=parent.uuid if parent else "",
            facts=facts,
        )

    @staticmethod
    def _mig_handles(calls: DeviceCalls, handle: Any) -> list[Any]:
        mode = calls.call(pynvml.nvmlDeviceGetMigMode, handle)
        if mode is None or mode[0] != pynvml.NVML_DEVICE_MIG_ENABLE:
            return []
        slots = calls.call(pynvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0
        found = []
        for slot in range(slots):
            mig_handle = calls.call(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, slot,
                                    empty_on=frozenset({pynvml.NVML_ERROR_NOT_FOUND}))
            if mig_handle is not None:
                found.append(mig_handle)
        return found
