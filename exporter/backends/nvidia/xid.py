"""XID (critical driver error) events, counted from an NVML event set.

The set is asked for what is waiting without blocking (`nvmlEventSetWait` with a 0 ms
timeout, as DCGM's event thread asks it once a second) at each device's read: the
driver queues a set's events until they are asked for, so a device's XID counts are as
of its own read, and no call waits in NVML between reads. Where no read has asked for
`IDLE_POLL_S` (every GPU hung, as a GSP timeout leaves them, with its XID to count) a
thread of the watcher's own asks; it wakes that often, and stops at once.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
import time
from collections import Counter
from typing import Any

import pynvml

log = logging.getLogger(__name__)

# The most events one ask takes (a few milliseconds of a device's read); a storm beyond
# that is taken by the next asks.
MOST_EVENTS_PER_POLL = 1_000
_STOP_WAIT_S = 2.0  # how long `stop()` waits for an ask still in the driver
IDLE_POLL_S = 5.0


def handle_key(handle: Any) -> int | None:
    """A hashable identity for an NVML device handle (the pointer value)."""
    return ctypes.cast(handle, ctypes.c_void_p).value


class XidWatcher:
    """Counts XID events per device and code until stopped.

    Devices are added one at a time as they are discovered (`watch`); those
    that cannot deliver XID events (NotSupported) are skipped. The event set
    and the thread that asks it while no read does start with the first device
    watched; `poll` counts what waits in the set. Counts start at zero when a
    device is first watched.
    """

    def __init__(self) -> None:
        self._uuid_by_handle: dict[int | None, str] = {}
        self._counts: dict[str, Counter[int]] = {}
        self._lock = threading.Lock()
        self._polling = threading.Lock()  # one ask of the event set at a time
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._polled_at = time.monotonic()
        self._event_set: Any = None
        self._unavailable = False
        self.watched: set[str] = set()

    def watch(self, uuid: str, handle: Any) -> bool:
        """Register one device for XID events; False when it cannot deliver them.

        Called from the device's own discovery thread: the registration may hang
        with the device, and holds no lock meanwhile.
        """
        event_set = self._ensure_event_set()
        if event_set is None:
            return False
        with self._lock:
            self._uuid_by_handle[handle_key(handle)] = uuid
        try:
            pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError,
                                            event_set)
        except pynvml.NVMLError as error:
            log.info("XID events not available for %s: %s", uuid, error)
            return False
        with self._lock:
            self.watched.add(uuid)
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._poll_while_unread,
                                                name="ray-accel-xid", daemon=True)
                self._thread.start()
        return True

    def _ensure_event_set(self) -> Any:
        with self._lock:
            if self._event_set is None and not self._unavailable and not self._stop.is_set():
                try:
                    self._event_set = pynvml.nvmlEventSetCreate()
                except pynvml.NVMLError as error:
                    log.warning("XID events unavailable: %s", error)
                    self._unavailable = True
            return self._event_set

    def counts(self, uuid: str) -> dict[int, int]:
        """XID code -> events seen on the device since the watcher started."""
        with self._lock:
            return dict(self._counts.get(uuid, {}))

    def poll(self) -> None:
        """Count the events waiting in the set: at a device's read, or on the watcher's
        thread where no read asked lately. Returns at once where another ask is under way
        (that one takes them)."""
        if not self._polling.acquire(blocking=False):
            return
        self._polled_at = time.monotonic()
        try:
            if self._event_set is not None:
                self._take_waiting(self._event_set)
        finally:
            self._polling.release()

    def _take_waiting(self, event_set: Any) -> None:
        for _ in range(MOST_EVENTS_PER_POLL):
            try:
                data = pynvml.nvmlEventSetWait(event_set, 0)
            except pynvml.NVMLError_Timeout:  # none waiting
                return
            except pynvml.NVMLError as error:
                log.debug("XID events could not be read: %s", error)
                return
            if data.eventType & pynvml.nvmlEventTypeXidCriticalError:
                self._record(data)

    def _poll_while_unread(self) -> None:
        wait_s = IDLE_POLL_S
        while not self._stop.wait(wait_s):
            unread_s = time.monotonic() - self._polled_at
            if unread_s >= IDLE_POLL_S:
                self.poll()  # or, where an ask hangs in the driver, look again later
                wait_s = IDLE_POLL_S
            else:
                wait_s = IDLE_POLL_S - unread_s

    def stop(self) -> None:
        """Stop the thread and free the event set, once no ask is in the driver (waiting at
        most `_STOP_WAIT_S` for each: a set an ask hangs in is left to the process's end)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=_STOP_WAIT_S)
        # An ask from a device's read may be in the driver: the set outlives it.
        if self._event_set is None or not self._polling.acquire(timeout=_STOP_WAIT_S):
            return
        try:
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlEventSetFree(self._event_set)
            self._event_set = None
        finally:
            self._polling.release()

    def _record(self, data: Any) -> None:
        code = int(data.eventData)
        with self._lock:
            uuid = self._uuid_by_handle.get(handle_key(data.device))
            if uuid is None:
                return
            counts = self._counts.setdefault(uuid, Counter())
            counts[code] += 1
            seen = counts[code]
        if seen & (seen - 1) == 0:  # log the 1st, 2nd, 4th, 8th...: a storm stays a few lines
            log.warning("XID %d on %s (%d so far)", code, uuid, seen)
