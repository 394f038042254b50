"""The Transfers view of the Accelerators tab: the node summary's compact transfers and the
head's cluster-wide view, its findings and its endpoint.

Input: node snapshots built by the agent's own code (pairing of hand-made State API
tasks, the snapshot document, the summary), served over real HTTP by fake agents
where the collector and the API take part.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer
from transfer_docs import (
    HEAD,
    JOB,
    NOW,
    OTHER_JOB,
    WORKER,
    abort,
    actor,
    head_snapshot,
    transfer_tasks,
    worker_snapshot,
)

from ray_accel.dashboard_module import transfers_view
from ray_accel.dashboard_module.aggregate import FINDING_KINDS, NodeState, build_view
from ray_accel.dashboard_module.api import AcceleratorsApi
from ray_accel.dashboard_module.collector import Collector
from ray_accel.dashboard_module.fleet import FleetServer, node_id
from ray_accel.dashboard_module.standalone import build_app
from ray_accel.dashboard_module.transfers_view import ABORT_WINDOW_S, LastKnownDevices
from ray_accel.exporter.node_transfers import MAX_LISTED
from ray_accel.exporter.node_view import reduce_snapshot, reduce_summary
from ray_accel.exporter.sinks.summary import encode, summary_document

TOKEN = "transfers-token"


def summary_of(doc: dict) -> dict:
    return json.loads(encode(summary_document(doc))[0])


def nodes(head: dict, worker: dict) -> list[NodeState]:
    return [NodeState(HEAD, "u0", "head-host", data=head),
            NodeState(WORKER, "u1", "worker-host", data=worker)]


def test_the_summary_lists_the_oldest_transfers_and_counts_the_rest():
    tasks = [t for n in range(120) for t in transfer_tasks(n, 5 + n / 10)]  # 50 stalled (>10 s)
    doc = head_snapshot(tasks)
    assert len(doc["transfers"]["transfers"]) == 120
    summary = summary_of(doc)
    compact = summary["transfers"]
    assert len(compact["transfers"]) == MAX_LISTED and compact["dropped"] == 120 - MAX_LISTED
    assert compact["by_job"][JOB]["in_flight"] == 120  # the counts cover every transfer
    assert compact["by_job"][JOB]["stalled"] == sum(t["stalled"] for t in
                                                    doc["transfers"]["transfers"]) == 69
    ages = [NOW - t["since"] for t in compact["transfers"]]
    assert ages == sorted(ages, reverse=True) and min(ages) > 5 + 69 / 10  # the oldest kept
    assert compact["aborts"] == {}  # jobs without an abort are left out
    assert compact["pairs"] is True
    # bounded: 120 or 12,000 transfers cost the summary the same
    many = summary_of(head_snapshot([t for n in range(1200) for t in transfer_tasks(n, 20)]))
    assert len(json.dumps(many)) < len(json.dumps(summary)) * 1.05
    assert many["transfers"]["dropped"] == 1200 - MAX_LISTED
    # the same cycle's summary and full snapshot agree
    assert reduce_summary(summary)["transfers"] == reduce_snapshot(doc)["transfers"]
    # a node without transfers carries none
    assert "transfers" not in summary_of(worker_snapshot())


def test_the_view_names_both_ends_with_their_nodes_and_devices():
    head = reduce_snapshot(head_snapshot(transfer_tasks(0, 12) + transfer_tasks(1, 2)))
    view = build_view(nodes(head, reduce_snapshot(worker_snapshot())), 5, now=NOW + 1)
    transfers = view.transfers
    stalled, healthy = transfers.transfers
    assert stalled["stalled"] and not healthy["stalled"]
    assert abs(stalled["age_s"] - 13) < 0.01 and abs(healthy["age_s"] - 3) < 0.01
    source, destination = stalled["source"], stalled["destination"]
    assert (source["actor_class"], source["node_id"], source["hostname"]) == (
        "Producer", HEAD, "head-host")
    assert [(d["uuid"], d["index"]) for d in source["devices"]] == [("GPU-head-0", "0")]
    # the receive has no node yet: its actor's devices say where it is
    assert (destination["actor_class"], destination["node_id"], destination["hostname"]) == (
        "Consumer", WORKER, "worker-host")
    assert [(d["uuid"], d["index"], d["node_id"]) for d in destination["devices"]] == [
        ("GPU-worker-3", "3", WORKER)]
    assert destination["state"].startswith("PENDING")
    # an end whose actor holds no device anywhere: its node, no devices
    other = healthy["destination"]
    assert other["devices"] == [] and other["node_id"] == ""
    job = transfers.by_job[JOB]
    assert (job["in_flight"], job["stalled"], round(job["oldest_age_s"])) == (2, 1, 13)
    (finding,) = [f for f in view.findings if f["kind"] == "transfer_stalled"]
    assert finding["severity"] == "critical" and finding["node_id"] == HEAD
    for words in ("13 s", "Producer", "Consumer", "head-host", "worker-host", "#0", "#3", JOB):
        assert words in finding["message"], finding["message"]
    assert finding["details"]["destination"]["actor_id"] == actor("b", 0)
    assert view.summary["findings"]["by_kind"]["transfer_stalled"] == 1
    # one node's or one job's share
    answer = transfers.answer(node_id=WORKER)
    assert [t["source"]["task_id"] for t in answer["transfers"]] == [
        stalled["source"]["task_id"]]
    assert (answer["in_flight"], answer["stalled"]) == (1, 1)
    assert transfers.answer(job_id=OTHER_JOB)["transfers"] == []
    assert transfers.answer()["pairing_nodes"] == [{"node_id": HEAD, "hostname": "head-host"}]


def test_recent_aborts_and_suspected_collectives_are_findings():
    aborts = (abort(5, ABORT_WINDOW_S * 2), abort(6, 60))
    head = reduce_snapshot(head_snapshot([], aborts, collective_stall=True))
    view = build_view(nodes(head, reduce_snapshot(worker_snapshot())), 5, now=NOW)
    listed = view.transfers.aborts
    assert [round(a["ago_s"]) for a in listed] == [60, ABORT_WINDOW_S * 2]  # newest first
    (finding,) = [f for f in view.findings if f["kind"] == "transfer_aborted"]
    assert finding["severity"] == "warning"
    assert "60 s ago" in finding["message"] and "stalled for 25 s" in finding["message"]
    assert finding["details"]["source"]["actor_id"] == actor("a", 6)
    assert view.transfers.by_job[JOB]["aborts"] == 2
    assert OTHER_JOB not in view.transfers.by_job  # no abort, nothing in flight
    (stall,) = [f for f in view.findings if f["kind"] == "collective_stall"]
    assert stall["device_uuid"] == "GPU-head-0" and stall["severity"] == "critical"
    assert view.health["GPU-head-0"] == "warning"
    answer = view.transfers.answer(collective_stalls=[stall])
    assert answer["collective_stalls"] == [stall] and answer["in_flight"] == 0


def test_two_pairing_agents_count_each_transfer_once():
    doc = reduce_snapshot(head_snapshot(transfer_tasks(0, 12)))
    twin = NodeState(WORKER, "u1", "worker-host", data=doc)
    view = build_view([NodeState(HEAD, "u0", "head-host", data=doc), twin], 5, now=NOW)
    assert len(view.transfers.transfers) == 1
    assert view.transfers.by_job[JOB]["in_flight"] == 1
    assert len(view.transfers.answer()["pairing_nodes"]) == 2


def test_the_endpoint_over_real_agents_summaries():
    summaries = {0: encode(summary_document(head_snapshot(transfer_tasks(0, 12)))),
                 1: encode(summary_document(worker_snapshot()))}

    async def scenario() -> None:
        async with FleetServer(lambda n: None, summaries=summaries.get) as fakes:
            async def discover():
                return [fakes.target(0), fakes.target(1)]

            collector = Collector(discover, refresh_s=1, fetch_timeout_s=2)
            api = AcceleratorsApi(collector, "standalone")
            client = TestClient(TestServer(build_app(api, TOKEN)))
            await client.start_server()
            try:
                await collector.refresh()
                auth = {"Authorization": f"Bearer {TOKEN}"}

                async def get(params: dict) -> tuple[int, dict]:
                    reply = await client.get("/accelerators/api/transfers", headers=auth,
                                             params=params)
                    return reply.status, await reply.json()

                status, body = await get({})
                assert status == 200, body
                (transfer,) = body["transfers"]
                assert transfer["stalled"] and transfer["source"]["hostname"] == "host-0"
                assert transfer["destination"]["devices"][0]["index"] == "3"
                assert body["by_job"] == [{"job_id": JOB, "in_flight": 1, "stalled": 1,
                                           "oldest_age_s": body["by_job"][0]["oldest_age_s"],
                                           "aborts": 0}]
                assert body["by_job"][0]["oldest_age_s"] >= 12
                status, body = await get({"job_id": OTHER_JOB})
                assert status == 200 and body["transfers"] == [] and body["in_flight"] == 0
                status, body = await get({"node_id": node_id(1)})
                assert status == 200 and len(body["transfers"]) == 1
                for params, words in [({"job_id": "zz"}, "malformed job id"),
                                      ({"node_id": "x"}, "malformed node id"),
                                      ({"since": "1"}, "unknown query parameter")]:
                    status, body = await get(params)
                    assert status == 400 and words in body["error"], body
                findings = await (await client.get(
                    "/accelerators/api/findings", headers=auth,
                    params={"kind": "transfer_stalled"})).json()
                assert findings["total"] == 1
                # Ray aborts it, killing both actors: the collector's rounds remember the
                # devices they held
                summaries[0] = encode(summary_document(
                    head_snapshot([], (abort(0, 20),), held=False)))
                summaries[1] = encode(summary_document(worker_snapshot(held=False)))
                await collector.refresh()
                reply = await client.get("/accelerators/api/findings", headers=auth,
                                         params={"kind": "transfer_aborted"})
                (aborted,) = (await reply.json())["findings"]
                assert "device #0 on host-0" in aborted["message"], aborted["message"]
                assert "device #3 on host-1" in aborted["message"], aborted["message"]
                reply = await client.get("/accelerators/api/findings", headers=auth,
                                         params={"kind": "transfer_slow"})
                assert reply.status == 200 and (await reply.json())["total"] == 0
            finally:
                await client.close()
                await collector.stop()

    asyncio.run(scenario())


def test_an_aborted_transfer_names_the_devices_its_actors_held_while_stalled():
    last_known = LastKnownDevices()
    stalled = nodes(reduce_snapshot(head_snapshot(transfer_tasks(0, 30))),
                    reduce_snapshot(worker_snapshot()))
    build_view(stalled, 5, now=NOW, transfer_devices=last_known)
    # Ray killed both actors: their devices are held by no one, the abort is counted
    aborted = nodes(reduce_snapshot(head_snapshot([], (abort(0, 20),), held=False)),
                    reduce_snapshot(worker_snapshot(held=False)))
    view = build_view(aborted, 5, now=NOW, transfer_devices=last_known)
    (listed,) = view.transfers.aborts
    assert [(d["uuid"], d["index"], d["node_id"]) for d in listed["source"]["devices"]] == [
        ("GPU-head-0", "0", HEAD)]
    # the receive never started, so its task names no node: its devices' node is the end's
    assert (listed["destination"]["node_id"], listed["destination"]["hostname"]) == (
        WORKER, "worker-host")
    assert [(d["uuid"], d["index"], d["node_id"], d["hostname"])
            for d in listed["destination"]["devices"]] == [
        ("GPU-worker-3", "3", WORKER, "worker-host")]  # an end on another node than the pairing
    (finding,) = [f for f in view.findings if f["kind"] == "transfer_aborted"]
    for words in ("Producer", "Consumer", "device #0 on head-host", "device #3 on worker-host"):
        assert words in finding["message"], finding["message"]
    assert (finding["device_uuid"], finding["device_index"]) == ("GPU-head-0", "0")
    assert finding["details"]["destination"]["devices"][0]["uuid"] == "GPU-worker-3"
    # later rounds that still list the abort keep naming them
    again = build_view(aborted, 5, now=NOW + 5, transfer_devices=last_known)
    assert again.transfers.aborts[0]["destination"]["devices"][0]["index"] == "3"
    # a head that never saw the transfer stalled (restarted since) knows no devices
    fresh = build_view(aborted, 5, now=NOW)
    assert fresh.transfers.aborts[0]["source"]["devices"] == []
    (unnamed,) = [f for f in fresh.findings if f["kind"] == "transfer_aborted"]
    assert "device #" not in unnamed["message"] and unnamed["device_uuid"] == ""


def test_the_last_known_devices_are_bounded_and_keep_an_ends_last_devices():
    last_known = LastKnownDevices(capacity=3)

    def joined(number: int, devices: list[str]) -> dict:
        return {"job_id": JOB,
                "source": {"actor_id": actor("a", number), "node_id": HEAD,
                           "devices": [{"uuid": u} for u in devices]},
                "destination": {"actor_id": actor("b", number), "node_id": WORKER,
                                "devices": []}}

    for number in range(5):
        last_known.remember(joined(number, [f"GPU-{number}"]))
    last_known.remember(joined(2, []))  # the end holds nothing now: its last devices stay
    assert len(last_known) == 3
    for number, expected in [(0, []), (1, []), (2, [{"uuid": "GPU-2"}]),
                             (4, [{"uuid": "GPU-4"}])]:
        item = joined(number, [])
        last_known.fill(item)
        assert item["source"]["devices"] == expected, number
    kept = joined(4, [])
    kept["source"]["devices"] = [{"uuid": "GPU-now"}]
    last_known.fill(kept)  # an end that names its devices keeps its own
    assert kept["source"]["devices"] == [{"uuid": "GPU-now"}]


def test_a_transfer_in_flight_past_the_report_threshold_is_an_info_finding():
    tasks = transfer_tasks(0, 4) + transfer_tasks(1, 12) + transfer_tasks(2, 0.2)
    doc = head_snapshot(tasks)
    assert [t["slow"] for t in doc["transfers"]["transfers"]] == [True, True, False]
    summary = summary_of(doc)
    assert reduce_summary(summary)["transfers"] == reduce_snapshot(doc)["transfers"]
    view = build_view(nodes(reduce_summary(summary), reduce_snapshot(worker_snapshot())), 5,
                      now=NOW)
    assert [(t["stalled"], t["slow"]) for t in view.transfers.transfers] == [
        (True, True), (False, True), (False, False)]
    (slow,) = [f for f in view.findings if f["kind"] == "transfer_slow"]
    assert slow["severity"] == "info" and slow["node_id"] == HEAD
    assert slow["message"].startswith("transfer in flight for 4 s: "), slow["message"]
    for words in ("Producer", "Consumer", "device #0 on head-host", "device #3 on worker-host",
                  JOB):
        assert words in slow["message"], slow["message"]
    assert slow["details"]["source"]["actor_id"] == actor("a", 0)
    assert slow["device_uuid"] == "GPU-head-0"
    # the stalled one is a stall only, the young one nothing
    assert [f["details"]["source"]["actor_id"] for f in view.findings
            if f["kind"] == "transfer_stalled"] == [actor("a", 1)]
    assert view.summary["findings"]["by_kind"]["transfer_slow"] == 1
    # the agent's own threshold decides (--transfer-report-after)
    later = head_snapshot(tasks, report_after_s=5)
    assert [t["slow"] for t in later["transfers"]["transfers"]] == [True, False, False]
    view = build_view(nodes(reduce_snapshot(later), reduce_snapshot(worker_snapshot())), 5,
                      now=NOW)
    assert not [f for f in view.findings if f["kind"] == "transfer_slow"]


def test_every_transfer_finding_kind_is_documented_and_accepted():
    api_doc = (Path(__file__).parent.parent / "docs" / "api.md").read_text()
    for kind in transfers_view.FINDING_KINDS:
        assert f"`{kind}`" in api_doc, kind
        assert kind in FINDING_KINDS, kind
