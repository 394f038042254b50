"""How a process tells it runs on simulated hardware, without loading the simulator.

`SimulatedHardware` (exporter/simulate/) names the fake NVML's state file in
this variable for every process it starts or activates, a raylet started on
simulated hardware included, whose workers and agents inherit it.
"""

from __future__ import annotations

import os

STATE_ENV = "RAY_ACCEL_FAKE_NVML_STATE"


def simulated_environment() -> bool:
    """True when this process inherited simulated hardware (e.g. from a raylet started on it)."""
    return bool(os.environ.get(STATE_ENV))
