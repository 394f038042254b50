"""Kept-alive HTTP/1.1 GETs to agents, for the collector's summary requests.

A refresh round asks every agent for its summary; most answer 304 with no body.
aiohttp's client spends several times the request's own work on each of those
(URL objects, multidicts, response and stream objects, timers), so the rounds'
conditional GETs go through this small client instead: one asyncio protocol
per connection, a request written as one buffer, the answer's head split by
hand, and idle connections kept per agent for the next round. It presents the
same headers (the token) and verifies TLS with the same context as the
collector's aiohttp session. Bodies come whole (Content-Length or chunked) and
are refused beyond a limit. Anything else (a body read until the connection
closes, 1xx answers) is an error, never a guess.
"""

from __future__ import annotations

import asyncio
import collections
import resource
import ssl
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

MAX_HEAD_BYTES = 64 * 1024
# One idle connection per agent is what a round reuses; the file descriptor limit rules.
DEFAULT_MAX_IDLE = 65536

Origin = tuple[str, str, int]  # scheme, host, port


class AnswerTooLarge(ValueError):
    """The agent's answer is larger than the caller accepts."""


@dataclass(frozen=True, slots=True)
class Reply:
    """One answer: its status, headers (names lower-cased) and whole body."""

    status: int
    headers: Mapping[str, str]
    body: bytes

    def header(self, name: str, default: str = "") -> str:
        return self.headers.get(name.lower(), default)


@dataclass(frozen=True, slots=True)
class _Target:
    origin: Origin
    path: str
    host_header: str


def _target(url: str) -> _Target:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url[:200]!r}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return _Target((parts.scheme, parts.hostname, port), path,
                   parts.netloc.rpartition("@")[2])


def _parse_head(head: bytes) -> tuple[int, dict[str, str], bool]:
    """(status, headers with lower-cased names, HTTP/1.1) of an answer's head."""
    lines = head.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    if not version.startswith("HTTP/1.") or not rest[:3].isdigit():
        raise ConnectionError(f"not an HTTP/1.x answer: {lines[0][:80]!r}")
    status = int(rest[:3])
    if status < 200:
        raise ConnectionError(f"unexpected interim answer {status}")
    headers = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon:
            raise ConnectionError(f"malformed header line {line[:80]!r}")
        headers[name.strip().lower()] = value.strip()
    return status, headers, version == "HTTP/1.1"


class _Connection(asyncio.Protocol):
    """One connection to one agent; one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle = False
        self.idle_mark = 0  # which time it was last kept idle
        self.received = False  # a byte of the current answer arrived
        self._buffer = bytearray()
        self._answer: asyncio.Future[Reply] | None = None
        self._limit = 0
        self._head: tuple[int, dict[str, str], bool] | None = None
        self._chunks: list[bytes] = []
        self._chunked_bytes = 0

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.received = True
        self._buffer += data
        if self._answer is not None and not self._answer.done():
            try:
                self._parse()
            except (ValueError, ConnectionError) as error:
                self._fail(error)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(ConnectionError("the agent closed the connection"))

    # -- one request -----------------------------------------------------------------------
    def request(self, head: bytes, limit: int) -> asyncio.Future[Reply]:
        """Write `head` (a whole GET request); the future is its answer."""
        self._answer = asyncio.get_running_loop().create_future()
        self._limit, self._head, self.received = limit, None, False
        self._chunks, self._chunked_bytes = [], 0
        self._buffer.clear()
        assert self.transport is not None
        self.transport.write(head)
        return self._answer

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _fail(self, error: Exception) -> None:
        if self._answer is not None and not self._answer.done():
            self._answer.set_exception(error)

    def _parse(self) -> None:
        if self._head is None:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buffer) > MAX_HEAD_BYTES:
                    raise ConnectionError("the agent's answer has no end of headers")
                return
            self._head = _parse_head(bytes(self._buffer[:end]))
            del self._buffer[:end + 4]
        status, headers, _ = self._head
        if status in (204, 304):
            self._finish(b"")
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self._read_chunks()
        elif "content-length" in headers:
            try:
                length = int(headers["content-length"])
            except ValueError:
                raise ConnectionError("the agent's Content-Length is not a number") from None
            if length > self._limit:
                raise AnswerTooLarge(f"answer larger than {self._limit // 2**20} MiB")
            if len(self._buffer) >= length:
                self._finish(bytes(self._buffer[:length]))
        else:
            raise ConnectionError("the agent's answer has neither a length nor chunks")

    def _read_chunks(self) -> None:
        buffer = self._buffer
        while (line_end := buffer.find(b"\r\n")) >= 0:
            try:
                size = int(bytes(buffer[:line_end]).split(b";", 1)[0], 16)
            except ValueError:
                raise ConnectionError("the agent's chunk size is not a number") from None
            if size == 0:
                if buffer.find(b"\r\n\r\n", line_end) >= 0:  # the end, past any trailers
                    self._finish(b"".join(self._chunks))
                return
            if len(buffer) < line_end + size + 4:
                return
            self._chunks.append(bytes(buffer[line_end + 2:line_end + 2 + size]))
            self._chunked_bytes += size
            if self._chunked_bytes > self._limit:
                raise AnswerTooLarge(f"answer larger than {self._limit // 2**20} MiB")
            del buffer[:line_end + size + 4]

    def _finish(self, body: bytes) -> None:
        assert self._head is not None and self._answer is not None
        status, headers, http11 = self._head
        if not http11 or headers.get("connection", "").lower() == "close":
            self.closed = True  # the caller closes it rather than keeping it
        self._answer.set_result(Reply(status, headers, body))


def _idle_cap(wanted: int) -> int:
    """At most half the process's file descriptors are kept idle."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return wanted if soft == resource.RLIM_INFINITY else max(min(wanted, soft // 2), 1)


