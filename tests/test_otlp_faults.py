"""OTLP export against collectors that misbehave: hang, fail, or are not there.

The sink runs with the real OpenTelemetry exporters (gRPC and HTTP) against
small local stand-ins: a TCP listener that accepts connections and never
answers (a hung collector), an HTTP receiver whose answer the test sets, and a
port nobody listens on. The time bounds (5 s) only separate a prompt stop or a
one-interval export from the bug's wait for the exporter's whole timeout (60 s
here, as an operator's OTEL_EXPORTER_OTLP_TIMEOUT); they are not benchmarks.
"""

from __future__ import annotations

import asyncio
import http.server
import logging
import signal
import socket
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from agent_process import AgentProcess

from ray_accel.exporter.model import BackendStatus, NodeSnapshot
from ray_accel.exporter.sinks.otlp import OtlpSettings, OtlpSink, otlp_settings
from ray_accel.exporter.store import SnapshotStore

PROTOCOLS = ["grpc", "http/protobuf"]
BOUND_S = 5.0  # well above a prompt stop (~1 s), well below the exporter's 60 s timeout
LONG_TIMEOUT = {"OTEL_EXPORTER_OTLP_TIMEOUT": "60"}


class SilentCollector:
    """Accepts TCP connections and never answers, like a collector that hangs."""

    def __init__(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.1)
        self.url = f"http://127.0.0.1:{self._server.getsockname()[1]}"
        self.accepted = threading.Event()
        self._connections: list[socket.socket] = []
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                connection, _ = self._server.accept()
            except TimeoutError:
                continue
            self._connections.append(connection)
            self.accepted.set()

    def close(self) -> None:
        self._closed.set()
        self._thread.join()
        for connection in [*self._connections, self._server]:
            connection.close()


class AnsweringCollector:
    """Takes OTLP/HTTP exports and answers with `status` (settable)."""

    def __init__(self, status: int) -> None:
        self.status = status
        self.requests: list[int] = []  # the status each request got
        collector = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                status = collector.status
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()
                collector.requests.append(status)

            def log_message(self, *args) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def wait_for(self, status: int, count: int) -> None:
        deadline = time.monotonic() + 30
        while self.requests.count(status) < count:
            assert time.monotonic() < deadline, f"{count} answers {status}: {self.requests}"
            time.sleep(0.05)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def silent_collector() -> Iterator[SilentCollector]:
    collector = SilentCollector()
    yield collector
    collector.close()


def _store() -> SnapshotStore:
    store = SnapshotStore()
    store.publish(NodeSnapshot(cycle=1, taken_at=time.time(), interval_s=1.0,
                               node_labels={"simulated": "true"},
                               backends=(BackendStatus("nvidia", "nvidia", True),),
                               devices=(), agent_facts={"version": "0"}))
    return store


def _started(settings: OtlpSettings) -> OtlpSink:
    sink = OtlpSink(settings)
    asyncio.run(sink.start(SimpleNamespace(store=_store())))
    return sink


def _finishes_within(seconds: float, work) -> bool:
    """Run `work` on a thread; whether it returned within `seconds` (never waits longer)."""
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(seconds)
    return not thread.is_alive()


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_stop_is_prompt_while_an_export_hangs(protocol, silent_collector, monkeypatch):
    for name, value in LONG_TIMEOUT.items():
        monkeypatch.setenv(name, value)  # the exporter reads it too
    settings = otlp_settings(silent_collector.url, protocol, 60.0, LONG_TIMEOUT)
    sink = _started(settings)
    assert silent_collector.accepted.wait(10), "the export never reached the collector"
    time.sleep(0.5)  # the request is in flight
    assert _finishes_within(BOUND_S, lambda: asyncio.run(sink.stop()))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_export_to_a_hung_collector_lasts_about_one_interval(protocol, silent_collector,
                                                                monkeypatch):
    for name, value in LONG_TIMEOUT.items():
        monkeypatch.setenv(name, value)
    sink = OtlpSink(otlp_settings(silent_collector.url, protocol, 1.0, LONG_TIMEOUT))
    asyncio.run(sink.start(SimpleNamespace(store=_store())))
    try:
        assert _finishes_within(BOUND_S, sink.export_once)
    finally:
        asyncio.run(sink.stop())


