"""One backend inside the sampler: opening it, discovering and reading each device on its own.

Vendor calls run off the sampler's thread (exporter/call_worker.py), at most one call
in flight per device. Devices that answer promptly share one read thread, read one
after another; a read still running when the cycle ends keeps that thread for its own
device from then on, and every other device moves to a new shared thread (those
queued behind it miss that one cycle, well within `stale_after_s`). So a vendor call that
hangs holds up only its device: the cycle ends at its deadline and the device is
reported stale. Opening runs the same way: the library's open is one bounded step
(retried on its own schedule), and a backend that splits opening
(`Backend.open_library`) has each device identified on a thread of that device's own,
so a device that hangs from its first call is listed as stale ("discovery: not
answering") while the others report, and joins when it answers. A device that is down
or stale keeps its counters (exporter/carry.py).
"""

from __future__ import annotations

import concurrent.futures as futures
import logging
import time
from collections.abc import Collection
from dataclasses import dataclass, field

from .backends.base import (
    Backend,
    BackendAbsent,
    BackendUnavailable,
    DeviceChanged,
    DeviceDown,
    ErrorTally,
    Undiscovered,
)
from .call_worker import Lane, Worker
from .carry import carried
from .model import BackendStatus, Device, DeviceSample
from .rates import LinkRates
from .validation import ReadingValidator

log = logging.getLogger(__name__)

STALE = "stale: the vendor library has not answered"
NOT_ANSWERING = "not answering"
NOT_OPENED = "not opened yet"
NOT_READ_YET = "listed, not read yet"
DISCOVERY = "discovery"


@dataclass
class _Identified:
    """What a discovery job found (set as soon as known), then each device's first read."""

    devices: list[Device]
    reads: list[DeviceSample | BaseException] = field(default_factory=list)


@dataclass
class _Discovery:
    """A listed device still to be identified; `reason` says why it is not yet."""

    pending: Undiscovered
    reason: str = NOT_ANSWERING
    failed: bool = False  # the last try raised (down); else it is in flight or to start (stale)
    retry_at: float = 0.0


def _loss(sample: DeviceSample) -> str:
    if sample.stale:
        return "stopped answering"
    reasons = "; ".join(f"{k}: {v}" for k, v in sorted(sample.errors.items()))
    return f"down: {reasons or 'no reason given'}"


def _describe(error: BaseException) -> str:
    return str(error) if isinstance(error, (BackendUnavailable, DeviceDown)) else repr(error)


