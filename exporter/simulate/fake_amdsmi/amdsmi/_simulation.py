"""The simulated machine behind the fake amdsmi: a scenario's AMD devices at time t.

The scenario comes from ``scenario.json`` beside the state file named by
RAY_ACCEL_FAKE_NVML_STATE (written by `SimulatedHardware`), re-read when it
changes, so tests and other processes can update it while this one runs. Calls
follow the fake NVML's order of checks: initialised, injected delay, valid
handle, lost GPU, injected error. A `busy` delay spends its time on the CPU.
"""

from __future__ import annotations

import ctypes
import math
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ray_accel.exporter.simulate.amd_scenario import AMD, AMD_WILDCARD, AMDSMI_STATUS, vendor_of
from ray_accel.exporter.simulate.contexts import pid_alive
from ray_accel.exporter.simulate.delays import pass_delay
from ray_accel.exporter.simulate.handle_slots import HandleSlots
from ray_accel.exporter.simulate.saved import (
    SavedScenario,
    read_once,
    saved_scenario_path,
    scenario_time,
)

from .amdsmi_exception import (
    AmdSmiLibraryException,
    AmdSmiParameterException,
    AmdSmiRetryException,
    AmdSmiTimeoutException,
)

_PARTITION_BITS = 8  # handle value = (the device's slot + 1) << 8 | partition id
_NO_MACHINE: Mapping[str, Any] = {"devices": [], "errors": [], "delays": []}


@dataclass(frozen=True)
class Target:
    """What a processor handle names: a device of the scenario, or one of its partitions."""

    index: int  # position in the scenario's devices (what error rules name)
    ordinal: int  # position among the AMD devices
    device: Mapping[str, Any]
    partition_id: int = 0
    slot: int = 0  # what its handles carry (handle_slots.py)

    @property
    def handle(self) -> int:
        """The value of the device's handle (its partition 0)."""
        return handle_value(self.slot)

    @property
    def partition(self) -> Mapping[str, Any] | None:
        """The secondary partition's own keys (None for the device itself, partition 0)."""
        if self.partition_id == 0:
            return None
        return self.device["partitions"][self.partition_id - 1]

    def value(self, key: str) -> Any:
        """A key of the partition, falling back to the device's."""
        partition = self.partition
        if partition is not None and partition.get(key) is not None:
            return partition[key]
        return self.device.get(key)


def handle_value(slot: int, partition_id: int = 0) -> int:
    """The pointer value of the handle for a device (by its slot) and partition."""
    return (slot + 1) << _PARTITION_BITS | partition_id


def library_error(code: int) -> AmdSmiLibraryException:
    """The exception amdsmi's _check_res raises for a status."""
    if code == AMDSMI_STATUS["RETRY"]:
        return AmdSmiRetryException()
    if code == AMDSMI_STATUS["TIMEOUT"]:
        return AmdSmiTimeoutException()
    return AmdSmiLibraryException(code)


