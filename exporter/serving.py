"""How the agent and the standalone dashboard serve HTTP: one set-up with limits for both.

aiohttp alone keeps a connection whose request head never completes for as long
as its keep-alive timer (an hour by default), accepts connections until file
descriptors run out, answers its parser's errors in plain text and logs a
traceback for each. `serve` puts these limits around an `web.Application`:

- a request head (request line and headers) must arrive within
  `header_timeout_s` of its first byte, else the client gets a JSON 408 and
  the connection is closed;
- a connection with no request under way is closed after `keepalive_timeout_s`
  (also one that opens and sends nothing);
- at most `max_connections` are open: a new one beyond the cap takes the place of
  the oldest connection that has not completed a request yet, or, when every
  open connection has, is answered a JSON 503 and closed. A slow client thus
  cannot lock out a scraper that sends its request at once;
- errors found by aiohttp's HTTP parser and the connection refusals are answered
  as JSON and logged as one line, at most once a minute per server.
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMethod, BadStatusLine, LineTooLong
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest
from aiohttp.web_server import Server

log = logging.getLogger(__name__)

# Connections the kernel queues before accept(); aiohttp's 128 makes a burst wait.
LISTEN_BACKLOG = 1024
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class ServingLimits:
    """Per-server limits on what a client may hold or send."""

    header_timeout_s: float = 10.0
    keepalive_timeout_s: float = 60.0
    max_connections: int = 1024
    max_line_bytes: int = 8190  # request line and each header line
    max_headers: int = 100
    notice_every_s: float = 60.0  # at most one log line per this many seconds

    def __post_init__(self) -> None:
        for name in ("header_timeout_s", "keepalive_timeout_s", "notice_every_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)!r}")
        if self.max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, got {self.max_connections}")


def json_error(status: int, message: str) -> web.Response:
    """A JSON error body with the given HTTP status."""
    return web.Response(body=_error_body(status, message), status=status,
                        content_type="application/json", headers={"Cache-Control": "no-store"})


def _error_body(status: int, message: str) -> bytes:
    return json.dumps({"error": message, "status": status}, separators=(",", ":")).encode()


@web.middleware
async def errors_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Turns aiohttp's HTTP errors (404, 405, 413, ...) raised by routing into JSON bodies."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        response = json_error(exc.status, exc.reason)
        if exc.status == 405 and "Allow" in exc.headers:
            response.headers["Allow"] = exc.headers["Allow"]
        return response


class RateLimitedNotice:
    """Logs a kind of event as one line at most once per `every_s`, counting the rest."""

    def __init__(self, every_s: float, logger: logging.Logger = log) -> None:
        self._every_s = every_s
        self._logger = logger
        self._last_at = float("-inf")
        self._suppressed = 0
        self.count = 0

    def __call__(self, message: str, *, traceback: BaseException | None = None) -> None:
        self.count += 1
        now = time.monotonic()
        if now - self._last_at < self._every_s:
            self._suppressed += 1
            return
        more = (f" ({self._suppressed} more like it not logged in the last "
                f"{now - self._last_at:.0f} s)" if self._suppressed else "")
        self._last_at, self._suppressed = now, 0
        self._logger.warning("%s%s", message, more, exc_info=traceback)


class _CountedServer(Server):
    """aiohttp's connection manager, with the header timeout and the connection cap."""

    def __init__(self, *args: Any, limits: ServingLimits, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits
        self.notice = RateLimitedNotice(limits.notice_every_s)
        self._open: dict[_GuardedHandler, None] = {}  # insertion order: oldest first

    def __call__(self) -> RequestHandler:
        return _GuardedHandler(self, loop=self._loop, **self._kwargs)

    @property
    def open_connections(self) -> int:
        """Connections counted against the cap now."""
        return len(self._open)

    def admit(self, handler: _GuardedHandler) -> bool:
        """Counts a new connection; False when it must be refused."""
        if len(self._open) >= self.limits.max_connections:
            victim = next((h for h in self._open if not h.completed_a_request), None)
            if victim is None:
                self.notice(f"refused a connection from {handler.peer}: "
                            f"{self.limits.max_connections} connections are open, each "
                            "serving requests")
                return False
            self.release(victim)
            self.notice(f"closed a connection from {victim.peer} that had sent no complete "
                        f"request, to admit a new one ({self.limits.max_connections} open)")
            victim.force_close()
        self._open[handler] = None
        return True

    def release(self, handler: _GuardedHandler) -> None:
        self._open.pop(handler, None)


class _GuardedHandler(RequestHandler):
    """One connection: aiohttp's protocol plus a header timer and JSON errors."""

    def __init__(self, manager: _CountedServer, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._limits = manager.limits
        self._notice = manager.notice
        self._header_timer: asyncio.TimerHandle | None = None
        self._silent_timer: asyncio.TimerHandle | None = None
        self.completed_a_request = False
        self.peer = "?"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        self.peer = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        super().connection_made(transport)
        manager = self._manager
        if isinstance(manager, _CountedServer) and not manager.admit(self):
            self._refuse(503, "too many connections; try again later")
        elif self._keepalive_handle is None:
            # aiohttp before 3.14 starts its idle timer only after a first request.
            self._silent_timer = self._loop.call_later(self._limits.keepalive_timeout_s,
                                                       self._silent_timed_out)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._cancel_header_timer()
        if self._silent_timer is not None:
            self._silent_timer.cancel()
        manager = self._manager
        if isinstance(manager, _CountedServer):
            manager.release(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if data and self._silent_timer is not None:
            self._silent_timer.cancel()
            self._silent_timer = None
        super().data_received(data)
        if self._messages:
            self.completed_a_request = True
            self._cancel_header_timer()
        elif (data and self._header_timer is None and self._waiter is not None
              and not self._waiter.done()):
            # The first bytes of a request head: it must be complete in time.
            self._header_timer = self._loop.call_later(self._limits.header_timeout_s,
                                                       self._header_timed_out)

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timed_out(self) -> None:
        self._header_timer = None
        if self._waiter is not None and not self._waiter.done():
            self._notice(f"closed a connection from {self.peer}: request head not complete "
                         f"within {self._limits.header_timeout_s:g} s")
            self._refuse(408, f"request head not received within "
                              f"{self._limits.header_timeout_s:g} s")

    def _silent_timed_out(self) -> None:
        self._silent_timer = None
        self._notice(f"closed a connection from {self.peer}: nothing received within "
                     f"{self._limits.keepalive_timeout_s:g} s")
        self.force_close()

    def _refuse(self, status: int, message: str) -> None:
        """Writes a JSON error response straight to the socket and closes the connection."""
        transport = self.transport
        if transport is not None and not transport.is_closing():
            body = _error_body(status, message)
            head = (f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
                    "Content-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")
            transport.write(head.encode() + body)
        self.force_close()

    def _parser_error_text(self, exc: BaseException | None, fallback: str) -> str:
        """What was wrong, without echoing the client's bytes back."""
        if isinstance(exc, LineTooLong):
            return (f"request line or header line longer than {self._limits.max_line_bytes} "
                    "bytes")
        if isinstance(exc, BadHttpMethod):
            return "invalid HTTP method"
        if isinstance(exc, BadStatusLine):
            return "invalid request line"
        text = getattr(exc, "message", None) or fallback
        return " ".join(str(text).split())[:120]

    def handle_error(self, request: BaseRequest, status: int = 500,
                     exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        """aiohttp's last-resort error answer, as JSON, logged as one rate-limited line."""
        if status >= 500:
            self._notice(f"error answering {request.method} {request.path[:100]!r} from "
                         f"{self.peer}: {exc!r}", traceback=exc)
            text = HTTPStatus(status).phrase
        else:
            text = self._parser_error_text(exc, message or HTTPStatus(status).phrase)
            self._notice(f"refused a malformed request from {self.peer}: {text}")
        if request.writer.output_size > 0:
            raise ConnectionError("response already started; cannot send the error")
        response = json_error(status, text)
        response.force_close()
        return response


class _GuardedRunner(web.AppRunner):
    def __init__(self, app: web.Application, limits: ServingLimits) -> None:
        super().__init__(app, access_log=None, keepalive_timeout=limits.keepalive_timeout_s,
                         max_line_size=limits.max_line_bytes,
                         max_field_size=limits.max_line_bytes, max_headers=limits.max_headers)
        self._limits = limits

    async def _make_server(self) -> Server:
        plain = await super()._make_server()
        return _CountedServer(plain.request_handler, request_factory=plain.request_factory,
                              handler_cancellation=plain.handler_cancellation,
                              loop=asyncio.get_running_loop(), limits=self._limits,
                              **plain._kwargs)


class Serving:
    """A started server: where it listens, its connection count, and how to stop it."""

    def __init__(self, runner: _GuardedRunner, host: str, scheme: str) -> None:
        self._runner = runner
        self.host = host
        self.scheme = scheme
        self.port: int = runner.addresses[0][1] if runner.addresses else 0

    @property
    def url(self) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{shown}:{self.port}"

    @property
    def open_connections(self) -> int:
        server = self._runner.server
        return server.open_connections if isinstance(server, _CountedServer) else 0

    @property
    def notices(self) -> int:
        """How many refused, closed or failed connections the server has noted."""
        server = self._runner.server
        return server.notice.count if isinstance(server, _CountedServer) else 0

    async def close(self) -> None:
        await self._runner.cleanup()


async def serve(app: web.Application, host: str, port: int,
                limits: ServingLimits | None = None,
                ssl_context: ssl.SSLContext | None = None) -> Serving:
    """Starts serving `app` on host:port under `limits`; returns once it accepts connections."""
    runner = _GuardedRunner(app, limits or ServingLimits())
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port, ssl_context=ssl_context,
                          backlog=LISTEN_BACKLOG).start()
    except BaseException:
        await runner.cleanup()
        raise
    return Serving(runner, host, "https" if ssl_context else "http")


def raise_open_file_limit() -> int:
    """Raises this process's soft limit on open files to its hard limit; returns the limit.

    Each connection takes a file descriptor; the common soft limit of 1,024 would
    be reached before the connection cap.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as error:
            log.debug("cannot raise the open-file limit: %s", error)
    return soft