@dataclass
class BackendRunner:
    """A backend's lifecycle inside the sampler: opening, retrying, its device workers."""

    backend: Backend
    retry_s: float
    up: bool = False
    absent: bool = False
    message: str = NOT_OPENED
    # Set once the sampler's start report (exporter/start_report.py) has been logged: what
    # happens before it is in that report, what happens after is logged on its own.
    start_reported: bool = False
    devices: list[Device] = field(default_factory=list)  # in the backend's order
    last: dict[str, DeviceSample] = field(default_factory=dict)
    workers: dict[str, Worker] = field(default_factory=dict)
    undiscovered: dict[str, _Discovery] = field(default_factory=dict)  # by placeholder uuid
    # Set by a discovery job once its device is identified, before its first read.
    identified: dict[str, _Identified] = field(default_factory=dict)  # by placeholder uuid
    first_reads: set[str] = field(default_factory=set)  # read by a discovery job in flight
    answered_at: dict[str, float] = field(default_factory=dict)  # taken_at of the last answer
    stale: set[str] = field(default_factory=set)
    alone: set[str] = field(default_factory=set)  # were late on the shared lane: their own now
    said_down: set[str] = field(default_factory=set)  # devices whose loss has been logged
    opener: Worker | None = None
    next_open_at: float = 0.0
    readings: ReadingValidator = field(init=False)
    rates: LinkRates = field(default_factory=LinkRates)
    lane: Lane = field(init=False)  # the read thread that devices answering promptly share

    def __post_init__(self) -> None:
        self.opener = Worker(f"ray-accel-open-{self.backend.name}")
        self.lane = Lane(f"ray-accel-{self.backend.name}")
        self.readings = ReadingValidator(self.backend.errors, self.backend.name)

    # -- one cycle ---------------------------------------------------------------

    def start_cycle(self, now: float) -> list[futures.Future]:
        """Begin this cycle's work; return the futures the cycle should wait for."""
        if not self.up:
            return self._start_open(now)
        return self._start_devices(now)

    def after_open(self, now: float) -> list[futures.Future]:
        """If the backend opened since the cycle began, start its devices in this same cycle."""
        if self.up:
            return []
        self._finish_open(now)
        return self._start_devices(now) if self.up else []

    def finish_cycle(self, now: float, stale_after: float, tally: ErrorTally) -> None:
        """Take whatever finished, and mark devices whose reads are late as stale."""
        if not self.up:
            self._finish_open(now)
            if self.up:
                self._mark_listed(now)
            return
        for device in list(self.devices):
            if device.uuid not in self.workers:
                continue  # forgotten this cycle with its changed GPU
            future = self.workers[device.uuid].take_result()
            if device.uuid in self.undiscovered:
                self._take_discovery(device, future, now, tally)
            elif future is None:
                continue
            elif future.exception() is None and isinstance(future.result(), _Identified):
                self._take_first_reads(future.result(), tally)
            elif isinstance(future.exception(), DeviceChanged):
                self._identify_again(device, future.exception())
            else:
                self._take_sample(self._sample_result(device, future, tally))
        self._isolate_late()
        for device in self.devices:
            discovery = self.undiscovered.get(device.uuid)
            if discovery is not None:
                self._mark_undiscovered(device, discovery, now, tally)
                continue
            answered = self.answered_at.get(device.uuid)
            if answered is None or now - answered > stale_after:
                self._mark_stale(device, now, tally)
        self._log_losses()

    def _log_losses(self) -> None:
        """A device that had answered and is down or stale at the end of a cycle is a WARNING,
        once; its return is said too (judged on the cycle's outcome, so a late answer that is
        stale on arrival does not flap)."""
        for device in self.devices:
            sample = self.last.get(device.uuid)
            if sample is None or device.uuid not in self.answered_at:
                continue
            if not sample.up and device.uuid not in self.said_down:
                self.said_down.add(device.uuid)
                log.warning("%s device %s (%s) %s", self.backend.name, device.index,
                            device.uuid, _loss(sample))
            elif sample.up and device.uuid in self.said_down:
                self.said_down.discard(device.uuid)
                log.info("%s device %s (%s) answers again", self.backend.name, device.index,
                         device.uuid)

    @property
    def answered(self) -> bool:
        """Whether its library has opened, or failed to, at least once."""
        return self.up or self.message != NOT_OPENED

    def status(self, left_out: Collection[str] = ()) -> BackendStatus:
        """The backend's state, counting its devices but those `left_out` (UUIDs)."""
        return BackendStatus(
            name=self.backend.name, vendor=self.backend.vendor, up=self.up,
            device_count=sum(1 for d in self.devices if d.uuid not in left_out),
            message=self.message,
            facts=dict(self.backend.facts()) if self.up else {}, absent=self.absent,
        )

    def samples(self) -> list[DeviceSample]:
        return [self.last[d.uuid] for d in self.devices if d.uuid in self.last]

    def shutdown(self) -> None:
        for worker in self.workers.values():
            worker.shutdown()
        self.lane.close()
        self.opener.shutdown()

    # -- opening -----------------------------------------------------------------

    def _start_open(self, now: float) -> list[futures.Future]:
        if now < self.next_open_at:
            return []
        future = self.opener.submit(self.backend.open_library)
        return [future] if future is not None else []

    def _finish_open(self, now: float) -> None:
        future = self.opener.take_result()
        if future is None:
            return
        error = future.exception()
        if error is None:
            self._list(future.result())
            self.up, self.absent, self.message = True, False, ""
            log.log(logging.INFO if self.start_reported else logging.DEBUG,
                    "backend %s up with %d device(s)%s", self.backend.name, len(self.devices),
                    f", {len(self.undiscovered)} to identify" if self.undiscovered else "")
            return
        message = _describe(error)
        absent = isinstance(error, BackendAbsent)
        level = self._open_failure_level(message, absent)
        self.message, self.absent = message, absent
        self.next_open_at = now + self.retry_s
        if absent:
            log.log(level, "backend %s not present: %s (checking again every %.0f s)",
                    self.backend.name, message, self.retry_s)
        else:
            log.log(level, "backend %s down: %s (retrying every %.0f s)",
                    self.backend.name, message, self.retry_s)

    def _open_failure_level(self, message: str, absent: bool) -> int:
        """WARNING for a library that fails where its hardware is; a backend not present on
        the host is named by the start report, or said once at INFO after it."""
        if message == self.message:
            return logging.DEBUG  # said once per reason: it is retried for ever
        if not absent:
            return logging.WARNING
        return logging.INFO if self.start_reported else logging.DEBUG

    def _list(self, items: list[Device | Undiscovered]) -> None:
        for item in items:
            if isinstance(item, Undiscovered):
                device = item.placeholder
                self.undiscovered[device.uuid] = _Discovery(item)
                worker = self._worker(device)  # identified on a thread of its own
            else:
                device, worker = item, self._worker(item, self.lane)
            self.devices.append(device)
            self.workers[device.uuid] = worker

    def _worker(self, device: Device, lane: Lane | None = None) -> Worker:
        """The device's worker: on `lane` (shared), or on a thread of its own."""
        return Worker(f"ray-accel-{self.backend.name}-{device.index}", lane)

    def _reader(self, device: Device) -> Worker:
        """The worker for the device's next read: the shared lane's, unless the device was
        late there once (its own from then on) or its own worker has a call to finish."""
        worker = self.workers[device.uuid]
        if worker.lane is self.lane or device.uuid in self.alone or not worker.idle:
            return worker
        worker.shutdown()
        worker = self.workers[device.uuid] = self._worker(device, self.lane)
        return worker

    def _isolate_late(self) -> None:
        """A read still running on the shared lane when the cycle ends makes that lane its
        device's own; the reads queued behind it are withdrawn, and the other devices read
        on a new shared lane from the next cycle."""
        device = next((d for d in self.devices
                       if (worker := self.workers[d.uuid]).lane is self.lane and worker.running),
                      None)
        if device is None:
            return
        late = self.workers[device.uuid]
        late.keep_lane()
        self.alone.add(device.uuid)
        self.lane = Lane(self.lane.name)
        for worker in self.workers.values():
            if worker is not late and worker.lane is late.lane:
                worker.withdraw()
        log.debug("%s device %s (%s) was late: it reads on a thread of its own",
                  self.backend.name, device.index, device.uuid)

    # -- devices -----------------------------------------------------------------

    def _start_devices(self, now: float) -> list[futures.Future]:
        pending = []
        for device in self.devices:
            discovery = self.undiscovered.get(device.uuid)
            if device.uuid in self.first_reads:
                continue  # its discovery job reads it first
            if discovery is None:
                future = self._reader(device).submit(self.backend.sample, device)
            elif now >= discovery.retry_at:
                future = self.workers[device.uuid].submit(self._discover_and_sample,
                                                          discovery.pending)
                if future is not None:
                    discovery.reason, discovery.failed = NOT_ANSWERING, False
            else:
                continue
            if future is not None:
                pending.append(future)
        return pending

    def _discover_and_sample(self, pending: Undiscovered) -> _Identified:
        """On the device's worker: identify it (and say so at once), then read each device found."""
        identified = _Identified(list(self.backend.discover(pending)))
        self.identified[pending.placeholder.uuid] = identified
        for device in identified.devices:
            try:
                identified.reads.append(self.backend.sample(device))
            except Exception as error:  # turned into a down sample by _take_first_reads
                identified.reads.append(error)
        return identified

    def _take_discovery(self, placeholder: Device, future: futures.Future | None, now: float,
                        tally: ErrorTally) -> None:
        """A device identified (it joins, under its own uuid), or why it could not be."""
        identified = self.identified.pop(placeholder.uuid, None)
        if future is not None and future.exception() is not None:
            self._discovery_failed(placeholder, future.exception(), now, tally)
            return
        if identified is None and future is None:
            return  # still in flight
        identified = identified or future.result()
        found = identified.devices
        position = self.devices.index(placeholder)
        self.devices[position:position + 1] = found
        worker = self.workers.pop(placeholder.uuid)
        del self.undiscovered[placeholder.uuid]
        self.last.pop(placeholder.uuid, None)
        self.stale.discard(placeholder.uuid)
        for number, device in enumerate(found):
            self.workers[device.uuid] = worker if number == 0 else self._worker(device)
        # At start the start report counts them; a device identified later is news.
        log.log(logging.INFO if self.start_reported else logging.DEBUG,
                "%s device %s identified: %s", self.backend.name, placeholder.index,
                ", ".join(device.uuid for device in found) or "nothing")
        if future is None:  # its first reads are still running on that worker
            self.first_reads.update(device.uuid for device in found)
        else:
            self._take_first_reads(identified, tally)

    def _identify_again(self, device: Device, changed: DeviceChanged) -> None:
        """Another device answers where `device` was (or its partitions changed): it and
        what the backend forgot with it leave, and a placeholder in their place is
        identified as at start. Their series end: what answers now is not them."""
        gone = [d for d in self.devices if d.uuid in changed.forgotten or d.uuid == device.uuid]
        position = self.devices.index(gone[0])
        for each in gone:
            self.devices.remove(each)
            worker = self.workers.pop(each.uuid)
            worker.withdraw()  # a read of it still queued this cycle
            worker.shutdown()
            for kept in (self.last, self.answered_at):
                kept.pop(each.uuid, None)
            for marks in (self.stale, self.alone, self.said_down, self.first_reads):
                marks.discard(each.uuid)
        placeholder = changed.pending.placeholder
        self.devices.insert(position, placeholder)
        self.undiscovered[placeholder.uuid] = _Discovery(changed.pending)
        self.workers[placeholder.uuid] = self._worker(placeholder)
        log.warning("%s device %s changed (%s): identifying it again", self.backend.name,
                    placeholder.index, changed.kind)

    def _take_first_reads(self, identified: _Identified, tally: ErrorTally) -> None:
        self.first_reads.difference_update(d.uuid for d in identified.devices)
        for device, read in zip(identified.devices, identified.reads, strict=True):
            if isinstance(read, BaseException):
                read = self._failed_sample(device, read, tally)
            self._take_sample(read)

    def _discovery_failed(self, placeholder: Device, error: BaseException, now: float,
                          tally: ErrorTally) -> None:
        discovery = self.undiscovered[placeholder.uuid]
        reason = _describe(error)
        level = logging.DEBUG if reason == discovery.reason else logging.WARNING
        discovery.reason, discovery.failed = reason, True
        discovery.retry_at = now + self.retry_s
        self.stale.discard(placeholder.uuid)
        if not isinstance(error, (BackendUnavailable, DeviceDown)):  # not the vendor's
            tally.count("internal", f"{self.backend.name}.discover")
            level = logging.ERROR
        log.log(level, "%s device %s could not be identified: %s (retrying every %.0f s)",
                self.backend.name, placeholder.index, reason, self.retry_s)

    def _take_sample(self, sample: DeviceSample) -> None:
        uuid = sample.device.uuid
        checked = self.readings.check(sample)  # impossible values dropped first
        previous = self.last.get(uuid)
        self.answered_at[uuid] = sample.taken_at
        self.stale.discard(uuid)
        if checked.up:
            self.last[uuid] = self.rates.of(previous, checked)
        else:
            self.last[uuid] = carried(previous, checked,
                                      self.backend.event_readings(checked.device))

    def _mark_stale(self, device: Device, now: float, tally: ErrorTally) -> None:
        if device.uuid not in self.stale:
            self.stale.add(device.uuid)
            tally.count("stale", f"{self.backend.name}.sample")
        previous = self.last.get(device.uuid)
        known = previous.device if previous is not None else device
        self.last[device.uuid] = carried(
            previous, DeviceSample(device=known, up=False, taken_at=now,
                                   errors={"sample": STALE}, stale=True),
            self.backend.event_readings(known))

    def _mark_listed(self, now: float) -> None:
        """The devices of a library that opened after the cycle stopped waiting: listed, none
        read yet (stale), so the cycle does not say they all answer."""
        for device in self.devices:
            why = DISCOVERY if device.uuid in self.undiscovered else "sample"
            self.last[device.uuid] = DeviceSample(device=device, up=False, taken_at=now,
                                                  errors={why: NOT_READ_YET}, stale=True)

    def _mark_undiscovered(self, placeholder: Device, discovery: _Discovery, now: float,
                           tally: ErrorTally) -> None:
        if not discovery.failed and placeholder.uuid not in self.stale:
            self.stale.add(placeholder.uuid)
            tally.count("stale", f"{self.backend.name}.discover")
        self.last[placeholder.uuid] = carried(
            self.last.get(placeholder.uuid),
            DeviceSample(device=placeholder, up=False, taken_at=now,
                         errors={DISCOVERY: discovery.reason}, stale=not discovery.failed))

    def _sample_result(self, device: Device, future: futures.Future,
                       tally: ErrorTally) -> DeviceSample:
        error = future.exception()
        if error is None:
            return future.result()
        return self._failed_sample(device, error, tally)

    def _failed_sample(self, device: Device, error: BaseException,
                       tally: ErrorTally) -> DeviceSample:
        log.error("sampling %s failed", device.uuid, exc_info=error)
        tally.count("internal", f"{self.backend.name}.sample")
        return DeviceSample(device=device, up=False, taken_at=time.time(),
                            errors={"sample": repr(error)})
