"""The Accelerators module as a Ray dashboard `SubprocessModule` (see bootstrap.py).

Ray serves `/accelerators/...` on the dashboard port behind its own token
middleware and proxies each request to this module's process. This file is
imported by name in Ray's forkserver, a bare interpreter: its top level only
imports Ray's own classes (as Ray's modules do) and turns any failure into
ImportError, which the forkserver tolerates. The real work is imported in
`run()`, where every failure is caught and reported by the routes as 503.
"""

from __future__ import annotations

import json
import logging
import os

try:
    from aiohttp import web
    from ray.dashboard.subprocesses.module import SubprocessModule
    from ray.dashboard.subprocesses.routes import SubprocessRouteTable as routes
except Exception as error:  # only ImportError may leave this module
    raise ImportError(f"ray-accel: Ray's dashboard classes are unavailable: {error}") from error

log = logging.getLogger(__name__)

REFRESH_VARIABLE = "RAY_ACCEL_DASHBOARD_REFRESH_S"


def _error(status: int, message: str) -> web.Response:
    return web.Response(status=status, content_type="application/json",
                        body=json.dumps({"error": message, "status": status}))


class RayAccelAccelerators(SubprocessModule):
    """Serves the Accelerators tab and its API at /accelerators/ on Ray's dashboard port."""

    def __init__(self, config) -> None:
        super().__init__(config)
        self._api = None
        self._failure = "starting"

    @classmethod
    def is_enabled(cls) -> bool:
        return os.environ.get("RAY_ACCEL_DASHBOARD") == "1"

    async def run(self) -> None:
        await super().run()
        try:
            from .api import AcceleratorsApi
            from .bootstrap import injected
            from .collector import DEFAULT_REFRESH_S, Collector, registry_discovery
            from .prometheus_history import configured

            injected("run")
            refresh = float(os.environ.get(REFRESH_VARIABLE) or DEFAULT_REFRESH_S)
            # Ray's dashboard proxies a subprocess module's answers through an aiohttp
            # client that inflates a gzip body but passes its Content-Encoding on, which
            # the browser then fails to decode: inside Ray, bodies go out as they are.
            collector = Collector(registry_discovery(self.gcs_address),
                                  refresh_s=min(max(refresh, 0.2), 3600.0),
                                  gzip_columns=False)
            # Ray's RAY_PROMETHEUS_HOST / _HEADERS, scoped to this session's series.
            prometheus, prometheus_error = configured(os.environ, self.session_name)
            self._api = AcceleratorsApi(collector, "ray", ray_dashboard_url="/",
                                        prometheus=prometheus, prometheus_error=prometheus_error)
            await collector.start()
            self._failure = ""
        except Exception as error:  # Ray gives up on a module whose run() raises
            self._failure = f"{type(error).__name__}: {error}"
            log.exception("ray-accel: the Accelerators module failed to start; Ray's "
                          "dashboard is unaffected")

    @routes.get("/accelerators")
    async def accelerators_root(self, request) -> web.StreamResponse:
        return web.Response(status=302, headers={"Location": "/accelerators/"})

    @routes.get("/accelerators/{tail:.*}")
    async def accelerators(self, request) -> web.StreamResponse:
        if self._failure or self._api is None:
            return _error(503, f"the Accelerators module is not running: {self._failure}")
        try:
            return await self._api.handle(request, request.match_info.get("tail", ""))
        except Exception as error:
            log.exception("ray-accel: request %s failed", request.path)
            return _error(500, f"internal error: {type(error).__name__}")
