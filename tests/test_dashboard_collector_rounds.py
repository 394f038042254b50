"""The collector's rounds at the wire and in memory: kept-alive conditional GETs (304s
honoured, TLS verified, the token presented, chunked and oversized answers), the
history's staged rounds, the heatmap encoded once per changed node, shared values.

Agents here are small aiohttp servers answering hand-made summaries: what is under
test is how the head asks and keeps, not what an agent reports (tests/test_agent_node_summary.py
runs a real agent).
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections.abc import Callable

import pytest
from aiohttp import web
from tls_files import make_certificates

from ray_accel.dashboard_module.agent_connections import AgentConnections, AnswerTooLarge
from ray_accel.dashboard_module.aggregate import NodeState, build_view, heatmap_body
from ray_accel.dashboard_module.collector import AgentTarget, Collector
from ray_accel.dashboard_module.fleet import node_id
from ray_accel.dashboard_module.history import History
from ray_accel.exporter import shared_values
from ray_accel.exporter.agent_client import CA_FILE_ENV
from ray_accel.exporter.node_view import (
    NOW_HEADER,
    SUMMARY_KIND,
    TAKEN_AT_HEADER,
    reduce_summary,
)
from ray_accel.exporter.sinks.summary import content_version, encode

TOKEN = "collector-rounds-token"


def summary(number: int, watts: float = 300.0) -> tuple[bytes, str]:
    """Node `number`'s summary: two H200s on one fabric, the first drawing `watts`."""
    fabric = {"state": 3.0, "status": 0.0, "health_summary": None, "issues": [],
              "state_name": "completed", "status_name": "success",
              "health_summary_name": "healthy", "incorrect_configuration": "none",
              "cluster_uuid": "29db9a08-13d3-5c97-a4fe-ddd7908adcd0", "clique_id": "1"}
    devices = [{"uuid": f"GPU-{number:08x}-{index}", "index": str(index), "vendor": "nvidia",
                "model": "NVIDIA H200", "up": True, "utilization": 0.5,
                "memory_used_bytes": 2**30, "memory_total_bytes": 150754820096.0,
                "power_watts": watts if index == 0 else 300.0, "power_limit_watts": 700.0,
                "temperature_celsius": 60,
                "pcie": {"generation": 5.0, "generation_max": 5.0, "width": 16.0,
                         "width_max": 16.0}, "fabric": dict(fabric)}
               for index in range(2)]
    doc = {"kind": SUMMARY_KIND, "schema_version": 1, "node_id": node_id(number),
           "interval_s": 1.0, "placement": {"nvlink_domain": "nvl-0"}, "devices": devices}
    doc["version"] = content_version(doc)
    return encode(doc)