class AgentConnections:
    """GETs to many agents over kept-alive connections (idle ones capped, oldest closed)."""

    def __init__(self, headers: Mapping[str, str], ssl_context: Callable[[], ssl.SSLContext],
                 max_idle: int = DEFAULT_MAX_IDLE) -> None:
        """`headers` go with every request (the token); `ssl_context()` verifies https
        agents (made on first use)."""
        self._extra = "".join(f"{name}: {value}\r\n" for name, value in headers.items()) + \
            "Accept: application/json\r\nAccept-Encoding: identity\r\n"
        self._make_ssl = ssl_context
        self._ssl: ssl.SSLContext | None = None
        self.max_idle = _idle_cap(max_idle)
        self._idle: dict[Origin, list[_Connection]] = {}
        # (origin, connection, mark) in the order they were kept idle, oldest first
        self._idle_order: collections.deque[tuple[Origin, _Connection, int]] = \
            collections.deque()
        self._idle_count = 0
        self._marks = 0
        self._targets: dict[str, _Target] = {}
        self.opened = 0  # connections made

    async def get(self, url: str, headers: Mapping[str, str], timeout_s: float,
                  limit: int) -> Reply:
        """GET `url` with `headers` added: TimeoutError past `timeout_s`, OSError when the
        connection fails, AnswerTooLarge beyond `limit` bytes of body."""
        target = self._targets.get(url)
        if target is None:
            target = self._targets[url] = _target(url)
        head = "".join((f"GET {target.path} HTTP/1.1\r\nHost: {target.host_header}\r\n",
                        self._extra, *(f"{k}: {v}\r\n" for k, v in headers.items()),
                        "\r\n")).encode("latin-1")
        async with asyncio.timeout(timeout_s):
            connection = self._take_idle(target.origin)
            if connection is not None:
                try:
                    return await self._ask(target.origin, connection, head, limit)
                except ConnectionError:
                    if connection.received:
                        raise
                    # The agent closed the kept-alive connection before reading this
                    # request (its idle timeout): a GET is safe to send once more.
            connection = await self._connect(target.origin)
            return await self._ask(target.origin, connection, head, limit)

    async def _ask(self, origin: Origin, connection: _Connection, head: bytes,
                   limit: int) -> Reply:
        try:
            reply = await connection.request(head, limit)
        except BaseException:  # a failure or a cancellation leaves it mid-answer
            connection.close()
            raise
        if connection.closed:
            connection.close()
        else:
            self._keep_idle(origin, connection)
        return reply

    async def _connect(self, origin: Origin) -> _Connection:
        scheme, host, port = origin
        context = None
        if scheme == "https":
            if self._ssl is None:
                self._ssl = self._make_ssl()
            context = self._ssl
        _, connection = await asyncio.get_running_loop().create_connection(
            _Connection, host, port, ssl=context, server_hostname=host if context else None)
        self.opened += 1
        return connection

    def _take_idle(self, origin: Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        while idle:
            connection = idle.pop()
            connection.idle = False
            self._idle_count -= 1
            if not connection.closed:
                return connection
        return None

    def _keep_idle(self, origin: Origin, connection: _Connection) -> None:
        self._marks += 1
        connection.idle, connection.idle_mark = True, self._marks
        self._idle.setdefault(origin, []).append(connection)
        self._idle_order.append((origin, connection, self._marks))
        self._idle_count += 1
        while self._idle_count > self.max_idle:
            old_origin, old, mark = self._idle_order.popleft()
            if old.idle and old.idle_mark == mark:  # idle ever since: the oldest idle one
                self._idle[old_origin].remove(old)
                old.idle = False
                self._idle_count -= 1
                old.close()
        if len(self._idle_order) > 4 * self.max_idle + 64:  # forget entries taken since
            self._idle_order = collections.deque(
                entry for entry in self._idle_order
                if entry[1].idle and entry[1].idle_mark == entry[2])

    @property
    def known(self) -> tuple[int, int]:
        """(URLs asked, origins with idle connections kept) at this moment."""
        return len(self._targets), len(self._idle)

    def keep_only(self, urls: Iterable[str]) -> None:
        """Forget every URL but `urls`, and close the idle connections to origins none of
        those asked so far is on."""
        wanted = set(urls)
        self._targets = {url: t for url, t in self._targets.items() if url in wanted}
        origins = {t.origin for t in self._targets.values()}
        for origin in [o for o in self._idle if o not in origins]:
            for connection in self._idle.pop(origin):
                if connection.idle:
                    connection.idle = False
                    self._idle_count -= 1
                connection.close()

    def close(self) -> None:
        """Close every idle connection."""
        for idle in self._idle.values():
            for connection in idle:
                connection.idle = False
                connection.close()
        self._idle.clear()
        self._idle_order.clear()
        self._idle_count = 0
