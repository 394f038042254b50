"""Starting and stopping the agent's HTTP/1.1 server on a listening socket."""

from __future__ import annotations

import asyncio
import ssl

from ..serving import LISTEN_BACKLOG, ListeningAt, ServingLimits
from .connection import ConnectionManager
from .messages import Handler


class Serving(ListeningAt):
    """A started server: where it listens, its connection count, and how to stop it."""

    def __init__(self, server: asyncio.Server, manager: ConnectionManager, host: str,
                 scheme: str) -> None:
        self._server = server
        self._manager = manager
        self.host = host
        self.scheme = scheme
        self.port = server.sockets[0].getsockname()[1] if server.sockets else 0

    @property
    def open_connections(self) -> int:
        """Connections counted against the cap now."""
        return len(self._manager.cap)

    @property
    def notices(self) -> int:
        """How many refused, closed or failed connections the server has noted."""
        return self._manager.notice.count

    async def close(self) -> None:
        """Stops listening and closes every connection (answers under way are cancelled)."""
        self._server.close()
        self._manager.close_all()
        await self._server.wait_closed()


async def serve(handler: Handler, host: str, port: int, limits: ServingLimits | None = None,
                ssl_context: ssl.SSLContext | None = None) -> Serving:
    """Starts serving `handler` on host:port under `limits`; returns once it accepts
    connections. A TLS handshake must finish within the limits' header timeout."""
    limits = limits or ServingLimits()
    manager = ConnectionManager(handler, limits)
    server = await asyncio.get_running_loop().create_server(
        manager, host, port, backlog=LISTEN_BACKLOG, ssl=ssl_context,
        ssl_handshake_timeout=limits.header_timeout_s if ssl_context else None)
    return Serving(server, manager, host, "https" if ssl_context else "http")
