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
from ...model import UNKNOWN_MODEL, Device, Link, Reading, labels_of
from ...nics import nearest_nics
from ..base import (
    BackendUnavailable,
    DeviceChanged,
    DeviceReads,
    HandleBackend,
    HandleDevice,
    Undiscovered,
    unavailable,
)
from ..calls import text
from .cadence import DEFAULT_INTERVAL_S, SlowReads, phase_of, rare_reads
from .calls import BACKEND_NAME, DeviceCalls, DeviceDown, error_kind
from .interconnect import LinkLayout, discover_nvlinks, pcie_max_readings, read_links
from .joining import NodeTopology
from .probes import DEVICE_PROBES, RARE_PROBES, SLOW_PROBES, DeviceState, processes
from .topology import placement_facts
from .xid import XidWatcher

_ARCHITECTURES = {
    getattr(pynvml, name): name.removeprefix("NVML_DEVICE_ARCH_").lower()
    for name in dir(pynvml)
    if name.startswith("NVML_DEVICE_ARCH_") and name != "NVML_DEVICE_ARCH_UNKNOWN"
}
# NVML or its kernel driver missing: with no /dev/nvidia<N> either, there are no GPUs here.
_ABSENT = frozenset({pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, pynvml.NVML_ERROR_DRIVER_NOT_LOADED})
_DEVICE_NODES = ("/dev/nvidia[0-9]*",)
_INHERITED = ("numa_node", "cpu_affinity", "nvlink_domain", "nearest_nics")


@dataclass
class _Tracked(HandleDevice):
    """What the NVIDIA backend keeps per device, besides its handle and calls."""

    calls: DeviceCalls
    state: DeviceState = field(default_factory=DeviceState)
    links: LinkLayout | None = None  # physical GPUs only


