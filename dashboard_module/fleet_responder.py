"""A synthetic fleet's agents answered by a minimal HTTP/1.1 responder, for benchmarks.

`FleetServer` (fleet.py) answers through aiohttp, as a real agent does; at 10,000
nodes its request handling costs the fake agents about as much CPU as the head
spends fetching from them, and on one machine the two compete for the same
cores. `FleetResponder` answers the same paths with the same status codes and
headers (ETag, Cache-Control, the snapshot's time, Content-Length, kept-alive
connections) from an `asyncio.Protocol` that reads only the request line and the
`If-None-Match` and `Connection` headers, so a benchmark measures the head and
not its fakes. It serves GETs without bodies, which is all the head sends.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from .fleet import FleetAnswers

MAX_HEADER_BYTES = 65536
_PATHS = {b"snapshot", b"summary"}


def _response(status: str, headers: list[tuple[str, str]], body: bytes = b"") -> bytes:
    lines = [f"HTTP/1.1 {status}", *(f"{name}: {value}" for name, value in headers)]
    if not status.startswith("304"):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class _Connection(asyncio.Protocol):
    """One client connection: requests answered in order, one at a time."""

    def __init__(self, responder: FleetResponder) -> None:
        self._responder = responder
        self._buffer = b""
        self._transport: asyncio.Transport | None = None
        self._hung = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._responder.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._responder.connections.discard(self)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        while not self._hung:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buffer) > MAX_HEADER_BYTES:
                    self.close()
                return
            head, self._buffer = self._buffer[:end], self._buffer[end + 4:]
            self._answer(head)

    def _answer(self, head: bytes) -> None:
        request_line, *header_lines = head.split(b"\r\n")
        headers = {}
        for line in header_lines:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        parts = request_line.split(b" ")
        path = parts[1].split(b"?", 1)[0] if len(parts) == 3 else b""
        answer = self._responder.answer(path, headers.get(b"if-none-match"))
        if answer is None:  # a stuck agent: nothing more on this connection until the end
            self._hung = True
            return
        assert self._transport is not None
        self._transport.write(answer)
        if headers.get(b"connection", b"").lower() == b"close":
            self.close()


class FleetResponder(FleetAnswers):
    """`FleetServer`'s answers (fleet.py: `FleetAnswers`), served by `_Connection`s; a
    request that hangs does so until the responder stops and closes its connections.
    Use as an async context manager.
    """

    def __init__(self, bodies: Callable[[int], bytes | None],
                 summaries: Callable[[int], tuple[bytes, str] | None],
                 taken_at: Callable[[int], float] = lambda number: time.time()) -> None:
        super().__init__(bodies, summaries, taken_at)
        self.connections: set[_Connection] = set()
        self._server: asyncio.Server | None = None

    def answer(self, path: bytes, if_none_match: bytes | None) -> bytes | None:
        """The whole response to a GET of `path`; None: hang."""
        parts = path.split(b"/")  # b"", b"n", number, b"api", b"v1", what
        last = parts[-1]
        self.requests[last.decode("latin-1")] += 1  # 404s too
        if (len(parts) != 6 or parts[1] != b"n" or parts[3:5] != [b"api", b"v1"]
                or last not in _PATHS or not parts[2].isdigit()):
            return _response("404 Not Found", [("Content-Type", "text/plain")], b"not found")
        number = int(parts[2])
        if last == b"snapshot":
            body = self.bodies(number)
            return None if body is None else _response(
                "200 OK", [("Content-Type", "application/json")], body)
        found = self.summaries(number)
        if found is None:
            return None
        body, etag = found
        headers = list(self.summary_headers(number, etag).items())
        if self.unchanged(etag, None if if_none_match is None else if_none_match.decode("latin-1")):
            return _response("304 Not Modified", headers)
        return _response("200 OK", [("Content-Type", "application/json"), *headers], body)

    async def __aenter__(self) -> FleetResponder:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Connection(self), "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        for connection in list(self.connections):
            connection.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
