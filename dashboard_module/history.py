"""Short in-memory history for sparklines: one value per key per refresh round.

Every series shares one ring of timestamps (doubles). The values live in blocks
of `BLOCK_SERIES` series each (no object, header or dict of its own per series):
single-precision floats (NaN where the round had no value: seven significant
digits are plenty for a sparkline), except devices' utilization, a ratio the
agents' summaries carry in thousandths, kept as 16-bit thousandths. Ten
thousand nodes of eight devices at ten minutes of five-second rounds cost about
75 MB. A key not written for a whole window is forgotten and its place reused.

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
BLOCK_SERIES = 1024
# 16-bit thousandths: 0..MAX_THOUSANDTHS, ABSENT where the round had no value (a ratio
# out of that range cannot be a utilization, and is kept as absent, never clamped).
ABSENT = 0xFFFF
MAX_THOUSANDTHS = 1000


def _is_thousandths(key: str) -> bool:
    return key.startswith("device.") and key.endswith(".utilization")


class _Store:
    """Series of `slots` values of one array type, `BLOCK_SERIES` to a block."""

    def __init__(self, typecode: str, empty: float | int, slots: int) -> None:
        self.slots = slots
        self.empty = empty
        self.empty_series = array(typecode, [empty]) * slots
        self.blocks: list[array] = []
        self.last = array("q")  # per series: the round that last wrote it
        self.free: list[int] = []
        self.count = 0

    def allocate(self) -> int:
        """A series number, every value of it empty."""
        if self.free:
            number = self.free.pop()
        else:
            number, self.count = self.count, self.count + 1
            if number >= len(self.blocks) * BLOCK_SERIES:
                self.blocks.append(self.empty_series * BLOCK_SERIES)
                self.last.extend([-1] * BLOCK_SERIES)
        start = (number % BLOCK_SERIES) * self.slots
        self.blocks[number // BLOCK_SERIES][start:start + self.slots] = self.empty_series
        return number

    def values(self, number: int, order: list[int]) -> list[float | int]:
        block, start = self.blocks[number // BLOCK_SERIES], (number % BLOCK_SERIES) * self.slots
        return [block[start + slot] for slot in order]


class History:
    """A ring of `length` rounds; `record()` adds one round (`stage()` then `publish()`)."""

    def __init__(self, length: int) -> None:
        if length < 1:
            raise ValueError("history length must be at least 1")
        self.length = length
        self._slots = length + 1  # one more than shown: the slot being staged
        self._times = array("d", [_NAN] * self._slots)
        # the stores by kind: 0 single-precision floats, 1 thousandths
        self._stores = (_Store("f", _NAN, self._slots), _Store("H", ABSENT, self._slots))
        # key -> its series number in its store, times two, plus the store's kind
        self._series: dict[str, int] = {}
        self._round = -1  # the newest published round
        self._staged: list[str] | None = None  # keys to forget when the staged round shows

    def record(self, at: float, values: Mapping[str, float | None]) -> None:
        """Store one round taken at `at` (unix seconds)."""
        self.stage(at, values)
        self.publish()

    def _new_series(self, key: str) -> int:
        kind = 1 if _is_thousandths(key) else 0
        code = self._series[key] = self._stores[kind].allocate() * 2 + kind
        return code

    def stage(self, at: float, values: Mapping[str, float | None],
              pause: Callable[[], None] | None = None) -> None:
        """Write the next round into the spare slot, unseen until `publish()`; `pause()`,
        when given, is called every PAUSE_EVERY values (see collector.py)."""
        now = self._round + 1
        slot = now % self._slots
        slots = self._slots
        self._times[slot] = at
        series_of, stores = self._series, self._stores
        for number, (key, value) in enumerate(values.items()):
            if pause is not None and number % PAUSE_EVERY == PAUSE_EVERY - 1:
                pause()
            code = series_of.get(key)
            if code is None:
                code = self._new_series(key)
            store, at_series = stores[code & 1], code >> 1
            if code & 1:
                stored = ABSENT if value is None or not 0.0 <= value <= 1.0 else \
                    round(value * MAX_THOUSANDTHS)
            else:
                stored = _NAN if value is None else value
            store.blocks[at_series // BLOCK_SERIES][(at_series % BLOCK_SERIES) * slots + slot] = \
                stored
            store.last[at_series] = now
        # Only the keys this round did not write (a set difference, not a walk of all).
        forget = []
        for key in series_of.keys() - values.keys():
            code = series_of[key]
            store, at_series = stores[code & 1], code >> 1
            if now - store.last[at_series] >= self.length:
                forget.append(key)
            else:
                store.blocks[at_series // BLOCK_SERIES][
                    (at_series % BLOCK_SERIES) * slots + slot] = store.empty
        self._staged = forget

    def publish(self) -> None:
        """Show the staged round as the newest (and forget keys no round wrote for a whole
        window); nothing to do when no round is staged."""
        if self._staged is None:
            return
        for key in self._staged:
            code = self._series.pop(key)
            self._stores[code & 1].free.append(code >> 1)
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
        code = self._series.get(key)
        if code is None:
            return []
        values = self._stores[code & 1].values(code >> 1, self._order())
        if code & 1:
            return [None if v == ABSENT else v / MAX_THOUSANDTHS for v in values]
        return [None if math.isnan(v) else float(f"{v:.7g}") for v in values]

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
    timestamps = history.timestamps()
    body: dict[str, object] = {"timestamps": timestamps}

    def series(name: str) -> list[float | None]:  # one value per timestamp, None where absent
        return history.series(name) or [None] * len(timestamps)

    if scope == "cluster":
        body.update({name: series(f"cluster.{name}") for name in CLUSTER_SERIES})
    elif scope == "node":
        body.update(utilization=series(f"node.{key}.utilization"),
                    power_watts=series(f"node.{key}.power_watts"),
                    devices={uuid: _device_series(series, uuid) for uuid in devices})
    elif scope == "device":
        body.update(_device_series(series, key))
    else:
        body.update({name: [] for name in JOB_SERIES})
    return body


def _device_series(series: Callable[[str], list[float | None]],
                   uuid: str) -> dict[str, list[float | None]]:
    return {name: series(f"device.{uuid}.{name}") for name in ("utilization", "memory_used_bytes")}