def test_the_export_timeout_is_one_interval_or_the_operators_smaller_one():
    def timeout(interval_s: float, environ: dict[str, str]) -> float:
        return otlp_settings("http://c:4317", None, interval_s, environ).export_timeout_s

    assert timeout(2.0, {}) == 2.0
    assert timeout(2.0, LONG_TIMEOUT) == 2.0
    assert timeout(0.2, {}) == 1.0  # never shorter than a second
    assert timeout(600.0, {}) == 10.0  # nor longer than the SDK's default
    assert timeout(2.0, {"OTEL_EXPORTER_OTLP_TIMEOUT": "0.5"}) == 0.5
    assert timeout(2.0, {"OTEL_EXPORTER_OTLP_METRICS_TIMEOUT": "0.3",
                         "OTEL_EXPORTER_OTLP_TIMEOUT": "0.5"}) == 0.3


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_agent_stops_promptly_on_sigterm_while_an_export_hangs(protocol, silent_collector):
    with AgentProcess("--simulate", "hgx-h200", "--otlp-endpoint", silent_collector.url,
                      "--otlp-protocol", protocol, "--otlp-interval", "1",
                      env=LONG_TIMEOUT) as agent:
        assert silent_collector.accepted.wait(30), "the export never reached the collector"
        time.sleep(1.0)  # the request is in flight
        agent.proc.send_signal(signal.SIGTERM)
        assert _finishes_within(BOUND_S, agent.proc.wait), "the agent did not exit in time"
    assert agent.proc.returncode == 0


def test_an_interval_that_cannot_be_waited_does_not_end_the_export(caplog):
    collector = AnsweringCollector(200)
    caplog.set_level(logging.INFO)
    sink = _started(OtlpSettings("http/protobuf", float("inf"), collector.url + "/v1/metrics"))
    try:
        collector.wait_for(200, 1)
        deadline = time.monotonic() + 10
        while not any("cannot wait" in r.getMessage() for r in caplog.records):
            assert time.monotonic() < deadline, "the failed wait was not logged"
            time.sleep(0.05)
        assert sink._thread.is_alive()
    finally:
        asyncio.run(sink.stop())
        collector.close()


def _sink_and_library_records(caplog) -> tuple[list[str], list[str]]:
    sink = [r.getMessage() for r in caplog.records if r.name.endswith("sinks.otlp")]
    library = [f"{r.name}: {r.getMessage()}" for r in caplog.records
               if r.name.startswith("opentelemetry")]
    return sink, library


def test_a_failing_collector_is_logged_when_it_fails_and_when_it_works_again(caplog):
    collector = AnsweringCollector(500)
    caplog.set_level(logging.INFO)
    sink = _started(OtlpSettings("http/protobuf", 0.2, collector.url + "/v1/metrics"))
    try:
        collector.wait_for(500, 4)
        collector.status = 200
        collector.wait_for(200, 2)
        collector.status = 500
        collector.wait_for(500, 6)
    finally:
        asyncio.run(sink.stop())
        collector.close()
    sink_lines, library_lines = _sink_and_library_records(caplog)
    assert library_lines == []
    failures = [line for line in sink_lines if "export failed" in line]
    assert len(failures) == 2, sink_lines  # once per outage, not once per export
    assert all("500" in line for line in failures), failures  # with the exporter's reason
    assert sum("works again" in line for line in sink_lines) == 1


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_unreachable_collector_is_logged_once(protocol, caplog):
    caplog.set_level(logging.INFO)
    sink = _started(OtlpSettings(protocol, 0.2, f"http://127.0.0.1:{_closed_port()}"))
    try:
        deadline = time.monotonic() + 8  # several exports of at most 1 s, and their retries
        while time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        asyncio.run(sink.stop())
    sink_lines, library_lines = _sink_and_library_records(caplog)
    assert library_lines == []
    failures = [line for line in sink_lines if "export failed" in line]
    assert len(failures) == 1, sink_lines
