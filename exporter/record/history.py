"""The agent's recent history: compact frames of the last minutes, capped in memory.

Fed by every published snapshot (SnapshotStore's listeners); read by
`/api/v1/record` to build a scenario of an incident after the fact.

Frames are kept packed: each device's values (8-byte floats, exactly as read) are
XORed with the same device's values of the frame before when its series are the
same ones, so an unchanged value becomes eight zero bytes, then compressed with
zlib. The oldest kept frame is always packed on its own, so dropping it never
leaves a frame that cannot be unpacked. `recording()` unpacks them.

The series keys of a device are kept once per set (a set changes when a process
or link comes or goes), the keys a new set shares with the set before it reused,
and each set counts in the history's bytes while a kept frame uses it: when GPU
processes come and go every few cycles, the keys, not the values, are most of it.
"""

from __future__ import annotations

import sys
import threading
import zlib
from array import array
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..model import BackendStatus, Device, DeviceSample, Link, NodeSnapshot
from .frames import DeviceFrame, Frame, FrameMaker, SeriesKey

DEFAULT_MAX_AGE_S = 600.0
# hgx-h200 at 1 s (1219 series): 9.8 kB of values per frame, packed to about 1 kB (two
# fifths of them change each cycle), 2.2 kB with the objects that hold them: 0.13 MB per
# node-minute, 1.3 MB for the 10 minutes kept, plus 0.1 MB for the series keys
# (tests/test_record_history.py measures it). The cap leaves room for 10 minutes of a
# node three times that size, and drops the oldest frames beyond (at a 0.05 s interval,
# its processes replaced every 50 cycles, it holds about 1,700 frames of this node).
DEFAULT_MAX_BYTES = 4 * 1024 * 1024
_LEVEL = 1  # zlib's fastest: the XOR already did most of the work
# Frames past their age are dropped this many at a time: the frame after them is packed on
# its own again once per batch, not at every cycle (a third of a full history's cost of
# keeping a frame). Until then `recording()` leaves them out.
AGED_DROPPED_TOGETHER = 10


@dataclass(frozen=True, slots=True)
class _PackedDevice:
    """One device's values in one cycle, packed (see the module docstring)."""

    uuid: str
    taken_at: float
    up: bool
    stale: bool
    keys: tuple[SeriesKey, ...]
    packed: bytes
    delta: bool  # XORed with this device's values of the frame before
    errors: Mapping[str, str]
    counters_at: float | None

    def nbytes(self) -> int:
        return sys.getsizeof(self) + sys.getsizeof(self.packed)


@dataclass(frozen=True, slots=True)
class _PackedFrame:
    taken_at: float
    devices: tuple[_PackedDevice, ...]

    def nbytes(self) -> int:
        return sys.getsizeof(self) + sum(d.nbytes() for d in self.devices)


def _xor(data: bytes, base: bytes) -> bytes:
    return (int.from_bytes(data, "little") ^ int.from_bytes(base, "little")).to_bytes(
        len(data), "little")


def _pack(device: DeviceFrame, keys: tuple[SeriesKey, ...],
          before_raw: bytes | None) -> tuple[_PackedDevice, bytes]:
    """`device` (its series under `keys`, as kept) packed against the raw values of the
    frame before, when that frame had the same keys (`before_raw` given)."""
    raw = device.values.tobytes()
    delta = before_raw is not None
    data = _xor(raw, before_raw) if delta else raw
    packed = _PackedDevice(device.uuid, device.taken_at, device.up, device.stale, keys,
                           zlib.compress(data, _LEVEL), delta, device.errors,
                           device.counters_at)
    return packed, raw


@dataclass
class _KeySet:
    keys: tuple[SeriesKey, ...]
    nbytes: int
    used_by: int = 0  # device frames kept that use it


