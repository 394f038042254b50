"""The agent process's own `process_*` series, read from /proc at each render.

The same families, names, help texts and values as prometheus_client's
`ProcessCollector` (which every Prometheus client library's process metrics
follow): virtual and resident memory, start time, CPU seconds, open and maximum
file descriptors. Where /proc cannot be read (not Linux), there are none.
"""

from __future__ import annotations

import contextlib
import os
import resource

from .exposition import COUNTER, GAUGE, Family

_PAGE_SIZE = resource.getpagesize()


def _clock_ticks() -> float:
    try:
        return float(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError):
        return 100.0


def _boot_time(proc: str) -> float:
    """The host's boot time (seconds since the epoch), 0 when /proc says nothing."""
    try:
        with open(os.path.join(proc, "stat"), "rb") as stat:
            for line in stat:
                if line.startswith(b"btime "):
                    return float(line.split()[1])
    except OSError:
        pass
    return 0.0


def _one(name: str, documentation: str, value: float, kind: str = GAUGE) -> Family:
    family = Family(name, documentation, kind)
    family.add_metric((), value)
    return family


class ProcessMetrics:
    """Reads this process's `process_*` families from `proc` (default /proc)."""

    def __init__(self, proc: str = "/proc") -> None:
        self._proc = proc
        self._ticks = _clock_ticks()
        self._boot_time = _boot_time(proc)

    def families(self) -> list[Family]:
        """The families now; empty where /proc is not there."""
        if not self._boot_time:
            return []
        own = os.path.join(self._proc, "self")
        found: list[Family] = []
        try:
            with open(os.path.join(own, "stat"), "rb") as stat:
                parts = stat.read().split(b")")[-1].split()
            found += [
                _one("process_virtual_memory_bytes", "Virtual memory size in bytes.",
                     float(parts[20])),
                _one("process_resident_memory_bytes", "Resident memory size in bytes.",
                     float(parts[21]) * _PAGE_SIZE),
                _one("process_start_time_seconds",
                     "Start time of the process since unix epoch in seconds.",
                     float(parts[19]) / self._ticks + self._boot_time),
                _one("process_cpu_seconds_total",
                     "Total user and system CPU time spent in seconds.",
                     float(parts[11]) / self._ticks + float(parts[12]) / self._ticks, COUNTER),
            ]
        except OSError:
            pass
        with contextlib.suppress(OSError):
            found += self._descriptors(own)
        return found

    @staticmethod
    def _descriptors(own: str) -> list[Family]:
        open_fds = _one("process_open_fds", "Number of open file descriptors.",
                        len(os.listdir(os.path.join(own, "fd"))))
        with open(os.path.join(own, "limits"), "rb") as limits:
            for line in limits:
                if line.startswith(b"Max open file"):
                    return [open_fds, _one("process_max_fds",
                                           "Maximum number of open file descriptors.",
                                           float(line.split()[3]))]
        return [open_fds]
