"""OTLP export end to end: the agent's export, received by local OTLP receivers.

A gRPC server implementing the OTLP MetricsService and an HTTP server taking
protobuf at /v1/metrics stand in for a collector. The agent runs on simulated
hardware and exports several times per sampling cycle, so the test can pair
what /metrics served with the export of the same snapshot (same cycle): every
catalog series on /metrics must be one OTLP data point, under the catalog's
OTel name and unit, with the same attributes and value, and nothing more.
"""

from __future__ import annotations

import http.server
import queue
import socket
import threading
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest
from agent_process import AgentProcess
from opentelemetry.proto.collector.metrics.v1 import (
    metrics_service_pb2,
    metrics_service_pb2_grpc,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from prometheus_client.parser import text_string_to_metric_families as parse_text

from ray_accel.exporter import catalog as m
from ray_accel.exporter.catalog import CATALOG, Kind, prometheus_name
from ray_accel.exporter.model import BackendStatus, NodeSnapshot
from ray_accel.exporter.sinks.otlp import (
    DEFAULT_INTERVAL_S,
    OtlpSettings,
    node_resource,
    otlp_settings,
)

CATALOG_SAMPLES = {spec.prometheus_name for spec in CATALOG}
Series = dict[tuple[str, frozenset], float]


class Receiver:
    """Collects ExportMetricsServiceRequests, whichever protocol brought them."""

    def __init__(self) -> None:
        self.requests: queue.Queue = queue.Queue()

    def take(self, timeout: float = 30.0) -> metrics_service_pb2.ExportMetricsServiceRequest:
        return self.requests.get(timeout=timeout)


class _GrpcService(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self, receiver: Receiver) -> None:
        self.receiver = receiver

    def Export(self, request, context):
        self.receiver.requests.put(request)
        return metrics_service_pb2.ExportMetricsServiceResponse()


@pytest.fixture
def grpc_receiver() -> Iterator[tuple[str, Receiver]]:
    receiver = Receiver()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(_GrpcService(receiver), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"http://127.0.0.1:{port}", receiver
    finally:
        server.stop(grace=None)


@pytest.fixture
def http_receiver() -> Iterator[tuple[str, Receiver]]:
    receiver = Receiver()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.path != "/v1/metrics" or \
                    self.headers["Content-Type"] != "application/x-protobuf":
                self.send_error(404)
                return
            receiver.requests.put(
                metrics_service_pb2.ExportMetricsServiceRequest.FromString(body))
            reply = metrics_service_pb2.ExportMetricsServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", receiver
    finally:
        server.shutdown()
        server.server_close()


def _value(value: AnyValue):
    return getattr(value, value.WhichOneof("value"))


def otlp_series(request) -> tuple[Series, dict]:
    """The request's data points keyed like Prometheus samples, and its resource attributes."""
    series: Series = {}
    (resource_metrics,) = request.resource_metrics
    resource = {kv.key: _value(kv.value) for kv in resource_metrics.resource.attributes}
    for scope_metrics in resource_metrics.scope_metrics:
        for metric in scope_metrics.metrics:
            spec = m.spec(metric.name)
            assert metric.unit == spec.unit, metric.name
            assert metric.description == spec.description
            if spec.kind is Kind.COUNTER:
                assert metric.WhichOneof("data") == "sum", metric.name
                assert metric.sum.is_monotonic
                assert metric.sum.aggregation_temporality == 2  # cumulative
                points = metric.sum.data_points
            else:
                assert metric.WhichOneof("data") == "gauge", metric.name
                points = metric.gauge.data_points
            name = prometheus_name(metric.name, metric.unit, spec.kind)
            for point in points:
                attributes = frozenset((kv.key, _value(kv.value)) for kv in point.attributes)
                key = (name, attributes)
                assert key not in series, key
                series[key] = getattr(point, point.WhichOneof("value"))
    return series, resource


def prometheus_series(agent: AgentProcess) -> Series:
    status, _, body = agent.get("/metrics")
    assert status == 200
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in parse_text(body.decode()) for s in family.samples
        if s.name in CATALOG_SAMPLES
    }


def _cycles(series: Series) -> float:
    cycles = m.spec(m.AGENT_CYCLES).prometheus_name
    return next(value for (name, _), value in series.items() if name == cycles)


def compare_with_metrics(agent: AgentProcess, receiver: Receiver) -> dict:
    """Match the export of a snapshot /metrics served, series for series; return resource."""
    agent.wait_for(lambda doc: len(doc["devices"]) == 8)
    for _ in range(20):
        scraped = prometheus_series(agent)
        exported, resource = otlp_series(receiver.take())
        # Exports of the scraped snapshot follow within an export interval, unless the
        # next cycle came first: then scrape again.
        while _cycles(exported) < _cycles(scraped):
            exported, resource = otlp_series(receiver.take())
        if _cycles(exported) == _cycles(scraped):
            break
    else:
        raise AssertionError("no export of a snapshot /metrics served")
    assert exported.keys() == scraped.keys()
    for key, value in scraped.items():
        assert exported[key] == pytest.approx(value, rel=1e-12), key
    # Not a vacuous match: devices, processes, counters and info series all came.
    names = {name for name, _ in exported}
    assert {"hw_power_watts", "hw_energy_joules_total", "ray_accelerator_device_info",
            "ray_accelerator_process_memory_usage_bytes"} <= names
    assert len(exported) > 100
    return resource


def _run_agent(*otlp_args: str, env: dict[str, str] | None = None) -> AgentProcess:
    return AgentProcess("--simulate", "hgx-h200", "--interval", "1", *otlp_args, env=env)


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_export_matches_the_prometheus_endpoint(protocol, grpc_receiver, http_receiver):
    endpoint, receiver = grpc_receiver if protocol == "grpc" else http_receiver
    with _run_agent("--otlp-endpoint", endpoint, "--otlp-protocol", protocol,
                    "--otlp-interval", "0.2") as agent:
        resource = compare_with_metrics(agent, receiver)
    assert resource["host.name"] == socket.gethostname()
    assert resource["service.name"] == "ray-accel-agent"
    assert resource["ray.accelerator.simulated"] is True
    assert "ray.node.id" not in resource  # this agent runs without Ray


def test_standard_environment_variables_configure_the_export(http_receiver):
    endpoint, receiver = http_receiver
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
           "OTEL_METRIC_EXPORT_INTERVAL": "200",
           "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=test,service.name=gpu-fleet"}
    with _run_agent(env=env) as agent:
        resource = compare_with_metrics(agent, receiver)
    assert resource["deployment.environment"] == "test"
    assert resource["service.name"] == "gpu-fleet"


