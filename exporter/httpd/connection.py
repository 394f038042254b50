"""One HTTP/1.1 connection of the agent's server as an asyncio protocol, and their manager.

Requests on a connection are answered one at a time, in the order they came
(pipelining); bytes that arrive meanwhile wait in the buffer, and reading
pauses when too many wait or the client does not read its answers. The limits
of `ServingLimits` (exporter/serving.py) apply as the module docstring there
describes: header timeout, idle timeout, send timeout, the connection cap and its
eviction rule, line and field limits, and one rate-limited log line per kind of event.
"""

from __future__ import annotations

import asyncio

from ..serving import ConnectionCap, RateLimitedNotice, SendWatch, ServingLimits
from .messages import NO_CONTENT, Handler, json_error, refusal_bytes
from .parser import HttpError, RequestHead, check_incomplete, chunked_end, parse_head

MAX_REQUEST_BYTES = 16 * 1024  # request bodies: no endpoint reads one
_PAUSE_AT_BYTES = 256 * 1024  # buffered, unanswered request bytes before reading pauses


class ConnectionManager:
    """The open connections in order of arrival, the cap, and the notices of one server."""

    def __init__(self, handler: Handler, limits: ServingLimits) -> None:
        self.handler = handler
        self.limits = limits
        self.notice = RateLimitedNotice(limits.notice_every_s)
        self.closing = False
        self.cap = ConnectionCap(limits, self.notice)

    def __call__(self) -> Connection:
        return Connection(self)

    def close_all(self) -> None:
        self.closing = True
        for connection in self.cap:
            connection.evict()