class NvidiaBackend(HandleBackend[_Tracked]):
    """Reads NVIDIA GPUs and MIG instances through NVML.

    Opening is split (see `Backend`): `open_library` initialises NVML and
    counts the GPUs; `discover` identifies one GPU (and its MIG instances) and
    joins it to the node's topology, so a GPU that hangs delays only itself.
    """

    name = BACKEND_NAME
    vendor = "nvidia"

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 slow_read_interval_s: float = DEFAULT_INTERVAL_S) -> None:
        """`clock` times the reuse of slow calls' answers (see calls.py) and the slow
        cadence: slow-cadence values are read every `slow_read_interval_s` (cadence.py;
        0 reads them every cycle). Set `slow_read_interval_s` before opening."""
        super().__init__()
        self._clock = clock
        self.slow_read_interval_s = slow_read_interval_s
        self._gpu_count = 0
        self._xid: XidWatcher | None = None
        self._initialised = False
        self._topology = NodeTopology()

    def open(self) -> Sequence[Device]:
        return self._open_in_turn()

    def open_library(self) -> Sequence[Undiscovered]:
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as error:
            message = f"NVML could not be initialised: {error}"
            if error.value in _ABSENT:
                raise unavailable(message, _DEVICE_NODES) from None
            raise BackendUnavailable(message) from None
        self._initialised = True
        self._facts = self._read_facts()
        self._tracked = {}
        self._topology = NodeTopology()
        self._xid = XidWatcher()
        try:
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as error:
            self.close()
            raise BackendUnavailable(f"NVML cannot count the GPUs: {error}") from None
        self._gpu_count = count
        return [self._placeholder(str(index)) for index in range(count)]

    def _placeholder(self, index: str) -> Undiscovered:
        return Undiscovered(Device(self.vendor, index, f"nvidia-index-{index}", UNKNOWN_MODEL))

    def discover(self, pending: Undiscovered) -> Sequence[Device]:
        index = pending.placeholder.index
        calls = DeviceCalls(self.errors, clock=self._clock)
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(int(index))
        except pynvml.NVMLError as error:
            raise DeviceDown("nvmlDeviceGetHandleByIndex", error_kind(error)) from None
        tracked = _Tracked(self._identify(calls, handle, index), handle, calls)
        migs = []
        for mig_handle in self._mig_handles(calls, handle):
            mig_calls = DeviceCalls(self.errors, clock=self._clock)
            try:
                mig = self._identify(mig_calls, mig_handle, index, parent=tracked.device)
            except DeviceDown:
                continue
            migs.append(_Tracked(mig, mig_handle, mig_calls))
        self._place(tracked, migs)
        for each in (tracked, *migs):
            phase = phase_of(each.device.index, self._gpu_count)
            each.state.slow = SlowReads(self.slow_read_interval_s, phase)
            each.state.rare = rare_reads(self.slow_read_interval_s, phase)
        if self._xid is not None:
            self._xid.watch(tracked.device.uuid, handle)
        self._topology.join(tracked, migs, self._tracked)
        return [t.device for t in (tracked, *migs)]

    def event_readings(self, device: Device) -> tuple[Reading, ...]:
        return tuple(self._xid_readings(device.uuid))

    def close(self) -> None:
        if self._xid is not None:
            self._xid.stop()
            self._xid = None
        if self._initialised:
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlShutdown()
            self._initialised = False

    def _read(self, tracked: _Tracked) -> DeviceReads:
        try:
            return self._read_values(tracked)
        except DeviceDown:
            if self._xid is not None:  # the events of its loss (an XID 79) count this cycle
                self._xid.poll()
            raise

    def _read_values(self, tracked: _Tracked) -> DeviceReads:
        calls, handle, state = tracked.calls, tracked.handle, tracked.state
        readings: list[Reading] = []
        for probe in DEVICE_PROBES:
            readings.extend(probe(calls, handle, state))
        now = self._clock()
        slow = state.slow
        due = slow.due(now)
        if due:  # at the slow cadence: is the device behind the handle still the same one?
            self._check_identity(tracked, partitions=state.rare.due(now))
        links: tuple[Link, ...] = ()
        if tracked.links is not None:
            gpm = state.extra.get("gpm")  # the link rates it measured this cycle, if any
            links, pcie = read_links(calls, handle, tracked.links, slow=due,
                                     measured=gpm.link_rates if gpm else None, now=now)
            readings.extend(pcie)
        for schedule, probes, read_now in ((slow, SLOW_PROBES, due),
                                           (state.rare, RARE_PROBES, state.rare.due(now))):
            if read_now:
                fresh: list[Reading] = []
                for probe in probes:
                    fresh.extend(probe(calls, handle, state))
                schedule.done(now, tuple(fresh))
            readings.extend(schedule.readings)
            age = schedule.age(now)
            if age is not None:
                readings.append(age)
        procs = processes(calls, handle, state)
        if self._xid is not None:
            self._xid.poll()
        readings.extend(self._xid_readings(tracked.device.uuid))
        return DeviceReads(tuple(readings), links, procs)

    def _check_identity(self, tracked: _Tracked, partitions: bool) -> None:
        """`DeviceChanged` where the handle now reads a device with another UUID, or (with
        `partitions`, at the rare cadence: the MIG mode call costs 0.3 ms of a real
        driver's CPU) a GPU's MIG instances are not the ones identified (created,
        destroyed, MIG turned on or off); the GPU and its instances are then forgotten, to
        be identified again."""
        calls, handle, device = tracked.calls, tracked.handle, tracked.device
        uuid = calls.call(pynvml.nvmlDeviceGetUUID, handle)
        gpu_index = device.index.partition("/")[0]
        if uuid is not None and text(uuid) != device.uuid:
            self._changed(gpu_index, f"{device.uuid} is now {text(uuid)}")
        if device.parent_uuid or not partitions:
            return
        known = {t.device.uuid for t in list(self._tracked.values())
                 if t.device.parent_uuid == device.uuid}
        found = set()
        for mig_handle in self._mig_handles(calls, handle):
            mig_uuid = calls.call(pynvml.nvmlDeviceGetUUID, mig_handle)
            if mig_uuid is None:
                return  # cannot tell: the next check asks again
            found.add(text(mig_uuid))
        if found != known:
            self._changed(gpu_index, f"MIG instances {', '.join(sorted(known)) or 'none'} are "
                                     f"now {', '.join(sorted(found)) or 'none'}")

    def _changed(self, gpu_index: str, what: str) -> None:
        """Forget GPU `gpu_index` and its MIG instances; raise `DeviceChanged` for it."""
        forgotten = tuple(uuid for uuid, t in list(self._tracked.items())
                          if t.device.index.partition("/")[0] == gpu_index)
        for uuid in forgotten:
            del self._tracked[uuid]
        raise DeviceChanged("identity", f"changed: {what}", self._placeholder(gpu_index),
                            forgotten)

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
                facts[key] = text(fn())
            except pynvml.NVMLError:
                continue
        return facts

    @staticmethod
    def _place(tracked: _Tracked, migs: Sequence[_Tracked]) -> None:
        """A GPU's own placement (NUMA, CPUs, NVLink domain, NICs) and links; MIGs inherit."""
        handle = tracked.handle
        facts = {**tracked.device.facts, **placement_facts(handle),
                 "nearest_nics": ",".join(nearest_nics(tracked.device.pci_bus_id))}
        tracked.device = replace(tracked.device, facts=facts)
        tracked.links = LinkLayout(discover_nvlinks(handle), {}, pcie_max_readings(handle))
        inherited = {k: facts[k] for k in _INHERITED if k in facts}
        for mig in migs:
            mig.device = replace(mig.device, facts={**mig.device.facts, **inherited})

    def _without_handle(self, device: Device) -> _Tracked:
        return _Tracked(device, None, DeviceCalls(self.errors, clock=self._clock))

    def _identify(
        self, calls: DeviceCalls, handle: Any, index: str, parent: Device | None = None
    ) -> Device:
        """Read a device's identity; a MIG instance inherits its parent's PCI and architecture."""
        name = calls.call(pynvml.nvmlDeviceGetName, handle)
        uuid = calls.call(pynvml.nvmlDeviceGetUUID, handle)
        if uuid is None:  # a GPU without a UUID at all (NOT_SUPPORTED) keeps its stand-in
            calls.raise_if_failed("nvmlDeviceGetUUID")
        facts = {"driver_version": self._facts.get("driver_version", "")}
        serial = calls.call(pynvml.nvmlDeviceGetSerial, handle)
        if serial is not None:
            facts["serial"] = text(serial)
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
            pci_bus_id = text(pci.busId) if pci is not None else ""
        return Device(
            vendor=self.vendor,
            index=index,
            uuid=text(uuid) if uuid is not None else f"nvidia-index-{index}",
            model=text(name) if name is not None else UNKNOWN_MODEL,
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

