"""The compact per-node summary: served by a real agent with ETag/304, honoured by the
collector over real HTTP, agreeing with the full snapshot of the same cycle, and the
node page's on-demand full snapshot.
"""

from __future__ import annotations

import asyncio
import json
import math
import time

import pytest
from agent_process import AgentProcess, write_scenario
from aiohttp.test_utils import TestClient, TestServer, make_mocked_request
from doctored_nodes import TOKEN, doctored, set_value
from transfer_docs import abort, head_snapshot, transfer_tasks

from ray_accel.dashboard_module.aggregate import NodeState, build_view
from ray_accel.dashboard_module.api import AcceleratorsApi
from ray_accel.dashboard_module.collector import SUMMARY_RETRY_ROUNDS, AgentTarget, Collector
from ray_accel.dashboard_module.fleet import Fleet, FleetServer, node_id
from ray_accel.dashboard_module.fleet_responder import FleetResponder
from ray_accel.dashboard_module.node_detail import NodeDetails
from ray_accel.dashboard_module.standalone import build_app
from ray_accel.exporter.node_view import (
    CYCLE_HEADER,
    NOW_HEADER,
    TAKEN_AT_HEADER,
    NotASnapshot,
    reduce_snapshot,
    reduce_summary,
)
from ray_accel.exporter.simulate.scenario import load_scenario
from ray_accel.exporter.sinks.summary import encode, summary_document

# How far a summary's rounding may move a value the views show (exporter/sinks/summary.py
# rounds power and temperature to 1, memory to 1 MiB); every other value must be equal.
TOLERANCE = {"power": 0.55, "power_watts": 0.5, "watts": 8 * 0.5, "temp": 0.55,
             "temperature_celsius": 0.5, "memory_used_bytes": 2**19, "used_bytes": 8 * 2**19,
             "mem": 0.0015}


def assert_agree(full, summary, key: str = "") -> None:
    """`summary` equals `full` but for the rounding TOLERANCE allows, key by key."""
    if isinstance(full, dict):
        assert isinstance(summary, dict) and set(full) == set(summary), (key, full, summary)
        for name in full:
            assert_agree(full[name], summary[name], name)
    elif isinstance(full, list):
        assert isinstance(summary, list) and len(full) == len(summary), (key, full, summary)
        for a, b in zip(full, summary, strict=True):
            assert_agree(a, b, key)
    elif isinstance(full, float) and isinstance(summary, int | float) and key in TOLERANCE:
        assert abs(full - summary) <= TOLERANCE[key], (key, full, summary)
    else:
        assert full == summary, (key, full, summary)


@pytest.fixture(scope="module")
def agent():
    """A real agent whose cycle comes every 30 s: one snapshot holds for a whole test."""
    with AgentProcess("--simulate", "hgx-h200", "--interval", "30") as running:
        # the peers (and so the topology matrix) come with the second cycle
        running.wait_for(lambda d: len(d["devices"]) == 8 and all(
            device["peers"] for device in d["devices"]), timeout=90)
        yield running


@pytest.fixture(scope="module")
def template(agent) -> dict:
    return agent.json("/api/v1/snapshot")


def test_agent_serves_304_for_an_unchanged_summary(agent):
    status, headers, body = agent.get("/api/v1/summary")
    assert status == 200, body
    summary = json.loads(body)
    assert summary["kind"] == "ray-accel.node-summary" and len(summary["devices"]) == 8
    assert headers["Cache-Control"] == "no-cache"
    etag = headers["ETag"]
    assert etag == f'"{summary["version"]}"'
    assert float(headers[TAKEN_AT_HEADER]) > 0 and int(headers[CYCLE_HEADER]) >= 1
    assert float(headers[NOW_HEADER]) >= float(headers[TAKEN_AT_HEADER])  # answered after

    def conditional(tag: str) -> tuple[int, dict, bytes]:
        import urllib.error
        import urllib.request
        request = urllib.request.Request(agent.url + "/api/v1/summary",
                                         headers={"If-None-Match": tag})
        try:
            with urllib.request.urlopen(request, timeout=5) as reply:
                return reply.status, dict(reply.headers), reply.read()
        except urllib.error.HTTPError as error:
            return error.code, dict(error.headers), error.read()

    status, again, body = conditional(etag)
    assert again[CYCLE_HEADER] == headers[CYCLE_HEADER]  # the same cycle: nothing changed
    assert status == 304 and body == b"" and again["ETag"] == etag
    status, _, body = conditional('"not-this-version"')
    assert status == 200 and json.loads(body) == summary
    # bad input gets a clear error and changes nothing
    status, _, body = agent.get("/api/v1/summary?since=1")
    assert status == 400 and b"unknown query parameter" in body
    # the summary is much smaller than the snapshot it summarises
    assert len(agent.get("/api/v1/snapshot")[2]) > 10 * len(agent.get("/api/v1/summary")[2])


