"""How a round's answers are parsed and its heatmaps encoded: changed summaries parsed in
batches (each caller gets its own result or error), JSON decoded as the json module
does, the columns form joined from each node's share (made again only for a changed
node), the per-node form written from its rows, shared numbers keeping -0.0 apart, and
the history's series in blocks.

Summaries here are hand-made (two models, a lost device, a stale and an unreachable
node): what is under test is the head's encoding, not what an agent reports.
"""

from __future__ import annotations

import asyncio
import json
import math
from concurrent.futures import ThreadPoolExecutor

import pytest
from aiohttp.test_utils import TestClient, TestServer

from ray_accel.dashboard_module.aggregate import NodeState, build_view, heatmap_body
from ray_accel.dashboard_module.api import AcceleratorsApi
from ray_accel.dashboard_module.batch_parse import BatchParser
from ray_accel.dashboard_module.collector import AgentTarget, Collector, start_offset
from ray_accel.dashboard_module.fleet import node_id
from ray_accel.dashboard_module.heatmap_columns import columns_body, columns_document
from ray_accel.dashboard_module.history import BLOCK_SERIES, History
from ray_accel.dashboard_module.json_decode import decode
from ray_accel.dashboard_module.standalone import build_app
from ray_accel.exporter import shared_values
from ray_accel.exporter.node_view import SUMMARY_KIND, reduce_summary

NOW = 1.0e9


def _summary(number: int, watts: float = 300.0) -> dict:
    """Node `number`: four devices, model B on odd nodes' last two, node 3's device 1 lost."""
    devices = []
    for index in range(4):
        device = {"uuid": f"GPU-{number:08x}-{index}", "index": str(index), "vendor": "nvidia",
                  "model": "Model B" if number % 2 and index >= 2 else "Model A",
                  "up": True, "utilization": round(0.1 * index + 0.01 * number, 3),
                  "memory_used_bytes": 2**30 * (index + 1), "memory_total_bytes": 2.0**36,
                  "power_watts": watts + index, "temperature_celsius": 50 + number % 7,
                  "activity": {"graphics": 0.5, "sm": 0.25}}
        if number == 3 and index == 1:
            device = {k: device[k] for k in ("uuid", "index", "vendor", "model")}
            device.update(up=False, errors={"nvmlDeviceGetHandleByIndex": "gpu_is_lost"})
        devices.append(device)
    return {"kind": SUMMARY_KIND, "schema_version": 1, "node_id": node_id(number),
            "interval_s": 1.0, "devices": devices,
            "placement": {"nvlink_domain": f"nvl-{number // 2}", "rack": f"rack-{number // 2}",
                          "node_pool": "train" if number % 3 else "serve"}}


def _node(number: int, watts: float = 300.0, taken_at: float = NOW) -> NodeState:
    data = reduce_summary(_summary(number, watts))
    data["taken_at"] = taken_at
    return NodeState(node_id(number), f"http://x/{number}", f"host-{number}", data=data)


def _fleet() -> list[NodeState]:
    nodes = [_node(n) for n in range(6)]
    nodes.append(_node(6, taken_at=NOW - 600))  # stale
    nodes.append(NodeState(node_id(7), "http://x/7", "host-7", error="ConnectionError"))
    return nodes


def test_changed_answers_are_parsed_in_batches_each_with_its_own_outcome():
    def parse(body: bytes) -> dict:
        doc = json.loads(body)
        if "bad" in doc:
            raise ValueError(f"bad answer {doc['bad']}")
        return doc

    pauses = []

    async def run() -> tuple[list, int]:
        with ThreadPoolExecutor(max_workers=1) as pool:
            batches = BatchParser(pool, delay_s=0.05, pause=lambda: pauses.append(1))
            bodies = [json.dumps({"n": n} if n % 4 else {"bad": n}).encode() for n in range(12)]
            outcomes = await asyncio.gather(*(batches.parse(parse, b) for b in bodies),
                                            return_exceptions=True)
            return outcomes, batches.batches

    outcomes, batches = asyncio.run(run())
    assert batches == 1  # twelve answers arriving together: one hand-over
    assert len(pauses) == 11  # the event loop let in between each two
    for n, outcome in enumerate(outcomes):
        if n % 4:
            assert outcome == {"n": n}
        else:
            assert isinstance(outcome, ValueError) and str(outcome) == f"bad answer {n}"


def test_a_parse_after_the_executor_stopped_fails_instead_of_hanging():
    async def run() -> BaseException:
        pool = ThreadPoolExecutor(max_workers=1)
        pool.shutdown()
        with pytest.raises(RuntimeError) as caught:
            await asyncio.wait_for(BatchParser(pool, delay_s=0.0).parse(len, b"x"), 10)
        return caught.value

    assert "shutdown" in str(asyncio.run(run()))


@pytest.mark.parametrize("text", [
    b'{"a":[1,2.5,-0.0,"\\u00e9"],"b":{"c":null,"d":true}}',
    b'{"big":123456789012345678901234567890}',  # past 64 bits
    b'{"x":NaN,"y":[Infinity,-Infinity]}',  # what json.dumps writes for non-finite floats
    b'{"over":1e400,"under":5e-324,"twice":1,"twice":2}',
])
def test_decoding_reads_what_the_json_module_reads(text):
    decoded, expected = decode(text), json.loads(text)
    assert json.dumps(decoded, sort_keys=True) == json.dumps(expected, sort_keys=True)
    assert repr(decoded) == repr(expected)  # the same types too (-0.0, big ints, NaN)