class _KeySets:
    """The key sets the kept frames use, each counted once in bytes while it is used."""

    def __init__(self) -> None:
        self._sets: dict[int, _KeySet] = {}  # by id() of the kept tuple

    def kept_as(self, keys: tuple[SeriesKey, ...],
                before: tuple[SeriesKey, ...] | None) -> tuple[tuple[SeriesKey, ...], int]:
        """A new set `keys`, sharing the keys it has in common with `before`; its bytes."""
        shared = dict(zip(before, before, strict=True)) if before else {}
        kept = tuple(shared.get(key, key) for key in keys)
        new = sum(sys.getsizeof(key) for key in keys if key not in shared)
        return kept, sys.getsizeof(kept) + new

    def use(self, keys: tuple[SeriesKey, ...], nbytes: int) -> int:
        """Counts one more frame using `keys`; the bytes this adds to the history."""
        found = self._sets.get(id(keys))
        if found is None:
            found = self._sets[id(keys)] = _KeySet(keys, nbytes)
        found.used_by += 1
        return found.nbytes if found.used_by == 1 else 0

    def release(self, keys: tuple[SeriesKey, ...]) -> int:
        """One frame less uses `keys`; the bytes this frees."""
        found = self._sets[id(keys)]
        found.used_by -= 1
        if found.used_by:
            return 0
        del self._sets[id(keys)]
        return found.nbytes


def _raw(device: _PackedDevice, before: Mapping[str, bytes]) -> bytes:
    data = zlib.decompress(device.packed)
    return _xor(data, before[device.uuid]) if device.delta else data


def _unpack(frames: list[_PackedFrame]) -> list[Frame]:
    """Frames as FrameMaker made them; the first one must be packed on its own."""
    before: dict[str, bytes] = {}
    unpacked = []
    for frame in frames:
        devices, current = [], {}
        for device in frame.devices:
            raw = current[device.uuid] = _raw(device, before)
            devices.append(DeviceFrame(device.uuid, device.taken_at, device.up, device.stale,
                                       device.keys, array("d", raw), device.errors,
                                       device.counters_at))
        before = current
        unpacked.append(Frame(frame.taken_at, tuple(devices)))
    return unpacked


def _standalone(frame: _PackedFrame, before: Mapping[str, bytes]) -> _PackedFrame:
    """`frame` packed on its own, given the raw values of the frame before it."""
    devices = tuple(
        _PackedDevice(d.uuid, d.taken_at, d.up, d.stale, d.keys,
                      zlib.compress(_raw(d, before), _LEVEL), False, d.errors, d.counters_at)
        if d.delta else d for d in frame.devices)
    return _PackedFrame(frame.taken_at, devices)


@dataclass
class Recording:
    """What a scenario is built from: the devices as last seen, the backends, the frames."""

    devices: dict[str, Device] = field(default_factory=dict)
    backends: tuple[BackendStatus, ...] = ()
    frames: list[Frame] = field(default_factory=list)
    interval_s: float = 1.0
    # device uuid -> (link type, link index) -> what the link connects to
    link_facts: dict[str, dict[tuple[str, int], Mapping[str, str]]] = field(default_factory=dict)


@dataclass(frozen=True)
class PackedRecording:
    """The history as kept, taken at once: small and picklable (the scenario is built from
    it in a process of its own); `unpacked()` makes the `Recording` of its last seconds."""

    devices: dict[str, Device]
    backends: tuple[BackendStatus, ...]
    frames: tuple[_PackedFrame, ...]
    interval_s: float
    link_facts: dict[str, dict[tuple[str, int], Mapping[str, str]]]
    max_age_s: float

    def unpacked(self, last_s: float | None = None) -> Recording:
        """The frames of the last `last_s` seconds (of the last `max_age_s` when None)."""
        frames = _unpack(list(self.frames))
        if frames:
            window = self.max_age_s if last_s is None else min(last_s, self.max_age_s)
            since = frames[-1].taken_at - window
            frames = [f for f in frames if f.taken_at >= since]
        return Recording(self.devices, self.backends, frames, self.interval_s, self.link_facts)


