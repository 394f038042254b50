"""XID (critical driver error) events, read from an NVML event set in their own thread."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
from collections import Counter
from collections.abc import Mapping
from typing import Any

import pynvml

log = logging.getLogger(__name__)

WAIT_MS = 500
_RETRY_AFTER_ERROR_S = 1.0


def handle_key(handle: Any) -> int | None:
    """A hashable identity for an NVML device handle (the pointer value)."""
    return ctypes.cast(handle, ctypes.c_void_p).value


class XidWatcher:
    """Counts XID events per device and code until stopped.

    Devices that cannot deliver XID events (NotSupported) are skipped; the
    others are watched. Counts start at zero when the watcher starts.
    """

    def __init__(self, handles_by_uuid: Mapping[str, Any]) -> None:
        self._uuid_by_handle = {handle_key(h): uuid for uuid, h in handles_by_uuid.items()}
        self._handles = dict(handles_by_uuid)
        self._counts: dict[str, Counter[int]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._event_set: Any = None
        self.watched: set[str] = set()

    def start(self) -> None:
        """Register every device that supports XID events and start waiting for them."""
        try:
            self._event_set = pynvml.nvmlEventSetCreate()
        except pynvml.NVMLError as error:
            log.warning("XID events unavailable: %s", error)
            return
        for uuid, handle in self._handles.items():
            try:
                pynvml.nvmlDeviceRegisterEvents(
                    handle, pynvml.nvmlEventTypeXidCriticalError, self._event_set
                )
                self.watched.add(uuid)
            except pynvml.NVMLError as error:
                log.info("XID events not available for %s: %s", uuid, error)
        if not self.watched:
            self._free()
            return
        self._thread = threading.Thread(target=self._run, name="ray-accel-xid", daemon=True)
        self._thread.start()

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
        uuid = self._uuid_by_handle.get(handle_key(data.device))
        if uuid is None:
            return
        code = int(data.eventData)
        with self._lock:
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