def test_decoding_refuses_what_is_not_json():
    with pytest.raises(ValueError):
        decode(b'{"devices": [')


def test_the_columns_form_joined_from_each_node_equals_the_document():
    nodes = _fleet()
    parts: dict = {}
    first = build_view(nodes, 5, now=NOW, parts=parts)
    assert json.loads(columns_body(first)) == columns_document(first)
    doc = json.loads(columns_body(first))
    row = {nid: at for at, nid in enumerate(doc["nodes"]["node_id"])}  # rows by node id
    assert sorted(doc["models"]) == ["Model A", "Model B"]
    assert sorted(doc["nodes"]["devices"]) == [0] + [4] * 7  # the unreachable node: none
    status = dict(zip(doc["nodes"]["node_id"], doc["nodes"]["status"], strict=True))
    assert (status[node_id(6)], status[node_id(7)], status[node_id(0)]) == (
        "stale", "unreachable", "ok")

    def first_device(number: int) -> int:  # the first device's position in device columns
        return sum(doc["nodes"]["devices"][:row[node_id(number)]])

    assert doc["devices"]["util"][first_device(3) + 1] is None  # lost: absent, not 0
    shares = {n: p.columns for n, p in parts.items()}
    assert all(share is not None for share in shares.values())

    nodes[2] = _node(2, watts=450.0)  # one node changes
    second = build_view(nodes, 5, now=NOW + 1, parts=parts)
    assert json.loads(columns_body(second)) == columns_document(second)
    assert json.loads(columns_body(second))["devices"]["power"][first_device(2)] == 450.0
    assert [n for n, p in parts.items() if p.columns is not shares[n]] == [node_id(2)]


def test_the_columns_form_of_no_nodes():
    view = build_view([], 5, now=NOW)
    assert json.loads(columns_body(view)) == columns_document(view)


def test_the_per_node_heatmap_is_written_from_its_rows():
    async def ask() -> tuple[bytes, int, str, int, str]:
        async def discover():
            return []

        collector = Collector(discover, refresh_s=5)
        api = AcceleratorsApi(collector, "standalone")
        async with TestClient(TestServer(build_app(api, None))) as client:
            await collector.stop()  # no rounds: the view below is the one served
            collector.view = build_view(_fleet(), 5, now=NOW)
            reply = await client.get("/accelerators/api/heatmap")
            body = await reply.read()
            head = await client.head("/accelerators/api/heatmap")
            return (body, reply.status, reply.headers["Content-Length"], head.status,
                    head.headers["Content-Length"])

    body, status, length, head_status, head_length = asyncio.run(ask())
    view = build_view(_fleet(), 5, now=NOW)
    assert status == 200 and head_status == 200
    assert body == heatmap_body(view)
    assert int(length) == int(head_length) == len(body)
    doc = json.loads(body)
    assert doc == {"generated_at": NOW, "nodes": view.heatmap}
    assert sorted(len(row["devices"]) for row in doc["nodes"]) == [0] + [4] * 7


def test_shared_numbers_keep_negative_zero_apart():
    assert shared_values.share(0.0) == 0.0
    negative = shared_values.share(-0.0)
    assert math.copysign(1.0, negative) < 0
    assert math.copysign(1.0, shared_values.share(0.0)) > 0
    first, second = shared_values.share(float("1234.5")), shared_values.share(float("1234.5"))
    assert first is second


def test_history_blocks_keep_every_series_apart_and_reuse_forgotten_places():
    history = History(2)
    keys = [f"device.GPU-{n}.memory_used_bytes" for n in range(BLOCK_SERIES + 5)]  # two blocks
    history.record(1.0, {key: float(n) for n, key in enumerate(keys)})
    history.record(2.0, {key: n + 0.5 for n, key in enumerate(keys)})
    assert history.series(keys[0]) == [0.0, 0.5]
    assert history.series(keys[-1]) == [len(keys) - 1.0, len(keys) - 0.5]
    history.record(3.0, {"cluster.power_watts": 7.0})  # the devices' keys stop
    history.record(4.0, {"cluster.power_watts": 8.0})
    assert history.series(keys[0]) == []  # forgotten: no round wrote it for a whole window
    history.record(5.0, {"node.x.power_watts": 1.0})  # takes a forgotten place
    assert history.series("node.x.power_watts") == [None, 1.0]  # nothing of the old series


def test_history_keeps_device_utilization_in_thousandths():
    history = History(4)
    for at, ratio in enumerate((0.256, None, 1.0, 1.5)):
        history.record(float(at), {"device.GPU-1.utilization": ratio,
                                   "node.n.utilization": ratio})
    assert history.series("device.GPU-1.utilization") == [0.256, None, 1.0, None]  # 1.5: absent
    assert history.series("node.n.utilization") == [0.256, None, 1.0, 1.5]


def test_a_round_starts_its_fetches_in_the_order_of_their_offsets():
    asked: list[str] = []

    class Recording(Collector):
        async def _fetch(self, node, limit, stats) -> None:
            asked.append(node.node_id)

    targets = [AgentTarget(node_id(n), f"http://127.0.0.1:9/n/{n}") for n in range(40)]

    async def run() -> None:
        async def discover():
            return targets

        collector = Recording(discover, refresh_s=0.5, spread=0.5)
        try:
            await collector.refresh()
        finally:
            await collector.stop()

    asyncio.run(run())
    assert asked == sorted((t.node_id for t in targets), key=lambda n: start_offset(n, 0.25))
