"""Unary gRPC calls on the caller's thread: one HTTP/2 connection per server, no grpcio.

The agent asks Ray's servers one or two unary questions each attribution refresh.
grpcio's client keeps six threads of its own awake while a channel is open (about
0.1 % of a core between calls) and spends about 3 ms of CPU on a call made 2 s
after the one before (bench/ray_rpc_cost.py). This client speaks the gRPC wire
protocol itself: a POST on an HTTP/2 stream (the `h2` state machine) carrying one
length-prefixed message, the status in the trailers.

- The connection opens on the first call and is reused; any failure closes it, and
  the next call connects afresh. One left idle longer than Ray's client keepalive
  time (`RAY_grpc_client_keepalive_time_ms`, 300 s) is replaced before a call,
  as keepalive pings would have found a dead one.
- The whole call (connect, send, answer) is bounded by its timeout, also sent as
  `grpc-timeout` so the server gives up on it too.
- TLS when asked (an `ssl.SSLContext`), negotiated as `h2` by ALPN.
- With `RAY_grpc_enable_http_proxy` on, as grpcio does then, the connection goes
  through the proxy of `grpc_proxy`, `https_proxy` or `http_proxy` (HTTP CONNECT),
  unless `no_proxy` names the host.
"""

from __future__ import annotations

import os
import select
import socket
import ssl
import struct
import time
from urllib.parse import unquote

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings

# gRPC status codes by number (grpc/status.h), named as grpcio's `StatusCode` names them.
STATUS_NAMES = (
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
    "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
    "UNAUTHENTICATED",
)
# An answer without gRPC status, by its HTTP status (gRPC's http-grpc-status-mapping).
_HTTP_STATUS = {400: "INTERNAL", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
                404: "UNIMPLEMENTED", 429: "UNAVAILABLE", 502: "UNAVAILABLE",
                503: "UNAVAILABLE", 504: "UNAVAILABLE"}
_WINDOW = 16 * 1024 * 1024  # what the server may send ahead of our reading it
_USER_AGENT = "ray-accel"
_PREFIX = struct.Struct(">BI")  # a gRPC message: compressed flag, length


class RpcFailure(Exception):
    """A call that ended without an answer: its gRPC status name and what was said."""

    def __init__(self, code: str, details: str) -> None:
        super().__init__(f"{code}: {details}")
        self.code = code
        self.details = details


def _status_name(value: str) -> str:
    return STATUS_NAMES[int(value)] if value.isdigit() and int(value) < len(STATUS_NAMES) \
        else "UNKNOWN"


class _Deadline:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._at = time.monotonic() + seconds

    def left(self) -> float:
        """Seconds left; `RpcFailure` DEADLINE_EXCEEDED once none are."""
        left = self._at - time.monotonic()
        if left <= 0:
            raise self.exceeded()
        return left

    def exceeded(self) -> RpcFailure:
        return RpcFailure("DEADLINE_EXCEEDED", f"no answer within {self.seconds:.1f} s")


