"""The agent's own HTTP/1.1 server (exporter/httpd/) over real sockets: what RFC 9112 asks
of it and what the agent's clients rely on. HEAD, pipelining, keep-alive, the idle
timeout and close, 405 with Allow, bounded and chunked bodies, a failing handler,
malformed requests, TLS and its handshake timeout.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import time
from dataclasses import replace

import aiohttp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from snapshots import sample_snapshot
from tls_files import make_certificates

from ray_accel.exporter.httpd import MAX_REQUEST_BYTES, Request, Response, Router, serve
from ray_accel.exporter.httpd.parser import HttpError, check_incomplete, chunked_end, parse_head
from ray_accel.exporter.server import AgentHttp
from ray_accel.exporter.serving import ServingLimits
from ray_accel.exporter.store import SnapshotStore

Answer = tuple[int, dict[str, str], bytes]


def _handler():
    """The agent's endpoints plus /fail (raises) and /echo (what the parser made of it)."""
    store = SnapshotStore()
    store.publish(replace(sample_snapshot(), taken_at=time.time()))
    agent = AgentHttp(store, lambda: True).app()
    extra = Router()

    async def fail(request: Request) -> Response:
        raise RuntimeError("a handler's bug")

    async def echo(request: Request) -> Response:
        return Response(body=json.dumps({"path": request.path, "query": dict(request.query),
                                         "cookies": request.cookies}).encode())

    extra.add_get("/fail", fail)
    extra.add_get("/echo/a b", echo)

    async def handler(request: Request) -> Response:
        return await (extra if request.path in ("/fail", "/echo/a b") else agent)(request)

    return handler


async def _read_answer(reader: asyncio.StreamReader, head_only: bool = False) -> Answer:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    lines = head.decode("latin-1").rstrip("\r\n").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    status = int(lines[0].split()[1])
    length = 0 if head_only else int(headers.get("Content-Length", "0"))
    return status, headers, await reader.readexactly(length)