class Simulation:
    """The state every fake amdsmi function reads; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._saved: SavedScenario | None = None
        self._document: dict[str, Any] = {}
        self.initialized = False
        self._slots = HandleSlots()

    # -- the scenario --------------------------------------------------------

    def _load(self) -> None:
        """Takes the saved scenario as it is now (re-read if it changed)."""
        if self._saved is None:  # before amdsmi_init (amdsmi_get_lib_version needs none)
            path = saved_scenario_path()
            if path is None:
                self._document = {"epoch": time.time(), "scenario": _NO_MACHINE}
                return
            self._saved = SavedScenario(path)
        self._document = self._saved.document()

    @property
    def scenario(self) -> Mapping[str, Any]:
        return self._document["scenario"]

    def time(self) -> float:
        """Scenario time t: seconds since the epoch, or the frozen time."""
        return scenario_time(self._document)

    def amd_devices(self) -> list[tuple[int, Mapping[str, Any]]]:
        """(scenario index, device) of every AMD device."""
        return [(i, d) for i, d in enumerate(self.scenario["devices"]) if vendor_of(d) == AMD]

    # -- life cycle ----------------------------------------------------------

    def init(self) -> None:
        """amdsmi_init: find the scenario; no scenario or no AMD device means no driver."""
        with self._lock:
            path = saved_scenario_path()
            if path is None:
                raise library_error(AMDSMI_STATUS["DRIVER_NOT_LOADED"])
            if self._saved is None or path != self._saved.path:
                self._saved = SavedScenario(path)
            try:
                self._load()
            except (OSError, ValueError):
                raise library_error(AMDSMI_STATUS["DRIVER_NOT_LOADED"]) from None
        self.enter("amdsmi_init", device_call=False, check_init=False)
        with self._lock:
            if not self.amd_devices():
                raise library_error(AMDSMI_STATUS["DRIVER_NOT_LOADED"])
            self.initialized = True

    def shut_down(self) -> None:
        self.initialized = False

    # -- calls ---------------------------------------------------------------

    def enter(self, function: str, handle: Any = None, *, device_call: bool = True,
              check_init: bool = True) -> Target | None:
        """Checks one call: initialised, delay, valid handle, lost GPU, injected error.

        Returns what the handle names (None for calls that take no handle).
        """
        if device_call and not isinstance(handle, ctypes.c_void_p):
            raise AmdSmiParameterException(handle, ctypes.c_void_p)
        value = handle.value if device_call else None
        with self._lock:
            if check_init and not self.initialized:
                raise library_error(AMDSMI_STATUS["NOT_INIT"])
            self._load()
            found = self._resolve(value)
            delay = self._rule("delays", function, found.index if found else None)
        pass_delay(delay)  # without the lock: other devices keep answering
        with self._lock:
            target = self._resolve(value)
            if device_call:
                if target is None:  # a device gone from the machine, or no handle at all
                    gone = self._slots.issued((value >> _PARTITION_BITS) - 1)
                    raise library_error(AMDSMI_STATUS["NOT_FOUND" if gone else "INVAL"])
                lost_at = target.device.get("lost_at_s")
                if lost_at is not None and self.time() >= lost_at:
                    raise library_error(AMDSMI_STATUS["NOT_FOUND"])
            error = self._rule("errors", function, target.index if target else None)
        if error is not None:
            raise library_error(error["code"])
        return target

    def _rule(self, kind: str, function: str, index: int | None) -> Mapping[str, Any] | None:
        t = self.time()
        for rule in self.scenario.get(kind) or ():
            if rule["function"] not in (function, AMD_WILDCARD):
                continue
            if rule["device"] is not None and rule["device"] != index:
                continue
            until = rule.get("until_s")
            if rule["from_s"] <= t and (until is None or t < until):
                return rule
        return None

    def _resolve(self, value: int | None) -> Target | None:
        if not value:
            return None
        slot, partition_id = (value >> _PARTITION_BITS) - 1, value & ((1 << _PARTITION_BITS) - 1)
        devices = self.amd_devices()
        ordinal = self._slots.find([device for _, device in devices], slot)
        if ordinal is None:
            return None
        index, device = devices[ordinal]
        if partition_id > len(device.get("partitions") or ()):
            return None
        return Target(index, ordinal, device, partition_id, slot)

    # -- lookups the functions share -----------------------------------------

    def handles(self) -> list[int]:
        """Handle values of every logical GPU: each device, then its secondary partitions."""
        with self._lock:
            return [handle_value(self._slots.slot(device), p)
                    for _, device in self.amd_devices()
                    for p in range(1 + len(device.get("partitions") or ()))]

    def devices(self) -> list[Target]:
        """Every physical GPU (partition 0)."""
        with self._lock:
            devices = self.amd_devices()
            self._slots.assign([device for _, device in devices])
            return [Target(index, ordinal, device, slot=self._slots.slot(device))
                    for ordinal, (index, device) in enumerate(devices)]

    def live_processes(self, processes: Any) -> list[Mapping[str, Any]]:
        """A process list without `while_alive` processes whose pid has ended, nor those
        outside their `from_s`-`until_s` window."""
        t = self.time()
        return [p for p in processes or ()
                if (not p.get("while_alive") or pid_alive(p["pid"]))
                and (p.get("from_s") or 0) <= t < (p.get("until_s") or math.inf)]


SIMULATION = Simulation()


def not_supported() -> AmdSmiLibraryException:
    """What a function answers for a value the scenario does not define."""
    return library_error(AMDSMI_STATUS["NOT_SUPPORTED"])


def import_failure() -> str | None:
    """The import failure the scenario simulates (``amdsmi_import_error``), if any."""
    document = read_once(saved_scenario_path()) or {}
    return document.get("scenario", {}).get("amdsmi_import_error")
