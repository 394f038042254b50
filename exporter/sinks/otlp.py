"""OpenTelemetry export of node snapshots over OTLP (gRPC or HTTP/protobuf).

Every export reads the store's latest snapshot (never a vendor library) and
sends each catalog metric under its catalog name, unit and description. The
data points are the very series the Prometheus endpoint renders for that
snapshot (both read sinks/series.py), so attributes and values match it one for
one; counters are cumulative sums, info metrics gauges of 1. The node's identity is
also put on the resource: `host.name`, `ray.node.id`, `ray.accelerator.simulated`.

The points are built per export instead of going through SDK observable
instruments: the SDK keeps every attribute set it has ever seen, so labels
that churn (task ids, pids) would reach its cardinality limit and collapse into
an overflow series after a while. The SDK's OTLP exporters still do the
sending, with their own handling of the OTEL_EXPORTER_OTLP_* variables
(headers, TLS, compression); their timeout is bounded by the interval
(`OtlpSettings.export_timeout_s`).

While a collector is down the exporters log every retry and every failed
export; the sink keeps those lines out of the log (they show at DEBUG) and logs
only when exports start failing, with the exporter's first reason, and when
they work again.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from typing import TYPE_CHECKING

from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Metric,
    MetricExporter,
    MetricExportResult,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from ..catalog import Kind
from ..model import NodeSnapshot
from .otlp_settings import (  # noqa: F401 - re-exported for callers of the sink
    DEFAULT_INTERVAL_S,
    GRPC,
    HTTP_PROTOBUF,
    PROTOCOLS,
    OtlpSettings,
    otlp_settings,
)
from .series import snapshot_series

if TYPE_CHECKING:
    from ..extensions import AgentHandle
    from ..store import SnapshotStore

log = logging.getLogger(__name__)

SERVICE_NAME = "ray-accel-agent"
SCOPE_NAME = "ray_accel.exporter"
STOP_GRACE_S = 1.0  # how long stop() waits for an export in flight
# Where the OpenTelemetry exporters (HTTP client and transport, gRPC) log their failures.
LIBRARY_LOGGERS = (
    "opentelemetry.exporter.otlp.proto.http.metric_exporter",
    "opentelemetry.exporter.otlp.proto.http._common",
    "opentelemetry.exporter.otlp.common.http",
    "opentelemetry.exporter.otlp.proto.grpc.exporter",
    "opentelemetry.exporter.otlp.proto.grpc.metric_exporter",
)


def create_exporter(settings: OtlpSettings) -> MetricExporter:
    """The SDK's OTLP metric exporter for the protocol."""
    if settings.protocol == HTTP_PROTOBUF:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    else:
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
    return OTLPMetricExporter(endpoint=settings.endpoint, timeout=settings.export_timeout_s)


def node_resource(snapshot: NodeSnapshot) -> Resource:
    """The node's identity as resource attributes, merged with OTEL_RESOURCE_ATTRIBUTES."""
    labels = snapshot.node_labels
    identity: dict[str, str | bool] = {
        "host.name": socket.gethostname(),
        "service.version": snapshot.agent_facts.get("version", ""),
        "ray.accelerator.simulated": labels.get("simulated") == "true",
    }
    if labels.get("ray_node_id"):
        identity["ray.node.id"] = labels["ray_node_id"]
    resource = Resource.create(identity)
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": SERVICE_NAME}))
    return resource


def snapshot_metrics(snapshot: NodeSnapshot, start_time_ns: int) -> list[Metric]:
    """Every catalog metric present in the snapshot, with the Prometheus endpoint's series."""
    series = snapshot_series(snapshot)
    taken_ns = int(snapshot.taken_at * 1e9)
    metrics = []
    for spec, rows in series.in_catalog_order():
        counter = spec.kind is Kind.COUNTER
        start_ns = start_time_ns if counter else 0
        points = [
            NumberDataPoint(attributes=labels, start_time_unix_nano=start_ns,
                            time_unix_nano=taken_ns, value=value)
            for labels, value in series.samples(spec, rows)
        ]
        data = (Sum(points, AggregationTemporality.CUMULATIVE, is_monotonic=True) if counter
                else Gauge(points))
        metrics.append(Metric(spec.name, spec.description, spec.unit, data))
    return metrics