class History:
    """A bounded window of frames: at most `max_age_s` old and `max_bytes` big (packed)."""

    def __init__(self, max_age_s: float = DEFAULT_MAX_AGE_S,
                 max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if max_age_s <= 0 or max_bytes <= 0:
            raise ValueError("max_age_s and max_bytes must be positive")
        self.max_age_s = max_age_s
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._maker = FrameMaker()
        self._frames: deque[tuple[_PackedFrame, int]] = deque()
        self._bytes = 0
        # Per device of the newest frame: the keys FrameMaker gave, the same keys as kept,
        # its raw values (the next frame is packed against them).
        self._newest: dict[str, tuple[tuple, tuple, bytes]] = {}
        self._key_sets = _KeySets()
        self._new_key_bytes: dict[int, int] = {}  # key sets made by this add, not used yet
        self._devices: dict[str, Device] = {}
        self._backends: tuple[BackendStatus, ...] = ()
        self._interval_s = 1.0
        self._link_facts: dict[str, dict[tuple[str, int], Mapping[str, str]]] = {}
        self._facts_from: dict[str, tuple[Link, ...]] = {}  # the links they were last kept from

    def add(self, snapshot: NodeSnapshot) -> None:
        """Keep `snapshot`'s values; drop what is older or beyond the memory cap."""
        with self._lock:
            frame = self._maker.frame(snapshot)
            devices, newest = [], {}
            for device in frame.devices:
                keys, before_raw = self._kept_keys(device)
                packed, raw = _pack(device, keys, before_raw)
                devices.append(packed)
                newest[device.uuid] = (device.keys, keys, raw)
            self._newest = newest
            self._append(_PackedFrame(frame.taken_at, tuple(devices)))
            self._new_key_bytes.clear()
            for sample in snapshot.devices:
                self._devices[sample.device.uuid] = sample.device
                self._keep_link_facts(sample)
            self._backends = snapshot.backends
            self._interval_s = snapshot.interval_s
            # The newest frame stays, even alone beyond the cap: what the node did last is
            # never dropped for a recording to say it found no device.
            while len(self._frames) > 1 and self._bytes > self.max_bytes:
                self._drop_first(1)
            self._drop_aged(snapshot.taken_at - self.max_age_s)

    def _keep_link_facts(self, sample: DeviceSample) -> None:
        """What `sample`'s links connect to, unless they are the very links kept last time."""
        uuid = sample.device.uuid
        if self._facts_from.get(uuid) is sample.links:
            return
        self._facts_from[uuid] = sample.links
        for link in sample.links:
            if link.facts:
                self._link_facts.setdefault(uuid, {})[(link.link_type, link.index)] = link.facts

    def _kept_keys(self, device: DeviceFrame) -> tuple[tuple[SeriesKey, ...], bytes | None]:
        """The keys to keep `device` under, and the raw values to pack it against (if any)."""
        newest = self._newest.get(device.uuid)
        if newest is not None and newest[0] is device.keys:  # FrameMaker's set unchanged
            return newest[1], newest[2]
        keys, nbytes = self._key_sets.kept_as(device.keys, newest[1] if newest else None)
        self._new_key_bytes[id(keys)] = nbytes
        return keys, None

    def _append(self, frame: _PackedFrame) -> None:
        size = frame.nbytes()
        self._frames.append((frame, size))
        self._bytes += size
        for device in frame.devices:
            self._bytes += self._key_sets.use(device.keys,
                                              self._new_key_bytes.get(id(device.keys), 0))

    def _drop_aged(self, oldest: float) -> None:
        """Drop the frames taken before `oldest` once there are enough of them (or all are)."""
        aged = 0
        for frame, _ in self._frames:
            if frame.taken_at >= oldest:
                break
            aged += 1
        if aged >= AGED_DROPPED_TOGETHER or (aged and aged == len(self._frames)):
            self._drop_first(aged)

    def _drop_first(self, count: int) -> None:
        """Drop the `count` oldest frames; the one after them is then packed on its own."""
        base: dict[str, bytes] = {}  # the raw values of the last frame dropped
        for _ in range(count):
            dropped, size = self._frames.popleft()
            self._bytes -= size
            for device in dropped.devices:
                self._bytes -= self._key_sets.release(device.keys)
            base = {d.uuid: _raw(d, base) for d in dropped.devices}  # the oldest is standalone
        if not self._frames:
            self._newest = {}  # the next frame is packed on its own
            return
        after, after_size = self._frames[0]
        if any(d.delta for d in after.devices):
            after = _standalone(after, base)
            self._frames[0] = (after, after.nbytes())
            self._bytes += self._frames[0][1] - after_size

    @property
    def nbytes(self) -> int:
        """Bytes the kept frames hold, packed, with the key sets they use."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._frames)

    def packed(self) -> PackedRecording:
        """The frames kept and what they need to be unpacked, as they are now."""
        with self._lock:
            return PackedRecording(
                dict(self._devices), self._backends, tuple(f for f, _ in self._frames),
                self._interval_s,
                {uuid: dict(links) for uuid, links in self._link_facts.items()},
                self.max_age_s)

    def recording(self, last_s: float | None = None) -> Recording:
        """The frames of the last `last_s` seconds (of the last `max_age_s` when None)."""
        return self.packed().unpacked(last_s)