class Agents:
    """One aiohttp server posing as many agents (/n/<i>/api/v1/summary), optionally over
    TLS and requiring a bearer token; counts 200s, 304s and connections. The agents whose
    numbers are in `silent` take requests and never answer (until the server stops);
    `clock(i)` is agent i's (when its sample was taken, its time now), its time None for
    an agent that does not send it."""

    def __init__(self, bodies: Callable[[int], tuple[bytes, str]], *, token: str = "",
                 tls: ssl.SSLContext | None = None, chunked: bool = False,
                 keepalive_timeout: float = 75.0) -> None:
        self.bodies, self.token, self.tls, self.chunked = bodies, token, tls, chunked
        self.keepalive_timeout = keepalive_timeout
        self.silent: set[int] = set()
        self.clock: Callable[[int], tuple[float, float | None]] = \
            lambda number: (time.time(), time.time())
        self._stopping = asyncio.Event()
        self.answered = {"summary": 0, "not_modified": 0, "refused": 0}
        self.peers: set[tuple[str, int]] = set()
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def _summary(self, request: web.Request) -> web.StreamResponse:
        self.peers.add(request.transport.get_extra_info("peername")[:2])
        if self.token and request.headers.get("Authorization") != f"Bearer {self.token}":
            self.answered["refused"] += 1
            raise web.HTTPUnauthorized()
        if int(request.match_info["number"]) in self.silent:
            await self._stopping.wait()
        body, etag = self.bodies(int(request.match_info["number"]))
        taken_at, now = self.clock(int(request.match_info["number"]))
        headers = {"ETag": etag, TAKEN_AT_HEADER: repr(taken_at),
                   **({NOW_HEADER: repr(now)} if now is not None else {})}
        if request.headers.get("If-None-Match") == etag:
            self.answered["not_modified"] += 1
            return web.Response(status=304, headers=headers)
        self.answered["summary"] += 1
        if not self.chunked:
            return web.Response(body=body, content_type="application/json", headers=headers)
        reply = web.StreamResponse(headers=headers)
        reply.enable_chunked_encoding()
        await reply.prepare(request)
        for start in range(0, len(body), 1000):  # many chunks
            await reply.write(body[start:start + 1000])
        await reply.write_eof()
        return reply

    async def __aenter__(self) -> Agents:
        app = web.Application()
        app.router.add_get("/n/{number}/api/v1/summary", self._summary)
        self._runner = web.AppRunner(app, access_log=None,
                                     keepalive_timeout=self.keepalive_timeout)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self.tls)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"{'https' if self.tls else 'http'}://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        self._stopping.set()
        await self._runner.cleanup()

    def targets(self, count: int) -> list[AgentTarget]:
        return [AgentTarget(node_id(n), f"{self.url}/n/{n}", f"host-{n}") for n in range(count)]


def collector_of(targets: list[AgentTarget], token: str | None = None) -> Collector:
    async def discover() -> list[AgentTarget]:
        return targets

    return Collector(discover, refresh_s=1, fetch_timeout_s=5, spread=0.0,
                     token=lambda: token)


def test_rounds_keep_their_connections_and_304s_keep_the_data():
    watts = dict.fromkeys(range(12), 300.0)

    async def scenario() -> None:
        async with Agents(lambda n: summary(n, watts[n])) as agents:
            collector = collector_of(agents.targets(12))
            try:
                await collector.refresh()
                opened = collector.connections().opened
                assert collector.last_round.summaries == 12 and opened <= 12
                kept = {n: collector.nodes[node_id(n)].data for n in range(12)}
                await collector.refresh()
                watts[5] = 340.0
                await collector.refresh()
                rounds = collector.last_round
                assert (rounds.summaries, rounds.not_modified, rounds.failures) == (1, 11, 0)
                assert agents.answered == {"summary": 13, "not_modified": 23, "refused": 0}
                # later rounds went over the connections the first one opened
                assert collector.connections().opened == opened
                assert len(agents.peers) == opened
                assert all(collector.nodes[node_id(n)].data is kept[n] for n in range(12)
                           if n != 5)
                cells = {r["node_id"]: r["devices"][0]["power"] for r in collector.view.heatmap}
                assert cells[node_id(5)] == 340.0 and cells[node_id(4)] == 300.0
            finally:
                await collector.stop()

    asyncio.run(scenario())


def test_an_agent_that_drops_idle_connections_is_asked_on_a_new_one():
    async def scenario() -> None:
        async with Agents(summary, keepalive_timeout=0.05) as agents:
            collector = collector_of(agents.targets(3))
            try:
                await collector.refresh()
                first = collector.connections().opened
                await asyncio.sleep(0.3)  # the agents close every idle connection
                await collector.refresh()
                assert collector.last_round.failures == 0
                assert collector.last_round.not_modified == 3
                assert collector.connections().opened > first
                assert set(collector.view.statuses.values()) == {"ok"}
            finally:
                await collector.stop()

    asyncio.run(scenario())