def metrics_data(snapshot: NodeSnapshot, start_time_ns: int) -> MetricsData:
    """One OTLP export's worth of data for a snapshot."""
    scope = InstrumentationScope(SCOPE_NAME, snapshot.agent_facts.get("version") or None)
    return MetricsData([ResourceMetrics(
        node_resource(snapshot),
        [ScopeMetrics(scope, snapshot_metrics(snapshot, start_time_ns), "")],
        "",
    )])


class LibraryLog(logging.Filter):
    """Holds back the exporters' own log lines, keeping a thread's first since `reset`."""

    def __init__(self) -> None:
        super().__init__()
        # Per thread: the exporters log on the thread that exports, and one process
        # may run more than one sink (tests).
        self._reasons: dict[int, str | None] = {}

    def reset(self) -> None:
        """Start collecting this thread's reason (for the export it is about to make)."""
        self._reasons[threading.get_ident()] = None

    def reason(self) -> str | None:
        """The first warning or error the exporters logged on this thread since `reset`."""
        return self._reasons.get(threading.get_ident())

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING and self._reasons.get(record.thread, "") is None:
            self._reasons[record.thread] = record.getMessage()
        return log.isEnabledFor(logging.DEBUG)


LIBRARY_LOG = LibraryLog()


def quiet_library_loggers() -> None:
    """Send the exporters' log lines through LIBRARY_LOG (once, however many sinks start)."""
    for name in LIBRARY_LOGGERS:
        logging.getLogger(name).addFilter(LIBRARY_LOG)  # no-op when already there


class OtlpSink:
    """Agent extension: exports the latest snapshot every `interval_s` on its own thread."""

    def __init__(self, settings: OtlpSettings, exporter: MetricExporter | None = None) -> None:
        self.settings = settings
        self._exporter = exporter
        self._store: SnapshotStore | None = None
        self._start_ns = time.time_ns()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False

    async def start(self, agent: AgentHandle) -> None:
        self._store = agent.store
        if self._exporter is None:
            self._exporter = create_exporter(self.settings)
        quiet_library_loggers()
        self._thread = threading.Thread(target=self._loop, name="ray-accel-otlp", daemon=True)
        self._thread.start()
        log.info("exporting OTLP (%s) to %s every %g s", self.settings.protocol,
                 self.settings.endpoint or "the OTEL_EXPORTER_OTLP_* endpoint",
                 self.settings.interval_s)

    async def stop(self) -> None:
        self._stop.set()
        # Shut the exporter down first: that ends its retry waits and closes its gRPC
        # channel. A request to a collector that never answers cannot be cut short; it is
        # left to the (daemon) thread rather than delaying the agent's stop.
        if self._exporter is not None:
            await asyncio.to_thread(self._exporter.shutdown)
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, STOP_GRACE_S)
            if self._thread.is_alive():
                log.info("stopped OTLP export with an export still waiting on the collector")

    def export_once(self) -> bool:
        """Send the latest snapshot now; True when the receiver took it."""
        snapshot = self._store.latest if self._store is not None else None
        if snapshot is None or self._exporter is None:
            return False
        LIBRARY_LOG.reset()
        # The exporter's own timeout bounds this (create_exporter); it ignores timeout_millis.
        result = self._exporter.export(metrics_data(snapshot, self._start_ns))
        ok = result is MetricExportResult.SUCCESS
        if ok and self._failing:  # log changes only
            log.info("OTLP export works again")
        elif not ok and not self._failing:
            log.warning("OTLP export failed (%s); retrying every %g s",
                        LIBRARY_LOG.reason() or "no reason given", self.settings.interval_s)
        self._failing = not ok
        return ok

    def _loop(self) -> None:
        # The first export goes out as soon as there is a snapshot, then on the interval.
        while self._store is not None and not self._stop.is_set():
            if self._store.wait_for_cycle(1, timeout=0.2) is not None:
                break
        while not self._stop.is_set():
            try:
                self.export_once()
            except Exception:  # export must never take the agent down
                if not self._stop.is_set():  # else the exporter was shut under it (gRPC)
                    log.exception("OTLP export failed")
            self._pause()

    def _pause(self) -> None:
        try:
            self._stop.wait(self.settings.interval_s)
        except Exception:  # an interval the settings should have refused (inf): never die
            log.exception("OTLP export: cannot wait %r s; waiting %g s instead",
                          self.settings.interval_s, DEFAULT_INTERVAL_S)
            self._stop.wait(DEFAULT_INTERVAL_S)
