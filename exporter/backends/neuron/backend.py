"""The Neuron backend: AWS Trainium and Inferentia devices through ``neuron-monitor``.

The backend runs neuron-monitor with a configuration it writes (every metric
group the backend reads, one period for all) and reads its JSON stream in the
background (`Monitor`); `sample()` only reads the latest report. Each Neuron
device (chip) is a device; each of its NeuronCores is a device of its own that
names the chip as parent, the way NVIDIA MIG instances and AMD compute
partitions do, because Ray hands out ``neuron_cores``: slot i of a worker's
``neuron_cores`` is NeuronCore i, whose ``neuroncore`` fact is its index in
NEURON_RT_VISIBLE_CORES. Memory and ECC counters are the chip's; utilization
and the memory of each runtime are per core.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ...model import Device, DeviceSample
from ..base import Backend, BackendUnavailable, unavailable
from .locate import find_monitor
from .monitor import FUNCTION, Monitor
from .probes import chip_processes, chip_readings, core_processes, core_readings
from .report import HARDWARE_INFO, Hardware, ReportError, ReportView, hardware_of

DEFAULT_PERIOD_S = 1.0
OPEN_TIMEOUT_S = 15.0
_DEVICE_NODES = ("/dev/neuron[0-9]*",)  # the Neuron driver's device files


@dataclass(frozen=True)
class _Place:
    """Where a device sits: its chip, and for a NeuronCore its global core index."""

    chip: int
    cores: tuple[int, ...]  # the chip's cores, or the one core
    is_core: bool


def device_model(hardware: Hardware) -> str:
    """The chip's model name, from neuron_device_type ("trainium2" -> "Trainium2")."""
    return hardware.device_type[:1].upper() + hardware.device_type[1:]


class NeuronBackend(Backend):
    """Reads Neuron devices and their NeuronCores from neuron-monitor's report stream."""

    name = "neuron"
    vendor = "aws"

    def __init__(self, period_s: float = DEFAULT_PERIOD_S, stale_after_s: float | None = None,
                 open_timeout_s: float = OPEN_TIMEOUT_S, backoff_s: float = 0.5) -> None:
        """`stale_after_s`: how old the latest report may be before devices count as down
        (default 5 periods, at least 5 s)."""
        super().__init__()
        self.period_s = period_s
        self.stale_after_s = stale_after_s or max(5 * period_s, 5.0)
        self._open_timeout_s = open_timeout_s
        self._backoff_s = backoff_s
        self._monitor: Monitor | None = None
        self._places: dict[str, _Place] = {}
        self._hardware: Hardware | None = None
        self._facts: dict[str, str] = {}
        self._stale_lock = threading.Lock()
        self._stale_counted = -1.0

    @property
    def monitor(self) -> Monitor | None:
        """The running neuron-monitor supervisor (None before `open`)."""
        return self._monitor

    def open(self) -> Sequence[Device]:
        try:
            executable = find_monitor()
        except BackendUnavailable as error:  # absent, unless the host has Neuron devices
            raise unavailable(str(error), _DEVICE_NODES) from None
        self.close()
        monitor = Monitor(executable, self.period_s, self.errors, backoff_s=self._backoff_s,
                          silent_restart_s=max(3 * self.stale_after_s, 15.0))
        monitor.start()
        raw = monitor.wait_first(self._open_timeout_s)
        try:
            if raw is None:
                why = monitor.last_problem or "it is still starting"
                raise BackendUnavailable(
                    f"neuron-monitor ({executable}) gave no report within "
                    f"{self._open_timeout_s:g} s: {why}")
            try:
                hardware = hardware_of(raw)
            except ReportError as error:
                raise BackendUnavailable(str(error)) from None
            if hardware.device_count <= 0 or hardware.cores_per_device <= 0:
                raise unavailable("no Neuron devices found (neuron-monitor reports none)",
                                  _DEVICE_NODES)
        except BackendUnavailable:
            monitor.close()
            raise
        self._monitor, self._hardware = monitor, hardware
        self._facts = {"neuron_device_type": hardware.device_type,
                       "neuron_device_version": hardware.device_version,
                       "neuroncore_version": hardware.core_version,
                       "instance_type": hardware.instance_type,
                       "neuron_monitor": executable}
        return self._discover(hardware)

    def _discover(self, hardware: Hardware) -> list[Device]:
        node = hardware.instance_id or socket.gethostname()
        model = device_model(hardware)
        core_name = f"NeuronCore-{hardware.core_version}" if hardware.core_version else "NeuronCore"
        per_chip = hardware.cores_per_device
        devices: list[Device] = []
        self._places = {}
        for chip in range(hardware.device_count):
            cores = tuple(range(chip * per_chip, (chip + 1) * per_chip))
            parent = Device(self.vendor, str(chip), f"neuron-{node}-nd{chip}", model,
                            facts={"architecture": hardware.device_version,
                                   "neuroncores": str(per_chip)})
            devices.append(parent)
            self._places[parent.uuid] = _Place(chip, cores, is_core=False)
            for local, core in enumerate(cores):
                child = Device(self.vendor, f"{chip}/{local}", f"neuron-{node}-nc{core}",
                               f"{model} {core_name}", parent_uuid=parent.uuid,
                               facts={"architecture": core_name, "neuroncore": str(core)})
                devices.append(child)
                self._places[child.uuid] = _Place(chip, (core,), is_core=True)
        return devices

    def facts(self) -> Mapping[str, str]:
        return {k: v for k, v in self._facts.items() if v}

    def sample(self, device: Device) -> DeviceSample:
        place = self._places[device.uuid]
        monitor, hardware = self._monitor, self._hardware
        view = monitor.latest() if monitor is not None else None
        taken_at = time.time()
        if view is None or hardware is None:
            return DeviceSample(device=device, up=False, taken_at=taken_at,
                                errors={FUNCTION: "no_report"})
        if time.monotonic() - view.received_at > self.stale_after_s:
            self._count_stale(view.received_at)
            why = (monitor.last_problem if monitor is not None else "") or "stale"
            return DeviceSample(device=device, up=False, taken_at=taken_at,
                                errors={FUNCTION: f"stale: {why}" if why != "stale" else why})
        gone = _not_reported(view, place.chip)
        if gone:
            return DeviceSample(device=device, up=False, taken_at=view.taken_at,
                                errors={HARDWARE_INFO: gone})
        if place.is_core:
            readings = tuple(core_readings(view, place.cores[0]))
            processes = core_processes(view, place.cores[0])
        else:
            readings = tuple(chip_readings(view, place.chip, place.cores,
                                           hardware.device_memory_bytes))
            processes = chip_processes(view, place.cores)
        return DeviceSample(device=device, up=True, taken_at=view.taken_at, readings=readings,
                            processes=processes, errors=dict(view.problems))

    def _count_stale(self, received_at: float) -> None:
        """Counts a stale report once, not once per device and cycle."""
        with self._stale_lock:
            if self._stale_counted != received_at:
                self._stale_counted = received_at
                self.errors.count("stale", FUNCTION)

    def close(self) -> None:
        monitor, self._monitor = self._monitor, None
        if monitor is not None:
            monitor.close()


def _not_reported(view: ReportView, chip: int) -> str:
    """Why the latest report does not vouch for the device `chip` ("" where it does): its
    hardware section reports an error (a device not responding) or no longer lists it."""
    if view.hardware_problem:
        return view.hardware_problem
    if view.hardware is not None and chip >= view.hardware.device_count:
        return f"not reported (the host reports {view.hardware.device_count} devices)"
    return ""