def _link_down(name: str) -> dict:
    """Shipped scenario `name` with GPU 2's first NVLink down."""
    scenario = load_scenario(name)
    device = scenario["devices"][2]
    device["nvlinks"] = [dict(link) for link in device.get("nvlinks")
                         or scenario["device_defaults"]["nvlinks"]]
    device["nvlinks"][0]["state"] = False
    return {**scenario, "name": f"{name}-link-down"}


# Scenarios whose summaries carry each part the cut keeps: a link down, a device lost (XID 79,
# its errors), MIG, a fabric, AMD's own series, processes and holders' stand-ins.
CUT_SCENARIOS = {
    "hgx-h200, a link down": lambda: _link_down("hgx-h200"),
    "gpu-lost, after the loss": lambda: {**load_scenario("gpu-lost"), "freeze_at_s": 25},
    "gb200-nvl72": lambda: load_scenario("gb200-nvl72"),
    "a100-mig": lambda: load_scenario("a100-mig"),
    "mi300x-8": lambda: load_scenario("mi300x-8"),
}


@pytest.mark.parametrize("scenario", sorted(CUT_SCENARIOS))
def test_the_agents_summary_is_the_summary_of_its_whole_snapshot(tmp_path, scenario):
    """The agent makes its summary of a cut of the snapshot (exporter/sinks/summary.py's
    `summary_cut`): what it serves is byte for byte the summary of its whole snapshot."""
    path = write_scenario(tmp_path, CUT_SCENARIOS[scenario]())
    with AgentProcess("--simulate", path, "--interval", "3") as running:
        # the second cycle: GPM's activity and the peers come with it
        running.wait_for(lambda d: d["cycle"] >= 2, timeout=90)
        for _ in range(5):  # the two answers of one cycle
            status, headers, body = running.get("/api/v1/summary")
            whole = running.json("/api/v1/snapshot")
            if status == 200 and headers[CYCLE_HEADER] == str(whole["cycle"]):
                break
        assert headers[CYCLE_HEADER] == str(whole["cycle"]), (headers, whole["cycle"])
    assert body == encode(summary_document(whole))[0]
    devices = json.loads(body)["devices"]
    if "link down" in scenario:
        assert devices[2]["links"] == [{"link_type": "nvlink", "index": 0, "up": False}]
        assert not any("links" in d for i, d in enumerate(devices) if i != 2)
    if "gpu-lost" in scenario:
        assert devices[2]["up"] is False and devices[2]["errors"]


