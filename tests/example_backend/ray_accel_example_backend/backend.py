"""The example backend: what a third-party ray-accel backend implements.

The vendor library is initialised once in `open()`; `sample()` reads one
device and never raises for a failing value: the value is left out and the
failure counted. Values use the catalog's names and base units.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence

from ray_accel.exporter import catalog as m
from ray_accel.exporter.backends.base import Backend, BackendUnavailable
from ray_accel.exporter.model import Device, DeviceSample, Reading, labels_of

from . import vendor

MIB = 1024 * 1024
_PERMANENT = {"NOT_SUPPORTED"}  # answers that will not change: do not ask again
_DEVICE_DOWN = {"DEVICE_LOST"}


class _DeviceDown(Exception):
    pass


class ExampleBackend(Backend):
    """Reads the made-up vendor's accelerators."""

    name = "example"
    vendor = "example"

    def __init__(self) -> None:
        super().__init__()
        self._unsupported: dict[str, set[str]] = {}

    def open(self) -> Sequence[Device]:
        try:
            vendor.init()
        except vendor.VendorError as error:
            raise BackendUnavailable(f"example library unavailable: {error.status}") from None
        devices = []
        for index in range(vendor.device_count()):
            try:
                uuid = vendor.serial(index)
            except vendor.VendorError:
                uuid = f"example-index-{index}"  # listed all the same, and reported down
            devices.append(Device(vendor=self.vendor, index=str(index), uuid=uuid,
                                  model="Example Accelerator X1"))
            self._unsupported[uuid] = set()
        return devices

    def facts(self) -> Mapping[str, str]:
        return {"driver_version": "1.0.0"}

    def sample(self, device: Device) -> DeviceSample:
        errors: dict[str, str] = {}
        index = int(device.index)

        def read(function, *args):
            if function.__name__ in self._unsupported[device.uuid]:
                return None
            try:
                return function(*args)
            except vendor.VendorError as error:
                self.errors.count(error.status.lower(), function.__name__)
                if error.status in _DEVICE_DOWN:
                    raise _DeviceDown(function.__name__) from None
                if error.status in _PERMANENT:
                    self._unsupported[device.uuid].add(function.__name__)
                errors[function.__name__] = error.status.lower()
                return None

        readings = []
        try:
            busy = read(vendor.busy_percent, index)
            if busy is not None:
                readings.append(Reading(m.GPU_UTILIZATION, busy / 100,
                                        labels_of({"task": "general"})))
            memory = read(vendor.memory_mib, index)
            if memory is not None:
                readings.append(Reading(m.MEMORY_USAGE, memory[0] * MIB))
                readings.append(Reading(m.MEMORY_LIMIT, memory[1] * MIB))
            milliwatts = read(vendor.power_mw, index)
            if milliwatts is not None:
                readings.append(Reading(m.POWER, milliwatts / 1000))
            if os.environ.get("EXAMPLE_UNCATALOGUED"):
                # A backend's mistake, for the tests: a metric the catalog lacks (the agent
                # drops it and counts it in ray_accelerator_agent_errors_total).
                readings.append(Reading("example.fan.speed", 3000.0))
        except _DeviceDown as down:
            return DeviceSample(device, up=False, taken_at=time.time(),
                                errors={str(down): "device_lost"})
        unsupported = {name: "not_supported" for name in self._unsupported[device.uuid]}
        return DeviceSample(device, up=True, taken_at=time.time(), readings=tuple(readings),
                            errors={**unsupported, **errors})
