"""One thread per device: a vendor call that hangs holds up only the device it was for."""

from __future__ import annotations

import concurrent.futures as futures
import queue
import threading
from collections.abc import Callable
from typing import Any


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