def test_summary_is_guarded_like_the_snapshot(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    with AgentProcess("--simulate", "l4-pcie", "--interval", "30",
                      "--token-file", str(token_file)) as running:
        for path in ("/api/v1/snapshot", "/api/v1/summary"):
            status, headers, _ = running.get(path)
            assert status == 401 and "Bearer" in headers["WWW-Authenticate"], path


def _view_parts(view) -> dict:
    return {"summary": view.summary, "heatmap": view.heatmap, "findings": view.findings,
            "health": view.health, "jobs": view.jobs, "units": view.units,
            "transfers": view.transfers.answer()}


def test_summary_and_snapshot_of_one_cycle_agree(template):
    doc = doctored(template)
    # a spinning holder and GPM activity travel too
    doc["devices"][0]["holders"][0]["spinning"] = True
    for engine, ratio in (("sm", 0.0312), ("graphics", 0.9871)):
        set_value(doc["devices"][0]["values"], "ray.accelerator.activity", {"engine": engine},
                  ratio)
    set_value(doc["devices"][0]["values"], "ray.accelerator.device.spinning", {}, 1)
    # and transfers (one stalled, one not, a recent abort) and a suspected hung collective
    doc["transfers"] = head_snapshot(transfer_tasks(0, 12) + transfer_tasks(1, 2),
                                     (abort(6, 60),))["transfers"]
    doc["devices"][3]["collective_suspected_stall"] = True
    body, _ = encode(summary_document(doc))
    summary = json.loads(body)
    assert summary["devices"][0]["holders"][0]["spinning"] is True
    activity = summary["devices"][0]["activity"]
    assert (activity["graphics"], activity["sm"]) == (0.99, 0.03)  # rounded to 0.01
    full = reduce_snapshot(doc)
    compact = reduce_summary(summary)
    compact["taken_at"] = full["taken_at"]  # a header of the same answer
    assert compact["devices"][0]["spinning"] == full["devices"][0]["spinning"] == 1.0
    for got, want in zip(compact["devices"], full["devices"], strict=True):
        assert got["holders"] == want["holders"]
        assert got["spinning"] == want["spinning"]
        assert set(got["activity"]) == set(want["activity"])
        assert all(abs(got["activity"][k] - want["activity"][k]) <= 0.005
                   for k in want["activity"])
    now = full["taken_at"]
    one = build_view([NodeState(node_id(1), "u", "h", data=full)], 5, now=now)
    other = build_view([NodeState(node_id(1), "u", "h", data=compact)], 5, now=now)
    assert {f["kind"] for f in one.findings} >= {"device_down", "idle_allocation", "xid",
                                                 "link_down", "ecc_uncorrected",
                                                 "transfer_stalled", "transfer_aborted",
                                                 "collective_stall"}
    assert len(one.transfers.transfers) == 2
    assert_agree(_view_parts(one), _view_parts(other))


def test_a_snapshot_whose_device_has_no_uuid_is_refused():
    for devices in ([{"uuid": 1}], [{"uuid": None}], [{}], [5]):
        with pytest.raises(NotASnapshot):
            reduce_snapshot({"devices": devices})


def test_a_malformed_summary_is_refused():
    for bad in ([], {"kind": "ray-accel.node-summary"}, {"devices": []},
                {"kind": "ray-accel.node-summary", "devices": [5]}):
        with pytest.raises(NotASnapshot):
            reduce_summary(bad)


# A device field of another kind than the summary's writer sends, or a number that is not
# finite: each makes the summary malformed, naming the field.
WRONG_FIELDS = [
    ("utilization", "high"), ("utilization", [1]), ("utilization", math.nan),
    ("utilization", math.inf), ("memory_used_bytes", "x"), ("power_watts", {"a": 1}),
    ("temperature_celsius", True), ("up", "no"), ("stale", 1), ("model", None),
    ("vendor", ["nvidia"]), ("pcie", "x16"), ("pcie", {"width": "16"}), ("fabric", [1]),
    ("throttle_reasons", "hw_slowdown"), ("xid_errors", [79]), ("xid_errors", {"79": "many"}),
    ("ecc_uncorrected", "1"), ("activity", "busy"), ("activity", {"sm": -math.inf}),
    ("holders", {"pid": 1}), ("holders", ["worker"]), ("holders", [{"ray_job_id": 1}]),
    ("holders", [{"fraction": math.nan}]), ("processes", [{"pid": "1"}]),
    ("links", [{"link_type": 5}]), ("errors", {"gpu_is_lost": 1}),
]


@pytest.mark.parametrize(("field", "wrong"), WRONG_FIELDS)
def test_a_summary_device_field_of_another_kind_makes_the_summary_malformed(
        template, field, wrong):
    body, _ = Fleet(template).summary(1)
    doc = json.loads(body)
    assert reduce_summary(doc)["devices"]  # as the agent sent it
    doc["devices"][0][field] = wrong
    with pytest.raises(NotASnapshot, match=f"device field {field} holds"):
        reduce_summary(doc)


def test_a_summary_whose_interval_or_transfer_time_is_not_a_number_is_malformed(template):
    body, _ = Fleet(template).summary(1)
    for change in ({"interval_s": math.inf}, {"interval_s": "1"},
                   {"transfers": {"by_job": {"01000000": {"in_flight": 1, "stalled": 0,
                                                          "since": math.nan}}}}):
        with pytest.raises(NotASnapshot):
            reduce_summary({**json.loads(body), **change})


async def _collector(targets, **options) -> Collector:
    async def discover():
        return targets

    return Collector(discover, refresh_s=1, fetch_timeout_s=2, spread=0.0, **options)


# The benchmarks' fake agents answer from FleetResponder; it must answer as FleetServer.
FAKE_AGENTS = pytest.mark.parametrize("serve", [FleetServer, FleetResponder])


@FAKE_AGENTS
def test_collector_sends_conditional_requests_and_rebuilds_changed_nodes(template, serve):
    fleet = Fleet(template)
    generation = dict.fromkeys(range(6), 0)

    async def scenario() -> None:
        async with serve(lambda n: fleet.text(n).encode(),
                         lambda n: fleet.summary(n, generation[n])) as fakes:
            collector = await _collector([fakes.target(n) for n in range(6)])
            try:
                await collector.refresh()
                first = collector.last_round
                assert (first.summaries, first.not_modified, first.rebuilt_nodes) == (6, 0, 6)
                await collector.refresh()
                second = collector.last_round
                assert (second.summaries, second.not_modified) == (0, 6)
                assert second.body_bytes == 0 and second.rebuilt_nodes == 0
                before = {c["node_id"]: c["devices"][0]["power"]
                          for c in collector.view.heatmap}
                generation[2] = generation[4] = 3  # two nodes draw 3 W more
                await collector.refresh()
                third = collector.last_round
                assert (third.summaries, third.not_modified, third.rebuilt_nodes) == (2, 4, 2)
                after = {c["node_id"]: c["devices"][0]["power"] for c in collector.view.heatmap}
                assert {n for n in after if after[n] != before[n]} == {node_id(2), node_id(4)}
                assert after[node_id(2)] == before[node_id(2)] + 3
                assert fakes.requests["snapshot"] == 0  # rounds never pull a full snapshot
                assert fakes.requests["not_modified"] == 10
            finally:
                await collector.stop()

    asyncio.run(scenario())


@FAKE_AGENTS
def test_a_silent_agent_is_unreachable_and_keeps_its_last_summary(template, serve):
    fleet = Fleet(template)
    silent: set[int] = set()

    async def scenario() -> None:
        async with serve(lambda n: fleet.text(n).encode(),
                         lambda n: None if n in silent else fleet.summary(n)) as fakes:
            collector = await _collector([fakes.target(n) for n in range(3)])
            collector.fetch_timeout_s = 0.5
            try:
                await collector.refresh()
                kept = collector.nodes[node_id(1)].data
                silent.add(1)
                await collector.refresh()
                view = collector.view
                assert view.statuses[node_id(1)] == "unreachable"
                assert collector.nodes[node_id(1)].data is kept
                row = next(r for r in view.heatmap if r["node_id"] == node_id(1))
                assert len(row["devices"]) == 8
                assert {c["health"] for c in row["devices"]} == {"stale"}
                assert view.summary["devices"]["total"] == 24
                assert view.summary["nodes"]["unreachable"] == 1
                assert [f["node_id"] for f in view.findings
                        if f["kind"] == "node_unreachable"] == [node_id(1)]
                silent.clear()  # it answers again: a conditional request finds it unchanged
                await collector.refresh()
                assert collector.view.statuses[node_id(1)] == "ok"
                assert collector.last_round.not_modified == 3
            finally:
                await collector.stop()

    asyncio.run(scenario())


@FAKE_AGENTS
def test_an_agent_whose_sampling_stopped_is_stale_and_keeps_its_last_summary(template, serve):
    fleet = Fleet(template)
    stuck_since: dict[int, float] = {}

    async def scenario() -> None:
        async with serve(lambda n: fleet.text(n).encode(), lambda n: fleet.summary(n),
                         lambda n: stuck_since.get(n, time.time())) as fakes:
            collector = await _collector([fakes.target(n) for n in range(2)])
            try:
                await collector.refresh()
                kept = collector.nodes[node_id(1)].data
                stuck_since[1] = time.time() - 300  # it answers, with a snapshot 10 cycles old
                await collector.refresh()
                view = collector.view
                assert collector.last_round.not_modified == 2
                assert view.statuses == {node_id(0): "ok", node_id(1): "stale"}
                assert collector.nodes[node_id(1)].data is kept
                row = next(r for r in view.heatmap if r["node_id"] == node_id(1))
                assert [c["health"] for c in row["devices"]] == ["stale"] * 8
                stale = [f for f in view.findings if f["kind"] == "node_stale"]
                assert [f["node_id"] for f in stale] == [node_id(1)]
                assert "300 s old" in stale[0]["message"]
            finally:
                await collector.stop()

    asyncio.run(scenario())


def test_an_agent_without_the_summary_gets_its_snapshot_fetched(agent, template):
    fleet = Fleet(template)

    async def scenario() -> None:
        async with FleetServer(lambda n: fleet.text(n).encode()) as older:  # no summary: 404
            collector = await _collector([AgentTarget(node_id(0), agent.url, "real"),
                                          older.target(1)])
            try:
                await collector.refresh()
                await collector.refresh()
                assert collector.nodes[node_id(1)].has_summary is False
                assert collector.nodes[node_id(0)].has_summary is True
                assert older.requests["summary"] == 1 and older.requests["snapshot"] == 2
                assert collector.last_round.snapshots == 1
                assert collector.last_round.not_modified == 1  # the real agent's 304
                assert set(collector.view.statuses.values()) == {"ok"}
                assert collector.view.summary["devices"]["total"] == 16
                collector.rounds += SUMMARY_RETRY_ROUNDS  # much later: asked again once
                await collector.refresh()
                assert older.requests["summary"] == 2 and older.requests["snapshot"] == 3
            finally:
                await collector.stop()

    asyncio.run(scenario())


@FAKE_AGENTS
def test_node_page_fetches_the_full_snapshot_on_demand_and_briefly_caches_it(template, serve):
    fleet = Fleet(template)
    silent: set[int] = set()
    silent_summaries: set[int] = set()

    async def scenario() -> None:
        async with serve(lambda n: None if n in silent else fleet.text(n).encode(),
                         lambda n: None if n in silent_summaries else fleet.summary(n)) as fakes:
            collector = await _collector([fakes.target(n) for n in range(4)])
            api = AcceleratorsApi(collector, "standalone")
            client = TestClient(TestServer(build_app(api, None)))
            await client.start_server()
            try:
                await collector.stop()
                await collector.refresh()
                assert fakes.requests["snapshot"] == 0
                page = f"/accelerators/api/nodes/{node_id(2)}"
                node = await (await client.get(page)).json()
                assert fakes.requests["snapshot"] == 1  # that node's only
                assert node["detail"] == {"source": "snapshot", "error": ""}
                device = node["devices"][0]
                assert device["links"] and device["peers"] and device["facts"]
                assert node["topology"]["matrix"][1][2] == "NV18"
                again = await (await client.get(page)).json()
                assert fakes.requests["snapshot"] == 1  # within 2 s: the cached copy
                assert again["devices"] == node["devices"]
                collector.details.ttl_s = 0.0  # expired: fetched again
                await client.get(page)
                assert fakes.requests["snapshot"] == 2
                # an agent that does not give its snapshot: the page shows its summary
                silent.add(3)
                collector.fetch_timeout_s = 0.5
                collector._session = None  # a session with the shorter timeout
                reply = await client.get(f"/accelerators/api/nodes/{node_id(3)}")
                body = await reply.json()
                assert reply.status == 200
                assert body["detail"]["source"] == "summary" and body["detail"]["error"]
                assert len(body["devices"]) == 8 and body["devices"][0]["links"] == []
                # an agent that did not answer the last round is not asked: the page says why
                silent_summaries.add(1)
                await collector.refresh()
                asked = fakes.requests["snapshot"]
                body = await (await client.get(f"/accelerators/api/nodes/{node_id(1)}")).json()
                assert fakes.requests["snapshot"] == asked
                assert body["status"] == "unreachable" and body["detail"] == {
                    "source": "summary", "error": collector.nodes[node_id(1)].error}
                assert body["detail"]["error"].startswith("no answer within")
                assert len(body["devices"]) == 8
            finally:
                await client.close()
                await collector.stop()

    asyncio.run(scenario())


def test_node_details_share_one_request_and_limit_those_in_flight():
    in_flight, most, calls = 0, 0, []

    async def fetch_full(node: NodeState) -> dict:
        nonlocal in_flight, most
        calls.append(node.node_id)
        in_flight += 1
        most = max(most, in_flight)
        await asyncio.sleep(0.05)
        in_flight -= 1
        return {"node_id": node.node_id, "devices": []}

    async def scenario() -> None:
        details = NodeDetails(fetch_full, ttl_s=60, max_in_flight=8)
        nodes = [NodeState(node_id(n), f"http://n{n}", data={"devices": []}, detailed=False)
                 for n in range(20)]
        answers = await asyncio.gather(*(details.get(n) for n in nodes for _ in range(3)))
        assert sorted(calls) == sorted(n.node_id for n in nodes)  # one request per node
        assert most == 8
        assert [a.data["node_id"] for a in answers] == [n.node_id for n in nodes for _ in
                                                       range(3)]
        full = NodeState(node_id(99), "http://full", data={"devices": [1]})
        assert (await details.get(full)).data is full.data  # a full snapshot already
        assert details.fetches == 20

    asyncio.run(scenario())


def test_fetches_spread_over_the_interval_at_stable_offsets():
    from ray_accel.dashboard_module.collector import start_offset

    offsets = [start_offset(node_id(n), 3.0) for n in range(1000)]
    assert offsets == [start_offset(node_id(n), 3.0) for n in range(1000)]
    assert all(0 <= o < 3.0 for o in offsets)
    thirds = [sum(1 for o in offsets if k <= o < k + 1) for k in range(3)]
    assert min(thirds) > 250  # spread, not one burst
    assert start_offset(node_id(1), 0.0) == 0.0
    with pytest.raises(ValueError, match="spread"):
        Collector(lambda: None, spread=1.5)


def test_history_keeps_values_and_forgets_keys_no_round_wrote():
    from ray_accel.dashboard_module.history import History

    history = History(3)
    history.record(1.0, {"a": 0.25, "b": 150754820096.0, "c": None})
    history.record(2.0, {"a": 0.5})
    assert history.series("a") == [0.25, 0.5]
    assert history.series("b") == [150754800000.0, None]  # seven significant digits
    assert history.series("c") == [None, None]
    history.record(3.0, {"a": 1})
    history.record(4.0, {"a": 2})
    assert history.timestamps() == [2.0, 3.0, 4.0]
    assert history.series("a") == [0.5, 1.0, 2.0]
    assert history.series("b") == []  # not written for a whole window: forgotten


@FAKE_AGENTS
def test_an_agent_with_a_malformed_summary_costs_only_its_own_node(template, serve):
    fleet = Fleet(template)
    broken: dict[int, tuple[str, object]] = {}

    def summary(number: int) -> tuple[bytes, str]:
        body, etag = fleet.summary(number)
        if number not in broken:
            return body, etag
        field, wrong = broken[number]
        doc = json.loads(body)
        doc["devices"][0][field] = wrong
        return json.dumps(doc).encode(), etag + "-broken"  # NaN as JSON's NaN, as Python's

    async def scenario() -> None:
        async with serve(lambda n: fleet.text(n).encode(), summary) as fakes:
            collector = await _collector([fakes.target(n) for n in range(3)])
            api = AcceleratorsApi(collector, "standalone")
            try:
                await collector.refresh()
                kept = collector.nodes[node_id(1)].data
                for field, wrong in (("utilization", "high"), ("utilization", math.inf),
                                     ("holders", {"pid": 1})):
                    broken[1] = (field, wrong)
                    rounds = collector.rounds
                    await collector.refresh()
                    view = collector.view
                    assert collector.rounds == rounds + 1  # the round was built and published
                    assert view.statuses[node_id(1)] == "unreachable"
                    assert f"device field {field} holds" in collector.nodes[node_id(1)].error
                    assert collector.nodes[node_id(1)].data is kept
                    assert view.statuses[node_id(0)] == view.statuses[node_id(2)] == "ok"
                    answer = api.summary(make_mocked_request("GET", "/accelerators/api/summary"))
                    json.loads(answer.body, parse_constant=_no_constant)  # valid JSON
                broken.clear()
                await collector.refresh()
                assert collector.view.statuses[node_id(1)] == "ok"
            finally:
                await collector.stop()

    asyncio.run(scenario())


def _no_constant(name: str) -> None:
    raise AssertionError(f"the dashboard answered JSON with {name}")
