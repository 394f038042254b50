"""Holds the latest node snapshot; sinks read it, only the sampler writes it."""

from __future__ import annotations

import threading
from collections.abc import Callable

from .model import NodeSnapshot


class SnapshotStore:
    """The last published snapshot, swapped atomically once per cycle."""

    def __init__(self) -> None:
        self._latest: NodeSnapshot | None = None
        self._published = threading.Condition()
        self._listeners: list[Callable[[NodeSnapshot], None]] = []

    def subscribe(self, listener: Callable[[NodeSnapshot], None]) -> None:
        """Call `listener` with every snapshot published from now on (on the sampler's thread)."""
        self._listeners.append(listener)

    @property
    def latest(self) -> NodeSnapshot | None:
        """The newest snapshot, or None before the first cycle completes."""
        return self._latest

    def publish(self, snapshot: NodeSnapshot) -> None:
        """Make `snapshot` the one every reader sees from now on."""
        with self._published:
            self._latest = snapshot
            self._published.notify_all()
        for listener in self._listeners:
            listener(snapshot)

    def wait_for_cycle(self, cycle: int, timeout: float) -> NodeSnapshot | None:
        """Block until a snapshot of at least `cycle` is published (or time runs out)."""
        with self._published:
            self._published.wait_for(
                lambda: self._latest is not None and self._latest.cycle >= cycle, timeout
            )
            return self._latest
