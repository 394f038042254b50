"""Ready-made changes to a scenario, played on running simulated hardware.

`hung_collective` makes devices look like they spin on a hung collective:
utilization pinned high while their NVLink (fields 138/139) and PCIe (197/198)
byte counters stop moving: each counter becomes a constant at its value at the
moment the hang starts (`rate_per_s` 0), so a counter read after that moment
never goes back. (Read before it, it shows the same constant: as a scenario
of its own, the devices have been hung since the start.) Where a device has GPM
signals, they take the spinning kernel's signature: the graphics engine as busy
as the utilization, SM activity `HUNG_SM_PERCENT`, every pipe and link idle.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from .nvml_gpm import zero_signals
from .signals import counter_at

NVLINK_BYTE_FIELDS = ("138", "139")
HUNG_SM_PERCENT = 2.0  # one small kernel polling for peers keeps a few SMs busy
PCIE_BYTE_FIELDS = ("197", "198")


def _stop_counter(counter: Any, at_s: float) -> Any:
    """The counter held at its value at `at_s` (from then on it is flat)."""
    if not isinstance(counter, Mapping) or "rate_per_s" not in counter:
        return counter
    return {"start": counter_at(counter, at_s), "rate_per_s": 0}


def hung_collective(scenario: Mapping[str, Any], devices: Iterable[int], at_s: float,
                    utilization_percent: float = 100.0) -> dict[str, Any]:
    """A copy of an expanded scenario in which `devices` hang from `at_s` on (scenario time)."""
    changed = copy.deepcopy(dict(scenario))
    for index in devices:
        device = changed["devices"][index]
        device["utilization_gpu_percent"] = utilization_percent
        fields = device.get("fields") or {}
        for number in (*NVLINK_BYTE_FIELDS, *PCIE_BYTE_FIELDS):
            value = fields.get(number)
            if isinstance(value, Mapping) and "*" in value:  # per link (scope) map
                fields[number] = {scope: _stop_counter(v, at_s) for scope, v in value.items()}
            elif value is not None:
                fields[number] = _stop_counter(value, at_s)
        if device.get("gpm"):
            zero_signals(device)
            device["gpm"].update(graphics_util=utilization_percent, sm_util=HUNG_SM_PERCENT)
    return changed


def play_hung_collective(hardware: Any, devices: Iterable[int],
                         utilization_percent: float = 100.0) -> None:
    """Hang `devices` of running `SimulatedHardware` now (other processes see it within ~20 ms)."""
    at_s = max(hardware.elapsed_s(), 0.0)
    devices = list(devices)

    def change(scenario: dict[str, Any]) -> None:
        scenario.update(hung_collective(scenario, devices, at_s, utilization_percent))

    hardware.modify(change)
