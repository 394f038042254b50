"""Vendor calls off the sampler's thread: a call that hangs holds up only the device it was for.

A `Lane` is a daemon thread that runs the calls queued on it one at a time, in order. A
`Worker` is one device's calls, at most one in flight, on a lane: a lane of its own, or
one it shares with other devices. Sharing one lane spares the switches between threads
that each call releasing the interpreter costs when every device has its own
(docs/benchmarks.md); the runner (exporter/runner.py) gives a device that was late on a
shared lane a lane of its own.
"""

from __future__ import annotations

import concurrent.futures as futures
import queue
import threading
from collections.abc import Callable
from typing import Any


class Lane:
    """A daemon thread, started with the first call, running queued calls in order.

    The thread is a daemon so that a vendor call hung forever never keeps the
    agent from exiting.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def put(self, future: futures.Future, fn: Callable[..., Any], args: tuple) -> None:
        """Queue `fn(*args)`; its outcome goes to `future`, unless that is cancelled first."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()
        self._queue.put((future, fn, args))

    def close(self) -> None:
        """Let the thread end after the calls queued so far."""
        self._queue.put(None)

    def _run(self) -> None:
        while (job := self._queue.get()) is not None:
            future, fn, args = job
            if not future.set_running_or_notify_cancel():
                continue  # withdrawn while it waited
            try:
                future.set_result(fn(*args))
            except BaseException as error:  # handed to whoever reads the future
                future.set_exception(error)


class Worker:
    """One device's calls, one at a time, on `lane` if given (shared), else on its own lane."""

    def __init__(self, name: str, lane: Lane | None = None) -> None:
        self._owns_lane = lane is None
        self.lane = lane if lane is not None else Lane(name)
        self._future: futures.Future | None = None

    def submit(self, fn: Callable[..., Any], *args: Any) -> futures.Future | None:
        """Queue `fn(*args)` unless a previous call's result is still to be taken (then None).

        A call that finished after its cycle stopped waiting is taken by the next
        `take_result`, not lost to a new call: an opened backend must not be
        opened again.
        """
        if self._future is not None:
            return None
        self._future = futures.Future()
        self.lane.put(self._future, fn, args)
        return self._future

    def take_result(self) -> futures.Future | None:
        """The finished future not yet taken, if any."""
        future = self._future
        if future is None or not future.done():
            return None
        self._future = None
        return future

    @property
    def idle(self) -> bool:
        """No call in flight and no result left to take."""
        return self._future is None

    @property
    def running(self) -> bool:
        """A call of this worker's is running now (not queued, not finished)."""
        return self._future is not None and self._future.running()

    def withdraw(self) -> None:
        """Cancel the call still queued on the lane, if any (one that started runs on)."""
        if self._future is not None and self._future.cancel():
            self._future = None

    def keep_lane(self) -> None:
        """Make the lane this worker's own (it is closed with the worker)."""
        self._owns_lane = True

    def shutdown(self) -> None:
        """Let its own lane's thread end after its current call; a shared lane is left open."""
        if self._owns_lane:
            self.lane.close()
