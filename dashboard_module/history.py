"""Short in-memory history for sparklines: one value per key per refresh round.

Every series shares one ring of timestamps (doubles); each key keeps a fixed
array of single-precision floats (NaN where the round had no value: seven
significant digits are plenty for a sparkline), so ten thousand nodes of eight
devices at ten minutes of five-second rounds cost about 80 MB. A key not written
for a whole window is forgotten.

A round is written in two steps so that the writing (180,000 values at 10,000
nodes) can happen beside the event loop: `stage()` (any thread) fills the ring's
one spare slot, which no reader sees, and `publish()` (the thread that reads)
makes it the newest round at once. Readers between two publishes all see the
same rounds, so timestamps and series read one after the other line up.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Iterable, Mapping

_NAN = float("nan")
PAUSE_EVERY = 4096


class History:
    """A ring of `length` rounds; `record()` adds one round (`stage()` then `publish()`)."""

    def __init__(self, length: int) -> None:
        if length < 1:
            raise ValueError("history length must be at least 1")
        self.length = length
        self._slots = length + 1  # one more than shown: the slot being staged
        self._times = array("d", [_NAN] * self._slots)
        self._series: dict[str, array] = {}
        self._last_round: dict[str, int] = {}
        self._round = -1  # the newest published round
        self._staged: list[str] | None = None  # keys to forget when the staged round shows

    def record(self, at: float, values: Mapping[str, float | None]) -> None:
        """Store one round taken at `at` (unix seconds)."""
        self.stage(at, values)
        self.publish()

    def stage(self, at: float, values: Mapping[str, float | None],
              pause: Callable[[], None] | None = None) -> None:
        """Write the next round into the spare slot, unseen until `publish()`; `pause()`,
        when given, is called every PAUSE_EVERY values (see collector.py)."""
        now = self._round + 1
        slot = now % self._slots
        self._times[slot] = at
        series_of, last_round = self._series, self._last_round
        for number, (key, value) in enumerate(values.items()):
            if pause is not None and number % PAUSE_EVERY == PAUSE_EVERY - 1:
                pause()
            series = series_of.get(key)
            if series is None:
                series = series_of[key] = array("f", [_NAN] * self._slots)
            series[slot] = _NAN if value is None else value
            last_round[key] = now
        # Only the keys this round did not write (a set difference, not a walk of all).
        forget = []
        for key in series_of.keys() - values.keys():
            if now - last_round[key] >= self.length:
                forget.append(key)
            else:
                series_of[key][slot] = _NAN
        self._staged = forget

    def publish(self) -> None:
        """Show the staged round as the newest (and forget keys no round wrote for a whole
        window); nothing to do when no round is staged."""
        if self._staged is None:
            return
        for key in self._staged:
            del self._series[key], self._last_round[key]
        self._staged = None
        self._round += 1

    def _order(self) -> list[int]:
        count = min(self._round + 1, self.length)
        first = self._round - count + 1
        return [(first + i) % self._slots for i in range(count)]

    def timestamps(self) -> list[float]:
        return [self._times[i] for i in self._order()]

    def series(self, key: str) -> list[float | None]:
        """Values of `key` in time order (None where absent); empty if unknown."""
        values = self._series.get(key)
        if values is None:
            return []
        return [None if math.isnan(values[i]) else float(f"{values[i]:.7g}")
                for i in self._order()]

    def many(self, keys: Iterable[str]) -> dict[str, list[float | None]]:
        return {key: self.series(key) for key in keys}


CLUSTER_SERIES = ("utilization", "memory_used_bytes", "power_watts", "idle_allocations",
                  "devices_down")
JOB_SERIES = ("devices_held", "idle_allocations", "utilization", "memory_used_bytes")


def memory_series(history: History, scope: str, key: str = "",
                  devices: Iterable[str] = ()) -> dict[str, object]:
    """What `history` holds for a scope, named as the Prometheus history names it.

    `scope` is cluster, node (with the node's device `devices`), device (`key` its
    uuid) or job: the rounds keep no per-job series, so a job's are empty.
    """
    body: dict[str, object] = {"timestamps": history.timestamps()}
    if scope == "cluster":
        body.update({name: history.series(f"cluster.{name}") for name in CLUSTER_SERIES})
    elif scope == "node":
        body.update(utilization=history.series(f"node.{key}.utilization"),
                    power_watts=history.series(f"node.{key}.power_watts"),
                    devices={uuid: _device_series(history, uuid) for uuid in devices})
    elif scope == "device":
        body.update(_device_series(history, key))
    else:
        body.update({name: [] for name in JOB_SERIES})
    return body


def _device_series(history: History, uuid: str) -> dict[str, list[float | None]]:
    return {name: history.series(f"device.{uuid}.{name}")
            for name in ("utilization", "memory_used_bytes")}
