"""Background sampling: one cycle per interval, one snapshot per cycle.

Every device is read on its own worker thread, at most one read in flight per
device, so a vendor call that hangs holds up only that device: the cycle ends
at its deadline, the device is reported stale, and no further threads pile up
behind it. Opening a backend (which may also hang, or fail until a driver
appears) runs the same way and is retried on its own schedule.
"""

from __future__ import annotations

import concurrent.futures as futures
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .attribution.model import UNATTRIBUTED, Attribution
from .attribution.slots import assign_holders
from .backends.base import Backend, BackendUnavailable, ErrorTally
from .collective import CollectiveStallDetector
from .heap import HeapTrimmer
from .model import BackendStatus, Device, DeviceSample, NodeSnapshot, stale_after_s
from .rates import with_link_rates
from .store import SnapshotStore
from .validation import ReadingValidator

log = logging.getLogger(__name__)

AGENT = "agent"


class Worker:
    """Runs one call at a time on its own daemon thread; busy while a call is in flight.

    The thread is a daemon so that a vendor call hung forever never keeps the
    agent from exiting.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._future: futures.Future | None = None

    def submit(self, fn: Callable[..., Any], *args: Any) -> futures.Future | None:
        """Start `fn(*args)` unless a previous call's result is still to be taken (then None).

        A call that finished after its cycle stopped waiting is taken by the next
        `take_result`, not lost to a new call: an opened backend must not be
        opened again.
        """
        if self._future is not None:
            return None
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()
        self._future = futures.Future()
        self._queue.put((self._future, fn, args))
        return self._future

    def take_result(self) -> futures.Future | None:
        """The finished future not yet taken, if any."""
        future = self._future
        if future is None or not future.done():
            return None
        self._future = None
        return future

    def shutdown(self) -> None:
        """Let the thread end after its current call."""
        self._queue.put(None)

    def _run(self) -> None:
        while (job := self._queue.get()) is not None:
            future, fn, args = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as error:  # handed to whoever reads the future
                future.set_exception(error)


@dataclass
class BackendRunner:
    """A backend's lifecycle inside the sampler: opening, retrying, its device workers."""

    backend: Backend
    retry_s: float
    up: bool = False
    message: str = "not opened yet"
    devices: list[Device] = field(default_factory=list)
    last: dict[str, DeviceSample] = field(default_factory=dict)
    workers: dict[str, Worker] = field(default_factory=dict)
    opener: Worker | None = None
    next_open_at: float = 0.0
    readings: ReadingValidator = field(init=False)

    def __post_init__(self) -> None:
        self.opener = Worker(f"ray-accel-open-{self.backend.name}")
        self.readings = ReadingValidator(self.backend.errors, self.backend.name)

    def start_cycle(self, now: float) -> list[futures.Future]:
        """Begin this cycle's work; return the futures the cycle should wait for."""
        if not self.up:
            return self._start_open(now)
        pending = []
        for device in self.devices:
            future = self.workers[device.uuid].submit(self.backend.sample, device)
            if future is not None:
                pending.append(future)
        return pending

    def finish_cycle(self, now: float, stale_after: float, tally: ErrorTally) -> None:
        """Take whatever finished, and mark devices whose reads are late as stale."""
        if not self.up:
            self._finish_open(now)
            return
        for device in self.devices:
            future = self.workers[device.uuid].take_result()
            if future is not None:
                self.last[device.uuid] = with_link_rates(  # impossible values dropped first
                    self.last.get(device.uuid),
                    self.readings.check(self._sample_result(device, future, tally)))
            sample = self.last.get(device.uuid)
            if sample is None or now - sample.taken_at > stale_after:
                if sample is None or sample.up or sample.readings:
                    tally.count("stale", f"{self.backend.name}.sample")
                self.last[device.uuid] = DeviceSample(
                    device=device, up=False,
                    taken_at=sample.taken_at if sample else now,
                    errors={"sample": "stale: the vendor library has not answered"},
                )

    def status(self) -> BackendStatus:
        return BackendStatus(
            name=self.backend.name, vendor=self.backend.vendor, up=self.up,
            device_count=len(self.devices), message=self.message,
            facts=dict(self.backend.facts()) if self.up else {},
        )

    def samples(self) -> list[DeviceSample]:
        return [self.last[d.uuid] for d in self.devices if d.uuid in self.last]

    def _start_open(self, now: float) -> list[futures.Future]:
        if now < self.next_open_at:
            return []
        future = self.opener.submit(self.backend.open)
        return [future] if future is not None else []

    def _finish_open(self, now: float) -> None:
        future = self.opener.take_result()
        if future is None:
            return
        error = future.exception()
        if error is None:
            self.devices = list(future.result())
            self.workers = {d.uuid: Worker(f"ray-accel-{self.backend.name}-{d.index}")
                            for d in self.devices}
            self.up, self.message = True, ""
            log.info("backend %s up with %d device(s)", self.backend.name, len(self.devices))
            return
        message = str(error) if isinstance(error, BackendUnavailable) else repr(error)
        # Said once per reason: a host without a vendor's devices retries for ever.
        level = logging.DEBUG if message == self.message else logging.WARNING
        self.message = message
        self.next_open_at = now + self.retry_s
        log.log(level, "backend %s down: %s (retrying every %.0f s)",
                self.backend.name, message, self.retry_s)

    def _sample_result(self, device: Device, future: futures.Future,
                       tally: ErrorTally) -> DeviceSample:
        error = future.exception()
        if error is None:
            return future.result()
        log.exception("sampling %s failed", device.uuid, exc_info=error)
        tally.count("internal", f"{self.backend.name}.sample")
        return DeviceSample(device=device, up=False, taken_at=time.time(),
                            errors={"sample": repr(error)})

    def shutdown(self) -> None:
        for worker in self.workers.values():
            worker.shutdown()
        self.opener.shutdown()


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
    ) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
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
            if runner.up:
                try:
                    runner.backend.close()
                except Exception:  # closing must not stop the others from closing
                    log.exception("closing backend %s failed", runner.backend.name)

    def run_cycle(self) -> NodeSnapshot:
        """Run one sampling cycle now, publish its snapshot and return it."""
        started = time.monotonic()
        now = time.time()
        pending = [f for runner in self._runners for f in runner.start_cycle(now)]
        if pending:
            futures.wait(pending, timeout=self.interval_s * 0.9)
        finished = time.time()
        for runner in self._runners:
            runner.finish_cycle(finished, self.stale_after_s, self._tally)
        self._cycle += 1
        samples = tuple(s for runner in self._runners for s in runner.samples())
        attribution = self._attribution()
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
            backends=tuple(runner.status() for runner in self._runners),
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
