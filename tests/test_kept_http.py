"""The State API's kept-alive GETs (exporter/attribution/kept_http.py) against a real server."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ray_accel.exporter.attribution import kept_http


class _Recorder(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[tuple[int, str]] = []  # (connection number, request target)
        self.connections = 0
        self.status = 200
        self.close_after_reply = False
        self.drop_after_reply = False  # closes without saying so, as a keep-alive timeout does


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keeps connections open unless told otherwise
    server: _Recorder

    def setup(self) -> None:
        super().setup()
        self.server.connections += 1
        self.number = self.server.connections

    def do_GET(self) -> None:
        # Read before the reply goes out: the client may change them once it has it.
        close, drop = self.server.close_after_reply, self.server.drop_after_reply
        self.server.requests.append((self.number, self.path))
        body = f"answer {len(self.server.requests)}".encode()
        self.send_response(self.server.status)
        self.send_header("Content-Length", str(len(body)))
        if close:
            self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = close or drop
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Recorder]:
    for name in ("http_proxy", "HTTP_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    kept_http._proxied.cache_clear()
    recorder = _Recorder()
    thread = threading.Thread(target=recorder.serve_forever, daemon=True)
    thread.start()
    yield recorder
    recorder.shutdown()
    recorder.server_close()
    kept_http._connections.by_server.clear()
    kept_http._proxied.cache_clear()


def _url(server: _Recorder, path: str) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}{path}"


def test_requests_to_one_server_share_one_connection(server: _Recorder) -> None:
    first = kept_http.get(_url(server, "/api/v0/tasks?limit=1"), {}, timeout_s=5)
    second = kept_http.get(_url(server, "/api/v0/tasks?limit=2"), {"x-a": "b"}, timeout_s=5)
    assert (first, second) == (b"answer 1", b"answer 2")
    assert server.requests == [(1, "/api/v0/tasks?limit=1"), (1, "/api/v0/tasks?limit=2")]


def test_a_connection_the_server_closed_is_replaced_and_the_request_sent_again(
        server: _Recorder) -> None:
    server.drop_after_reply = True
    kept_http.get(_url(server, "/a"), {}, timeout_s=5)
    server.drop_after_reply = False
    assert f"127.0.0.1:{server.server_address[1]}" in kept_http._connections.by_server
    time.sleep(0.2)  # the server's side of the connection is closed by now
    assert kept_http.get(_url(server, "/b"), {}, timeout_s=5) == b"answer 2"
    assert server.requests == [(1, "/a"), (2, "/b")]


def test_a_reply_that_closes_is_not_kept(server: _Recorder) -> None:
    server.close_after_reply = True
    kept_http.get(_url(server, "/a"), {}, timeout_s=5)
    kept_http.get(_url(server, "/b"), {}, timeout_s=5)
    assert server.requests == [(1, "/a"), (2, "/b")]
    assert not kept_http._connections.by_server


def test_a_status_other_than_2xx_is_an_error_with_the_body(server: _Recorder) -> None:
    server.status = 401
    with pytest.raises(kept_http.HttpStatusError) as raised:
        kept_http.get(_url(server, "/a"), {}, timeout_s=5)
    assert (raised.value.status, raised.value.body) == (401, b"answer 1")
    server.status = 200
    assert kept_http.get(_url(server, "/b"), {}, timeout_s=5) == b"answer 2"
    assert [number for number, _ in server.requests] == [1, 1]  # the error's reply was whole


def test_an_unreachable_server_is_an_os_error(server: _Recorder) -> None:
    port = server.server_address[1]
    server.shutdown()
    server.server_close()
    with pytest.raises(OSError):
        kept_http.get(f"http://127.0.0.1:{port}/a", {}, timeout_s=5)


def test_a_server_behind_a_proxy_is_asked_through_it(server: _Recorder,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # The recorder stands in for the proxy: a proxied request names the whole URL.
    monkeypatch.setenv("http_proxy", _url(server, ""))
    assert kept_http.get("http://head.invalid:8265/api/v0/tasks?limit=1", {},
                         timeout_s=5) == b"answer 1"
    assert server.requests == [(1, "http://head.invalid:8265/api/v0/tasks?limit=1")]
    monkeypatch.setenv("no_proxy", "head.invalid")
    kept_http._proxied.cache_clear()
    with pytest.raises(OSError):  # not proxied: the name does not resolve
        kept_http.get("http://head.invalid:8265/api/v0/tasks?limit=1", {}, timeout_s=5)
