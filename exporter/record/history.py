"""The agent's recent history: compact frames of the last minutes, capped in memory.

Fed by every published snapshot (SnapshotStore's listeners); read by
`/api/v1/record` to build a scenario of an incident after the fact.

Frames are kept packed: each device's values (8-byte floats, exactly as read) are
XORed with the same device's values of the frame before when its series are the
same ones, so an unchanged value becomes eight zero bytes, then compressed with
zlib. The oldest kept frame is always packed on its own, so dropping it never
leaves a frame that cannot be unpacked. `recording()` unpacks them.
"""

from __future__ import annotations

import sys
import threading
import zlib
from array import array
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..model import BackendStatus, Device, NodeSnapshot
from .frames import DeviceFrame, Frame, FrameMaker, SeriesKey

DEFAULT_MAX_AGE_S = 600.0
# hgx-h200 at 1 s (1219 series): 9.8 kB of values per frame, packed to about 1 kB (two
# fifths of them change each cycle), 2.2 kB with the objects that hold them: 0.13 MB per
# node-minute, 1.3 MB for the 10 minutes kept (tests/test_record_history.py measures
# it). The cap leaves room for 10 minutes of a node three times that size, and drops the
# oldest frames beyond (at a 0.05 s interval it holds about 1,900 frames of this node).
DEFAULT_MAX_BYTES = 4 * 1024 * 1024
_LEVEL = 1  # zlib's fastest: the XOR already did most of the work


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


def _pack(device: DeviceFrame, before: tuple[tuple, bytes] | None) -> tuple[_PackedDevice, bytes]:
    """`device` packed against `before` (its keys and raw values of the frame before)."""
    raw = device.values.tobytes()
    delta = before is not None and before[0] == device.keys
    data = _xor(raw, before[1]) if delta else raw
    packed = _PackedDevice(device.uuid, device.taken_at, device.up, device.stale, device.keys,
                           zlib.compress(data, _LEVEL), delta, device.errors,
                           device.counters_at)
    return packed, raw


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
        # The newest frame's keys and raw values per device, to pack the next one against.
        self._newest: dict[str, tuple[tuple, bytes]] = {}
        self._devices: dict[str, Device] = {}
        self._backends: tuple[BackendStatus, ...] = ()
        self._interval_s = 1.0
        self._link_facts: dict[str, dict[tuple[str, int], Mapping[str, str]]] = {}

    def add(self, snapshot: NodeSnapshot) -> None:
        """Keep `snapshot`'s values; drop what is older or beyond the memory cap."""
        with self._lock:
            frame = self._maker.frame(snapshot)
            devices, newest = [], {}
            for device in frame.devices:
                packed, raw = _pack(device, self._newest.get(device.uuid))
                devices.append(packed)
                newest[device.uuid] = (device.keys, raw)
            self._newest = newest
            self._append(_PackedFrame(frame.taken_at, tuple(devices)))
            for sample in snapshot.devices:
                self._devices[sample.device.uuid] = sample.device
                for link in sample.links:
                    if link.facts:
                        self._link_facts.setdefault(sample.device.uuid, {})[
                            (link.link_type, link.index)] = link.facts
            self._backends = snapshot.backends
            self._interval_s = snapshot.interval_s
            oldest = snapshot.taken_at - self.max_age_s
            while self._frames and (self._bytes > self.max_bytes
                                    or self._frames[0][0].taken_at < oldest):
                self._drop_oldest()

    def _append(self, frame: _PackedFrame) -> None:
        size = frame.nbytes()
        self._frames.append((frame, size))
        self._bytes += size

    def _drop_oldest(self) -> None:
        dropped, size = self._frames.popleft()
        self._bytes -= size
        if not self._frames:
            self._newest = {}  # the next frame is packed on its own
            return
        after, after_size = self._frames[0]
        if any(d.delta for d in after.devices):
            base = {d.uuid: _raw(d, {}) for d in dropped.devices}  # the oldest is standalone
            after = _standalone(after, base)
            self._frames[0] = (after, after.nbytes())
            self._bytes += self._frames[0][1] - after_size

    @property
    def nbytes(self) -> int:
        """Bytes the kept frames hold, packed."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._frames)

    def recording(self, last_s: float | None = None) -> Recording:
        """The frames of the last `last_s` seconds (all kept ones when None)."""
        with self._lock:
            packed = [f for f, _ in self._frames]
            devices = dict(self._devices)
            backends = self._backends
            link_facts = {uuid: dict(links) for uuid, links in self._link_facts.items()}
        frames = _unpack(packed)
        if last_s is not None and frames:
            since = frames[-1].taken_at - last_s
            frames = [f for f in frames if f.taken_at >= since]
        return Recording(devices, backends, frames, self._interval_s, link_facts)