async def _exchange(port: int, data: bytes, answers: int, head_only: bool = False,
                    kept: bool = False) -> tuple[list[Answer], bytes]:
    """Sends `data` at once and reads `answers` responses; then, with `kept`, asks
    /healthz once more on the same connection (b"<still open>" when answered), else reads
    what follows until the server closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        got = [await _read_answer(reader, head_only) for _ in range(answers)]
        if kept:
            writer.write(GET % b"/healthz")
            return got, b"<still open>" if (await _read_answer(reader))[0] == 200 else b""
        return got, await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


def _run(coroutine_function, *args, limits: ServingLimits | None = None):
    async def go():
        serving = await serve(_handler(), "127.0.0.1", 0, limits)
        try:
            return await coroutine_function(serving.port, *args)
        finally:
            await serving.close()

    return asyncio.run(go())


GET = b"GET %s HTTP/1.1\r\nHost: agent\r\n\r\n"


def test_head_answers_the_headers_of_get_without_a_body():
    async def go(port):
        (get,), _ = await _exchange(port, b"GET /metrics HTTP/1.1\r\nHost: a\r\n"
                                          b"Connection: close\r\n\r\n", 1)
        (head,), rest = await _exchange(port, b"HEAD /metrics HTTP/1.1\r\nHost: a\r\n"
                                              b"Connection: close\r\n\r\n", 1, head_only=True)
        return get, head, rest

    get, head, rest = _run(go)
    assert get[0] == head[0] == 200 and get[2].startswith(b"# HELP")
    assert head[1]["Content-Length"] == str(len(get[2]))
    assert head[1]["Content-Type"] == get[1]["Content-Type"]
    assert rest == b""  # no body followed the head, and the connection closed


def test_pipelined_requests_are_answered_in_order_on_one_connection():
    async def go(port):
        paths = [b"/healthz", b"/nope", b"/api/v1/summary", b"/", b"/metrics?x=1"]
        return await _exchange(port, b"".join(GET % p for p in paths), len(paths), kept=True)

    answers, rest = _run(go)
    assert [status for status, _, _ in answers] == [200, 404, 200, 200, 400]
    assert json.loads(answers[0][2])["status"] in ("ok", "degraded")
    assert json.loads(answers[2][2])["kind"] == "ray-accel.node-summary"
    assert json.loads(answers[3][2])["service"] == "ray-accel agent"
    assert rest == b"<still open>"  # HTTP/1.1 keeps the connection


def test_http_1_0_and_connection_close_close_after_the_answer():
    async def go(port):
        old = await _exchange(port, b"GET /healthz HTTP/1.0\r\n\r\n" + GET % b"/", 1)
        close = await _exchange(port, b"GET /healthz HTTP/1.1\r\nHost: a\r\n"
                                      b"Connection: close\r\n\r\n" + GET % b"/", 1)
        return old, close

    for (answer,), rest in _run(go):
        assert answer[0] == 200 and answer[1]["Connection"] == "close"
        assert rest == b""  # the second, pipelined request was not answered


def test_other_methods_get_405_with_allow_and_unknown_paths_404():
    async def go(port):
        return await _exchange(port, b"DELETE /metrics HTTP/1.1\r\nHost: a\r\n\r\n"
                                     b"OPTIONS /nope HTTP/1.1\r\nHost: a\r\n\r\n"
                                     b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", 3,
                               kept=True)

    (deleted, unknown, asterisk), _ = _run(go)
    assert deleted[0] == 405 and deleted[1]["Allow"] == "GET, HEAD"
    assert json.loads(deleted[2]) == {"error": "Method Not Allowed", "status": 405}
    assert unknown[0] == asterisk[0] == 404 and json.loads(unknown[2])["status"] == 404


def test_a_client_expecting_100_continue_gets_it_before_sending_its_body():
    async def go(port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(b"POST /metrics HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n"
                         b"Expect: 100-continue\r\n\r\n")
            interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            writer.write(b"{}")
            return interim, await _read_answer(reader)
        finally:
            writer.close()

    interim, (status, _, _) = _run(go)
    assert interim == b"HTTP/1.1 100 Continue\r\n\r\n" and status == 405


def test_request_bodies_are_bounded_and_skipped():
    small = b"POST /metrics HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello"
    chunked = (b"POST /healthz HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"3;ext=1\r\nabc\r\n0\r\nX-Trailer: t\r\n\r\n")
    big = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n" % (MAX_REQUEST_BYTES + 1)

    async def go(port):
        kept = await _exchange(port, small + chunked + GET % b"/healthz", 3, kept=True)
        refused = await _exchange(port, big + b"x" * 100, 1)
        return kept, refused

    (kept, kept_rest), (((status, _, body),), refused_rest) = _run(go)
    assert [answer[0] for answer in kept] == [405, 405, 200]  # the bodies did not derail it
    assert kept_rest == b"<still open>"
    assert status == 413 and json.loads(body)["status"] == 413 and refused_rest == b""


def test_a_failing_handler_gets_500_and_the_server_goes_on(caplog):
    async def go(port):
        failed = [await _exchange(port, GET % b"/fail", 1) for _ in range(3)]
        after = await _exchange(port, GET % b"/healthz", 1, kept=True)
        return failed, after

    with caplog.at_level(logging.WARNING):
        failed, (((status, _, _),), _) = _run(go)
    for (answer,), rest in failed:
        assert answer[0] == 500 and json.loads(answer[2]) == {
            "error": "Internal Server Error", "status": 500}
        assert b"a handler's bug" not in answer[2] and rest == b""
    assert status == 200
    logged = [r for r in caplog.records if "error answering GET '/fail'" in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is not None  # rate-limited, with traceback


@pytest.mark.parametrize("request_bytes", [
    b"GET /healthz\r\nHost: a\r\n\r\n",  # no version
    b"GET  /healthz HTTP/1.1\r\nHost: a\r\n\r\n",  # two spaces
    b"GET healthz HTTP/1.1\r\nHost: a\r\n\r\n",  # not a path
    b"GET /healthz HTTP/1.1\r\n\r\n",  # HTTP/1.1 without Host
    b"GET /healthz HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n",  # obsolete line folding
    b"GET /healthz HTTP/1.1\r\nHost : a\r\n\r\n",  # space before the colon
    b"GET /healthz HTTP/1.1\r\nHost: a\r\nContent-Length: 1, 2\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n",
])
def test_malformed_requests_get_json_400_and_close(request_bytes):
    ((status, headers, body),), rest = _run(_exchange, request_bytes + GET % b"/", 1)
    assert status == 400 and headers["Content-Type"] == "application/json"
    assert json.loads(body)["status"] == 400 and b"healthz" not in body
    assert rest == b""


def test_paths_are_percent_decoded_and_repeated_parameters_kept():
    async def go(port):
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/echo/a%20b?k=1&k=2&e=",
                                   cookies={"c": "v"}) as reply:
                echoed = await reply.json(content_type=None)
            async with session.get(f"http://127.0.0.1:{port}/metrics",
                                   params=[("name[]", "hw_power_watts")]) as reply:
                metrics = await reply.text()
        absolute, _ = await _exchange(port, b"GET http://agent/healthz HTTP/1.1\r\n"
                                            b"Host: agent\r\n\r\n", 1, kept=True)
        return echoed, metrics, absolute[0][0]

    echoed, metrics, absolute = _run(go)
    assert echoed == {"path": "/echo/a b", "query": {"k": ["1", "2"], "e": [""]},
                      "cookies": {"c": "v"}}
    names = {line.split("{")[0] for line in metrics.splitlines() if line[:1] not in ("#", "")}
    assert names == {"hw_power_watts"}
    assert absolute == 200


def test_a_kept_alive_connection_closes_after_the_idle_timeout():
    async def go(port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(GET % b"/healthz")
            answer = await _read_answer(reader)
            return answer[0], await asyncio.wait_for(reader.read(), 30)  # EOF once idle
        finally:
            writer.close()

    status, rest = _run(go, limits=ServingLimits(keepalive_timeout_s=0.5))
    assert status == 200 and rest == b""


def test_tls_serves_requests_and_a_silent_handshake_is_cut_off(tmp_path):
    certs = make_certificates(tmp_path)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(certs["cert"], certs["key"])
    client_context = ssl.create_default_context(cafile=str(certs["ca"]))

    async def go():
        serving = await serve(_handler(), "127.0.0.1", 0, ServingLimits(header_timeout_s=1),
                              ssl_context=server_context)
        try:
            silent_reader, silent_writer = await asyncio.open_connection("127.0.0.1",
                                                                         serving.port)
            reader, writer = await asyncio.open_connection("127.0.0.1", serving.port,
                                                           ssl=client_context,
                                                           server_hostname="127.0.0.1")
            writer.write(b"HEAD /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            answer = await _read_answer(reader, head_only=True)
            writer.close()
            cut = await asyncio.wait_for(silent_reader.read(), 30)  # no handshake: closed
            silent_writer.close()
            return serving.url, answer, cut
        finally:
            await serving.close()

    url, (status, headers, _), cut = asyncio.run(go())
    assert url.startswith("https://") and status == 200 and headers["Connection"] == "close"
    assert cut == b""


_HEAD_PARTS = st.sampled_from([
    b"GET", b"HEAD", b"POST", b" ", b"/", b"/metrics", b"?", b"&", b"=", b"%", b"%2", b"%zz",
    b"name[]", b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b"\r\n", b"\n", b"\t", b":", b"Host",
    b"Content-Length", b"Transfer-Encoding", b"chunked", b"0", b"12", b"\xb2", b"\xff",
    b"\x00", b"Cookie", b"Connection", b"close", b"*", b"http://a/b", b",",
])


@settings(max_examples=400, deadline=None)
@given(head=st.lists(st.one_of(_HEAD_PARTS, st.binary(max_size=6)), max_size=30).map(b"".join),
       body=st.binary(max_size=40))
def test_any_bytes_parse_to_a_request_or_a_4xx_5xx_refusal(head, body):
    try:
        check_incomplete(head, 8190, 100)
        parsed = parse_head(head, 8190, 100)
    except HttpError as error:
        assert 400 <= error.status < 600 and error.message
        return
    assert parsed.request.method and parsed.request.version in ("HTTP/1.0", "HTTP/1.1")
    assert parsed.request.path.startswith("/") or parsed.request.path == "*"
    if parsed.chunked:
        try:
            end = chunked_end(body, 0, MAX_REQUEST_BYTES)
        except HttpError as error:
            assert error.status in (400, 413)
        else:
            assert end is None or 0 < end <= len(body)
