"""One named asyncio task that runs in the background until stopped."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any


class BackgroundTask:
    """Starts `run()` as a task once; `stop` cancels it and waits until it has ended."""

    def __init__(self, name: str, run: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self._name = name
        self._run = run
        self._task: asyncio.Task | None = None

    @property
    def running(self) -> bool:
        return self._task is not None

    def start(self) -> None:
        """Starts the task on the running loop unless it already runs."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=self._name)

    async def stop(self) -> None:
        if self._task is not None:
            task, self._task = self._task, None
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
