"""Serving limits (exporter/serving.py) on the agent's and the standalone dashboard's apps.

Real sockets against the agent's own server (exporter/httpd/) and the dashboard's
aiohttp one: slow-header clients are cut off after the header timeout while a
normal client keeps getting /metrics; clients that ask and never read their answers
lose their place under the cap and then their connections; the connection cap holds;
what the parsers refuse comes back as JSON and is logged once, without a traceback.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import replace

import aiohttp
import pytest
from aiohttp import web
from greedy_clients import non_reader
from snapshots import sample_snapshot

from ray_accel.dashboard_module.api import PREFIX, AcceleratorsApi
from ray_accel.dashboard_module.collector import Collector
from ray_accel.dashboard_module.standalone import build_app
from ray_accel.exporter import aiohttp_serving
from ray_accel.exporter.httpd import Response, serve
from ray_accel.exporter.server import AgentHttp
from ray_accel.exporter.serving import ServingLimits
from ray_accel.exporter.store import SnapshotStore

SLOW_CLIENTS = 300
# The header timeout falls between two of a slow client's bytes (sent each second), so the
# 408 is read before the next byte; a byte sent to a closed socket would get a reset.
SLOW_HEAD = b"GET /metrics HTTP/1.1\r\nHost: agent\r\nX-Slow: " + b"z" * 60


def _agent_app():
    store = SnapshotStore()
    store.publish(replace(sample_snapshot(), taken_at=time.time()))
    return AgentHttp(store, lambda: True).app()


async def _dashboard_app():
    async def nobody():
        return []

    return build_app(AcceleratorsApi(Collector(nobody, refresh_s=60), "standalone"))


async def _raw(port: int, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Sends `request` as it is and reads the whole answer (the server closes)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    return int(lines[0].split()[1]), headers, body


async def _slow_client(port: int) -> bytes:
    """Sends a request head one byte a second; returns what the server answered."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    answer = asyncio.ensure_future(reader.read())  # until the server closes
    try:
        for byte in SLOW_HEAD:
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.wait([answer], timeout=1.0)
            if answer.done():
                break  # the server answered (and closed) before the head was complete
    except ConnectionError:
        pass
    finally:
        writer.close()
    try:
        return await asyncio.wait_for(answer, 5)
    except (ConnectionError, TimeoutError):
        return b""


async def _scrapes_while(port: int, busy: asyncio.Future) -> list[int]:
    """GET /metrics over one keep-alive connection and over fresh ones until `busy` is done."""
    statuses = []
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(timeout=timeout) as kept:
        while not busy.done():
            async with kept.get(f"http://127.0.0.1:{port}/metrics") as reply:
                await reply.read()
                statuses.append(reply.status)
            async with aiohttp.ClientSession(timeout=timeout) as fresh, \
                    fresh.get(f"http://127.0.0.1:{port}/metrics",
                              headers={"Connection": "close"}) as reply:
                await reply.read()
                statuses.append(reply.status)
            await asyncio.sleep(0.1)
    return statuses


def test_slow_header_clients_are_cut_off_while_scrapes_are_answered():
    async def go() -> tuple[list[bytes], list[int], int, int]:
        serving = await serve(_agent_app(), "127.0.0.1", 0,
                              ServingLimits(header_timeout_s=2.5, keepalive_timeout_s=30.0))
        try:
            slow = asyncio.gather(*(_slow_client(serving.port) for _ in range(SLOW_CLIENTS)))
            scrapes = asyncio.ensure_future(_scrapes_while(serving.port, slow))
            held = 0
            while not slow.done():
                held = max(held, serving.open_connections)
                await asyncio.sleep(0.1)
            answers = await slow
            statuses = await scrapes
            return answers, statuses, held, serving.open_connections
        finally:
            await serving.close()

    answers, statuses, held, left = asyncio.run(go())
    assert held >= SLOW_CLIENTS  # they were all connected at once
    assert len(SLOW_HEAD) > 20  # at one byte a second the head never completes in time
    timed_out = [a for a in answers if a.startswith(b"HTTP/1.1 408 ")]
    assert len(timed_out) == SLOW_CLIENTS, answers[:3]
    assert json.loads(timed_out[0].partition(b"\r\n\r\n")[2]) == {
        "error": "request head not received within 2.5 s", "status": 408}
    assert len(statuses) >= 4 and set(statuses) == {200}
    assert left <= 1


def test_connection_cap_makes_room_for_a_client_that_sends_its_request():
    cap = 20

    async def go():
        serving = await serve(_agent_app(), "127.0.0.1", 0, ServingLimits(max_connections=cap))
        idle = [await asyncio.open_connection("127.0.0.1", serving.port) for _ in range(cap)]
        try:
            await asyncio.sleep(0.2)
            full = serving.open_connections
            status, _, _ = await _raw(serving.port, b"GET /metrics HTTP/1.1\r\nHost: a\r\n"
                                                    b"Connection: close\r\n\r\n")
            evicted = await asyncio.wait_for(idle[0][0].read(), 5)  # the oldest idle one
            return full, status, evicted, serving.open_connections
        finally:
            for _, writer in idle:
                writer.close()
            await serving.close()

    full, status, evicted, after = asyncio.run(go())
    assert full == cap and status == 200 and evicted == b"" and after <= cap


