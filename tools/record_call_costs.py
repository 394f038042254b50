"""Records what the agent's costly NVML calls cost when repeated, for tools/record_real_gpu.py.

The simulated node's CPU cost per call (the `delays` of exporter/simulate/scenarios/
hgx-h200.json) comes from one real H200 run, where the energy counter was read once
(7.6 ms of wall time): one call cannot tell a first call's cost from every call's.
Here, on GPU 0, each of those calls is made `REPEATS` times, `SPACING_S` apart (after
the agent's backend read every GPU twice), each with its wall and CPU microseconds:
- `nvmlDeviceGetTotalEnergyConsumption`, the rare cadence's one read;
- `nvmlDeviceGetFieldValues` with the same counter as field 83
  (`TOTAL_ENERGY_CONSUMPTION`): whether the driver answers it for less through the
  field-value call, which the agent makes anyway;
- `nvmlDeviceGetFieldValues` with the PCIe byte counters (fields 197/198);
- `nvmlDeviceGetPcieReplayCounter`, on the slow cadence;
- `nvmlDeviceGetProcessUtilization`, every cycle while processes hold the GPU;
- `nvmlDeviceGetPowerUsage`, every cycle, for comparison;
- `nvmlEventSetWait` with a 0 ms timeout on a set with GPU 0's XID events, as each
  device read asks it (exporter/backends/nvidia/xid.py): NVML_ERROR_TIMEOUT, nothing
  waiting, is its common answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pynvml
from record_gpm import timed

REPEATS = 10
SPACING_S = 0.2


def _calls(handle: Any) -> dict[str, Callable[[], Any]]:
    return {
        "nvmlDeviceGetTotalEnergyConsumption":
            lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(handle),
        "nvmlDeviceGetFieldValues[83]": lambda: pynvml.nvmlDeviceGetFieldValues(
            handle, [pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION]),
        "nvmlDeviceGetFieldValues[197,198]": lambda: pynvml.nvmlDeviceGetFieldValues(
            handle, [pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES,
                     pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES]),
        "nvmlDeviceGetPcieReplayCounter": lambda: pynvml.nvmlDeviceGetPcieReplayCounter(handle),
        "nvmlDeviceGetProcessUtilization":
            lambda: pynvml.nvmlDeviceGetProcessUtilization(handle, 0),
        "nvmlDeviceGetPowerUsage": lambda: pynvml.nvmlDeviceGetPowerUsage(handle),
    }


def record_call_costs() -> dict[str, list[dict[str, Any]]]:
    """function -> each repeat's cost ({wall_us, cpu_us}, with the error where it raised)."""
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    calls = _calls(handle)
    event_set = pynvml.nvmlEventSetCreate()
    try:
        pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError,
                                        event_set)
        calls["nvmlEventSetWait[0 ms]"] = lambda: pynvml.nvmlEventSetWait(event_set, 0)
        costs: dict[str, list[dict[str, Any]]] = {name: [] for name in calls}
        for _ in range(REPEATS):
            for name, call in calls.items():
                costs[name].append(timed(call)[1])
            time.sleep(SPACING_S)
    finally:
        pynvml.nvmlEventSetFree(event_set)
    return costs
