"""The Accelerators API: aggregation, findings, errors, token, and 1000 nodes.

Real input: one snapshot from a real agent on simulated hardware, then doctored
(a lost GPU, an idle holder, throttling, XID, ...) or copied into a fleet of
1000 synthetic nodes served over HTTP by a fake agent endpoint.
"""

from __future__ import annotations

import asyncio
import copy
import json
import subprocess
import sys
import time

import pytest
from agent_process import AgentProcess
from aiohttp import ClientTimeout
from aiohttp.test_utils import TestClient, TestServer
from doctored_nodes import IDLE_ACTOR, JOB, TASK, TOKEN, doctored, holder, set_value

from ray_accel.dashboard_module.aggregate import NodeState, build_view
from ray_accel.dashboard_module.api import AcceleratorsApi
from ray_accel.dashboard_module.collector import AgentTarget, Collector
from ray_accel.dashboard_module.fleet import Fleet, FleetServer, node_id
from ray_accel.dashboard_module.standalone import COOKIE, build_app
from ray_accel.exporter.node_view import reduce_snapshot


def _all_answering(doc: dict) -> bool:
    """Eight GPUs up, each with its links and their rates (a slow cycle can leave one stale)."""
    return len(doc["devices"]) == 8 and all(
        dev["up"] and dev["links"] and all(link["rates_bytes_per_s"] for link in dev["links"])
        for dev in doc["devices"])


@pytest.fixture(scope="module")
def agent():
    with AgentProcess("--simulate", "hgx-h200", "--interval", "0.5") as running:
        running.wait_for(_all_answering, timeout=60)
        yield running


@pytest.fixture(scope="module")
def template(agent) -> dict:
    return agent.wait_for(_all_answering, timeout=60)


def run(coroutine):
    return asyncio.run(coroutine)


def test_findings_cover_every_kind(template):
    node = NodeState(node_id(1), "http://x", "host-1", data=reduce_snapshot(doctored(template)))
    view = build_view([node], refresh_s=5)
    kinds = {f["kind"]: f for f in view.findings}
    assert set(kinds) == {"device_down", "idle_allocation", "throttling", "link_down",
                          "pcie_downtrained", "xid", "ecc_uncorrected"}
    assert kinds["idle_allocation"]["device_index"] == "2"
    assert "IdleHolder" in kinds["idle_allocation"]["message"]
    assert kinds["link_down"]["details"]["links"] == ["nvlink 3"]
    assert view.findings[0]["severity"] == "critical"
    summary = view.summary
    assert summary["devices"]["total"] == 8 and summary["devices"]["down"] == 1
    assert summary["devices"]["idle_allocations"] == 1
    assert summary["by_model"] == [{"vendor": "nvidia", "model": "NVIDIA H200", "devices": 8,
                                    "down": 1, "nodes": 1}]
    assert view.health[node.data["devices"][3]["uuid"]] == "warning"
    assert view.jobs[JOB]["idle_allocations"] == 1 and view.jobs[JOB]["actors"] == 2


@pytest.mark.parametrize("reason", ["hbm_thermal", "socket_thermal", "prochot", "vr_thermal",
                                    "hw_thermal_slowdown"])
def test_a_device_held_down_by_heat_is_a_throttling_finding_on_any_vendor(template, reason):
    doc = copy.deepcopy(template)
    doc["attribution"]["node_id"] = node_id(1)
    set_value(doc["devices"][5]["values"], "ray.accelerator.throttle.active",
              {"reason": reason}, 1)
    node = NodeState(node_id(1), "http://x", "host-1", data=reduce_snapshot(doc))
    throttling = [f for f in build_view([node], refresh_s=5).findings
                  if f["kind"] == "throttling"]
    assert [(f["device_index"], f["details"]["reasons"]) for f in throttling] == [
        ("5", [reason])]


