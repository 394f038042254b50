"""The agent's recent history: compact frames of the last minutes, capped in memory.

Fed by every published snapshot (SnapshotStore's listeners); read by
`/api/v1/record` to build a scenario of an incident after the fact.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..model import BackendStatus, Device, NodeSnapshot
from .frames import Frame, FrameMaker

DEFAULT_MAX_AGE_S = 600.0
# hgx-h200 at 1 s (1219 series): 10.5 kB per frame, 0.63 MB per node-minute, 6.3 MB for
# the 10 minutes kept (tests/test_record_history.py measures it); the cap leaves room for
# 10 minutes of a node 2.5 times that size, and drops the oldest frames beyond.
DEFAULT_MAX_BYTES = 16 * 1024 * 1024


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
    """A bounded window of frames: at most `max_age_s` old and `max_bytes` big."""

    def __init__(self, max_age_s: float = DEFAULT_MAX_AGE_S,
                 max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if max_age_s <= 0 or max_bytes <= 0:
            raise ValueError("max_age_s and max_bytes must be positive")
        self.max_age_s = max_age_s
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._maker = FrameMaker()
        self._frames: deque[tuple[Frame, int]] = deque()
        self._bytes = 0
        self._devices: dict[str, Device] = {}
        self._backends: tuple[BackendStatus, ...] = ()
        self._interval_s = 1.0
        self._link_facts: dict[str, dict[tuple[str, int], Mapping[str, str]]] = {}

    def add(self, snapshot: NodeSnapshot) -> None:
        """Keep `snapshot`'s values; drop what is older or beyond the memory cap."""
        with self._lock:
            frame = self._maker.frame(snapshot)
            size = frame.nbytes()
            self._frames.append((frame, size))
            self._bytes += size
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
                self._bytes -= self._frames.popleft()[1]

    @property
    def nbytes(self) -> int:
        """Bytes the kept frames hold."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._frames)

    def recording(self, last_s: float | None = None) -> Recording:
        """The frames of the last `last_s` seconds (all kept ones when None)."""
        with self._lock:
            frames = [f for f, _ in self._frames]
            devices = dict(self._devices)
            backends = self._backends
            link_facts = {uuid: dict(links) for uuid, links in self._link_facts.items()}
        if last_s is not None and frames:
            since = frames[-1].taken_at - last_s
            frames = [f for f in frames if f.taken_at >= since]
        return Recording(devices, backends, frames, self._interval_s, link_facts)
