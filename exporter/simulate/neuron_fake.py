"""The simulated AWS Neuron family: a fake ``neuron-monitor`` serving a scenario's ``neuron``.

`start` writes a ``neuron-monitor`` launcher (a shell script running
``fake_neuron/monitor.py`` with this interpreter) into the hardware's state
folder; `environ` puts it first on PATH and names it in
RAY_ACCEL_NEURON_MONITOR, the variable the Neuron backend honours. The fake
re-reads the saved scenario for every report, so `SimulatedHardware.update`
and `modify` reach it.

Real processes (e.g. Ray workers holding ``neuron_cores``) show up as Neuron
runtimes by calling `open_runtime()`: it lists the caller's pid on the
NeuronCores of its NEURON_RT_VISIBLE_CORES for as long as it lives.
"""

from __future__ import annotations

import copy
import os
import pathlib
import shlex
import shutil
import sys
from collections.abc import Mapping
from typing import Any

from ..backends.neuron.locate import MONITOR_ENV
from . import SimulatedHardware, load_scenario
from .contexts import pid_alive
from .fake_neuron.monitor import SCENARIO_ENV

__all__ = ["NeuronFake", "driven_by_processes", "open_runtime", "parse_cores", "start"]

MONITOR_MODULE = f"{__package__}.fake_neuron.monitor"
BIN_DIR_NAME = "neuron-bin"


def parse_cores(value: str) -> list[int]:
    """NEURON_RT_VISIBLE_CORES ("0,1", "4-7", "0-1,6") as core indices."""
    cores: list[int] = []
    for entry in (e.strip() for e in value.split(",")):
        if not entry:
            continue
        first, dash, last = entry.partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise ValueError(f"invalid NeuronCore entry {entry!r}")
        cores.extend(range(int(first), int(last if dash else first) + 1))
    return cores


class NeuronFake:
    """The fake ``neuron-monitor`` of one `SimulatedHardware` (see `FamilyFake`)."""

    def __init__(self, hardware: SimulatedHardware) -> None:
        self.bin_dir = hardware.state_path.parent / BIN_DIR_NAME
        self.scenario_path = hardware.scenario_path
        self.bin_dir.mkdir(parents=True, exist_ok=True)
        self.monitor = self.bin_dir / "neuron-monitor"
        _write_launcher(self.monitor, self.scenario_path)

    def environ(self) -> dict[str, str]:
        """PATH with the fake first, and RAY_ACCEL_NEURON_MONITOR naming it."""
        path = os.environ.get("PATH", "")
        entries = [str(self.bin_dir), *(p for p in path.split(os.pathsep)
                                        if p and p != str(self.bin_dir))]
        return {MONITOR_ENV: str(self.monitor), SCENARIO_ENV: str(self.scenario_path),
                "PATH": os.pathsep.join(entries)}

    def activate(self) -> None:
        """Makes this process (and the children it starts) find the fake."""
        os.environ.update(self.environ())

    def close(self) -> None:
        """Removes the launcher."""
        shutil.rmtree(self.bin_dir, ignore_errors=True)


def _write_launcher(path: pathlib.Path, scenario_path: pathlib.Path) -> None:
    path.write_text(
        "#!/bin/sh\n"
        "# Simulated neuron-monitor (ray-accel): takes the real tool's flags.\n"
        f"{SCENARIO_ENV}={shlex.quote(str(scenario_path))} "
        f"exec {shlex.quote(sys.executable)} -m {MONITOR_MODULE} \"$@\"\n",
        encoding="utf-8")
    path.chmod(0o755)


def start(hardware: SimulatedHardware) -> NeuronFake:
    """The fake serving `hardware`'s ``neuron`` section."""
    return NeuronFake(hardware)


def open_runtime(memory_bytes: int = 0, utilization_percent: float = 0.0,
                 tag: str = "") -> int:
    """List this process as a Neuron runtime on its visible NeuronCores; returns how many.

    The cores come from NEURON_RT_VISIBLE_CORES (which Ray sets for a worker
    holding ``neuron_cores``); with it unset, every core is used. The runtime
    holds `memory_bytes` of tensors on each core and keeps each busy at
    `utilization_percent`, until the process exits.
    """
    hardware = SimulatedHardware.attach()
    visible = os.environ.get("NEURON_RT_VISIBLE_CORES")
    placed: list[int] = []

    def add(scenario: dict[str, Any]) -> None:
        section = scenario.get("neuron")
        if section is None:
            return
        total = section["neuron_device_count"] * section["neuroncore_per_device_count"]
        cores = (list(range(total)) if visible is None
                 else [c for c in parse_cores(visible) if c < total])
        kept = [r for r in section.get("runtimes") or () if r["pid"] != os.getpid()
                and (not r.get("while_alive") or pid_alive(r["pid"]))]
        if cores:
            kept.append({"pid": os.getpid(), "tag": tag or str(os.getpid()), "cores": cores,
                         "utilization_percent": utilization_percent,
                         "core_memory_bytes": {"tensors": int(memory_bytes)},
                         "host_memory_bytes": 64 * 2**20, "while_alive": True})
        section["runtimes"] = kept
        placed[:] = cores

    hardware.modify(add)
    return len(placed)


def driven_by_processes(scenario: str | os.PathLike[str] | Mapping[str, Any]) -> dict[str, Any]:
    """A scenario whose Neuron runtimes are only the processes that call `open_runtime`."""
    document = copy.deepcopy(load_scenario(scenario))
    if document.get("neuron") is not None:
        document["neuron"]["runtimes"] = []
    return load_scenario(document)
