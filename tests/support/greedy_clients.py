"""Clients that ask a server for answers and never read them, for the serving-limit tests."""

from __future__ import annotations

import asyncio
import socket

SMALL_RECEIVE_BUFFER = 4096  # so that the answers back up into the server's own buffer


async def non_reader(port: int, request: bytes, times: int = 20
                     ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection that sends `request` `times` over (pipelined) and reads nothing."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL_RECEIVE_BUFFER)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    reader, writer = await asyncio.open_connection(sock=sock, limit=1024)
    writer.transport.pause_reading()
    writer.write(request * times)
    return reader, writer