def test_a_device_never_identified_is_named_by_its_vendor_in_findings(template):
    doc = copy.deepcopy(template)
    doc["attribution"]["node_id"] = node_id(1)
    lost = doc["devices"][2]  # lost before the agent started: no name, no UUID
    lost.update(up=False, model="unknown", uuid="nvidia-index-2", links=[], processes=[],
                values={})
    node = NodeState(node_id(1), "http://x", "host-1", data=reduce_snapshot(doc))
    (down,) = [f for f in build_view([node], refresh_s=5).findings
               if f["kind"] == "device_down"]
    assert down["message"] == "nvidia device #2 is not answering"


def test_a_lost_device_keeps_its_xid_and_ecc_findings(template):
    doc = copy.deepcopy(template)
    doc["taken_at"] = time.time()
    doc["attribution"]["node_id"] = node_id(1)
    lost = doc["devices"][2]
    # What the agent exports for a lost GPU: its counters at their last values, no gauges.
    lost.update(up=False, links=[], processes=[], values={})
    set_value(lost["values"], "ray.accelerator.xid.errors", {"xid": "79"}, 200)
    set_value(lost["values"], "hw.errors", {"error_type": "ecc_uncorrected"}, 4)
    node = NodeState(node_id(1), "http://x", "host-1", data=reduce_snapshot(doc))
    found = [f for f in build_view([node], refresh_s=5).findings
             if f["device_index"] == lost["index"]]
    assert {f["kind"] for f in found} == {"device_down", "xid", "ecc_uncorrected"}
    assert next(f for f in found if f["kind"] == "xid")["details"]["xid"] == {"79": 200}


async def _client(collector: Collector, token: str | None = TOKEN) -> TestClient:
    api = AcceleratorsApi(collector, "standalone", "http://127.0.0.1:8265")
    client = TestClient(TestServer(build_app(api, token)))
    await client.start_server()
    return client


