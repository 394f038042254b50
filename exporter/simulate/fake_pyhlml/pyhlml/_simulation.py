"""The simulated machine behind the fake pyhlml: a scenario's ``gaudi`` section at time t.

The scenario is the saved expanded scenario of `SimulatedHardware` (its path in
RAY_ACCEL_FAKE_PYHLML_SCENARIO, else ``scenario.json`` beside the state file
named by RAY_ACCEL_FAKE_NVML_STATE), re-read when it changes, so tests and
other processes can change it while this one runs. Each call checks, in order:
initialised, injected delay (slept, or spent on the CPU when `busy`, without the
lock: other cards keep answering), valid handle, device lost, injected error,
value defined.
"""

from __future__ import annotations

import ctypes
import os
import pathlib
import threading
from collections.abc import Mapping
from typing import Any

from ray_accel.exporter.simulate.contexts import pid_alive
from ray_accel.exporter.simulate.delays import pass_delay
from ray_accel.exporter.simulate.gaudi_scenario import WILDCARD
from ray_accel.exporter.simulate.handle_slots import HandleSlots
from ray_accel.exporter.simulate.saved import (
    SavedScenario,
    read_once,
    saved_scenario_path,
    scenario_time,
)

from .hlml_error import HLMLError
from .pyhlml_types_generated import HLML_RETURN

SCENARIO_ENV = "RAY_ACCEL_FAKE_PYHLML_SCENARIO"


def scenario_path() -> pathlib.Path | None:
    """Where the simulated hardware's scenario is, from the environment."""
    if os.environ.get(SCENARIO_ENV):
        return pathlib.Path(os.environ[SCENARIO_ENV])
    return saved_scenario_path()


def error(name: str) -> HLMLError:
    """The HLMLError pyhlml raises for HLML_ERROR_<name>."""
    return HLMLError(HLML_RETURN[f"HLML_ERROR_{name}"].value)


class Simulation:
    """The state every fake pyhlml function reads; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._saved: SavedScenario | None = None
        self._document: dict[str, Any] = {}
        self.initialized = False
        self.slots = HandleSlots()

    def _load(self) -> None:
        """Takes the saved scenario as it is now (re-read if it changed)."""
        assert self._saved is not None
        self._document = self._saved.document()

    @property
    def section(self) -> Mapping[str, Any]:
        return self._document.get("scenario", {}).get("gaudi") or {}

    def time(self) -> float:
        """Scenario time t: seconds since the epoch, or the frozen time."""
        return scenario_time(self._document)

    # -- life cycle ----------------------------------------------------------

    def init(self) -> None:
        """hlmlInit: without a gaudi section, libhlml.so "cannot be loaded"."""
        with self._lock:
            path = scenario_path()
            if self._saved is None or path != self._saved.path:
                self._saved = SavedScenario(path) if path is not None else None
            try:
                if self._saved is None:
                    raise OSError("no simulated hardware")
                self._load()
                section = self._document["scenario"].get("gaudi")
            except (OSError, ValueError, KeyError):
                section = None
            if section is None:
                print("Failed to load libhlml")  # what pyhlml's LibHLML prints
                raise error("UNINITIALIZED")
            if section.get("init_error"):
                raise error(section["init_error"])
            self.initialized = True

    def shutdown(self) -> None:
        self.initialized = False

    # -- calls ---------------------------------------------------------------

    def check(self, function: str) -> None:
        """A call that takes no device: initialised and no injected delay or error."""
        self._enter(function, None)

    def device(self, function: str, handle: Any) -> Mapping[str, Any]:
        """The scenario device a handle names, after the checks every device call makes."""
        return self._enter(function, handle)

    def workloads_on(self, device: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        """The live ``gaudi.workloads`` using this card (by its module id)."""
        with self._lock:
            workloads = list(self.section.get("workloads") or ())
        return [w for w in workloads if device.get("module_id") in w["modules"]
                and (not w["while_alive"] or pid_alive(w["pid"]))]

    def devices(self) -> list[Mapping[str, Any]]:
        with self._lock:
            return list(self.section.get("devices") or ())

    def _enter(self, function: str, handle: Any) -> Any:
        with self._lock:
            if not self.initialized:
                raise error("UNINITIALIZED")
            self._load()
            delay = self._rule("delays", function, self._position(handle))
        pass_delay(delay)
        with self._lock:
            if delay is not None:
                self._load()  # it may have changed meanwhile
            position = self._position(handle)
            device = None
            if handle is not None:
                if position is None:  # a card gone from the machine, or no handle at all
                    gone = self.slots.issued(_slot_of(handle))
                    raise error("AIP_IS_LOST" if gone else "INVALID_ARGUMENT")
                device = self.section["devices"][position]
                lost_at = device.get("lost_at_s")
                if lost_at is not None and self.time() >= lost_at:
                    raise error("AIP_IS_LOST")
            rule = self._rule("errors", function, position)
        if rule is not None:
            raise HLMLError(rule["code"])
        return device

    def _position(self, handle: Any) -> int | None:
        """The position in ``gaudi.devices`` of the card a handle names; None if none."""
        if handle is None:
            return None
        return self.slots.find(self.section.get("devices") or (), _slot_of(handle))

    def handle(self, device: Mapping[str, Any]) -> ctypes.c_void_p:
        """The handle of a card (bound to it, not to its position)."""
        self.slots.assign(self.devices())
        return ctypes.c_void_p(self.slots.slot(device) + 1)

    def _rule(self, kind: str, function: str, position: int | None) -> Mapping[str, Any] | None:
        """The first `errors` or `delays` rule of the section matching the call now."""
        t = self.time()
        for rule in self.section.get(kind) or ():
            if rule["function"] not in (function, WILDCARD):
                continue
            if rule["device"] is not None and rule["device"] != position:
                continue
            until = rule.get("until_s")
            if rule["from_s"] <= t and (until is None or t < until):
                return rule
        return None


def _slot_of(handle: Any) -> int:
    """The slot a handle carries (-1 for what is no handle of ours)."""
    value = handle.value if isinstance(handle, ctypes.c_void_p) else None
    return value - 1 if value else -1


SIMULATION = Simulation()


def not_supported() -> HLMLError:
    """What a function answers for a value the scenario does not define."""
    return error("NOT_SUPPORTED")


def import_failure() -> str | None:
    """The import failure the scenario simulates (``gaudi.import_error``), if any."""
    document = read_once(scenario_path()) or {}
    return (document.get("scenario", {}).get("gaudi") or {}).get("import_error")