class Connection(asyncio.Protocol):
    """Reads requests, hands each to the manager's handler, writes the answers in order."""

    def __init__(self, manager: ConnectionManager) -> None:
        self._manager = manager
        self._limits = manager.limits
        self._notice = manager.notice
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._waiting_body: RequestHead | None = None
        self._answering: asyncio.Task | None = None
        self._request_timer: asyncio.TimerHandle | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self._writable: asyncio.Future | None = None
        self._send_watch = SendWatch(self._limits, self._notice)
        self._paused = False
        self._closed = False
        self._half_closed = False
        self.completed_a_request = False
        self.peer = "?"

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.peer = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        if not self._manager.cap.admit(self):
            self._refuse(503, "too many connections; try again later")
        else:
            self._start_idle_timer(silent=True)

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return
        self._cancel_idle_timer()
        self._buffer += data
        if self._answering is None:
            self._advance()
        elif len(self._buffer) > _PAUSE_AT_BYTES:
            self._pause_reading()

    def eof_received(self) -> bool:
        # The client sent all it will: answer what is complete, then close.
        self._half_closed = True
        if self._answering is None:
            self.close()
        # Keeping a TLS transport half-open is not possible (asyncio warns if asked).
        return self._transport is not None and self._transport.get_extra_info("sslcontext") is None

    def connection_lost(self, exc: Exception | None) -> None:
        self._forget()
        self._send_watch.resumed()
        # Dropped first: the cancelled task's traceback refers to this connection, and a
        # reference back would keep both (and the answer's bytes) until a full collection.
        answering, self._answering = self._answering, None
        if answering is not None:
            answering.cancel()
        writable, self._writable = self._writable, None
        if writable is not None and not writable.done():
            writable.set_result(None)
        self._transport = None

    def pause_writing(self) -> None:
        if self._writable is None or self._writable.done():
            self._writable = asyncio.get_running_loop().create_future()
        if self._transport is not None:
            self._send_watch.paused(self._transport, self.peer, self.evict)

    def resume_writing(self) -> None:
        self._send_watch.resumed()
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    @property
    def answer_waiting_since(self) -> float | None:
        """Since when (loop time) the client has left its answer waiting, or None."""
        return self._send_watch.waiting_since

    # reading requests

    def _advance(self) -> None:
        """Starts answering the next complete request in the buffer, if there is one."""
        try:
            head = self._next_request()
        except HttpError as error:
            self._notice(f"refused a malformed request from {self.peer}: {error.message}")
            self._refuse(error.status, error.message)
            return
        if head is None:
            if self._buffer or self._waiting_body is not None:  # a request under way
                if self._half_closed:
                    self.close()  # it can never be completed
                elif self._request_timer is None:
                    self._request_timer = asyncio.get_running_loop().call_later(
                        self._limits.header_timeout_s, self._request_timed_out)
            elif self._half_closed:
                self.close()
            else:
                self._start_idle_timer(silent=False)
            return
        self._cancel_request_timer()
        self._answering = asyncio.get_running_loop().create_task(self._answer(head))

    def _next_request(self) -> RequestHead | None:
        """The next request whose head and body are complete (the body is dropped)."""
        if self._waiting_body is None:
            while self._buffer.startswith(b"\r\n"):  # empty lines before a request (RFC 9112 2.2)
                del self._buffer[:2]
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                check_incomplete(self._buffer, self._limits.max_line_bytes,
                                 self._limits.max_headers)
                return None
            head = parse_head(bytes(self._buffer[:end]), self._limits.max_line_bytes,
                              self._limits.max_headers, self.peer)
            del self._buffer[:end + 4]
            self.completed_a_request = True
            if head.content_length > MAX_REQUEST_BYTES:
                raise HttpError(413, f"request body larger than {MAX_REQUEST_BYTES} bytes")
            if ((head.content_length or head.chunked) and self._transport is not None
                    and head.request.headers.get("Expect", "").lower() == "100-continue"):
                self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # RFC 9110 10.1.1
            self._waiting_body = head
        head = self._waiting_body
        if head.chunked:
            body_end = chunked_end(self._buffer, 0, MAX_REQUEST_BYTES)
            if body_end is None:
                return None
        elif len(self._buffer) >= head.content_length:
            body_end = head.content_length
        else:
            return None
        del self._buffer[:body_end]
        self._waiting_body = None
        return head

    def _request_timed_out(self) -> None:
        self._request_timer = None
        if self._answering is None and not self._closed:
            timeout = self._limits.header_timeout_s
            self._notice(f"closed a connection from {self.peer}: request head not complete "
                         f"within {timeout:g} s")
            self._refuse(408, f"request head not received within {timeout:g} s")

    # answering

    async def _answer(self, head: RequestHead) -> None:
        request = head.request
        close = not request.keep_alive or self._half_closed
        try:
            response = await self._manager.handler(request)
        except Exception as error:  # one handler's failure costs its request only
            self._notice(f"error answering {request.method} {request.path[:100]!r} from "
                         f"{self.peer}: {error!r}", traceback=error)
            response, close = json_error(500, "Internal Server Error"), True
        close = close or self._manager.closing
        body = b"" if request.method == "HEAD" or response.status in NO_CONTENT else response.body
        await self._write(response.head(close, len(response.body)) + body)
        self._answering = None
        if close or self._closed:
            self.close()
            return
        if self._paused and len(self._buffer) <= _PAUSE_AT_BYTES:
            self._paused = False
            self._transport.resume_reading()
        self._advance()

    async def _write(self, data: bytes) -> None:
        if self._transport is None or self._closed:
            return
        self._transport.write(data)
        if self._writable is not None and not self._writable.done():
            await self._writable  # the client reads its answers before it gets more

    def _refuse(self, status: int, message: str) -> None:
        """Writes a JSON error straight to the socket and closes the connection."""
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(refusal_bytes(status, message))
        self.close()

    # timers and closing

    def _start_idle_timer(self, silent: bool) -> None:
        self._cancel_idle_timer()
        self._idle_timer = asyncio.get_running_loop().call_later(
            self._limits.keepalive_timeout_s, self._idle_timed_out, silent)

    def _idle_timed_out(self, silent: bool) -> None:
        self._idle_timer = None
        if silent:
            self._notice(f"closed a connection from {self.peer}: nothing received within "
                         f"{self._limits.keepalive_timeout_s:g} s")
        self.close()

    def _cancel_idle_timer(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None

    def _cancel_request_timer(self) -> None:
        if self._request_timer is not None:
            self._request_timer.cancel()
            self._request_timer = None

    def _pause_reading(self) -> None:
        if not self._paused and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()

    def _forget(self) -> None:
        self._closed = True
        self._manager.cap.release(self)
        self._cancel_request_timer()
        self._cancel_idle_timer()


    def close(self) -> None:
        """Stops counting this connection and closes it once what was written is sent."""
        self._forget()
        if self._transport is not None:
            self._transport.close()

    def evict(self) -> None:
        """Stops counting this connection and closes it at once, dropping what waits to be
        sent (a client that does not read would otherwise hold it open)."""
        self._forget()
        if self._transport is not None:
            self._transport.abort()