def test_api_over_real_and_fake_agents(agent, template):
    doctored_body = json.dumps(doctored(template)).encode()

    async def scenario() -> None:
        async with FleetServer(lambda n: doctored_body if n == 1 else None) as fakes:
            targets = [AgentTarget(node_id(0), agent.url, "real-host"), fakes.target(1),
                       fakes.target(2)]  # node 2 hangs

            async def discover():
                return targets

            collector = Collector(discover, refresh_s=1, fetch_timeout_s=1)
            client = await _client(collector)
            try:
                started = time.monotonic()
                await collector.refresh()
                assert time.monotonic() - started < 10  # the hung agent cost one timeout
                auth = {"Authorization": f"Bearer {TOKEN}"}
                get = lambda path, **kw: client.get("/accelerators/api/" + path,  # noqa: E731
                                                    headers=auth, **kw)
                summary = await (await get("summary")).json()
                assert summary["nodes"] == {"total": 3, "ok": 2, "stale": 0, "unreachable": 1,
                                            "waiting": 0}
                assert summary["devices"]["total"] == 16
                assert summary["devices"]["idle_allocations"] == 1
                assert summary["history"]["timestamps"]

                node = await (await get(f"nodes/{node_id(0)}")).json()
                assert node["hostname"] == "real-host" and node["status"] == "ok"
                assert node["topology"]["matrix"][1][2] == "NV18"
                device = node["devices"][0]
                assert device["nvlink_transmit_bytes_per_s"] > 0
                assert device["links"][0]["transmit_bytes_per_s"] > 0

                jobs = await (await get("jobs")).json()
                assert [j["job_id"] for j in jobs["jobs"]] == [JOB]
                job = await (await get(f"jobs/{JOB}")).json()
                assert job["units"][0]["actor_class"] == "IdleHolder"
                assert job["units"][0]["idle"] is True
                actor = await (await get(f"actors/{IDLE_ACTOR}")).json()
                assert actor["devices"][0]["index"] == "2"
                task = await (await get(f"tasks/{TASK}")).json()
                assert task["task_name"] == "preprocess"
                findings = await (await get("findings", params={"kind": "xid"})).json()
                assert findings["total"] == 1 and findings["findings"][0]["device_index"] == "6"
                unreachable = await (await get("findings",
                                               params={"kind": "node_unreachable"})).json()
                assert unreachable["findings"][0]["node_id"] == node_id(2)
                heatmap = await (await get("heatmap")).json()
                assert {n["node_id"]: len(n["devices"]) for n in heatmap["nodes"]} == {
                    node_id(0): 8, node_id(1): 8, node_id(2): 0}
                history = await (await get("history", params={"node_id": node_id(0)})).json()
                assert history["utilization"]
                (known, *_) = [d["uuid"] for n in heatmap["nodes"]  # in the view: answered
                               for d in n["devices"]]
                device = await get("history", params={"uuid": known})
                assert device.status == 200
                assert len((await device.json())["utilization"]) == len(history["timestamps"])

                # clear 4xx errors
                for path, params, status, words in [
                    (f"nodes/{node_id(99)}", {}, 404, "unknown node"),
                    ("nodes/not-a-node", {}, 400, "malformed node id"),
                    (f"actors/{'d' * 32}", {}, 404, "unknown actor"),
                    ("actors/xyz", {}, 400, "malformed actor id"),
                    ("jobs/zz", {}, 400, "malformed job id"),
                    (f"tasks/{'e' * 48}", {}, 404, "unknown task"),
                    ("findings", {"severity": "bad"}, 400, "severity must be one of"),
                    ("findings", {"limit": "x"}, 400, "limit must be an integer"),
                    ("findings", {"limit": " 1"}, 400, "limit must be an integer"),
                    ("findings", {"offset": "1_0"}, 400, "offset must be an integer"),
                    ("findings", {"limit": "\u0663"}, 400, "limit must be an integer"),
                    ("summary", {"bogus": "1"}, 400, "unknown query parameter"),
                    ("nope", {}, 404, "no such endpoint"),
                    # a final newline is no part of an id (a `$` would let it through)
                    ("findings", {"node_id": node_id(0)[:-1] + "\n"}, 400, "malformed node id"),
                    ("history", {"job_id": "0100000\n"}, 400, "malformed job id"),
                    ("history", {"uuid": "GPU-x\n"}, 400, "malformed device uuid"),
                    ("history", {"uuid": "GPU-gone"}, 404, "no device GPU-gone in the cluster"),
                ]:
                    reply = await get(path, params=params)
                    body = await reply.json()
                    assert reply.status == status, (path, body)
                    assert words in body["error"], body
                reply = await client.post("/accelerators/api/summary", headers=auth)
                assert reply.status == 405
                for odd in ("%00", "index.html%00.js"):  # a NUL byte names no file
                    reply = await client.get(f"/accelerators/{odd}", headers=auth)
                    assert reply.status == 404 and (await reply.json())["status"] == 404

                # the token
                assert (await client.get("/accelerators/api/summary")).status == 401
                bad = await client.get("/accelerators/api/summary",
                                       headers={"Authorization": "Bearer wrong"})
                assert bad.status == 403
                assert (await client.get("/accelerators/")).status in (200, 503)  # public page
                login = await client.post("/accelerators/api/authenticate", headers=auth)
                assert login.status == 200 and COOKIE in login.cookies
                assert (await client.get("/accelerators/api/summary")).status == 200
            finally:
                await client.close()
                await collector.stop()

    run(scenario())


def test_an_agent_answering_for_another_node_is_not_taken_as_this_nodes(template):
    # Node 1's registered URL reaches node 0's agent (an agent on another host that
    # registered a loopback URL reaches the head's own; an address reused by a new node).
    fleet = Fleet(template)
    bodies = {0: fleet.text(0).encode(), 1: fleet.text(0).encode()}

    async def scenario() -> None:
        async with FleetServer(bodies.get) as fakes:
            async def discover():
                return [fakes.target(0), fakes.target(1)]

            collector = Collector(discover, refresh_s=5, fetch_timeout_s=5, spread=0.0)
            client = await _client(collector, token=None)
            try:
                await collector.refresh()
                summary = await (await client.get("/accelerators/api/summary")).json()
                page = await (await client.get(f"/accelerators/api/nodes/{node_id(1)}")).json()
            finally:
                await client.close()
                await collector.stop()
        assert summary["nodes"]["ok"] == 1 and summary["nodes"]["unreachable"] == 1
        assert summary["devices"]["total"] == 8  # node 0's eight, once
        wrong = collector.nodes[node_id(1)]
        assert wrong.data is None
        assert f"answers for node {node_id(0)[:16]}" in wrong.error
        assert page["status"] == "unreachable" and page["devices"] == []
        assert collector.nodes[node_id(0)].data["node_id"] == node_id(0)

    run(scenario())


