"""Limits on what an HTTP client may hold or send, shared by the agent and the dashboard.

Both servers (the agent's own, exporter/httpd/, and the standalone dashboard's
aiohttp one, exporter/aiohttp_serving.py) put these limits around what they serve:

- a request head (request line and headers) must arrive within
  `header_timeout_s` of its first byte, else the client gets a JSON 408 and
  the connection is closed;
- a connection with no request under way is closed after `keepalive_timeout_s`
  (also one that opens and sends nothing);
- a connection whose client takes none of its answer for `send_timeout_s` (the
  answer waits in the server's buffer, the client not reading) is closed;
- at most `max_connections` are open: a new one beyond the cap takes the place of
  the oldest connection that has not completed a request yet, else of the one
  whose client has left its answer waiting longest, or, when every open
  connection has completed a request and takes its answers, is answered a JSON
  503 and closed. A slow client, or one that asks and never reads, thus cannot
  lock out a scraper that sends its request at once;
- malformed requests and the connection refusals are answered as JSON and
  logged as one line, at most once a minute per server.

This module imports no HTTP framework: the agent process never loads aiohttp.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger(__name__)

# Connections the kernel queues before accept(); aiohttp's 128 makes a burst wait.
LISTEN_BACKLOG = 1024


@dataclass(frozen=True)
class ServingLimits:
    """Per-server limits on what a client may hold or send."""

    header_timeout_s: float = 10.0
    keepalive_timeout_s: float = 60.0
    send_timeout_s: float = 30.0  # an answer the client takes none of
    max_connections: int = 1024
    max_line_bytes: int = 8190  # request line and each header line
    max_headers: int = 100
    notice_every_s: float = 60.0  # at most one log line per this many seconds

    def __post_init__(self) -> None:
        for name in ("header_timeout_s", "keepalive_timeout_s", "send_timeout_s",
                     "notice_every_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)!r}")
        if self.max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, got {self.max_connections}")


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


class SendWatch:
    """Whether a connection's client takes its answers: started when the transport pauses
    writing (its buffer is full), stopped when it resumes. A client that takes none of the
    waiting bytes for `send_timeout_s` has its connection closed (noted once, rate-limited)."""

    def __init__(self, limits: ServingLimits, notice: RateLimitedNotice) -> None:
        self._timeout_s = limits.send_timeout_s
        self._notice = notice
        # Held only while an answer waits, so that the watch and its connection do not
        # refer to each other once the connection is gone.
        self._transport: asyncio.WriteTransport | None = None
        self._peer = ""
        self._close: Callable[[], None] | None = None
        self._waiting_bytes = 0
        self._timer: asyncio.TimerHandle | None = None
        #: When (loop time) the client stopped taking its answer; None while it takes it.
        self.waiting_since: float | None = None

    def paused(self, transport: asyncio.WriteTransport, peer: str,
               close: Callable[[], None]) -> None:
        """The transport paused writing: the answer to `peer` waits; `close` drops the
        connection should it wait too long."""
        loop = asyncio.get_running_loop()
        self._transport, self._peer, self._close = transport, peer, close
        self.waiting_since = loop.time()
        self._arm(loop)

    def resumed(self) -> None:
        """The transport resumed writing, or the connection is gone."""
        self._transport = self._close = self.waiting_since = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        assert self._transport is not None
        self._waiting_bytes = self._transport.get_write_buffer_size()
        self._timer = loop.call_later(self._timeout_s, self._check)

    def _check(self) -> None:
        self._timer = None
        transport, close = self._transport, self._close
        if transport is None or close is None or transport.is_closing():
            return
        if transport.get_write_buffer_size() < self._waiting_bytes:  # slow, but taking it
            self._arm(asyncio.get_running_loop())
            return
        self._notice(f"closed a connection from {self._peer}: its client took none of its "
                     f"answer for {self._timeout_s:g} s")
        close()


class Counted(Protocol):
    """A connection as the cap sees it."""

    peer: str
    completed_a_request: bool

    @property
    def answer_waiting_since(self) -> float | None:
        """Since when (loop time) the client has left its answer waiting; None while it
        takes its answers."""

    def evict(self) -> None:
        """Closes the connection at once, without an answer."""


class ConnectionCap:
    """One server's open connections in order of arrival, under `max_connections`: a new
    one beyond the cap takes the place of the oldest that has not completed a request,
    else of the one whose client has left its answer waiting longest."""

    def __init__(self, limits: ServingLimits, notice: RateLimitedNotice) -> None:
        self._limits = limits
        self._notice = notice
        self._open: dict[Counted, None] = {}  # insertion order: oldest first

    def __len__(self) -> int:
        return len(self._open)

    def __iter__(self) -> Iterator[Counted]:
        return iter(list(self._open))

    def admit(self, connection: Counted) -> bool:
        """Counts a new connection; False when it must be refused."""
        cap = self._limits.max_connections
        if len(self._open) >= cap:
            victim, why = self._victim()
            if victim is None:
                self._notice(f"refused a connection from {connection.peer}: {cap} connections "
                             "are open, each serving requests")
                return False
            self.release(victim)
            self._notice(f"closed a connection from {victim.peer} that {why}, to admit a new "
                         f"one ({cap} open)")
            victim.evict()
        self._open[connection] = None
        return True

    def release(self, connection: Counted) -> None:
        self._open.pop(connection, None)

    def _victim(self) -> tuple[Counted | None, str]:
        """The connection to close for a new one, and why; None when each one serves."""
        silent = next((c for c in self._open if not c.completed_a_request), None)
        if silent is not None:
            return silent, "had sent no complete request"
        waiting = [c for c in self._open if c.answer_waiting_since is not None]
        if waiting:
            return (min(waiting, key=lambda c: c.answer_waiting_since),  # type: ignore[arg-type]
                    "left its answer waiting")
        return None, ""


class ListeningAt:
    """Where a started server listens (its `host`, `port` and `scheme` set by the subclass)."""

    host: str
    port: int
    scheme: str

    @property
    def url(self) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{shown}:{self.port}"


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
