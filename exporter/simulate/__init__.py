"""Simulated hardware: a fake ``libnvidia-ml.so.1`` and a fake ``amdsmi``, driven by scenario files.

The unmodified ``pynvml`` binding (nvidia-ml-py) and Ray's vendored copy load the
fake library like the real one. A scenario (see docs/simulation.md) describes the
GPUs and how their values move over time; `SimulatedHardware` builds the library
(cached), writes the scenario as a state file and tells processes where to find
both::

    hw = SimulatedHardware.start("hgx-h200")
    subprocess.run([...], env={**os.environ, **hw.environ()})  # a child sees 8 H200s
    hw.activate()                                              # or this process does
    import pynvml; pynvml.nvmlInit()

A scenario's AMD devices (``"vendor": "amd"``) are served by a fake ``amdsmi``
package (``fake_amdsmi/``) with the real module's names and return shapes;
`activate` and `environ` make ``import amdsmi`` find it.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import fcntl
import importlib
import json
import os
import pathlib
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from ..backends.base import DEV_DIR_ENV
from .build import BuildError, build_library
from .nvml_state import render_state
from .saved import SCENARIO_FILE_NAME, STATE_ENV
from .scenario import ScenarioError, available_scenarios, load_scenario

__all__ = [
    "FAKE_AMDSMI_DIR",
    "FAMILY_FAKES",
    "STATE_ENV",
    "BuildError",
    "FamilyFake",
    "ScenarioError",
    "SimulatedHardware",
    "available_scenarios",
    "load_scenario",
]

STATE_FILE_NAME = "fakenvml.state"
LOCK_FILE_NAME = ".lock"
# Holds the simulated `amdsmi` package: first on sys.path / PYTHONPATH when simulating.
FAKE_AMDSMI_DIR = pathlib.Path(__file__).resolve().parent / "fake_amdsmi"
# Fakes of other accelerator families, started for a scenario with their section
# (FAMILY_SECTIONS in scenario.py): section -> module of this package defining
# `start(hardware) -> FamilyFake`.
FAMILY_FAKES = {
    "tpu": "tpu_fake",
    "neuron": "neuron_fake",
    "gaudi": "gaudi_fake",
}


class FamilyFake(Protocol):
    """The running fake of one accelerator family, serving a `SimulatedHardware`.

    It reads the family's section of the saved scenario (`scenario_path`) on each
    request, so `update` and `modify` reach it like they reach the fake NVML.
    """

    def environ(self) -> dict[str, str]:
        """Variables that make a child process find this fake."""

    def activate(self) -> None:
        """Makes this process find this fake."""

    def close(self) -> None:
        """Stops whatever the fake runs (servers, files)."""


class SimulatedHardware:
    """One simulated machine: the built library plus a state file with its scenario.

    Create it with `start`. The scenario can be replaced while processes are
    using it (`update`, `set_processes`); they see the change within ~20 ms.
    """

    scenario_name: str
    library_path: pathlib.Path
    state_path: pathlib.Path

    def __init__(
        self,
        scenario: dict[str, Any],
        library_path: pathlib.Path,
        state_path: pathlib.Path,
        epoch: float,
        owns_state_dir: bool,
    ) -> None:
        """Use `start` instead."""
        self._scenario = scenario
        self.scenario_name = scenario["name"]
        self.library_path = library_path
        self.state_path = state_path
        self._epoch = epoch
        self._owns_state_dir = owns_state_dir
        self._lock = threading.Lock()
        self._last_mtime_ns = 0
        self._family_fakes: list[FamilyFake] = []

    @classmethod
    def start(
        cls,
        scenario: str | os.PathLike[str] | Mapping[str, Any],
        state_dir: os.PathLike[str] | str | None = None,
        at_s: float = 0.0,
    ) -> SimulatedHardware:
        """Builds (or reuses) the library and writes the scenario's state file.

        Args:
            scenario: a shipped scenario name ("hgx-h200"), a JSON file path or a dict.
            state_dir: where to write the state file; a fresh temporary folder if None
                (removed by `close`).
            at_s: scenario time now (the epoch lies that many seconds in the past), so
                a late part of a scenario's period plays without waiting for it.

        Raises:
            ScenarioError: the scenario is invalid.
            BuildError: the library could not be compiled.
        """
        if not at_s >= 0:
            raise ValueError(f"at_s must be a number of seconds >= 0, got {at_s!r}")
        expanded = load_scenario(scenario)
        library = build_library()
        owns = state_dir is None
        folder = pathlib.Path(tempfile.mkdtemp(prefix="fakenvml-") if owns else state_dir)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            hw = cls(expanded, library, folder / STATE_FILE_NAME, time.time() - at_s, owns)
        except BaseException:  # a signal or error before `hw` can clean up after itself
            if owns:
                shutil.rmtree(folder, ignore_errors=True)
            raise
        try:
            hw._write(expanded)
            for section, module in FAMILY_FAKES.items():
                if section in expanded:
                    fake = importlib.import_module(f".{module}", __package__)
                    hw._family_fakes.append(fake.start(hw))
        except BaseException:
            hw.close()
            raise
        return hw

    @property
    def scenario_path(self) -> pathlib.Path:
        """The saved expanded scenario (JSON: epoch and scenario), rewritten on each change."""
        return self.state_path.parent / SCENARIO_FILE_NAME

    @classmethod
    def attach(cls, state_path: os.PathLike[str] | str | None = None) -> SimulatedHardware:
        """The simulated hardware another process started, found by its state file.

        `state_path` defaults to the one named by RAY_ACCEL_FAKE_NVML_STATE, which
        processes started on simulated hardware inherit.

        Raises:
            ScenarioError: no simulated hardware is found there.
        """
        path = pathlib.Path(state_path or os.environ.get(STATE_ENV, ""))
        saved = path.parent / SCENARIO_FILE_NAME
        if not str(path) or not saved.is_file():
            raise ScenarioError(f"no simulated hardware at {str(path)!r} (set {STATE_ENV})")
        document = json.loads(saved.read_text(encoding="utf-8"))
        return cls(document["scenario"], build_library(), path, document["epoch"], False)

    @property
    def scenario(self) -> dict[str, Any]:
        """A copy of the current expanded scenario."""
        with self._lock:
            return copy.deepcopy(self._scenario)

    @property
    def epoch(self) -> float:
        """Unix time at which the simulation's t was 0."""
        return self._epoch

    def environ(self) -> dict[str, str]:
        """Environment variables that make a child process use this hardware."""
        library_dir = str(self.library_path.parent)
        current = os.environ.get("LD_LIBRARY_PATH", "")
        python_path = os.environ.get("PYTHONPATH", "")
        variables = {
            "LD_LIBRARY_PATH": f"{library_dir}:{current}" if current else library_dir,
            "PYTHONPATH": (f"{FAKE_AMDSMI_DIR}{os.pathsep}{python_path}" if python_path
                           else str(FAKE_AMDSMI_DIR)),
            STATE_ENV: str(self.state_path),
            DEV_DIR_ENV: str(self.device_files_dir),
        }
        for fake in self._family_fakes:
            for name, value in fake.environ().items():
                if name in _SEARCH_PATHS and variables.get(name):
                    value = _joined_paths(value, variables[name])
                variables[name] = value
        return variables

    def activate(self) -> None:
        """Makes this process use the hardware: a later ``nvmlInit`` binds to it.

        Preloads the library globally, so the binding's ``CDLL("libnvidia-ml.so.1")``
        resolves to it, points the library at this state file, and puts the
        simulated ``amdsmi`` first on ``sys.path`` (a later ``amdsmi_init``
        binds to this hardware).
        """
        os.environ[STATE_ENV] = str(self.state_path)
        os.environ[DEV_DIR_ENV] = str(self.device_files_dir)
        ctypes.CDLL(str(self.library_path), mode=ctypes.RTLD_GLOBAL)
        activate_fake_amdsmi()
        for fake in self._family_fakes:
            fake.activate()

    def update(self, scenario: Mapping[str, Any]) -> None:
        """Replaces the scenario, keeping the epoch (t continues from where it is).

        The scenario is validated first: on ScenarioError nothing changes.
        """
        expanded = load_scenario(scenario)
        with self._locked():
            self._write(expanded)

    def modify(self, change: Callable[[dict[str, Any]], None]) -> None:
        """Applies `change` to the current scenario, as saved by whichever process wrote last.

        Safe against other processes modifying the same hardware at the same
        time. The result is validated first: on ScenarioError nothing changes.
        """
        with self._locked():
            current = self._saved_scenario()
            change(current)
            self._write(load_scenario(current))

    def set_processes(
        self, device_index: int, processes: list[dict[str, Any]], *, mig_index: int | None = None
    ) -> None:
        """Replaces the process list of one GPU (or one of its MIG devices)."""
        scenario = self.scenario
        devices = scenario["devices"]
        if not 0 <= device_index < len(devices):
            raise ScenarioError(f"no device {device_index} (there are {len(devices)})")
        target = devices[device_index]
        if mig_index is not None:
            migs = target.get("mig_devices") or []
            if not 0 <= mig_index < len(migs):
                raise ScenarioError(
                    f"devices[{device_index}] has no MIG device {mig_index} (there are {len(migs)})"
                )
            target = migs[mig_index]
        target["processes"] = copy.deepcopy(list(processes))
        self.update(scenario)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Holds this hardware's lock, shared by every process that writes its state."""
        with open(self.state_path.parent / LOCK_FILE_NAME, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _saved_scenario(self) -> dict[str, Any]:
        saved = self.scenario_path
        if saved.is_file():
            return json.loads(saved.read_text(encoding="utf-8"))["scenario"]
        return self.scenario

    def elapsed_s(self) -> float:
        """Seconds since the epoch (wall clock; ignores ``freeze_at_s``)."""
        return time.time() - self._epoch

    def close(self) -> None:
        """Stops the family fakes; removes the state folder if `start` created it.

        The fake NVML library then reports no driver.
        """
        for fake in self._family_fakes:
            fake.close()
        self._family_fakes = []
        if self._owns_state_dir:
            shutil.rmtree(self.state_path.parent, ignore_errors=True)

    def __enter__(self) -> SimulatedHardware:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write(self, expanded: dict[str, Any]) -> None:
        """Atomically replaces the state file and the saved scenario (temporary file + rename)."""
        saved = json.dumps({"epoch": self._epoch, "scenario": expanded})
        with self._lock:
            _replace(self.scenario_path, saved)
            # The library notices changes by inode/size/mtime; a recycled inode
            # of the same size must still differ, so mtimes strictly increase,
            # also across the processes that write this state.
            with contextlib.suppress(FileNotFoundError):
                self._last_mtime_ns = max(self._last_mtime_ns, self.state_path.stat().st_mtime_ns)
            mtime_ns = max(time.time_ns(), self._last_mtime_ns + 1_000)
            _replace(self.state_path, render_state(expanded, self._epoch), mtime_ns)
            self._last_mtime_ns = mtime_ns
            self._scenario = expanded
            self.scenario_name = expanded["name"]
            self._write_device_files(expanded.get("devices", []))

    @property
    def device_files_dir(self) -> pathlib.Path:
        """The folder standing for /dev: nvidia<N> per simulated NVIDIA GPU, kfd for AMD ones.

        Backends look there to tell a library that fails on a host with the
        devices (a fault) from one absent with its devices (nothing to report).
        """
        return self.state_path.parent / "dev"

    def _write_device_files(self, devices: list[dict[str, Any]]) -> None:
        folder = self.device_files_dir
        folder.mkdir(exist_ok=True)
        nvidia = sum(1 for d in devices if d.get("vendor", "nvidia") == "nvidia")
        wanted = {f"nvidia{i}" for i in range(nvidia)}
        if any(d.get("vendor") == "amd" for d in devices):
            wanted.add("kfd")
        for path in [*folder.glob("nvidia[0-9]*"), folder / "kfd"]:
            if path.name not in wanted:
                path.unlink(missing_ok=True)
        for name in wanted:
            (folder / name).touch()


_SEARCH_PATHS = ("PATH", "PYTHONPATH")


def _joined_paths(first: str, then: str) -> str:
    """Two search paths as one, `first`'s entries first, each entry once."""
    entries: list[str] = []
    for entry in (*first.split(os.pathsep), *then.split(os.pathsep)):
        if entry and entry not in entries:
            entries.append(entry)
    return os.pathsep.join(entries)


def activate_fake_amdsmi() -> None:
    """Makes ``import amdsmi`` in this process load the simulated package.

    An ``amdsmi`` imported before from elsewhere (the PyPI wheel) is forgotten,
    so that the next import finds the simulated one.
    """
    fake = str(FAKE_AMDSMI_DIR)
    if fake in sys.path:
        sys.path.remove(fake)
    sys.path.insert(0, fake)
    loaded = sys.modules.get("amdsmi")
    if loaded is not None and not getattr(loaded, "SIMULATED", False):
        for name in [n for n in sys.modules if n == "amdsmi" or n.startswith("amdsmi.")]:
            del sys.modules[name]
    importlib.invalidate_caches()


def _replace(path: pathlib.Path, text: str, mtime_ns: int | None = None) -> None:
    """Writes `text` to `path` atomically (temporary file + rename)."""
    fd, tmp = tempfile.mkstemp(prefix=".fakenvml-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        if mtime_ns is not None:
            os.utime(tmp, ns=(mtime_ns, mtime_ns))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
