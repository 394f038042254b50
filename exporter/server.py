"""The agent's HTTP endpoints. Every handler reads the stored snapshot only."""

from __future__ import annotations

import time
from collections.abc import Callable

from . import httpd
from .health import health
from .httpd import Request, Response, json_error, json_response
from .record import endpoint as record_endpoint
from .record.history import History
from .sinks.json import snapshot_document
from .sinks.prometheus import PrometheusRenderer, wants_openmetrics
from .sinks.summary import SummaryCache, summary_response
from .store import SnapshotStore

ENDPOINTS = {
    "/metrics": "Prometheus text (OpenMetrics when the Accept header asks for it)",
    "/healthz": "liveness of the sampling loop, each backend, and what is not answering",
    "/api/v1/snapshot": "the latest node snapshot as JSON",
    record_endpoint.PATH: record_endpoint.DESCRIPTION,
    "/api/v1/summary": "the compact node summary the head's rounds fetch (ETag, 304 when "
                       "unchanged)",
}
MAX_REQUEST_BYTES = httpd.MAX_REQUEST_BYTES


# Query parameters each endpoint accepts; anything else is refused with 400.
ALLOWED_PARAMETERS: dict[str, frozenset[str]] = {
    "/": frozenset(),
    "/metrics": frozenset({"name[]"}),
    "/healthz": frozenset(),
    "/api/v1/snapshot": frozenset(),
    record_endpoint.PATH: record_endpoint.PARAMETERS,
    "/api/v1/summary": frozenset(),
}


def known_parameters_only(handler: httpd.Handler) -> httpd.Handler:
    """`handler` behind a check that a known path is asked only its known parameters, each
    once (but lists, named `name[]`)."""
    async def checked(request: Request) -> Response:
        allowed = ALLOWED_PARAMETERS.get(request.path)
        if allowed is not None:
            unknown = sorted(set(request.query) - allowed)
            if unknown:
                accepted = ", ".join(sorted(allowed)) or "none"
                return json_error(400, f"unknown query parameter(s) {', '.join(unknown)} for "
                                       f"{request.path}; accepted: {accepted}")
            twice = sorted(name for name, values in request.query.items()
                           if len(values) > 1 and not name.endswith("[]"))
            if twice:
                return json_error(400, f"query parameter(s) {', '.join(twice)} given more "
                                       "than once")
        return await handler(request)

    return checked


class AgentHttp:
    """Handlers over a snapshot store; `sampler_alive` tells whether sampling still runs."""

    def __init__(self, store: SnapshotStore, sampler_alive: Callable[[], bool],
                 renderer: PrometheusRenderer | None = None,
                 history: History | None = None) -> None:
        self._store = store
        self._history = history if history is not None else History()
        self._sampler_alive = sampler_alive
        self._renderer = renderer or PrometheusRenderer()
        self._summary = SummaryCache()

    def app(self) -> httpd.Handler:
        """The handler of every request: parameter check, then routing."""
        router = httpd.Router()
        router.add_get("/", self.index)
        router.add_get("/metrics", self.metrics)
        router.add_get("/healthz", self.healthz)
        router.add_get("/api/v1/snapshot", self.snapshot)
        router.add_get(record_endpoint.PATH, record_endpoint.record_handler(self._history))
        router.add_get("/api/v1/summary", self.summary)
        return known_parameters_only(router)

    async def index(self, request: Request) -> Response:
        return json_response({"service": "ray-accel agent", "endpoints": ENDPOINTS})

    async def metrics(self, request: Request) -> Response:
        snapshot = self._store.latest
        if snapshot is None:
            return _not_ready()
        body, content_type = self._renderer.render(
            snapshot, wants_openmetrics(request.headers.get("Accept")),
            names=frozenset(request.params("name[]")),
        )
        return Response(body=body, content_type=content_type)

    async def healthz(self, request: Request) -> Response:
        body, code = health(self._store.latest, self._sampler_alive(), time.time())
        return json_response(body, status=code)

    async def snapshot(self, request: Request) -> Response:
        snapshot = self._store.latest
        if snapshot is None:
            return _not_ready()
        return json_response(snapshot_document(snapshot), compact=True)

    async def summary(self, request: Request) -> Response:
        snapshot = self._store.latest
        if snapshot is None:
            return _not_ready()
        return summary_response(self._summary.get(snapshot), snapshot,
                                request.headers.get("If-None-Match"))


def _not_ready() -> Response:
    response = json_error(503, "no sampling cycle has completed yet")
    response.headers["Retry-After"] = "1"
    return response
