"""The TPU backend: Google TPU chips through libtpu's runtime metric service.

Chips are found like Ray finds them (``/dev/accel*``, ``/dev/vfio/<group>``,
`chips.py`). Their values come from libtpu's gRPC runtime metric service while
a workload runs (`runtime.py`), else from the GKE TPU device plugin's
Prometheus endpoint when ``TPU_DEVICE_PLUGIN_ADDR`` is set (`device_plugin.py`);
with neither, a chip reports no values but stays up while its device file is
there. The processes holding a chip are those with its device file open
(`processes.py`); they carry no per-process values, their pid is what ties a
Ray worker to the chip.

Device identity: index = the chip's index on the host; uuid =
``TPU-<uuid5>`` of "<host>/<chip>", where host is "<TPU_NAME>/<TPU_WORKER_ID>"
(the slice and worker, unique in a cluster) or else the host name, and chip
is the PCI bus id or else the device file's name: stable across restarts,
unique across the slice's hosts.
"""

from __future__ import annotations

import os
import socket
import time
import uuid as uuidlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...model import Device, DeviceSample, ProcessSample
from ..base import Backend, BackendAbsent
from .chips import Chip, dev_dir, find_chips, model_from_type
from .device_plugin import PluginUnavailable, fetch, parse, plugin_address
from .latency import LatencyWindow
from .processes import holders, pids_of
from .shared import PerCycle
from .slice_info import slice_facts

if TYPE_CHECKING:
    from . import probes
    from .runtime import RuntimeCalls

# The runtime metric service's client (grpcio, protobuf: about 10 MiB resident) is
# imported once chips are found, so a host without TPUs never holds it.

_UUID_NAMESPACE = uuidlib.UUID("6f1d3a52-7c43-4f0e-9a55-1d1b2a0c7e11")


def chip_uuid(host: str, chip: Chip) -> str:
    """The stable uuid of a chip (see the module docstring)."""
    key = chip.pci_bus_id or os.path.basename(chip.path)
    return f"TPU-{uuidlib.uuid5(_UUID_NAMESPACE, f'{host}/{key}')}"


@dataclass(frozen=True, slots=True)
class _Tracked:
    device: Device
    chip: Chip


class TpuBackend(Backend):
    """Reads Google TPU chips through libtpu's runtime metrics (or the GKE device plugin)."""

    name = "tpu"
    vendor = "google"

    def __init__(self) -> None:
        super().__init__()
        self._tracked: dict[str, _Tracked] = {}
        self._calls: RuntimeCalls | None = None
        self._plugin = ""
        self._facts: dict[str, str] = {}
        self._windows: dict[str, LatencyWindow] = {}
        self._readout = PerCycle(self._read_all)
        self._holders = PerCycle(self._scan_processes)

    def open(self) -> Sequence[Device]:
        found = find_chips()
        if not found:
            dev = dev_dir()
            raise BackendAbsent(
                f"no TPU chips found ({dev}/accel* or a Google PCI device behind {dev}/vfio/*)")
        placement = slice_facts()
        host = (f"{placement['tpu_slice_name']}/{placement.get('tpu_worker_id', '0')}"
                if placement.get("tpu_slice_name") else socket.gethostname())
        type_generation, type_model = model_from_type(placement.get("accelerator_type", ""))
        self._tracked = {}
        for chip in found:
            facts = {**chip.facts, **placement, "device_file": chip.path}
            generation = chip.generation or type_generation
            if generation:
                facts["architecture"] = generation
            device = Device(self.vendor, str(chip.index), chip_uuid(host, chip),
                            chip.model or type_model or "TPU", chip.pci_bus_id, facts=facts)
            self._tracked[device.uuid] = _Tracked(device, chip)
        from .runtime import RuntimeCalls, runtime_ports

        if self._calls is not None:
            self._calls.close()
        self._calls = RuntimeCalls(runtime_ports(), self.errors)
        self._plugin = plugin_address()
        self._windows = {}
        self._facts = {"runtime_metrics_ports": ",".join(map(str, self._calls.ports)),
                       **({"device_plugin": self._plugin} if self._plugin else {}),
                       **placement}
        return [t.device for t in self._tracked.values()]

    def facts(self) -> Mapping[str, str]:
        return dict(self._facts)

    def sample(self, device: Device) -> DeviceSample:
        from . import probes

        started, taken_at = time.monotonic(), time.time()
        tracked = self._tracked[device.uuid]
        if not os.path.exists(tracked.chip.path):
            return DeviceSample(device=device, up=False, taken_at=taken_at,
                                errors={"device_file": "not_found"})
        readout = self._readout.get(device.uuid)
        if readout.silent:
            return DeviceSample(device=device, up=False, taken_at=taken_at,
                                errors={"every metric": readout.silent})
        pids = pids_of(self._holders.get(device.uuid), tracked.chip.path)
        return DeviceSample(
            device=device,
            up=True,
            taken_at=taken_at,
            duration_s=time.monotonic() - started,
            readings=tuple(probes.chip_readings(readout, tracked.chip.index)),
            processes=tuple(ProcessSample(pid) for pid in pids),
            errors=dict(readout.errors),
        )

    def close(self) -> None:
        if self._calls is not None:
            self._calls.close()
            self._calls = None

    # -- one cycle, all chips ------------------------------------------------------

    def _read_all(self) -> probes.Readout:
        from . import probes
        from .runtime import ServiceDown

        readout = probes.Readout()
        calls = self._calls
        if calls is None:
            return readout
        calls.begin_cycle()
        try:
            probes.runtime_gauges(calls, readout, len(self._tracked))
            probes.runtime_latencies(calls, readout, self._windows)
            readout.source = "runtime"
        except ServiceDown:
            readout.errors["GetRuntimeMetric"] = "unavailable"
        if self._plugin:
            self._read_plugin(readout)
        if not readout.chips and not readout.shared:
            # The service answers, but with no metric: the chips cannot be read at all (a
            # service that is absent is only no workload on the chips).
            readout.silent = calls.silence() or ""
        readout.errors.update(dict(probes.errors_of(calls, {})))
        return readout

    def _read_plugin(self, readout: probes.Readout) -> None:
        from . import probes

        try:
            plugin = parse(fetch(self._plugin))
        except PluginUnavailable:
            self.errors.count("unavailable", "device_plugin")
            readout.errors["device_plugin"] = "unavailable"
            return
        probes.plugin_values(plugin, readout)
        if readout.source != "runtime":
            readout.source = "device_plugin"

    def _scan_processes(self) -> dict[str, tuple[int, ...]]:
        return holders(t.chip.path for t in self._tracked.values())