def test_summaries_over_tls_carry_the_token_and_the_agent_is_verified(tmp_path, monkeypatch):
    certs = make_certificates(tmp_path)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(certs["cert"], certs["key"])

    async def round_with(token: str | None) -> Collector:
        async with Agents(summary, token=TOKEN, tls=tls) as agents:
            collector = collector_of(agents.targets(2), token)
            try:
                await collector.refresh()
                await collector.refresh()
                return collector
            finally:
                await collector.stop()

    monkeypatch.setenv(CA_FILE_ENV, str(certs["ca"]))
    trusted = asyncio.run(round_with(TOKEN))
    assert set(trusted.view.statuses.values()) == {"ok"}
    assert trusted.last_round.not_modified == 2  # 304s over TLS too
    refused = asyncio.run(round_with("wrong"))
    assert {n.error for n in refused.nodes.values()} == {"bad snapshot: HTTP 401"}
    assert set(refused.view.statuses.values()) == {"unreachable"}
    monkeypatch.delenv(CA_FILE_ENV)
    unverified = asyncio.run(round_with(TOKEN))
    errors = {n.error for n in unverified.nodes.values()}
    assert len(errors) == 1 and "CERTIFICATE_VERIFY_FAILED" in errors.pop()


def test_chunked_answers_are_read_whole_and_oversized_ones_refused():
    async def scenario() -> None:
        async with Agents(summary, chunked=True) as agents:
            connections = AgentConnections({}, ssl.create_default_context)
            try:
                url = f"{agents.url}/n/7/api/v1/summary"
                reply = await connections.get(url, {}, 5, 2**20)
                assert reply.status == 200 and reply.body == summary(7)[0]
                assert reply.header("ETag") == summary(7)[1]
                again = await connections.get(url, {"If-None-Match": summary(7)[1]}, 5, 2**20)
                assert again.status == 304 and again.body == b""
                assert connections.opened == 1  # the chunked answer left it reusable
                with pytest.raises(AnswerTooLarge):
                    await connections.get(url, {}, 5, 100)
                with pytest.raises(ValueError, match="not an http"):
                    await connections.get("ftp://127.0.0.1/x", {}, 5, 100)
            finally:
                connections.close()

    asyncio.run(scenario())


def test_a_staged_round_is_unseen_until_published():
    history = History(3)
    for at in (1.0, 2.0, 3.0):
        history.record(at, {"a": at * 10, "gone": at})
    history.stage(4.0, {"a": 40.0, "new": 4.0})
    # readers between stage and publish see the published rounds only
    assert history.timestamps() == [1.0, 2.0, 3.0]
    assert history.series("a") == [10.0, 20.0, 30.0]
    assert history.series("new") == [None, None, None]
    history.publish()
    assert history.timestamps() == [2.0, 3.0, 4.0]
    assert history.series("a") == [20.0, 30.0, 40.0]
    assert history.series("new") == [None, None, 4.0]
    assert history.series("gone") == [2.0, 3.0, None]
    for at in (5.0, 6.0, 7.0):
        history.record(at, {"a": at})
    assert history.series("gone") == []  # no round wrote it for a whole window
    history.publish()  # nothing staged: nothing changes
    assert history.timestamps() == [5.0, 6.0, 7.0]


def _nodes(count: int) -> list[NodeState]:
    nodes = []
    for n in range(count):
        data = reduce_summary(json.loads(summary(n)[0]))
        data["taken_at"] = 1.0e9
        nodes.append(NodeState(node_id(n), f"http://x/{n}", f"host-{n}", data=data))
    return nodes


