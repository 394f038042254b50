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

from ...model import UNKNOWN_MODEL, Device, Link, Reading
from ..base import (
    BackendUnavailable,
    DeviceReads,
    HandleBackend,
    HandleDevice,
    Undiscovered,
    unavailable,
)
from ..calls import text
from .calls import BACKEND_NAME, DeviceCalls, DeviceDown, error_kind, number
from .interconnect import bus_key, read_xgmi
from .joining import GpuTopology
from .library import load_amdsmi
from .probes import BOARD_PROBES, PARTITION_PROBES, throttling
from .processes import EngineClock, processes
from .topology import Placed, placement_facts
from .xcp import METRICS_TABLE, Residency, throttle_held, xcp_readings

_NA = "N/A"
_DEVICE_NODES = ("/dev/kfd",)  # the amdgpu compute driver: present on every AMD GPU host
_INHERITED = ("numa_node", "nearest_nics")  # facts a partition shares with its GPU
UUID_CALL = "amdsmi_get_gpu_device_uuid"


def _describe(error: BaseException) -> str:
    code = getattr(error, "err_code", None)
    return error_kind(error) + (f" (amdsmi status {code})" if code is not None else "")


def _text(value: Any) -> str:
    return text(value, absent=(_NA,))


@dataclass
class _Tracked(HandleDevice):
    """What the AMD backend keeps per logical GPU, besides its handle and calls."""

    calls: DeviceCalls
    board: bool = True  # answers board-level queries: a physical GPU
    engines: EngineClock = field(default_factory=EngineClock)
    residency: Residency = field(default_factory=Residency)  # metrics-table accumulators


@dataclass(frozen=True, slots=True)
class _PendingGpu(Undiscovered):
    """A GPU amdsmi lists, not identified yet: its handles, the primary partition's first."""

    handles: tuple[Any, ...] = ()


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
        self._topology = GpuTopology()

    def open(self) -> Sequence[Device]:
        return self._open_in_turn()

    def open_library(self) -> Sequence[Undiscovered]:
        """amdsmi, its facts, and one undiscovered GPU per PCI device with its partitions."""
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
        self._topology = GpuTopology(library)
        self._facts = self._library_facts(library)
        return [_PendingGpu(Device(self.vendor, str(index), f"amd-index-{index}", UNKNOWN_MODEL),
                            tuple(group))
                for index, group in enumerate(self._by_pci_device(library, handles))]

    def discover(self, pending: Undiscovered) -> Sequence[Device]:
        """Identify one GPU (its primary partition's handle first) and its other partitions."""
        if not isinstance(pending, _PendingGpu) or self._library is None:
            raise TypeError(f"not a GPU this backend listed: {pending!r}")
        library, index = self._library, pending.placeholder.index
        primary, *others = pending.handles
        calls = DeviceCalls(library, self.errors)
        if "driver_version" not in self._facts:  # asked of a GPU: the first that answers
            driver = calls.call("amdsmi_get_gpu_driver_info", primary) or {}
            if version := _text(driver.get("driver_version")):
                self._facts["driver_version"] = version
        identity = self._identify(calls, primary, int(index))  # DeviceDown: listed down
        gpu = _Tracked(Device(self.vendor, index, identity.uuid, identity.model,
                              identity.pci_bus_id, facts=identity.facts), primary, calls)
        placed = Placed(primary, gpu.device.uuid, index, gpu.device.pci_bus_id)
        gpu.device = replace(gpu.device, facts={**gpu.device.facts,
                                                **placement_facts(library, placed)})
        inherited = {k: gpu.device.facts[k] for k in _INHERITED if k in gpu.device.facts}
        partitions = []
        for handle in others:
            partition_calls = DeviceCalls(library, self.errors)
            try:
                part = self._identify(partition_calls, handle, int(index))
            except DeviceDown as down:
                if down.function == UUID_CALL:  # identified again with its GPU
                    raise
                continue
            device = Device(self.vendor, f"{index}/{part.partition_id}", part.uuid, part.model,
                            part.pci_bus_id, parent_uuid=gpu.device.uuid,
                            facts={**part.facts, **inherited})
            partitions.append(_Tracked(device, handle, partition_calls, board=False))
        self._topology.join(gpu, partitions, self._tracked)
        return [t.device for t in (gpu, *partitions)]

    @staticmethod
    def _by_pci_device(library: ModuleType, handles: Sequence[Any]) -> list[list[Any]]:
        """amdsmi's handles grouped by PCI device, in its order: a GPU's partitions follow it.

        The bus id comes from the kernel's PCI view, not from the GPU, so asking for
        it does not hang on a sick GPU; a handle whose bus id is unknown stands alone.
        """
        groups: dict[str, list[Any]] = {}
        alone: list[list[Any]] = []
        order: list[list[Any]] = []
        for handle in handles:
            try:
                bus = bus_key(_text(library.amdsmi_get_gpu_device_bdf(handle)))
            except library.AmdSmiException:
                bus = ""
            if not bus:
                alone.append([handle])
                order.append(alone[-1])
            elif bus in groups:
                groups[bus].append(handle)
            else:
                groups[bus] = [handle]
                order.append(groups[bus])
        return order

    def _without_handle(self, device: Device) -> _Tracked:
        return _Tracked(device, None, DeviceCalls(self._library, self.errors))

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
            links = read_xgmi(calls, handle, self._topology.uuid_by_bus)
            readings.extend(activity + held)
        return DeviceReads(tuple(readings), links, processes(calls, handle, tracked.engines))

    # -- discovery -------------------------------------------------------------

    @staticmethod
    def _library_facts(library: ModuleType) -> dict[str, str]:
        """amdsmi's own version. The driver's is asked of a GPU, at its discovery, so that
        a GPU that hangs delays only itself."""
        facts: dict[str, str] = {}
        with contextlib.suppress(library.AmdSmiException, AttributeError, TypeError, KeyError):
            version = library.amdsmi_get_lib_version()
            facts["amdsmi_version"] = f"{version['major']}.{version['minor']}.{version['release']}"
        return facts

    def _identify(self, calls: DeviceCalls, handle: Any, position: int) -> _Identity:
        uuid = _text(calls.call(UUID_CALL, handle))
        if not uuid:  # a GPU without a UUID at all (not supported) keeps its stand-in
            calls.raise_if_failed(UUID_CALL)
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
            model=_text(asic.get("market_name")) or UNKNOWN_MODEL,
            pci_bus_id=bus,
            partition_id=int(partition) if partition else 0,
            facts=facts,
        )
