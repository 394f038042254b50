"""The standalone dashboard (its real HTTP stack and collector) on its own event loop in a
thread, for tests that drive it from outside: a browser, plain HTTP."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

from aiohttp import web

from ray_accel.dashboard_module.api import AcceleratorsApi
from ray_accel.dashboard_module.collector import Collector
from ray_accel.dashboard_module.standalone import build_app


class StandaloneHead:
    """Serves on 127.0.0.1 (`url`) the collector `make_collector` builds on the head's loop."""

    def __init__(self, make_collector: Callable[[], Collector]) -> None:
        self.url = ""
        self.collector: Collector | None = None
        self._make_collector = make_collector
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="standalone-head", daemon=True)

    def _run(self) -> None:
        try:
            self._loop.run_until_complete(self._serve())
        except BaseException as error:  # reported by start()
            self._failure = error
            self._ready.set()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        self.collector = self._make_collector()
        runner = web.AppRunner(build_app(AcceleratorsApi(self.collector, "standalone"), None),
                               access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await runner.cleanup()

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(60)
        if self._failure is not None or not self.url:
            raise RuntimeError(f"the dashboard did not start: {self._failure}")

    def wait_for_round(self, timeout_s: float) -> float:
        """Seconds until the collector's first round is in (raises after `timeout_s`)."""
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            if self.collector is not None and self.collector.rounds >= 1:
                return time.monotonic() - started
            time.sleep(0.2)
        raise AssertionError(f"no round within {timeout_s} s")

    def close(self) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(60)

    def __enter__(self) -> StandaloneHead:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
