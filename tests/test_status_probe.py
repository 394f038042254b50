"""`ray-accel status`'s probe of one agent: its /healthz status and what it names as not
answering, whatever the agent (or what answers in its place) sends back."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ray_accel.exporter.cluster.deploy import probe_health

# path prefix -> (HTTP status, body)
ANSWERS = {
    "/degraded": (200, json.dumps({"status": "degraded", "not_answering": [
        {"backend": "amd", "state": "down", "reason": "amdsmi: no ROCm"},
        {"vendor": "nvidia", "index": "3", "uuid": "GPU-3", "state": "down",
         "reason": "gpu_is_lost"},
        "not an entry",
    ]})),
    "/starting": (503, json.dumps({"status": "starting", "not_answering": []})),
    "/not-json": (500, "<html>proxy error</html>"),
    "/a-list": (200, json.dumps(["ok"])),
    "/odd-problems": (200, json.dumps({"status": "degraded", "not_answering": "GPU 3"})),
}


class _Canned(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        status, body = ANSWERS[self.path.removesuffix("/healthz")]
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Canned)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_degraded_agent_names_each_backend_and_device_not_answering(base_url):
    assert probe_health(base_url + "/degraded") == ("degraded", [
        "backend amd down: amdsmi: no ROCm", "nvidia 3 down: gpu_is_lost"])


def test_a_503_still_gives_the_agents_own_status(base_url):
    assert probe_health(base_url + "/starting") == ("starting", [])


@pytest.mark.parametrize(("prefix", "expected"), [
    ("/not-json", ("HTTP 500", [])),
    ("/a-list", ("unknown", [])),
    ("/odd-problems", ("degraded", [])),
])
def test_what_is_not_an_agents_health_document_is_said_plainly(base_url, prefix, expected):
    assert probe_health(base_url + prefix) == expected


def test_an_agent_that_is_not_there_is_unreachable():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Canned)
    port = server.server_address[1]
    server.server_close()  # nothing listens on the port now
    status, problems = probe_health(f"http://127.0.0.1:{port}")
    assert status.startswith("unreachable (") and problems == []