def test_connection_cap_refuses_when_every_connection_is_serving():
    cap = 10

    async def go():
        serving = await serve(_agent_app(), "127.0.0.1", 0, ServingLimits(max_connections=cap))
        sessions = [aiohttp.ClientSession() for _ in range(cap)]
        try:
            for session in sessions:  # each keeps a connection that completed a request
                async with session.get(f"http://127.0.0.1:{serving.port}/healthz") as reply:
                    await reply.read()
            refused = await _raw(serving.port, b"GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n")
            return serving.open_connections, refused
        finally:
            for session in sessions:
                await session.close()
            await serving.close()

    open_connections, (status, headers, body) = asyncio.run(go())
    assert open_connections == cap
    assert status == 503 and headers["Content-Type"] == "application/json"
    assert json.loads(body) == {"error": "too many connections; try again later", "status": 503}


MALFORMED = [
    b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: a\r\n\r\n",  # request line too long
    b"GET / HTTP/1.1\r\nX-Big: " + b"b" * 9000 + b"\r\n\r\n",  # header line too long
    b"GET / HTTP/1.1\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(150)) + b"\r\n",
    b"GE\x01T / HTTP/1.1\r\nHost: a\r\n\r\n",  # bad method
    b"GET / HTTP/9.x\r\nHost: a\r\n\r\n",  # bad version
]


@pytest.mark.parametrize("which", ["agent", "dashboard"])
def test_parser_errors_are_json_and_logged_once(which, caplog):
    async def go():
        if which == "agent":
            serving = await serve(_agent_app(), "127.0.0.1", 0, ServingLimits())
        else:
            serving = await aiohttp_serving.serve(await _dashboard_app(), "127.0.0.1", 0)
        try:
            return [await _raw(serving.port, MALFORMED[i % len(MALFORMED)]) for i in range(50)]
        finally:
            await serving.close()

    with caplog.at_level(logging.DEBUG):
        answers = asyncio.run(go())
    for status, headers, body in answers:
        assert status == 400 and headers["Content-Type"] == "application/json"
        error = json.loads(body)
        assert error["status"] == 400 and error["error"]
        assert b"aaaa" not in body and b"bbbb" not in body  # the request is not echoed
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert warnings[0].exc_info is None and "\n" not in warnings[0].getMessage()
    assert "malformed request" in warnings[0].getMessage()


def test_dashboard_refuses_other_methods_as_json():
    async def go():
        serving = await aiohttp_serving.serve(await _dashboard_app(), "127.0.0.1", 0)
        try:
            async with aiohttp.ClientSession() as session:
                answers = []
                for path in ("/", PREFIX, PREFIX + "/api/summary", PREFIX + "/index.html",
                             PREFIX + "/api/authenticate"):
                    for method in ("POST", "PUT", "DELETE"):
                        if path.endswith("/authenticate") and method == "POST":
                            continue
                        async with session.request(method, f"{serving.url}{path}",
                                                   allow_redirects=False) as reply:
                            answers.append((method, path, reply.status,
                                            reply.headers["Content-Type"], await reply.read()))
                return answers
        finally:
            await serving.close()

    for method, path, status, content_type, body in asyncio.run(go()):
        assert status == 405, (method, path)
        assert content_type == "application/json", (method, path)
        assert json.loads(body)["status"] == 405


def test_a_connection_that_sends_nothing_is_closed_after_the_idle_timeout():
    async def go():
        serving = await serve(_agent_app(), "127.0.0.1", 0, ServingLimits(keepalive_timeout_s=1))
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", serving.port)
            closed_with = await asyncio.wait_for(reader.read(), 30)  # EOF: the server closed
            writer.close()
            return closed_with, serving.open_connections
        finally:
            await serving.close()

    closed_with, left = asyncio.run(go())
    assert closed_with == b"" and left == 0


LARGE_ANSWER = b"m" * 320_000  # about the /metrics of an 8-GPU node
NON_READERS = 8
METRICS = b"GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n"


async def _large_answers(which: str, limits: ServingLimits):
    """A server of `which` kind answering every GET with `LARGE_ANSWER`."""
    if which == "agent":
        async def handler(request):
            return Response(body=LARGE_ANSWER, content_type="text/plain")
        return await serve(handler, "127.0.0.1", 0, limits)

    async def route(request: web.Request) -> web.Response:
        return web.Response(body=LARGE_ANSWER, content_type="text/plain")
    app = web.Application()
    app.router.add_get("/{tail:.*}", route)
    return await aiohttp_serving.serve(app, "127.0.0.1", 0, limits)


async def _status_of_a_normal_get(port: int) -> int:
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(timeout=timeout) as session, \
            session.get(f"http://127.0.0.1:{port}/healthz") as reply:
        await reply.read()
        return reply.status


@pytest.mark.parametrize("which", ["agent", "dashboard"])
def test_clients_that_never_read_their_answers_lose_their_place_then_their_connection(
        which, caplog):
    async def go():
        limits = ServingLimits(max_connections=NON_READERS, send_timeout_s=2.0)
        serving = await _large_answers(which, limits)
        clients = [await non_reader(serving.port, METRICS) for _ in range(NON_READERS)]
        try:
            await asyncio.sleep(0.5)  # each one's answers fill its buffers
            held = serving.open_connections
            statuses = [await _status_of_a_normal_get(serving.port) for _ in range(3)]
            deadline = time.monotonic() + 15
            while serving.open_connections and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            return held, statuses, serving.open_connections
        finally:
            for _, writer in clients:
                writer.close()
            await serving.close()

    with caplog.at_level(logging.WARNING):
        held, statuses, left = asyncio.run(go())
    assert held == NON_READERS  # the cap was full of clients that had asked and not read
    assert statuses == [200, 200, 200]  # each time one of them made room
    assert left == 0  # the rest were closed once they took nothing for 2 s
    notes = " ".join(r.getMessage() for r in caplog.records)
    assert "left its answer waiting" in notes or "took none of its answer" in notes
