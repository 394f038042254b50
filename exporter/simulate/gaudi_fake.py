"""Serves a scenario's ``gaudi`` section through the simulated ``pyhlml`` package.

The fake runs in the process that imports it: there is nothing to start. It
needs its folder first on the import path and the saved scenario's location
(which `SimulatedHardware` rewrites on every `update`/`modify`; the fake
re-reads it when it changes).

HLML lists no processes, so real processes (e.g. Ray workers holding ``HPU``)
make their cards busy by calling `open_modules()`: it adds their load to the
cards of their HABANA_VISIBLE_MODULES for as long as they live.
"""

from __future__ import annotations

import copy
import importlib
import os
import pathlib
import sys
from collections.abc import Mapping
from typing import Any

from . import SimulatedHardware, load_scenario
from .contexts import pid_alive

# Holds the simulated `pyhlml` package.
FAKE_PYHLML_DIR = pathlib.Path(__file__).resolve().parent / "fake_pyhlml"
# Where the fake reads the scenario (see fake_pyhlml/pyhlml/_simulation.py).
SCENARIO_ENV = "RAY_ACCEL_FAKE_PYHLML_SCENARIO"
MODULE = "pyhlml"
VISIBLE_MODULES_ENV = "HABANA_VISIBLE_MODULES"  # what Ray sets for a worker holding HPUs


def activate_fake_pyhlml() -> None:
    """Makes ``import pyhlml`` in this process load the simulated package.

    A ``pyhlml`` imported before from elsewhere (the real habana-pyhlml) is
    forgotten, so that the next import finds the simulated one.
    """
    fake = str(FAKE_PYHLML_DIR)
    if fake in sys.path:
        sys.path.remove(fake)
    sys.path.insert(0, fake)
    loaded = sys.modules.get(MODULE)
    if loaded is not None and not getattr(loaded, "SIMULATED", False):
        for name in [n for n in sys.modules if n == MODULE or n.startswith(f"{MODULE}.")]:
            del sys.modules[name]
    importlib.invalidate_caches()


class GaudiFake:
    """The simulated pyhlml serving one `SimulatedHardware`."""

    def __init__(self, scenario_path: pathlib.Path) -> None:
        self.scenario_path = scenario_path

    def environ(self) -> dict[str, str]:
        """PYTHONPATH with the fake first, and where the scenario is."""
        from . import FAKE_AMDSMI_DIR

        # SimulatedHardware.environ() merges fakes' variables over its own, so the
        # PYTHONPATH given here keeps the simulated amdsmi it puts there too.
        parts = [str(FAKE_PYHLML_DIR), str(FAKE_AMDSMI_DIR)]
        parts += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                  if p and p not in parts]
        return {"PYTHONPATH": os.pathsep.join(parts), SCENARIO_ENV: str(self.scenario_path)}

    def activate(self) -> None:
        """Makes this process's ``import pyhlml`` find the fake, reading this scenario."""
        os.environ[SCENARIO_ENV] = str(self.scenario_path)
        activate_fake_pyhlml()

    def close(self) -> None:
        """Nothing runs: the saved scenario is removed with the hardware's folder."""


def start(hardware: SimulatedHardware) -> GaudiFake:
    """The fake for `hardware` (whose scenario has a ``gaudi`` section)."""
    return GaudiFake(hardware.scenario_path)


def open_modules(memory_bytes: int = 0, utilization_percent: float = 0.0) -> list[int]:
    """Make this process's cards busy until it exits; returns their module ids.

    The cards are those of HABANA_VISIBLE_MODULES (module ids, as Ray sets
    it for a worker holding ``HPU``); with it unset, every card. Each gets
    `memory_bytes` more memory in use and `utilization_percent` more load.
    """
    hardware = SimulatedHardware.attach()
    visible = os.environ.get(VISIBLE_MODULES_ENV)
    placed: list[int] = []

    def add(scenario: dict[str, Any]) -> None:
        section = scenario.get("gaudi")
        if section is None:
            return
        modules = [d["module_id"] for d in section["devices"]]
        if visible is not None:
            wanted = {int(m) for m in visible.split(",") if m.strip().isdigit()}
            modules = [m for m in modules if m in wanted]
        kept = [w for w in section.get("workloads") or () if w["pid"] != os.getpid()
                and (not w["while_alive"] or pid_alive(w["pid"]))]
        if modules:
            kept.append({"pid": os.getpid(), "modules": modules,
                         "utilization_percent": utilization_percent,
                         "memory_bytes": int(memory_bytes), "while_alive": True})
        section["workloads"] = kept
        placed[:] = modules

    hardware.modify(add)
    return placed


def driven_by_workloads(scenario: str | os.PathLike[str] | Mapping[str, Any]) -> dict[str, Any]:
    """A scenario whose Gaudi cards are idle and empty but for the processes of `open_modules`."""
    document = copy.deepcopy(load_scenario(scenario))
    for device in (document.get("gaudi") or {}).get("devices", ()):
        device.update(utilization_percent=0, memory_utilization_percent=0, memory_used_bytes=0)
    return load_scenario(document)
