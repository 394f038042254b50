"""The node page's download: the head hands on a node agent's recording as a scenario file.

A real agent (simulated `mixed` node: two NVIDIA L4s and two AMD MI210s) behind
Ray's cluster token, a real collector and the standalone tab's app behind the
head's own token; `GET /accelerators/api/nodes/{id}/record?last=1m` must give
an attachment that the simulator loads, with identities replaced, and refuse
bad input, unknown nodes and missing tokens with a clear message.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import urllib.error
import urllib.request

import pytest
from agent_process import AgentProcess
from aiohttp.test_utils import TestClient, TestServer

from ray_accel.dashboard_module.api import AcceleratorsApi
from ray_accel.dashboard_module.collector import AgentTarget, Collector
from ray_accel.dashboard_module.fleet import node_id
from ray_accel.dashboard_module.standalone import build_app
from ray_accel.exporter.simulate import load_scenario

AGENT_TOKEN = "cluster-token-for-download-tests"
HEAD_TOKEN = "head-token-for-download-tests"
NODE = node_id(0)


def _recorded(agent: AgentProcess) -> bool:
    """Whether the agent's history holds values that move (keyframes) yet."""
    request = urllib.request.Request(agent.url + "/api/v1/record?last=1m",
                                     headers={"Authorization": f"Bearer {AGENT_TOKEN}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return b"keyframes" in reply.read()
    except urllib.error.HTTPError:
        return False  # 404 until its first samples


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory):
    token_file = tmp_path_factory.mktemp("download") / "token"
    token_file.write_text(AGENT_TOKEN)
    with AgentProcess("--simulate", "mixed", "--interval", "0.5", "--token-file",
                      str(token_file), "--metrics-auth", "token") as running:
        deadline = time.monotonic() + 60
        while not _recorded(running):
            assert time.monotonic() < deadline, "the agent kept no history"
            time.sleep(0.5)
        yield running


async def _head(agent_url: str, agent_token: str) -> tuple[TestClient, Collector]:
    async def discover():
        return [AgentTarget(NODE, agent_url, "recorded-host")]

    collector = Collector(discover, refresh_s=1, fetch_timeout_s=5, token=lambda: agent_token)
    await collector.refresh()
    client = TestClient(TestServer(build_app(AcceleratorsApi(collector, "standalone"),
                                             HEAD_TOKEN)))
    await client.start_server()
    return client, collector


def _download(agent_url: str, path: str, agent_token: str = AGENT_TOKEN,
              head_token: str | None = HEAD_TOKEN) -> tuple[int, dict[str, str], bytes]:
    async def ask() -> tuple[int, dict[str, str], bytes]:
        client, collector = await _head(agent_url, agent_token)
        try:
            headers = {"Authorization": f"Bearer {head_token}"} if head_token else {}
            reply = await client.get("/accelerators/api/" + path, headers=headers)
            return reply.status, dict(reply.headers), await reply.read()
        finally:
            await client.close()
            await collector.stop()

    return asyncio.run(ask())


def test_head_route_returns_the_nodes_recording_as_a_scenario_file(agent) -> None:
    status, headers, body = _download(agent.url, f"nodes/{NODE}/record?last=1m")
    assert status == 200, body[:500]
    assert headers["Content-Disposition"].startswith('attachment; filename="ray-accel-')
    scenario = load_scenario(json.loads(body))
    vendors = [d.get("vendor", "nvidia") for d in scenario["devices"]]
    assert vendors == ["nvidia", "nvidia", "amd", "amd"]
    original = {d["uuid"] for d in load_scenario("mixed")["devices"]}
    assert not {d["uuid"] for d in scenario["devices"]} & original  # replaced by default
    status, _, kept = _download(agent.url, f"nodes/{NODE}/record?last=1m&identities=keep")
    assert status == 200
    assert {d["uuid"] for d in json.loads(kept)["devices"]} == original


def test_head_route_refuses_bad_input_naming_it(agent) -> None:
    for path, code, message in (
            (f"nodes/{NODE}/record?last=ten", 400, "last:"),
            (f"nodes/{NODE}/record?last=2h", 400, "outside"),
            (f"nodes/{NODE}/record?last=0.0001s", 400, "outside 1 s"),
            (f"nodes/{NODE}/record?last=", 400, "not a duration"),
            (f"nodes/{NODE}/record?identities=some", 400, "identities"),
            (f"nodes/{NODE}/record?since=1", 400, "unknown query parameter"),
            (f"nodes/{'0' * 56}/record", 404, "unknown node"),
            ("nodes/xyz/record", 400, "malformed node id")):
        status, _, body = _download(agent.url, path)
        assert status == code and message in json.loads(body)["error"], (path, body[:300])


def test_head_route_is_behind_the_token_and_presents_one(agent) -> None:
    status, _, _ = _download(agent.url, f"nodes/{NODE}/record", head_token=None)
    assert status == 401
    status, _, body = _download(agent.url, f"nodes/{NODE}/record", agent_token="wrong")
    assert status == 502 and "HTTP 401" in json.loads(body)["error"]


def test_an_agent_busy_building_recordings_is_passed_on_with_its_retry_after() -> None:
    """The agent answers 503 with Retry-After beyond the recordings it builds at a time
    (exporter/record/endpoint.py); the head hands that on instead of a 502."""
    from aiohttp import ClientSession, web

    from ray_accel.dashboard_module.node_record import node_recording
    from ray_accel.dashboard_module.node_state import NodeState
    from ray_accel.exporter.httpd import json_error

    async def busy(request: web.Request) -> web.Response:
        refused = json_error(503, "4 recordings are being built or waiting; ask again later")
        refused.headers["Retry-After"] = "5"
        return refused.as_aiohttp()

    async def scenario() -> web.Response:
        app = web.Application()
        app.router.add_get("/api/v1/record", busy)
        async with TestServer(app) as server, ClientSession() as session:
            node = NodeState(NODE, str(server.make_url("/")))
            return await node_recording(session, node, {"last": "600s"})

    answer = asyncio.run(scenario())
    assert answer.status == 503 and answer.headers["Retry-After"] == "5"
    assert "ask again later" in json.loads(answer.body)["error"]


def test_a_recording_that_is_not_a_scenario_document_is_not_handed_on() -> None:
    from aiohttp import ClientSession, web

    from ray_accel.dashboard_module.node_record import node_recording
    from ray_accel.dashboard_module.node_state import NodeState

    answers = [b"{{{garbage", b"[1, 2]", b'{"devices": 5}', b'{"name": "x", "devices": []}']

    async def agent(request: web.Request) -> web.Response:
        return web.Response(body=answers.pop(0), content_type="application/json")

    async def scenario() -> list[web.Response]:
        app = web.Application()
        app.router.add_get("/api/v1/record", agent)
        async with TestServer(app) as server, ClientSession() as session:
            node = NodeState(NODE, str(server.make_url("/")))
            return [await node_recording(session, node, {"last": "60s"}) for _ in range(4)]

    *refused, handed_on = asyncio.run(scenario())
    for answer in refused:
        assert answer.status == 502
        assert "not a scenario document" in json.loads(answer.body)["error"]
    assert handed_on.status == 200 and json.loads(handed_on.body)["name"] == "x"


def test_an_agent_that_did_not_answer_the_last_round_is_not_asked(agent) -> None:
    """As for the node page: a download from a node whose agent went silent answers at once
    with why, instead of waiting out the minute a recording may take; once the agent
    answers a round again, it is asked."""

    async def scenario() -> list[tuple[int, bytes]]:
        client, collector = await _head(agent.url, AGENT_TOKEN)
        headers = {"Authorization": f"Bearer {HEAD_TOKEN}"}
        answers = []
        try:
            os.kill(agent.proc.pid, signal.SIGSTOP)
            try:
                await collector.refresh()
                reply = await client.get(f"/accelerators/api/nodes/{NODE}/record?last=1m",
                                         headers=headers)
                answers.append((reply.status, await reply.read()))
            finally:
                os.kill(agent.proc.pid, signal.SIGCONT)
            await collector.refresh()
            reply = await client.get(f"/accelerators/api/nodes/{NODE}/record?last=1m",
                                     headers=headers)
            answers.append((reply.status, await reply.read()))
        finally:
            await client.close()
            await collector.stop()
        return answers

    (silent, silent_body), (back, back_body) = asyncio.run(scenario())
    assert silent == 504
    error = json.loads(silent_body)["error"]
    assert "did not answer the last round" in error and "not asked" in error
    assert back == 200 and b"keyframes" in back_body


def test_the_head_fetches_a_bounded_number_of_recordings_at_once() -> None:
    """The head holds each recording whole until it hands it on: downloads of many nodes at
    once beyond `most` are refused with 503 and Retry-After, and served once one ends."""
    from aiohttp import ClientSession, web

    from ray_accel.dashboard_module.node_record import RecordFetches
    from ray_accel.dashboard_module.node_state import NodeState

    async def scenario() -> tuple[list[int], int, str, int]:
        release = asyncio.Event()
        asked = 0

        async def slow_recording(request: web.Request) -> web.Response:
            nonlocal asked
            asked += 1
            await release.wait()
            return web.json_response({"name": "recorded", "devices": []})

        app = web.Application()
        app.router.add_get("/api/v1/record", slow_recording)
        fetches = RecordFetches(most=2)
        async with TestServer(app) as server, ClientSession() as session:
            node = NodeState(NODE, str(server.make_url("/")))
            held = [asyncio.create_task(fetches.fetch(session, node, {"last": "60s"}))
                    for _ in range(2)]
            while asked < 2:
                await asyncio.sleep(0.01)
            refused = await fetches.fetch(session, node, {"last": "60s"})
            release.set()
            served = [answer.status for answer in await asyncio.gather(*held)]
            again = await fetches.fetch(session, node, {"last": "60s"})
            return served, refused.status, refused.headers.get("Retry-After", ""), again.status

    served, refused, retry_after, again = asyncio.run(scenario())
    assert served == [200, 200]
    assert refused == 503 and retry_after == "5"
    assert again == 200