def test_the_heatmap_is_encoded_once_per_changed_node():
    nodes = _nodes(4)
    parts: dict = {}
    first = build_view(nodes, 5, now=1.0e9, parts=parts)
    assert json.loads(heatmap_body(first)) == {"generated_at": 1.0e9, "nodes": first.heatmap}
    rows = {n: p.row_json for n, p in parts.items()}
    nodes[2].data = reduce_summary(json.loads(summary(2, watts=450.0)[0]))
    nodes[2].data["taken_at"] = 1.0e9
    nodes[2].data_version += 1
    second = build_view(nodes, 5, now=1.0e9 + 1, parts=parts)
    assert [n for n, p in parts.items() if p.row_json is not rows[n]] == [node_id(2)]
    body = json.loads(heatmap_body(second))
    assert body == {"generated_at": 1.0e9 + 1, "nodes": second.heatmap}
    power = {row["node_id"]: row["devices"][0]["power"] for row in body["nodes"]}
    assert power[node_id(2)] == 450.0 and power[node_id(1)] == 300.0


def test_summaries_share_equal_values_without_changing_them():
    one, other = (reduce_summary(json.loads(summary(n)[0])) for n in (1, 2))
    first, second = one["devices"][0], other["devices"][1]
    assert first["pcie"] is second["pcie"] and first["fabric"] is second["fabric"]
    assert first["uuid"] != second["uuid"]
    assert first["fabric"] == json.loads(summary(1)[0])["devices"][0]["fabric"]
    # values Python counts as equal but that read differently stay apart
    assert shared_values.share(1) is not shared_values.share(1.0)
    assert shared_values.share({"x": 1.0}) == {"x": 1.0}
    assert type(shared_values.share({"x": 1})["x"]) is int
    assert shared_values.share(True) is True


def test_summary_devices_are_slotted_records_read_like_the_snapshot_form():
    device = reduce_summary(json.loads(summary(3)[0]))["devices"][0]
    assert not hasattr(device, "__dict__")  # slots only: no per-device hash table
    assert device["power_watts"] == 300.0 and device["links"] == [] and device["holders"] == []
    assert device["links"] is type(device).DEFAULTS["links"]  # the shared default
    assert "links" in device and "no_such_field" not in device
    assert device.get("fabric")["clique_id"] == "1" and device.get("no_such_field") is None
    with pytest.raises(AttributeError):
        device["no_such_field"]
    with pytest.raises(AttributeError):
        device["no_such_field"] = 1
    whole = device.complete()
    assert json.loads(json.dumps(whole)) == whole  # the node page's answer form
    assert set(whole) == set(type(device).DEFAULTS) and whole["links"] == []
    assert device == whole


def test_idle_connections_beyond_the_cap_are_closed_oldest_first():
    async def scenario() -> None:
        async with Agents(summary) as one, Agents(summary) as two, Agents(summary) as three:
            connections = AgentConnections({}, ssl.create_default_context, max_idle=2)
            try:
                for agents in (one, two, three):  # three agents: the first one's goes
                    await connections.get(f"{agents.url}/n/0/api/v1/summary", {}, 5, 2**20)
                assert connections.opened == 3
                await connections.get(f"{three.url}/n/1/api/v1/summary", {}, 5, 2**20)
                assert connections.opened == 3  # the newest idle one was kept
                await connections.get(f"{one.url}/n/1/api/v1/summary", {}, 5, 2**20)
                assert connections.opened == 4  # the oldest was closed
            finally:
                connections.close()

    asyncio.run(scenario())


def test_what_is_kept_for_agents_that_left_is_forgotten():
    async def scenario() -> None:
        async with Agents(summary) as first, Agents(summary) as second:
            targets = first.targets(4) + [
                AgentTarget(node_id(n), f"{second.url}/n/{n}", f"host-{n}") for n in (10, 11)]
            collector = collector_of(targets)
            try:
                await collector.refresh()
                assert collector.connections().known == (6, 2)
                # The second host's nodes leave (scaled down); two new nodes join the first.
                targets[:] = first.targets(6)
                await collector.refresh()
                assert collector.connections().known == (6, 1)
                assert collector.last_round.failures == 0 and len(collector.nodes) == 6
                assert set(collector.view.statuses.values()) == {"ok"}
            finally:
                await collector.stop()

    asyncio.run(scenario())