def test_node_identity_goes_on_the_resource():
    snapshot = NodeSnapshot(cycle=1, taken_at=1.0, interval_s=1.0,
                            node_labels={"ray_node_id": "ab" * 28, "simulated": "true"},
                            backends=(BackendStatus("nvidia", "nvidia", True),), devices=(),
                            agent_facts={"version": "1.2.3"})
    attributes = node_resource(snapshot).attributes
    assert attributes["ray.node.id"] == "ab" * 28
    assert attributes["host.name"] == socket.gethostname()
    assert attributes["service.version"] == "1.2.3"
    assert attributes["ray.accelerator.simulated"] is True


def test_settings_from_flags_and_environment():
    assert otlp_settings(None, None, None, {}) is None  # off by default
    assert otlp_settings("http://c:4317", None, None, {}) == OtlpSettings(
        "grpc", DEFAULT_INTERVAL_S, "http://c:4317")
    # A bare HTTP base URL gets the metrics path, like OTEL_EXPORTER_OTLP_ENDPOINT does.
    assert otlp_settings("http://c:4318", "http/protobuf", 2.0, {}).endpoint == \
        "http://c:4318/v1/metrics"
    assert otlp_settings("https://c/otlp/metrics", "http/protobuf", None, {}).endpoint == \
        "https://c/otlp/metrics"
    from_env = otlp_settings(None, None, None, {
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://c:4318/v1/metrics",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_METRIC_EXPORT_INTERVAL": "2500"})
    assert from_env == OtlpSettings("http/protobuf", 2.5, None)  # the exporter reads the URL
    # the gRPC exporter takes a scheme-less host:port from the variable as it is
    assert otlp_settings(None, None, None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4317"}
                         ) == OtlpSettings("grpc", 10.0, None)
    for milliseconds, seconds in (("100", 0.1), ("3600000", 3600.0)):  # the flag's bounds
        assert otlp_settings(None, None, None, {
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317",
            "OTEL_METRIC_EXPORT_INTERVAL": milliseconds}).interval_s == seconds


@pytest.mark.parametrize(
    ("args", "environ", "message"),
    [
        (("ftp://c:1", None, None), {}, "--otlp-endpoint must be an http:// or https:// URL"),
        (("c:4317", None, None), {}, "--otlp-endpoint must be an http:// or https:// URL"),
        (("http://c:99999", None, None), {}, "invalid port"),
        ((None, "grpc", None), {}, "need an endpoint"),
        ((None, None, None), {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317",
                              "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
         "OTEL_EXPORTER_OTLP_PROTOCOL must be one of grpc, http/protobuf"),
        ((None, None, None), {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317",
                              "OTEL_METRIC_EXPORT_INTERVAL": "soon"},
         "OTEL_METRIC_EXPORT_INTERVAL must be milliseconds"),
        # The flag's bounds (0.1-3600 s), and nothing that is not a finite number.
        *[((None, None, None), {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317",
                                "OTEL_METRIC_EXPORT_INTERVAL": interval},
           "OTEL_METRIC_EXPORT_INTERVAL must be between 100 and 3600000 milliseconds")
          for interval in ("nan", "inf", "-inf", "1", "99", "3600001", "0", "-5")],
        # The endpoint variables are URLs like the flag's value.
        ((None, None, None), {"OTEL_EXPORTER_OTLP_ENDPOINT": "not a url"},
         "OTEL_EXPORTER_OTLP_ENDPOINT must be an http:// or https:// URL"),
        ((None, "http/protobuf", None), {"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"},
         "OTEL_EXPORTER_OTLP_ENDPOINT must be an http:// or https:// URL"),
        ((None, None, None), {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317",
                              "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "c:4318/v1/metrics"},
         "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT must be an http:// or https:// URL"),
        ((None, None, None), {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:99999"},
         "OTEL_EXPORTER_OTLP_ENDPOINT has an invalid port"),
        *[(("http://c:4317", None, None), {"OTEL_EXPORTER_OTLP_TIMEOUT": timeout},
           "OTEL_EXPORTER_OTLP_TIMEOUT must be")
          for timeout in ("soon", "0", "-1", "nan", "inf")],
    ],
)
def test_bad_settings_are_refused(args, environ, message):
    with pytest.raises(ValueError, match=message):
        otlp_settings(*args, environ)


def test_every_catalog_metric_translates_to_its_prometheus_name():
    # The comparison above maps OTLP names back through the catalog's translation.
    for spec in CATALOG:
        assert prometheus_name(spec.name, spec.unit, spec.kind) == spec.prometheus_name
    assert Kind.INFO in {spec.kind for spec in CATALOG}
