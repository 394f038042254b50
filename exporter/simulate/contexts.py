"""Simulated CUDA contexts: real processes showing up on simulated GPUs.

On real hardware a process appears in NVML's process lists once it creates a
CUDA context on a device. On simulated hardware a process calls
`open_context()` instead: the devices in its CUDA_VISIBLE_DEVICES (which Ray
sets for each worker from the GPUs it assigned) list its pid, with the memory
and engine use given, for as long as the process lives. Ray workers inherit
the simulated hardware from the raylet's environment. On an AMD GPU the entry
has amdsmi's shape (GFX engine use) and HIP_VISIBLE_DEVICES, where Ray sets
it, names the devices.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from typing import Any

from . import ScenarioError, SimulatedHardware, load_scenario
from .amd_scenario import AMD, vendor_of
from .nvml_gpm import zero_signals as zero_gpm_signals

_VISIBLE = ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")  # Ray sets the first on AMD nodes


def _device_targets(scenario: Mapping[str, Any], entries: list[str]) -> list[dict[str, Any]]:
    """The scenario's device (or MIG device) objects named by CUDA_VISIBLE_DEVICES entries."""
    devices = scenario["devices"]
    targets = []
    for entry in entries:
        if entry.isdigit():
            if int(entry) < len(devices):
                targets.append(devices[int(entry)])
            continue
        for device in devices:
            candidates = [device, *(device.get("mig_devices") or [])]
            targets.extend(c for c in candidates if str(c.get("uuid", "")).startswith(entry))
    return targets


def pid_alive(pid: int) -> bool:
    """True while a process with this pid exists (also one we may not signal)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def open_context(memory_bytes: int = 0, sm_percent: int = 0, memory_percent: int = 0,
                 sm_activity_percent: float | None = None) -> int:
    """List this process on its visible simulated GPUs; returns how many devices it is on.

    Does nothing (returns 0) when CUDA_VISIBLE_DEVICES is empty. With it unset,
    every device is visible, as for CUDA. `sm_activity_percent` is the SM
    activity GPM sees from it where that is not `sm_percent`: a kernel that spins
    (waiting on a hung collective) keeps the GPU busy with its SMs nearly idle.
    """
    hardware = SimulatedHardware.attach()
    visible = next((os.environ[v] for v in _VISIBLE if v in os.environ), None)
    entry = {"pid": os.getpid(), "used_memory_bytes": int(memory_bytes),
             "sm_percent": int(sm_percent), "memory_percent": int(memory_percent),
             "while_alive": True}
    if sm_activity_percent is not None:
        entry["sm_activity_percent"] = float(sm_activity_percent)
    amd_entry = {"pid": entry["pid"], "used_memory_bytes": entry["used_memory_bytes"],
                 "gfx_percent": entry["sm_percent"], "while_alive": True}
    placed = []

    def add(scenario: dict[str, Any]) -> None:
        entries = ([e.strip() for e in visible.split(",") if e.strip()] if visible is not None
                   else [str(i) for i in range(len(scenario["devices"]))])
        targets = _device_targets(scenario, entries)
        for target in targets:
            # keep other live processes; forget ended ones and this pid's old entry
            kept = [p for p in target.get("processes") or [] if p["pid"] != entry["pid"]
                    and (not p.get("while_alive") or pid_alive(p["pid"]))]
            target["processes"] = [*kept, dict(amd_entry if vendor_of(target) == AMD else entry)]
        placed.extend(targets)

    hardware.modify(add)
    return len(placed)


def for_real_processes(scenario: str | os.PathLike[str] | Mapping[str, Any]) -> dict[str, Any]:
    """A scenario whose devices are driven by the processes that open contexts on them.

    The scenario's own made-up processes are removed, utilization starts at
    zero and memory at what the driver holds, and each device adds the memory
    and engine use of the live processes on it. AMD GPUs are driven so on a
    node without NVIDIA GPUs, and keep their scenario values beside them.
    """
    document = copy.deepcopy(load_scenario(scenario))
    # the workload runs on the NVIDIA GPUs where there are any (see demo/run.py)
    amd_driven = all(vendor_of(d) == AMD for d in document["devices"])
    for device in document["devices"]:
        if vendor_of(device) == AMD:
            if not amd_driven:
                continue
            device.update(processes=[], load_from_processes=True, gfx_activity_percent=0,
                          umc_activity_percent=0, vram_used_mb=0)
            device.pop("xcc_gfx_busy_percent", None)  # each XCC follows the processes' load
            for partition in device.get("partitions") or []:
                partition.update(processes=[], gfx_activity_percent=0, vram_used_mb=0)
            continue
        device.update(processes=[], load_from_processes=True, utilization_gpu_percent=0,
                      utilization_memory_percent=0, memory_used_bytes=0)
        zero_gpm_signals(device)
        for mig in device.get("mig_devices") or []:
            mig["processes"] = []
            zero_gpm_signals(mig)
    try:
        return load_scenario(document)
    except ScenarioError as error:  # a shipped scenario that cannot be adapted is a bug
        raise RuntimeError(f"cannot drive {document['name']} by processes: {error}") from error
