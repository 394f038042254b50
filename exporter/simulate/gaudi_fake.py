"""Serves a scenario's ``gaudi`` section through the simulated ``pyhlml`` package.

The fake runs in the process that imports it: there is nothing to start. It
needs its folder first on the import path and the saved scenario's location
(which `SimulatedHardware` rewrites on every `update`/`modify`; the fake
re-reads it when it changes).
"""

from __future__ import annotations

import importlib
import os
import pathlib
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from . import SimulatedHardware

# Holds the simulated `pyhlml` package.
FAKE_PYHLML_DIR = pathlib.Path(__file__).resolve().parent / "fake_pyhlml"
# Where the fake reads the scenario (see fake_pyhlml/pyhlml/_simulation.py).
SCENARIO_ENV = "RAY_ACCEL_FAKE_PYHLML_SCENARIO"
MODULE = "pyhlml"


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
