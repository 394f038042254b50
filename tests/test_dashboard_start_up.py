"""A fresh head's first rounds: the view lists the whole cluster before any node answers,
nodes never asked are admitted at the rate the head parses them (the rest wait for a
later round, each node's summary fetched whole once), the parts of the nodes that
answered are made while the round's fetches still run and reused by its view, and the
view's rows are encoded as compact JSON with non-finite numbers absent.

Agents here are small aiohttp servers (tests/test_dashboard_collector_rounds.py) whose
answers can be held back: what is under test is how the head paces and publishes.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections import Counter

import pytest
from aiohttp import web
from test_dashboard_collector_rounds import Agents, summary

from ray_accel.dashboard_module import fleet_agents
from ray_accel.dashboard_module.aggregate import NodeState, build_view, prepare_parts
from ray_accel.dashboard_module.collector import NEW_NODES_BACKLOG, Collector
from ray_accel.dashboard_module.json_encode import encode_compact
from ray_accel.exporter.node_view import reduce_summary

NODES = 20
IN_FLIGHT = 2  # so that NEW_NODES_BACKLOG * IN_FLIGHT new nodes fill the backlog
WAIT_S = 30.0  # a limit for a stuck condition, not a speed target


class HeldAgents(Agents):
    """`Agents` whose answers wait until `release` is set; counts 200s per node."""

    def __init__(self) -> None:
        super().__init__(summary)
        self.release = asyncio.Event()
        self.whole: Counter[int] = Counter()  # node -> 200 answers

    async def _summary(self, request: web.Request) -> web.StreamResponse:
        await self.release.wait()
        reply = await super()._summary(request)
        if reply.status == 200:
            self.whole[int(request.match_info["number"])] += 1
        return reply


def collector_of(agents: Agents, spread: float) -> Collector:
    targets = agents.targets(NODES)

    async def discover():
        return targets

    return Collector(discover, refresh_s=0.4, fetch_timeout_s=WAIT_S, spread=spread,
                     max_in_flight=IN_FLIGHT, token=lambda: None)


async def until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"not within {WAIT_S} s: {what}"
        await asyncio.sleep(0.01)


def test_new_nodes_beyond_the_backlog_wait_for_later_rounds_and_every_one_arrives():
    async def scenario() -> None:
        async with HeldAgents() as agents:
            collector = collector_of(agents, spread=0.5)
            try:
                first = asyncio.ensure_future(collector.refresh())
                # Before any agent answers, the view lists every node, none with data.
                await until(lambda: collector.view.summary["nodes"]["total"] == NODES,
                            "a view listing the cluster during the first round")
                assert collector.view.summary["nodes"]["waiting"] == NODES
                assert collector.rounds == 0 and collector.provisional_views == 1
                # The backlog's worth started; the others were left once the window ended.
                backlog = NEW_NODES_BACKLOG * IN_FLIGHT
                await until(lambda: collector.round_in_progress is not None
                            and collector.round_in_progress.deferred == NODES - backlog,
                            "the first round leaving the nodes beyond the backlog")
                agents.release.set()
                await first
                stats = collector.last_round
                assert (stats.requests, stats.summaries, stats.deferred) == \
                    (backlog, backlog, NODES - backlog)
                counts = collector.view.summary["nodes"]
                assert (counts["ok"], counts["waiting"]) == (backlog, NODES - backlog)
                # Later rounds ask the known nodes again (304s) and admit the rest.
                for _ in range(10):
                    await collector.refresh()
                    if collector.view.summary["nodes"]["ok"] == NODES:
                        break
                assert collector.view.summary["nodes"]["ok"] == NODES
                assert collector.last_round.deferred == 0
                assert agents.whole == Counter(range(NODES))  # each summary pulled once
                assert agents.answered["not_modified"] > 0
                assert collector.provisional_views == 1  # only the first round had new nodes
            finally:
                agents.release.set()
                await collector.stop()

    asyncio.run(scenario())


def test_without_a_spread_window_new_nodes_are_paced_but_all_asked_in_one_round():
    async def scenario() -> None:
        async with HeldAgents() as agents:
            agents.release.set()
            collector = collector_of(agents, spread=0.0)
            try:
                await collector.refresh()
                assert collector.last_round.deferred == 0
                assert collector.last_round.summaries == NODES
                assert collector.view.summary["nodes"]["ok"] == NODES
            finally:
                await collector.stop()

    asyncio.run(scenario())


def _nodes(count: int, now: float) -> list[NodeState]:
    nodes = []
    for number in range(count):
        data = reduce_summary(json.loads(summary(number)[0]))
        data["taken_at"] = now
        nodes.append(NodeState(data["node_id"], f"http://x/{number}", f"host-{number}",
                               data=data, data_version=1))
    return nodes


def test_parts_made_ahead_are_the_ones_the_view_uses_and_change_nothing():
    now = time.time()
    nodes = _nodes(6, now)
    parts: dict = {}
    prepare_parts(nodes[:4], 1.0, parts, now)
    ahead = {node_id: parts[node_id] for node_id in parts}
    assert len(ahead) == 4
    view = build_view(nodes, 1.0, now, parts)
    assert all(parts[node_id] is part for node_id, part in ahead.items())  # reused
    plain = build_view(_nodes(6, now), 1.0, now, {})
    assert view.summary == plain.summary
    assert view.heatmap_rows == plain.heatmap_rows
    # A node whose data changed after its part was made gets a new one.
    nodes[0].data = reduce_summary(json.loads(summary(0, watts=450.0)[0]))
    nodes[0].data["taken_at"] = now
    nodes[0].data_version += 1
    build_view(nodes, 1.0, now, parts)
    assert parts[nodes[0].node_id] is not ahead[nodes[0].node_id]
    assert parts[nodes[1].node_id] is ahead[nodes[1].node_id]


def test_compact_encoding_reads_back_as_the_json_module_writes_and_drops_non_finite():
    value = {"node": "n-é", "util": [0.125, None, 1e16, 1e-7], "ok": True, "count": 2**70}
    assert json.loads(encode_compact(value)) == json.loads(json.dumps(value))
    assert b" " not in encode_compact(value)
    assert json.loads(encode_compact({"power": math.nan, "temp": [math.inf, 1.5]})) == \
        {"power": None, "temp": [None, 1.5]}


def test_fake_agents_refuse_a_share_outside_their_count():
    for share in ("2/2", "1", "a/b"):
        with pytest.raises(SystemExit):
            fleet_agents.main(["fleet_agents", "10", "--share", share])
