"""Runs ``neuron-monitor`` and keeps its latest report; restarts it when it dies.

neuron-monitor writes one complete JSON report per line to stdout, once per
period. A reader thread parses each line as it arrives (`ReportReader`) and
keeps the resulting view, so sampling only ever reads memory and never waits
for the subprocess. A supervisor thread restarts a monitor that exits, or that
stays silent for `silent_restart_s`, after a backoff that doubles (from
`backoff_s` up to `max_backoff_s`) while restarts produce no report.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from ..base import ErrorTally
from .report import RUNTIME_GROUPS, SYSTEM_GROUPS, ReportReader, ReportView

log = logging.getLogger(__name__)

FUNCTION = "neuron-monitor"  # the `function` label of the backend's error counts
_STDERR_TAIL = 300


def monitor_config(period_s: float) -> dict[str, Any]:
    """A neuron-monitor configuration: every group the backend reads, all Neuron apps."""
    # "1s" is the documented form; sub-second periods in Go duration syntax ("500ms")
    millis = max(round(period_s * 1000), 1)
    period = f"{millis // 1000}s" if millis % 1000 == 0 else f"{millis}ms"
    return {
        "period": period,
        "neuron_runtimes": [{"tag_filter": ".*",
                             "metrics": [{"type": name} for name in RUNTIME_GROUPS]}],
        "system_metrics": [{"type": name} for name in SYSTEM_GROUPS],
    }


class Monitor:
    """One supervised neuron-monitor subprocess and its latest report."""

    def __init__(self, executable: str, period_s: float, errors: ErrorTally,
                 backoff_s: float = 0.5, max_backoff_s: float = 30.0,
                 silent_restart_s: float = 15.0) -> None:
        self.executable = executable
        self.period_s = period_s
        self._errors = errors
        self._backoff = (backoff_s, max_backoff_s)
        self._silent_restart_s = silent_restart_s
        self._reader = ReportReader()
        self._lock = threading.Lock()
        self._latest: ReportView | None = None
        self._raw: Mapping[str, Any] | None = None
        self._reports = 0
        self._last_line_at = 0.0
        self._first = threading.Event()
        self._stop = threading.Event()
        self._proc: subprocess.Popen[str] | None = None
        self._folder = Path(tempfile.mkdtemp(prefix="ray-accel-neuron-"))
        self._config = self._folder / "monitor.json"
        self._config.write_text(json.dumps(monitor_config(period_s)), encoding="utf-8")
        self.starts = 0
        self.last_problem = ""
        self._thread = threading.Thread(target=self._supervise, name="neuron-monitor",
                                        daemon=True)

    def start(self) -> None:
        """Starts the monitor (and its supervisor) in the background."""
        self._thread.start()

    def wait_first(self, timeout_s: float) -> Mapping[str, Any] | None:
        """The first report (raw JSON), waiting up to `timeout_s`; None if none came."""
        self._first.wait(timeout_s)
        with self._lock:
            return self._raw

    def latest(self) -> ReportView | None:
        """The view of the latest report, however old (None before the first one)."""
        with self._lock:
            return self._latest

    def latest_raw(self) -> Mapping[str, Any] | None:
        """The latest report as neuron-monitor wrote it."""
        with self._lock:
            return self._raw

    def close(self) -> None:
        """Stops the monitor and the threads; removes the configuration file."""
        self._stop.set()
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        shutil.rmtree(self._folder, ignore_errors=True)

    # -- supervisor --------------------------------------------------------------

    def _supervise(self) -> None:
        delay = self._backoff[0]
        while not self._stop.is_set():
            before = self._reports
            rc = self._run_once()
            if self._stop.is_set():
                break
            self._errors.count("exited", FUNCTION)
            log.warning("%s", self.last_problem or f"neuron-monitor exited ({rc})")
            if self._reports > before:
                delay = self._backoff[0]
            if self._stop.wait(delay):
                break
            delay = min(delay * 2, self._backoff[1])

    def _run_once(self) -> int | None:
        stderr_path = self._folder / "stderr.txt"
        self.starts += 1
        try:
            with stderr_path.open("w", encoding="utf-8") as stderr:
                proc = subprocess.Popen([self.executable, "-c", str(self._config)],
                                        stdout=subprocess.PIPE, stderr=stderr, text=True,
                                        stdin=subprocess.DEVNULL)
        except OSError as error:
            self._errors.count("start_failed", FUNCTION)
            self.last_problem = f"cannot run {self.executable}: {error}"
            return None
        self._proc = proc
        started = time.monotonic()
        reader = threading.Thread(target=self._read, args=(proc.stdout,),
                                  name="neuron-monitor-reader", daemon=True)
        reader.start()
        while reader.is_alive():
            reader.join(0.25)
            if self._stop.is_set():
                break
            silent_for = time.monotonic() - max(self._last_line_at, started)
            if silent_for > self._silent_restart_s and proc.poll() is None:
                self._errors.count("silent", FUNCTION)
                self.last_problem = f"neuron-monitor wrote nothing for {silent_for:.0f} s"
                proc.kill()
        if proc.poll() is None:
            proc.terminate()
        try:
            rc = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
        reader.join(timeout=5)
        if not self.last_problem.startswith("neuron-monitor wrote nothing"):
            tail = _tail(stderr_path)
            self.last_problem = f"neuron-monitor exited with status {rc}" + (
                f": {tail}" if tail else "")
        return rc

    def _read(self, stream: IO[str] | None) -> None:
        if stream is None:
            return
        with contextlib.closing(stream):
            for line in stream:
                self._last_line_at = time.monotonic()
                self._take(line)

    def _take(self, line: str) -> None:
        line = line.strip()
        if not line:
            return
        try:
            report = json.loads(line)
        except ValueError:
            report = None
        if not isinstance(report, dict):
            self._errors.count("malformed", FUNCTION)
            return
        try:
            view = self._reader.read(report)
        except Exception:  # a report shaped in a way we did not foresee: skip it
            log.exception("cannot read a neuron-monitor report")
            self._errors.count("internal", FUNCTION)
            return
        for group, kind in view.problems.items():  # once per report, not per runtime
            self._errors.count(kind, group)
        with self._lock:
            self._latest = view
            self._raw = report
            self._reports += 1
            self.last_problem = ""
        self._first.set()


def _tail(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""
    return " ".join(text.splitlines()[-2:])[-_STDERR_TAIL:]
