"""The saved scenario of simulated hardware, as the fakes read it: re-read when it changes.

`SimulatedHardware` saves the expanded scenario and its epoch as JSON
(``{"epoch": ..., "scenario": ...}``) in ``scenario.json`` beside the fake
NVML's state file, and replaces the file atomically on every change. Every fake
(amdsmi, pyhlml, the TPU runtime, neuron-monitor) reads it through
`SavedScenario`, so a change made by a test or by another process reaches all
of them, and all agree on the scenario time t.
"""

from __future__ import annotations

import json
import os
import pathlib
import threading
import time
from collections.abc import Mapping
from typing import Any

from ..simulation_marker import STATE_ENV

SCENARIO_FILE_NAME = "scenario.json"


def saved_scenario_path(environ: Mapping[str, str] | None = None) -> pathlib.Path | None:
    """The saved scenario beside the state file named by RAY_ACCEL_FAKE_NVML_STATE, if set."""
    state = (os.environ if environ is None else environ).get(STATE_ENV)
    return pathlib.Path(state).parent / SCENARIO_FILE_NAME if state else None


def read_once(path: pathlib.Path | None) -> dict[str, Any] | None:
    """The saved document at `path` read now, or None when there is none or it is unreadable."""
    if path is None:
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def scenario_time(document: Mapping[str, Any]) -> float:
    """Scenario time t of a saved document: seconds since its epoch, or its ``freeze_at_s``."""
    frozen = document.get("scenario", {}).get("freeze_at_s")
    return float(frozen) if frozen is not None else time.time() - document.get("epoch", 0.0)


class SavedScenario:
    """One saved scenario file, re-read when it changes; thread-safe.

    The file is looked at (one stat) at most every `recheck_s`. While it is being
    replaced, or if it vanishes, the last copy read stands.
    """

    def __init__(self, path: pathlib.Path, recheck_s: float = 0.01) -> None:
        self.path = path
        self._recheck_s = recheck_s
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._checked_at = 0.0
        self._document: dict[str, Any] = {}

    def document(self) -> dict[str, Any]:
        """The saved document, ``{"epoch", "scenario"}``.

        Raises:
            OSError, ValueError: the file was never read successfully.
        """
        with self._lock:
            now = time.monotonic()
            if self._stamp is not None and now - self._checked_at < self._recheck_s:
                return self._document
            self._checked_at = now
            try:
                info = self.path.stat()
                stamp = (info.st_ino, info.st_size, info.st_mtime_ns)
                if stamp != self._stamp:
                    self._document = json.loads(self.path.read_text(encoding="utf-8"))
                    self._stamp = stamp
            except (OSError, ValueError):
                if self._stamp is None:
                    raise
            return self._document

    def scenario(self) -> dict[str, Any]:
        """The expanded scenario."""
        return self.document()["scenario"]

    def time(self) -> float:
        """Scenario time t now."""
        return scenario_time(self.document())