class UnaryConnection:
    """Unary calls to one gRPC server at `address` (host:port), one at a time."""

    def __init__(self, address: str, tls: ssl.SSLContext | None = None,
                 max_message_bytes: int = 4 * 1024 * 1024, idle_reconnect_s: float = 300.0,
                 use_proxy: bool = False) -> None:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"not a host:port address: {address!r}")
        self.address = address
        self._host, self._port = host.strip("[]"), int(port)
        self._tls = tls
        self._max_message_bytes = max_message_bytes
        self._idle_reconnect_s = idle_reconnect_s
        self._use_proxy = use_proxy
        self._sock: socket.socket | None = None
        self._h2: h2.connection.H2Connection | None = None
        self._last_used = 0.0

    def call(self, path: str, message: bytes, timeout_s: float,
             metadata: tuple[tuple[str, str], ...] = ()) -> bytes:
        """The answer to `message` sent to the method `path` ("/package.Service/Method");
        `RpcFailure` when there is none, the connection then closed."""
        deadline = _Deadline(timeout_s)
        try:
            self._ensure_open(deadline)
            return self._exchange(path, message, deadline, metadata)
        except RpcFailure:
            self.close()
            raise
        except (OSError, h2.exceptions.H2Error) as error:
            self.close()
            if isinstance(error, TimeoutError):
                raise deadline.exceeded() from error
            raise RpcFailure("UNAVAILABLE", str(error) or type(error).__name__) from error
        finally:
            self._last_used = time.monotonic()

    def close(self) -> None:
        """Close the connection (the next call opens another)."""
        sock, self._sock, self._h2 = self._sock, None, None
        if sock is not None:
            sock.close()

    def _ensure_open(self, deadline: _Deadline) -> None:
        if self._sock is not None and (
                time.monotonic() - self._last_used > self._idle_reconnect_s
                or not self._still_open()):
            self.close()
        if self._sock is None:
            self._open(deadline)

    def _still_open(self) -> bool:
        """Whether the server has neither closed the connection nor said it will (GOAWAY)
        since the last call; what it sent meanwhile (a ping, settings) is handled."""
        assert self._sock is not None and self._h2 is not None
        try:
            while select.select([self._sock], [], [], 0)[0]:
                data = self._sock.recv(65536)
                if not data:
                    return False
                events = self._h2.receive_data(data)
                if any(isinstance(event, h2.events.ConnectionTerminated) for event in events):
                    return False
                self._flush()
        except (OSError, h2.exceptions.H2Error):
            return False
        return True

    def _open(self, deadline: _Deadline) -> None:
        sock = self._connect(deadline)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._tls is not None:
                sock.settimeout(deadline.left())
                sock = self._tls.wrap_socket(sock, server_hostname=self._host)
                if sock.selected_alpn_protocol() not in (None, "h2"):
                    raise RpcFailure("UNAVAILABLE", f"the server at {self.address} does not "
                                     "speak HTTP/2")
            connection = h2.connection.H2Connection(h2.config.H2Configuration(
                client_side=True, header_encoding="utf-8"))
            connection.initiate_connection()
            connection.update_settings({
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: _WINDOW,
                h2.settings.SettingCodes.ENABLE_PUSH: 0})
            connection.increment_flow_control_window(_WINDOW)
        except BaseException:
            sock.close()
            raise
        self._sock, self._h2 = sock, connection
        self._flush()

    def _connect(self, deadline: _Deadline) -> socket.socket:
        proxy = self._proxy() if self._use_proxy else None
        if proxy is None:
            return socket.create_connection((self._host, self._port), timeout=deadline.left())
        return _through_proxy(proxy, f"{self._host}:{self._port}", deadline)

    def _proxy(self) -> tuple[str, int] | None:
        from urllib.parse import urlsplit
        from urllib.request import proxy_bypass_environment

        url = next((os.environ[name] for name in ("grpc_proxy", "https_proxy", "http_proxy")
                    if os.environ.get(name)), "")
        if not url or proxy_bypass_environment(self._host):
            return None
        parts = urlsplit(url if "://" in url else f"http://{url}")
        return parts.hostname or "", parts.port or 80

    def _exchange(self, path: str, message: bytes, deadline: _Deadline,
                  metadata: tuple[tuple[str, str], ...]) -> bytes:
        assert self._h2 is not None
        stream = self._h2.get_next_available_stream_id()
        timeout_ms = max(int(deadline.left() * 1000), 1)
        headers = [(":method", "POST"), (":scheme", "https" if self._tls else "http"),
                   (":path", path), (":authority", self.address),
                   ("content-type", "application/grpc"), ("te", "trailers"),
                   ("user-agent", _USER_AGENT), ("grpc-timeout", f"{min(timeout_ms, 99_999_999)}m"),
                   *metadata]
        self._h2.send_headers(stream, headers)
        self._send_body(stream, _PREFIX.pack(0, len(message)) + message, deadline)
        return self._answer(stream, deadline)

    def _send_body(self, stream: int, body: bytes, deadline: _Deadline) -> None:
        assert self._h2 is not None
        sent = 0
        while sent < len(body):
            room = min(self._h2.local_flow_control_window(stream),
                       self._h2.max_outbound_frame_size, len(body) - sent)
            if room <= 0:  # the server's window is full: read until it opens
                self._flush()
                self._receive(deadline)
                continue
            self._h2.send_data(stream, body[sent:sent + room])
            sent += room
        self._h2.end_stream(stream)
        self._flush()

    def _answer(self, stream: int, deadline: _Deadline) -> bytes:
        body = bytearray()
        headers: dict[str, str] = {}
        while True:
            for event in self._receive(deadline):
                if getattr(event, "stream_id", stream) != stream:
                    continue
                if isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
                    headers.update(event.headers)
                elif isinstance(event, h2.events.DataReceived):
                    body += event.data
                    if len(body) > self._max_message_bytes + _PREFIX.size:
                        raise RpcFailure("RESOURCE_EXHAUSTED", "the answer is larger than "
                                         f"{self._max_message_bytes} bytes")
                    self._h2.acknowledge_received_data(event.flow_controlled_length, stream)
                elif isinstance(event, h2.events.StreamReset):
                    refused = event.error_code == h2.errors.ErrorCodes.REFUSED_STREAM
                    code = "UNAVAILABLE" if refused else "INTERNAL"
                    raise RpcFailure(code, f"stream reset by the server ({event.error_code!r})")
                elif isinstance(event, h2.events.ConnectionTerminated):
                    raise RpcFailure("UNAVAILABLE", f"connection closed by the server "
                                     f"({event.error_code!r})")
                elif isinstance(event, h2.events.StreamEnded):
                    return _message(headers, bytes(body))
            self._flush()

    def _receive(self, deadline: _Deadline) -> list[h2.events.Event]:
        assert self._sock is not None and self._h2 is not None
        self._sock.settimeout(deadline.left())
        data = self._sock.recv(65536)
        if not data:
            raise RpcFailure("UNAVAILABLE", "connection closed by the server")
        return self._h2.receive_data(data)

    def _flush(self) -> None:
        assert self._sock is not None and self._h2 is not None
        data = self._h2.data_to_send()
        if data:
            self._sock.sendall(data)


