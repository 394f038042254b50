"""The AMD backend: AMD Instinct and Radeon GPUs through the ``amdsmi`` Python API.

amdsmi is initialised once (GPUs only) and its processor handles kept for the
backend's life. amdsmi lists one handle per logical GPU: with the GPU split
into compute partitions (DPX, QPX, CPX, ...) every partition has a handle of
its own. The primary partition's handle also answers the board-level queries
(power, thermals, clocks, ECC, PCIe, XGMI), so it stands for the physical GPU,
and the other partitions become devices of their own that name it as parent,
the way NVIDIA MIG instances do.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import Any

from ...model import Device, Link, Reading
from ..base import BackendUnavailable, DeviceReads, HandleBackend, HandleDevice, unavailable
from .calls import BACKEND_NAME, DeviceCalls, DeviceDown, error_kind, number
from .interconnect import bus_key, read_xgmi
from .library import load_amdsmi
from .probes import BOARD_PROBES, PARTITION_PROBES, throttling
from .processes import EngineClock, processes
from .topology import Placed, peers_of, placement_facts
from .xcp import METRICS_TABLE, Residency, throttle_held, xcp_readings

_NA = "N/A"
_DEVICE_NODES = ("/dev/kfd",)  # the amdgpu compute driver: present on every AMD GPU host
_INHERITED = ("numa_node", "nearest_nics")  # facts a partition shares with its GPU


def _describe(error: BaseException) -> str:
    code = getattr(error, "err_code", None)
    return error_kind(error) + (f" (amdsmi status {code})" if code is not None else "")


def _text(value: Any) -> str:
    return "" if value is None or value == _NA else str(value)


@dataclass
class _Tracked(HandleDevice):
    """What the AMD backend keeps per logical GPU, besides its handle and calls."""

    calls: DeviceCalls
    board: bool = True  # answers board-level queries: a physical GPU
    engines: EngineClock = field(default_factory=EngineClock)
    residency: Residency = field(default_factory=Residency)  # metrics-table accumulators


@dataclass(frozen=True)
class _Identity:
    uuid: str
    model: str
    pci_bus_id: str
    partition_id: int
    facts: dict[str, str]


class AmdBackend(HandleBackend[_Tracked]):
    """Reads AMD GPUs, and their compute partitions, through amdsmi."""

    name = BACKEND_NAME
    vendor = "amd"

    def __init__(self) -> None:
        super().__init__()
        self._library: ModuleType | None = None
        self._uuid_by_bus: dict[str, str] = {}

    def open(self) -> Sequence[Device]:
        try:
            library = load_amdsmi()
        except BackendUnavailable as error:  # absent, unless the host has AMD GPUs
            raise unavailable(str(error), _DEVICE_NODES) from None
        try:
            library.amdsmi_init(library.AmdSmiInitFlags.INIT_AMD_GPUS)
        except library.AmdSmiException as error:
            raise unavailable(f"amdsmi could not be initialised: {_describe(error)}",
                              _DEVICE_NODES) from None
        self._library = library
        try:
            handles = list(library.amdsmi_get_processor_handles())
        except library.AmdSmiException as error:
            self.close()
            raise unavailable(f"amdsmi lists no GPUs: {_describe(error)}",
                              _DEVICE_NODES) from None
        self._tracked = {}
        self._facts = self._read_facts(library, handles)
        self._discover(library, handles)
        self._read_topology(library)
        return [t.device for t in self._tracked.values()]

    def close(self) -> None:
        library, self._library = self._library, None
        if library is not None:
            with contextlib.suppress(library.AmdSmiException):
                library.amdsmi_shut_down()

    # -- sampling --------------------------------------------------------------

    def _read(self, tracked: _Tracked) -> DeviceReads:
        calls, handle = tracked.calls, tracked.handle
        readings: list[Reading] = []
        links: tuple[Link, ...] = ()
        for probe in PARTITION_PROBES:
            readings.extend(probe(calls, handle))
        if tracked.board:
            activity = xcp_readings(calls.once(METRICS_TABLE, handle), tracked.residency)
            held = throttle_held(activity)  # where given, no violation status call (100 ms)
            for probe in BOARD_PROBES:
                if not (held and probe is throttling):
                    readings.extend(probe(calls, handle))
            links = read_xgmi(calls, handle, self._uuid_by_bus)
            readings.extend(activity + held)
        return DeviceReads(tuple(readings), links, processes(calls, handle, tracked.engines))

    # -- discovery -------------------------------------------------------------

    def _read_facts(self, library: ModuleType, handles: Sequence[Any]) -> dict[str, str]:
        facts: dict[str, str] = {}
        with contextlib.suppress(library.AmdSmiException, AttributeError, TypeError, KeyError):
            version = library.amdsmi_get_lib_version()
            facts["amdsmi_version"] = f"{version['major']}.{version['minor']}.{version['release']}"
        if handles:
            with contextlib.suppress(library.AmdSmiException, AttributeError):
                driver = _text(library.amdsmi_get_gpu_driver_info(handles[0]).get("driver_version"))
                if driver:
                    facts["driver_version"] = driver
        return facts

    def _discover(self, library: ModuleType, handles: Sequence[Any]) -> None:
        physical: list[_Tracked] = []
        for position, handle in enumerate(handles):
            calls = DeviceCalls(library, self.errors)
            try:
                identity = self._identify(calls, handle, position)
            except DeviceDown as down:
                # A GPU that cannot even be identified is still listed, as down.
                device = Device(self.vendor, str(len(physical)), f"amd-index-{position}",
                                "unknown")
                calls.cycle_errors["discovery"] = str(down)
                tracked = _Tracked(device, None, calls)
                physical.append(tracked)
                self._tracked[device.uuid] = tracked
                continue
            parent = physical[-1] if physical and identity.partition_id else None
            if parent is not None and bus_key(parent.device.pci_bus_id) == bus_key(
                    identity.pci_bus_id):
                device = Device(self.vendor, f"{parent.device.index}/{identity.partition_id}",
                                identity.uuid, identity.model, identity.pci_bus_id,
                                parent_uuid=parent.device.uuid, facts=identity.facts)
                self._tracked[device.uuid] = _Tracked(device, handle, calls, board=False)
                continue
            device = Device(self.vendor, str(len(physical)), identity.uuid, identity.model,
                            identity.pci_bus_id, facts=identity.facts)
            tracked = _Tracked(device, handle, calls)
            physical.append(tracked)
            self._tracked[device.uuid] = tracked

    def _identify(self, calls: DeviceCalls, handle: Any, position: int) -> _Identity:
        uuid = _text(calls.call("amdsmi_get_gpu_device_uuid", handle))
        bus = _text(calls.call("amdsmi_get_gpu_device_bdf", handle))
        asic = calls.call("amdsmi_get_gpu_asic_info", handle) or {}
        kfd = calls.call("amdsmi_get_gpu_kfd_info", handle) or {}
        facts = {"driver_version": self._facts.get("driver_version", "")}
        for key, value in (
            ("architecture", asic.get("target_graphics_version")),
            ("serial", asic.get("asic_serial")),
            ("compute_partition", calls.call("amdsmi_get_gpu_compute_partition", handle)),
            ("memory_partition", calls.call("amdsmi_get_gpu_memory_partition", handle)),
        ):
            if _text(value):
                facts[key] = _text(value)
        partition = number(kfd.get("current_partition_id"))
        return _Identity(
            uuid=uuid or f"amd-index-{position}",
            model=_text(asic.get("market_name")) or "unknown",
            pci_bus_id=bus,
            partition_id=int(partition) if partition else 0,
            facts=facts,
        )

    def _read_topology(self, library: ModuleType) -> None:
        """Device pairs, NUMA nodes and nearest NICs of the physical GPUs; partitions inherit."""
        physical = [t for t in self._tracked.values()
                    if t.handle is not None and not t.device.parent_uuid]
        placed = [Placed(t.handle, t.device.uuid, t.device.index, t.device.pci_bus_id)
                  for t in physical]
        self._uuid_by_bus = {bus_key(p.pci_bus_id): p.uuid for p in placed if p.pci_bus_id}
        facts = [{**t.device.facts, **placement_facts(library, p)}
                 for t, p in zip(physical, placed, strict=True)]
        peers = peers_of(library, placed, [f.get("numa_node", "") for f in facts])
        for tracked, own_facts, own_peers in zip(physical, facts, peers, strict=True):
            tracked.device = replace(tracked.device, facts=own_facts, peers=own_peers)
        for tracked in self._tracked.values():
            if tracked.device.parent_uuid in self._tracked:
                parent = self._tracked[tracked.device.parent_uuid].device
                extra = {k: parent.facts[k] for k in _INHERITED if k in parent.facts}
                tracked.device = replace(tracked.device, facts={**tracked.device.facts, **extra})
