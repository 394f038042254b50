"""Compact frames: one sampling cycle's values, kept cheaply for recording.

A frame keeps, per device, its readings (device, link and process ones) as one
float array under a key tuple shared with the previous frame while the set of
series does not change, plus up/stale and the per-call errors of the cycle.
Static identity (the `Device`s) is kept once, outside the frames.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter
from types import MappingProxyType

from ..model import DeviceSample, Link, NodeSnapshot, ProcessSample, Reading

# ("d", metric, labels) | ("l", link_type, link, metric, labels) | ("p", pid, metric, labels)
SeriesKey = tuple
_NO_ERRORS: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class DeviceFrame:
    """One device's values in one cycle."""

    uuid: str
    taken_at: float
    up: bool
    stale: bool
    keys: tuple[SeriesKey, ...]
    values: array
    errors: Mapping[str, str]
    counters_at: float | None = None  # when its link byte counters were read, if known

    def items(self) -> Iterator[tuple[SeriesKey, float]]:
        return zip(self.keys, self.values, strict=True)

    def nbytes(self) -> int:
        """Bytes this frame holds of its own (shared keys and error maps not counted)."""
        return sys.getsizeof(self) + self.values.buffer_info()[1] * self.values.itemsize


@dataclass(frozen=True, slots=True)
class Frame:
    """One cycle of the node."""

    taken_at: float
    devices: tuple[DeviceFrame, ...]

    def nbytes(self) -> int:
        return sys.getsizeof(self) + sum(d.nbytes() for d in self.devices)


def series_of(sample: DeviceSample) -> Iterator[tuple[SeriesKey, float]]:
    """Every value of a device sample under its series key."""
    for r in sample.readings:
        yield ("d", r.metric, r.labels), r.value
    for link in sample.links:
        for r in link.readings:
            yield ("l", link.link_type, link.index, r.metric, r.labels), r.value
    for process in sample.processes:
        for r in process.readings:
            yield ("p", process.pid, r.metric, r.labels), r.value


_METRIC, _LABELS, _VALUE = attrgetter("metric"), attrgetter("labels"), attrgetter("value")
_READINGS, _LINK_TYPE, _INDEX, _PID = (attrgetter("readings"), attrgetter("link_type"),
                                       attrgetter("index"), attrgetter("pid"))


def _shape(readings: tuple[Reading, ...]) -> tuple[tuple[str, ...], tuple[tuple, ...]]:
    """The metrics and labels of a run of readings, without a key tuple per series."""
    return tuple(map(_METRIC, readings)), tuple(map(_LABELS, readings))


@dataclass(frozen=True, slots=True)
class _Tail:
    """A sample's links and processes as a frame keeps them: what they were made from (the
    tuples themselves), their shape (equal for two samples exactly when `series_of` gives
    their links and processes the same keys), their values in `series_of` order and when
    the links' byte counters were read."""

    links: tuple[Link, ...]
    processes: tuple[ProcessSample, ...]
    shape: tuple
    values: array
    counters_at: float | None


def _tail(sample: DeviceSample) -> _Tail:
    links, processes = sample.links, sample.processes
    readings = tuple(chain(*map(_READINGS, links), *map(_READINGS, processes)))
    shape = (_shape(readings), tuple(map(len, map(_READINGS, links))),
             tuple(map(_LINK_TYPE, links)), tuple(map(_INDEX, links)),
             tuple(map(len, map(_READINGS, processes))), tuple(map(_PID, processes)))
    counters_at = next((link.counters_at for link in links if link.counters_at is not None),
                       None)
    return _Tail(links, processes, shape, array("d", map(_VALUE, readings)), counters_at)


class FrameMaker:
    """Turns snapshots into frames, reusing key tuples and error maps that did not change.

    A device's links and processes are made into values again only when they are not the
    very tuples of its last sample (a backend hands those back while it did not read them
    again; nothing changes them once made): most cycles only the device's own readings
    are new."""

    def __init__(self) -> None:
        # Per device: the shape of its last sample and the keys made from it.
        self._keys: dict[str, tuple[tuple, tuple[SeriesKey, ...]]] = {}
        self._tails: dict[str, _Tail] = {}
        self._errors: dict[str, Mapping[str, str]] = {}

    def _tail_of(self, sample: DeviceSample) -> _Tail:
        uuid = sample.device.uuid
        tail = self._tails.get(uuid)
        if tail is None or tail.links is not sample.links or tail.processes is not sample.processes:
            tail = self._tails[uuid] = _tail(sample)
        return tail

    def _keys_of(self, sample: DeviceSample, shape: tuple) -> tuple[SeriesKey, ...]:
        uuid = sample.device.uuid
        known = self._keys.get(uuid)
        if known is None or known[0] != shape:
            known = self._keys[uuid] = (shape, tuple(key for key, _ in series_of(sample)))
        return known[1]

    def frame(self, snapshot: NodeSnapshot) -> Frame:
        devices = []
        for sample in snapshot.devices:
            uuid = sample.device.uuid
            errors: Mapping[str, str] = _NO_ERRORS
            if sample.errors:
                if self._errors.get(uuid) != sample.errors:
                    self._errors[uuid] = MappingProxyType(dict(sample.errors))
                errors = self._errors[uuid]
            tail = self._tail_of(sample)
            keys = self._keys_of(sample, (_shape(sample.readings), tail.shape))
            values = array("d", map(_VALUE, sample.readings))
            values.extend(tail.values)
            devices.append(DeviceFrame(uuid, sample.taken_at, sample.up, sample.stale, keys,
                                       values, errors, tail.counters_at))
        return Frame(snapshot.taken_at, tuple(devices))
