"""The agent's HTTP surface refuses bad input with clear JSON errors and changes nothing.

The agent's server (exporter/httpd/) runs in-process over a fixed snapshot, asked
by aiohttp's client over real sockets; hypothesis generates paths, query strings,
methods and headers.
"""

from __future__ import annotations

import asyncio
import json
import string
import time
from dataclasses import replace

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from snapshots import sample_snapshot

from ray_accel.exporter.httpd import serve
from ray_accel.exporter.server import ALLOWED_PARAMETERS, AgentHttp
from ray_accel.exporter.store import SnapshotStore

PATHS = sorted(ALLOWED_PARAMETERS)


@pytest.fixture(scope="module")
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture(scope="module")
def client(loop):
    store = SnapshotStore()
    store.publish(replace(sample_snapshot(), taken_at=time.time()))

    async def start():
        serving = await serve(AgentHttp(store, lambda: True).app(), "127.0.0.1", 0)
        return serving, aiohttp.ClientSession(serving.url)

    serving, session = loop.run_until_complete(start())
    yield session, store, loop
    loop.run_until_complete(session.close())
    loop.run_until_complete(serving.close())


def call(client, method: str, path: str, **kwargs) -> tuple[int, dict, bytes]:
    session, _, loop = client

    async def go():
        async with session.request(method, path, allow_redirects=False, **kwargs) as reply:
            return reply.status, dict(reply.headers), await reply.read()

    return loop.run_until_complete(go())


def test_unknown_query_parameters_are_refused(client):
    status, headers, body = call(client, "GET", "/api/v1/snapshot?cycle=3")
    assert status == 400 and headers["Content-Type"].startswith("application/json")
    error = json.loads(body)
    assert "unknown query parameter(s) cycle" in error["error"] and error["status"] == 400


def test_a_parameter_given_twice_is_refused_but_a_list_is_not(client):
    status, _, body = call(client, "GET", "/api/v1/record?last=30s&last=10m")
    assert status == 400
    assert json.loads(body)["error"] == "query parameter(s) last given more than once"
    status, _, _ = call(client, "GET",
                        "/metrics?name[]=hw_power_watts&name[]=hw_energy_joules_total")
    assert status == 200


def test_metrics_name_filter(client):
    status, _, body = call(client, "GET", "/metrics?name[]=hw_power_watts"
                                          "&name[]=hw_energy_joules_total")
    names = {line.split("{")[0] for line in body.decode().splitlines()
             if line and not line.startswith("#")}
    assert status == 200 and names == {"hw_power_watts", "hw_energy_joules_total"}


def test_oversized_headers_are_refused(client):
    status, _, _ = call(client, "GET", "/metrics", headers={"X-Big": "x" * 20_000})
    assert status in (400, 431)


def test_every_endpoint_is_read_only(client):
    for path in PATHS:
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            status, _, body = call(client, method, path, data=b"{}")
            assert status == 405, (method, path)
            assert json.loads(body)["status"] == 405


_SEGMENT = st.text(alphabet=string.ascii_letters + string.digits + "-_.%~", min_size=1,
                   max_size=12)
_QUERY_KEY = st.text(alphabet=string.ascii_letters + "[]_", min_size=1, max_size=10)
_QUERY_VALUE = st.text(alphabet=string.printable.strip(), max_size=30)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    path=st.one_of(st.sampled_from(PATHS), st.lists(_SEGMENT, max_size=4).map(
        lambda parts: "/" + "/".join(parts))),
    query=st.dictionaries(_QUERY_KEY, _QUERY_VALUE, max_size=3),
    method=st.sampled_from(["GET", "HEAD", "POST", "DELETE", "OPTIONS"]),
    accept=st.sampled_from(["", "*/*", "application/openmetrics-text; version=1.0.0",
                            "text/plain", "\x7f\u00e9"]),
)
def test_fuzzed_requests_get_answers_never_server_errors(client, path, query, method, accept):
    _, store, _ = client
    before = store.latest
    headers = {"Accept": accept} if accept.isascii() else {}
    try:
        status, _, body = call(client, method, path, params=query,
                                              headers=headers)
    except aiohttp.ClientError:
        return  # a request the client library itself refuses to send
    assert status < 500, (method, path, query, body[:200])
    if status >= 400 and method != "HEAD":
        assert json.loads(body)["status"] == status
    if status == 200 and path in ALLOWED_PARAMETERS and method == "GET":
        assert not set(query) - ALLOWED_PARAMETERS[path]
    assert store.latest is before  # nothing a client sends changes the agent's state
