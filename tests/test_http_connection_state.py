"""The agent's HTTP server keeps nothing of a connection once it is closed.

A long-running agent answers /healthz and /metrics on fresh and kept-alive
connections for months; whatever a connection leaves behind (its place in the
connection table, a timer, an answering task, a reference from either) would
grow with every scrape. Real sockets, closed every way a client or the server
closes them. A connection is freed as soon as it closes, not at the garbage
collector's next full pass: the agent's collector runs those rarely
(exporter/python_gc.py), and a closed connection kept meanwhile holds its answer.
"""

from __future__ import annotations

import asyncio
import gc
import time
from dataclasses import replace

from greedy_clients import non_reader
from snapshots import sample_snapshot

from ray_accel.exporter.httpd import Response, serve
from ray_accel.exporter.httpd.connection import Connection
from ray_accel.exporter.server import AgentHttp
from ray_accel.exporter.serving import ServingLimits
from ray_accel.exporter.store import SnapshotStore

ROUNDS = 40  # of each way of closing
HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: agent\r\n\r\n"


async def _answered(port: int, request: bytes) -> bytes:
    """Sends `request` and reads until the server closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    data = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    await writer.wait_closed()
    return data


async def _goes_away(port: int, request: bytes, read_head: bool) -> bytes:
    """Sends `request` on a kept-alive connection, reads the answer's head if asked, then
    the client goes away."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10) if read_head else b""
    writer.close()
    await writer.wait_closed()
    return head


async def _until(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)


def _connections_alive() -> int:
    gc.collect()
    return sum(type(o) is Connection for o in gc.get_objects())


def test_closed_connections_leave_no_table_entry_timer_task_or_reference():
    store = SnapshotStore()
    store.publish(replace(sample_snapshot(), taken_at=time.time()))
    handler = AgentHttp(store, lambda: True).app()

    async def go() -> tuple[int, int, int, int, list[bytes]]:
        # Long timeouts: a timer left behind would still be pending when counted.
        limits = ServingLimits(header_timeout_s=300, keepalive_timeout_s=300)
        serving = await serve(handler, "127.0.0.1", 0, limits)
        loop = asyncio.get_running_loop()
        timers_before = len(loop._scheduled)
        try:
            firsts = []
            for _ in range(ROUNDS):
                fresh = await _answered(serving.port, b"GET /metrics HTTP/1.1\r\nHost: agent\r\n"
                                                      b"Connection: close\r\n\r\n")
                kept = await _goes_away(serving.port, HEALTHZ, read_head=True)
                malformed = await _answered(serving.port, b"NOT HTTP\r\n\r\n")
                await _goes_away(serving.port, b"GET /metrics HTTP/1.1\r\nHost: ag",
                                 read_head=False)  # half a request head
                firsts += [fresh[:12], kept[:12], malformed[:12]]
            await _until(lambda: serving.open_connections == 0)
            # cancelled timers stay in the loop's heap until it sheds them; live ones count
            timers = sum(not handle.cancelled() for handle in loop._scheduled)
            tasks = len(asyncio.all_tasks()) - 1  # this test's own
            return (serving.open_connections, timers - timers_before, tasks,
                    _connections_alive(), firsts)
        finally:
            await serving.close()

    open_connections, timers, tasks, alive, firsts = asyncio.run(go())
    assert set(firsts) == {b"HTTP/1.1 200", b"HTTP/1.1 400"}, set(firsts)
    assert open_connections == 0
    assert timers <= 0
    assert tasks == 0
    assert alive == 0


def _connections_kept() -> int:
    """Connections still in memory, without collecting: freed ones are gone already."""
    return sum(type(o) is Connection for o in gc.get_objects())


def test_a_connection_whose_client_left_with_its_answers_unread_is_freed_when_it_closes():
    large = b"m" * 320_000

    async def handler(request):
        return Response(body=large, content_type="text/plain")

    async def go() -> tuple[int, int, int]:
        serving = await serve(handler, "127.0.0.1", 0, ServingLimits())
        try:
            request = b"GET /metrics HTTP/1.1\r\nHost: agent\r\n\r\n"
            clients = [await non_reader(serving.port, request) for _ in range(ROUNDS)]

            def waiting() -> int:  # connections whose answer waits for its client
                return sum(c.answer_waiting_since is not None for c in serving._manager.cap)

            await _until(lambda: waiting() == ROUNDS)
            held = waiting()
            for _, writer in clients:  # each leaves with its answers unread
                writer.transport.abort()
            await _until(lambda: serving.open_connections == 0)
            await asyncio.sleep(0.2)  # their cancelled answers finish
            return held, serving.open_connections, _connections_kept()
        finally:
            await serving.close()

    gc.collect()
    gc.disable()
    try:
        held, open_connections, kept = asyncio.run(go())
    finally:
        gc.enable()
    assert held == ROUNDS
    assert open_connections == 0
    assert kept == 0
