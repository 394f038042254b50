"""The standalone dashboard's aiohttp server under `ServingLimits` (exporter/serving.py).

aiohttp alone keeps a connection whose request head never completes for as long
as its keep-alive timer (an hour by default), accepts connections until file
descriptors run out, answers its parser's errors in plain text and logs a
traceback for each. `serve` puts the limits around a `web.Application`. The
agent does not use this module (it serves through exporter/httpd/).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMethod, BadStatusLine, LineTooLong
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest
from aiohttp.web_server import Server

from .httpd import messages
from .serving import (
    LISTEN_BACKLOG,
    ConnectionCap,
    ListeningAt,
    RateLimitedNotice,
    SendWatch,
    ServingLimits,
)
from .web_auth import AccessPolicy

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def json_error(status: int, message: str) -> web.Response:
    """The agent's JSON error response (exporter/httpd/) as an aiohttp response, for the
    dashboard's handlers."""
    return messages.json_error(status, message).as_aiohttp()


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


def access_middleware(policy: AccessPolicy):
    """The aiohttp middleware enforcing `policy` (web_auth.py) on every request."""
    @web.middleware
    async def require_credentials(request: web.Request, handler: Handler
                                  ) -> web.StreamResponse:
        refusal = await policy.refusal(request.path, request.headers, request.cookies)
        return await handler(request) if refusal is None else refusal.response().as_aiohttp()

    return require_credentials


class _CountedServer(Server):
    """aiohttp's connection manager, with the header timeout and the connection cap."""

    def __init__(self, *args: Any, limits: ServingLimits, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits
        self.notice = RateLimitedNotice(limits.notice_every_s)
        self.cap = ConnectionCap(limits, self.notice)

    def __call__(self) -> RequestHandler:
        return _GuardedHandler(self, loop=self._loop, **self._kwargs)


class _GuardedHandler(RequestHandler):
    """One connection: aiohttp's protocol plus a header timer and JSON errors."""

    def __init__(self, manager: _CountedServer, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._limits = manager.limits
        self._notice = manager.notice
        self._header_timer: asyncio.TimerHandle | None = None
        self._silent_timer: asyncio.TimerHandle | None = None
        self._send_watch = SendWatch(self._limits, self._notice)
        self.completed_a_request = False
        self.peer = "?"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        self.peer = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        super().connection_made(transport)
        manager = self._manager
        if isinstance(manager, _CountedServer) and not manager.cap.admit(self):
            self._refuse(503, "too many connections; try again later")
        elif self._keepalive_handle is None:
            # aiohttp before 3.14 starts its idle timer only after a first request.
            self._silent_timer = self._loop.call_later(self._limits.keepalive_timeout_s,
                                                       self._silent_timed_out)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._send_watch.resumed()
        self._cancel_header_timer()
        if self._silent_timer is not None:
            self._silent_timer.cancel()
        manager = self._manager
        if isinstance(manager, _CountedServer):
            manager.cap.release(self)
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

    def pause_writing(self) -> None:
        super().pause_writing()
        if self.transport is not None:
            self._send_watch.paused(self.transport, self.peer, self.evict)

    def resume_writing(self) -> None:
        self._send_watch.resumed()
        super().resume_writing()

    @property
    def answer_waiting_since(self) -> float | None:
        """Since when (loop time) the client has left its answer waiting, or None."""
        return self._send_watch.waiting_since

    def evict(self) -> None:
        """Closes the connection at once, dropping what waits to be sent."""
        transport = self.transport
        self.force_close()
        if transport is not None:
            transport.abort()


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
            transport.write(messages.refusal_bytes(status, message))
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


class Serving(ListeningAt):
    """A started server: where it listens, its connection count, and how to stop it."""

    def __init__(self, runner: _GuardedRunner, host: str, scheme: str) -> None:
        self._runner = runner
        self.host = host
        self.scheme = scheme
        self.port = runner.addresses[0][1] if runner.addresses else 0

    @property
    def open_connections(self) -> int:
        server = self._runner.server
        return len(server.cap) if isinstance(server, _CountedServer) else 0

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