def _message(headers: dict[str, str], body: bytes) -> bytes:
    """The one message of a finished answer; `RpcFailure` for a status other than OK."""
    status = headers.get("grpc-status")
    if status is None:
        http = int(headers.get(":status", "0") or 0)
        code = "UNKNOWN" if http == 200 else _HTTP_STATUS.get(http, "UNKNOWN")
        raise RpcFailure(code, f"HTTP status {http} without a gRPC status")
    if status != "0":
        raise RpcFailure(_status_name(status), unquote(headers.get("grpc-message", "")))
    if len(body) < _PREFIX.size:
        raise RpcFailure("INTERNAL", "the answer has no message")
    compressed, length = _PREFIX.unpack_from(body)
    if compressed:
        raise RpcFailure("INTERNAL", "the answer is compressed, though none was asked for")
    if len(body) != _PREFIX.size + length:
        raise RpcFailure("INTERNAL", f"the answer is {len(body) - _PREFIX.size} bytes, "
                         f"its prefix says {length}")
    return body[_PREFIX.size:]


def _through_proxy(proxy: tuple[str, int], target: str, deadline: _Deadline) -> socket.socket:
    """A connection to `target` tunnelled through an HTTP proxy (CONNECT)."""
    sock = socket.create_connection(proxy, timeout=deadline.left())
    try:
        sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        reply = b""
        while b"\r\n\r\n" not in reply:
            sock.settimeout(deadline.left())
            chunk = sock.recv(4096)
            if not chunk or len(reply) > 65536:
                raise RpcFailure("UNAVAILABLE", f"the proxy {proxy[0]}:{proxy[1]} closed "
                                 "the connection")
            reply += chunk
        status = reply.split(b"\r\n", 1)[0].decode("latin-1")
        if status.split()[1:2] != ["200"]:
            raise RpcFailure("UNAVAILABLE", f"the proxy {proxy[0]}:{proxy[1]} refused the "
                             f"tunnel: {status}")
    except BaseException:
        sock.close()
        raise
    return sock
