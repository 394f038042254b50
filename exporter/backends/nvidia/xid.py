"""XID (critical driver error) events, read from an NVML event set in their own thread."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
from collections import Counter
from typing import Any

import pynvml

log = logging.getLogger(__name__)

# How long one nvmlEventSetWait may block. A driver sleeps in the kernel until an event or
# the timeout, so a wait costs next to nothing; the timeout bounds `stop()`, which must
# see the wait end before NVML is shut down (a longer one would slow every close).
WAIT_MS = 500
_RETRY_AFTER_ERROR_S = 1.0


def handle_key(handle: Any) -> int | None:
    """A hashable identity for an NVML device handle (the pointer value)."""
    return ctypes.cast(handle, ctypes.c_void_p).value


class XidWatcher:
    """Counts XID events per device and code until stopped.

    Devices are added one at a time as they are discovered (`watch`); those
    that cannot deliver XID events (NotSupported) are skipped. The event set
    and the thread waiting on it start with the first device watched. Counts
    start at zero when a device is first watched.
    """

    def __init__(self) -> None:
        self._uuid_by_handle: dict[int | None, str] = {}
        self._counts: dict[str, Counter[int]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
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
                self._thread = threading.Thread(target=self._run, name="ray-accel-xid",
                                                daemon=True)
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

    def stop(self) -> None:
        """Stop waiting; returns within about one wait period."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=WAIT_MS / 1000 * 4)
        if self._thread is None or not self._thread.is_alive():
            self._free()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = pynvml.nvmlEventSetWait(self._event_set, WAIT_MS)
            except pynvml.NVMLError_Timeout:
                continue
            except pynvml.NVMLError as error:
                log.debug("XID wait failed: %s", error)
                self._stop.wait(_RETRY_AFTER_ERROR_S)
                continue
            if data.eventType & pynvml.nvmlEventTypeXidCriticalError:
                self._record(data)

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

    def _free(self) -> None:
        if self._event_set is None:
            return
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlEventSetFree(self._event_set)
        self._event_set = None
