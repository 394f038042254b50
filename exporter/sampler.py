"""Background sampling: one cycle per interval, one snapshot per cycle.

Each backend runs in a BackendRunner (exporter/runner.py): its vendor calls run
off this thread, and a device late on the read thread the others share moves to one
of its own, so a vendor call that hangs holds up only its device, and the cycle ends
at its deadline whatever hangs.
"""

from __future__ import annotations

import concurrent.futures as futures
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from .attribution.model import UNATTRIBUTED, Attribution
from .attribution.slots import assign_holders, outside_pod
from .backends.base import Backend, ErrorTally
from .collective import CollectiveStallDetector
from .heap import HeapTrimmer
from .model import NodeSnapshot, stale_after_s
from .runner import BackendRunner
from .start_report import REPORT_WITHIN_S, start_report
from .store import SnapshotStore

log = logging.getLogger(__name__)

AGENT = "agent"
# How long stopping waits for the vendor libraries to close (nvmlShutdown and the like).
CLOSE_WITHIN_S = 2.0


class Sampler:
    """Samples every backend each interval and publishes one snapshot per cycle."""

    def __init__(
        self,
        backends: Sequence[Backend],
        store: SnapshotStore,
        interval_s: float = 1.0,
        node_labels: Mapping[str, str] | None = None,
        agent_facts: Mapping[str, str] | None = None,
        retry_s: float = 30.0,
        attribution: Callable[[], Attribution] | None = None,
        collective: CollectiveStallDetector | None = None,
        slow_read_interval_s: float | None = None,
    ) -> None:
        """`slow_read_interval_s`, when given, is set on every backend that reads on a slow
        cadence (has a `slow_read_interval_s`: NVIDIA), before any opens."""
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        if slow_read_interval_s is not None:
            if slow_read_interval_s < 0:
                raise ValueError("slow_read_interval_s must not be negative")
            for backend in backends:
                if hasattr(backend, "slow_read_interval_s"):
                    backend.slow_read_interval_s = slow_read_interval_s
        self.interval_s = interval_s
        self.store = store
        self.node_labels = dict(node_labels or {})
        self.agent_facts = dict(agent_facts or {})
        self._attribution = attribution or (lambda: UNATTRIBUTED)
        self._collective = collective or CollectiveStallDetector()
        self.stale_after_s = stale_after_s(interval_s)
        self._runners = [BackendRunner(b, retry_s) for b in backends]
        self._tally = ErrorTally()
        self._cycle = 0
        self._report_by: float | None = None  # when the start report is due at the latest
        self._start_reported = False
        self._outside: frozenset[str] = frozenset()  # devices another pod's agent exports
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Run cycles on a background thread until `stop()`."""
        self._thread = threading.Thread(target=self._loop, name="ray-accel-sampler", daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        """Stop sampling and release the vendor libraries."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 5)
        for runner in self._runners:
            runner.shutdown()
        close_backends([runner.backend for runner in self._runners if runner.up],
                       CLOSE_WITHIN_S)

    def run_cycle(self) -> NodeSnapshot:
        """Run one sampling cycle now, publish its snapshot and return it."""
        started = time.monotonic()
        deadline = started + self.interval_s * 0.9
        now = time.time()
        pending = [f for runner in self._runners for f in runner.start_cycle(now)]
        if pending:
            futures.wait(pending, timeout=self.interval_s * 0.9)
            # A backend that opened just now has its devices read within this same cycle.
            opened = [f for runner in self._runners for f in runner.after_open(time.time())]
            if opened:
                futures.wait(opened, timeout=max(deadline - time.monotonic(), 0.0))
        finished = time.time()
        for runner in self._runners:
            runner.finish_cycle(finished, self.stale_after_s, self._tally)
        self._report_start()
        self._cycle += 1
        samples = tuple(s for runner in self._runners for s in runner.samples())
        attribution = self._attribution()
        outside = outside_pod([s.device for s in samples], attribution.visible_devices)
        self._report_outside(outside, len(samples), attribution.node_id)
        if outside:
            samples = tuple(s for s in samples if s.device.uuid not in outside)
        node_labels = dict(self.node_labels)
        if attribution.node_id:
            node_labels["ray_node_id"] = attribution.node_id
        if attribution.session_name:
            # Ray's own series carry the session as `SessionName`; its boards filter on it.
            node_labels["SessionName"] = attribution.session_name
        snapshot = NodeSnapshot(
            cycle=self._cycle,
            taken_at=finished,
            interval_s=self.interval_s,
            node_labels=node_labels,
            backends=tuple(runner.status(outside) for runner in self._runners),
            devices=samples,
            cycle_duration_s=time.monotonic() - started,
            error_counts=self._error_counts(),
            agent_facts=self.agent_facts,
            attribution=attribution,
            holders=assign_holders([s.device for s in samples], attribution.visible_devices,
                                   attribution.grants),
            collective_stalls=self._collective.update(samples),
        )
        self.store.publish(snapshot)
        return snapshot

    def _report_outside(self, outside: frozenset[str], seen: int, node_id: str) -> None:
        """Log when the devices left to other pods' agents change."""
        if outside == self._outside:
            return
        if outside:
            log.info("exporting the %d of %d devices seen here that Ray node %s's container "
                     "was given (NVIDIA_VISIBLE_DEVICES); the other %d are another pod's",
                     seen - len(outside), seen, node_id, len(outside))
        else:
            log.info("exporting every device seen here")
        self._outside = outside

    def _report_start(self) -> None:
        """Log which backends found how many devices, once all have answered (or in time)."""
        if self._start_reported:
            return
        now = time.monotonic()
        if self._report_by is None:
            self._report_by = now + REPORT_WITHIN_S
        opening = [runner.backend.name for runner in self._runners if not runner.answered]
        if opening and now < self._report_by:
            return
        log.info("%s", start_report([runner.status() for runner in self._runners], opening))
        self._start_reported = True
        for runner in self._runners:
            runner.start_reported = True

    def _error_counts(self) -> dict[tuple[str, str, str], int]:
        counts = {(AGENT, kind, fn): n for (kind, fn), n in self._tally.snapshot().items()}
        for runner in self._runners:
            for (kind, fn), n in runner.backend.errors.snapshot().items():
                counts[(runner.backend.name, kind, fn)] = n
        return counts

    def _loop(self) -> None:
        next_at = time.monotonic()
        heap = HeapTrimmer()
        while not self._stop.is_set():
            try:
                self.run_cycle()
            except Exception:  # the loop must survive anything one cycle does
                log.exception("sampling cycle failed")
            heap.maybe_trim()
            next_at += self.interval_s
            now = time.monotonic()
            if next_at < now:  # overran: skip the ticks we missed
                next_at = now + self.interval_s - (now - next_at) % self.interval_s
            self._stop.wait(next_at - now)


def close_backends(backends: Sequence[Backend], within_s: float) -> None:
    """Closes each backend on a thread of its own, waiting at most `within_s` for them all:
    a vendor library that hangs in its shutdown must not keep the agent from exiting (what
    it holds goes with the process)."""
    def close(backend: Backend) -> None:
        try:
            backend.close()
        except Exception:  # closing must not stop the others from closing
            log.exception("closing backend %s failed", backend.name)

    closing = [threading.Thread(target=close, args=(backend,), daemon=True,
                                name=f"ray-accel-close-{backend.name}") for backend in backends]
    for thread in closing:
        thread.start()
    deadline = time.monotonic() + within_s
    for thread, backend in zip(closing, backends, strict=True):
        thread.join(max(deadline - time.monotonic(), 0.0))
        if thread.is_alive():
            log.warning("backend %s did not close within %g s; stopping without it",
                        backend.name, within_s)