def test_summary_of_1000_nodes(template):
    fleet = Fleet(doctored(template))
    bodies = [fleet.text(n).encode() for n in range(1000)]

    async def scenario() -> None:
        async with FleetServer(lambda n: bodies[n]) as fakes:
            targets = [fakes.target(n) for n in range(1000)]

            async def discover():
                return targets

            # no spread window: one round asks every node (new nodes paced, none left)
            collector = Collector(discover, refresh_s=5, fetch_timeout_s=30, spread=0.0)
            client = await _client(collector, token=None)
            try:
                started = time.monotonic()
                await collector.refresh()
                refreshed = time.monotonic() - started
                set_aside = collector._collection.frozen  # round_gc.py: a large cluster
                started = time.monotonic()
                reply = await client.get("/accelerators/api/summary",
                                         timeout=ClientTimeout(total=60))
                summary = await reply.json()
                answered = time.monotonic() - started
                heat = await client.get("/accelerators/api/heatmap",
                                        timeout=ClientTimeout(total=60))
                heatmap = await heat.json()
                print(f"\n1000 nodes: refresh {refreshed:.1f} s, summary {answered * 1000:.0f} ms,"
                      f" heatmap {len(await heat.read()) / 1e6:.1f} MB")
            finally:
                await client.close()
                await collector.stop()
        # every agent answered (the copies' snapshot time is fixed, so some may count stale)
        assert summary["nodes"]["total"] == 1000 and summary["nodes"]["unreachable"] == 0
        assert summary["devices"]["total"] == 8000 and summary["devices"]["down"] == 1000
        assert summary["devices"]["idle_allocations"] == 1000
        assert len(heatmap["nodes"]) == 1000
        assert set_aside and not collector._collection.frozen  # given back once stopped

    run(scenario())


def test_cli_refuses_bad_arguments(tmp_path):
    empty = tmp_path / "token"
    empty.write_text("")
    for args, words in [(["--port", "x"], "--port must be an integer"),
                        (["--token-file", str(empty)], "is empty"),
                        (["--refresh", "0"], "between 0.2 and 3600")]:
        result = subprocess.run([sys.executable, "-m", "ray_accel.exporter.cli", "dashboard",
                                 *args], capture_output=True, text=True, timeout=60)
        assert result.returncode == 2 and words in result.stderr, result.stderr


SPINNER_ACTOR = "d" * 32


def test_a_spinning_holder_is_a_finding_and_shows_in_the_heatmap_and_its_job(template):
    doc = copy.deepcopy(template)
    doc["taken_at"] = time.time()
    doc["attribution"]["node_id"] = node_id(1)
    for device in doc["devices"]:
        device.update(allocated=0.0, holders=[])
    spun = doc["devices"][3]
    spun.update(allocated=1.0, holders=[{**holder(104, SPINNER_ACTOR, "Spinner"),
                                         "spinning": True, "shared": False}])
    node = NodeState(node_id(1), "http://x", "host-1", data=reduce_snapshot(doc))
    view = build_view([node], refresh_s=5)
    (finding,) = [f for f in view.findings if f["kind"] == "spinning"]
    assert finding["device_index"] == spun["index"] and "Spinner" in finding["message"]
    assert finding["details"]["ray_actor_id"] == SPINNER_ACTOR
    cells = {c["index"]: c for n in view.heatmap for c in n["devices"]}
    assert cells[spun["index"]]["spinning"] and not cells["0"]["spinning"]
    assert "sm" in cells[spun["index"]]["act"]  # the simulated H200s measure GPM activity
    (use,) = view.units[view.actors[SPINNER_ACTOR]]["devices"]
    assert use["spinning"] and not use["shared"]
    assert use["activity"]["sm"] == cells[spun["index"]]["act"]["sm"]
