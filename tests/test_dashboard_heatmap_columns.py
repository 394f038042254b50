"""The heatmap's columns form: the same devices as the per-node form, with placement.

Real input: one snapshot of the simulated 8x H200 node, copied into fleet members
(one with a lost GPU, one with an idle holder, one in a rack and node pool of its
own), reduced and aggregated as the head does, then served by the real API.
"""

from __future__ import annotations

import asyncio
import copy
import gzip
import json
import time

import pytest
from aiohttp.test_utils import TestClient, TestServer
from doctored_nodes import set_value

from ray_accel.dashboard_module.aggregate import NodeState, build_view, heatmap_body
from ray_accel.dashboard_module.api import AcceleratorsApi
from ray_accel.dashboard_module.collector import Collector
from ray_accel.dashboard_module.content_coding import accepts_gzip
from ray_accel.dashboard_module.fleet import fleet_member, node_id
from ray_accel.dashboard_module.fleet_agents import template_document, with_device_down
from ray_accel.dashboard_module.heatmap_columns import (
    ALLOCATED,
    HEALTH_CODES,
    HOT,
    IDLE,
    columns_body,
    columns_document,
    columns_gzip,
)
from ray_accel.dashboard_module.standalone import build_app
from ray_accel.exporter.node_view import reduce_snapshot


@pytest.fixture(scope="module")
def template() -> dict:
    return template_document()


def _idle_holder() -> dict:
    return {"pid": 4242, "ray_job_id": "02000000", "ray_worker_id": "f" * 56,
            "ray_actor_id": "a" * 32, "actor_class": "IdleHolder", "actor_name": "",
            "ray_task_id": "", "task_name": "", "fraction": 1.0, "idle": True}


def _nodes(template: dict) -> list[NodeState]:
    docs = [fleet_member(template, 0), fleet_member(with_device_down(template, 2), 1),
            fleet_member(template, 2)]
    docs[2]["devices"][5].update(allocated=1.0, holders=[_idle_holder()])
    docs[2]["placement"] = {**docs[2]["placement"], "rack": "rack-7", "node_pool": "serve"}
    states = []
    for number, doc in enumerate(docs):
        doc["taken_at"] = time.time()
        states.append(NodeState(node_id(number), "http://x", f"host-{number}",
                                data=reduce_snapshot(copy.deepcopy(doc))))
    return states


def test_columns_carry_every_cell_of_the_per_node_form_and_the_placement(template):
    view = build_view(_nodes(template), refresh_s=5)
    doc = columns_document(view)
    nodes, devices = doc["nodes"], doc["devices"]
    assert nodes["node_id"] == [row["node_id"] for row in view.heatmap]
    assert nodes["devices"] == [8, 8, 8]
    assert sum(nodes["devices"]) == len(devices["index"]) == len(devices["health"]) == 24
    cells = [cell for row in view.heatmap for cell in row["devices"]]
    for at, cell in enumerate(cells):
        assert devices["index"][at] == cell["index"]
        assert doc["models"][devices["model"][at]] == cell["model"]
        assert HEALTH_CODES[devices["health"][at]] == cell["health"]
        assert [devices[k][at] for k in ("util", "mem", "power", "temp")] == [
            cell[k] for k in ("util", "mem", "power", "temp")]
    first = {nid: 8 * row for row, nid in enumerate(nodes["node_id"])}  # rows by node id
    down = [at for at, code in enumerate(devices["health"]) if HEALTH_CODES[code] == "down"]
    assert down == [first[node_id(1)] + 2]  # node 1's third device: the one it lost
    assert devices["util"][down[0]] is None  # a lost device has no utilization, not 0
    assert devices["flags"][first[node_id(2)] + 5] == ALLOCATED | IDLE
    assert sum(1 for f in devices["flags"] if f & IDLE) == 1
    racks = dict(zip(nodes["node_id"], zip(nodes["rack"], nodes["node_pool"], strict=True),
                     strict=True))
    assert racks == {node_id(0): ("", ""), node_id(1): ("", ""), node_id(2): ("rack-7", "serve")}
    # the simulated H200s report their NVLink domain through the fabric
    assert nodes["nvlink_domain"] == [row["nvlink_domain"] for row in view.heatmap]
    assert all(nodes["nvlink_domain"])


def test_columns_are_a_fraction_of_the_per_node_form(template):
    view = build_view(_nodes(template), refresh_s=5)
    columns, per_node = len(columns_body(view)), len(heatmap_body(view))
    assert columns < per_node / 3, (columns, per_node)
    assert columns_body(view) is columns_body(view)  # encoded once per view


def test_the_api_serves_both_forms_and_refuses_an_unknown_one(template):
    async def discover():
        return []

    async def ask() -> tuple[dict, dict, int, dict]:
        collector = Collector(discover, refresh_s=5)
        api = AcceleratorsApi(collector, "standalone")
        async with TestClient(TestServer(build_app(api, None))) as client:
            await collector.stop()  # no rounds: the view below is the one served
            collector.view = build_view(_nodes(template), refresh_s=5)
            reply = await client.get("/accelerators/api/heatmap", params={"form": "columns"})
            assert reply.status == 200
            columns = json.loads(await reply.read())
            plain = await (await client.get("/accelerators/api/heatmap")).json()
            bad = await client.get("/accelerators/api/heatmap", params={"form": "rows"})
            return columns, plain, bad.status, await bad.json()

    columns, plain, bad_status, bad = asyncio.run(ask())
    assert columns["form"] == "columns" and sum(columns["nodes"]["devices"]) == 24
    assert [len(row["devices"]) for row in plain["nodes"]] == [8, 8, 8]
    assert bad_status == 400 and "form must be one of nodes, columns" in bad["error"]


def test_the_columns_form_is_gzipped_for_a_client_that_accepts_it(template):
    async def discover():
        return []

    async def ask(accept_encoding: str | None,
                  host: str = "standalone") -> tuple[str | None, str, bytes]:
        collector = Collector(discover, refresh_s=5, gzip_columns=host != "ray")  # as ray_head
        api = AcceleratorsApi(collector, host)
        async with TestClient(TestServer(build_app(api, None)),
                              auto_decompress=False) as client:
            await collector.stop()
            collector.view = view
            if accept_encoding is None:  # no header at all (aiohttp would add its own)
                asked = {"skip_auto_headers": ("Accept-Encoding",)}
            else:
                asked = {"headers": {"Accept-Encoding": accept_encoding}}
            reply = await client.get("/accelerators/api/heatmap", params={"form": "columns"},
                                     **asked)
            assert reply.status == 200
            return (reply.headers.get("Content-Encoding"), reply.headers["Vary"],
                    await reply.read())

    view = build_view(_nodes(template), refresh_s=5)
    plain = columns_body(view)
    coding, vary, body = asyncio.run(ask("br;q=1.0, gzip;q=0.5"))
    assert coding == "gzip" and vary == "Accept-Encoding"
    assert gzip.decompress(body) == plain and len(body) < len(plain) / 2
    assert columns_gzip(view) is columns_gzip(view)  # compressed once per view
    for refused in (None, "gzip;q=0", "br, deflate", "*;q=0", "gzip;q=nonsense"):
        coding, vary, body = asyncio.run(ask(refused))
        assert coding is None and body == plain, refused
    # inside Ray's dashboard, whose proxy inflates gzip but keeps its Content-Encoding
    coding, vary, body = asyncio.run(ask("gzip", host="ray"))
    assert coding is None and body == plain


@pytest.mark.parametrize(("header", "accepted"), [
    ("gzip", True), ("GZIP", True), ("x-gzip", True), ("deflate, gzip;q=0.1", True),
    ("*", True), ("*;q=0.3", True), ("gzip; q=1.0", True),
    (None, False), ("", False), ("identity", False), ("gzip;q=0", False),
    ("gzip;q=0.000", False), ("*;q=0", False), ("gzip;q=0, *", False),
    ("gzip;q=2", False), ("gzip;q=", False), ("gzipx", False), (",,;", False),
])
def test_accept_encoding_weights_decide_gzip(header, accepted):
    assert accepts_gzip(header) is accepted


def test_hot_is_heat_holding_the_clocks_or_a_hot_die_never_a_hotspot_reading(template):
    doc = fleet_member(template, 0)
    doc["taken_at"] = time.time()
    devices = doc["devices"]

    def temperature(device: int, celsius: float, sensor: str = "gpu") -> None:
        devices[device]["values"]["hw.temperature"] = [
            {"labels": {"sensor": sensor}, "value": celsius}]

    for device in range(8):
        temperature(device, 60)
    temperature(0, 85)  # the die at the line
    temperature(1, 84.5)
    set_value(devices[2]["values"], "ray.accelerator.throttle.active",
              {"reason": "hw_thermal_slowdown"}, 1)  # held down by heat at 60 °C
    temperature(3, 97, "hotspot")  # an MI300's busy hotspot: not hot on its own
    temperature(4, 97, "hotspot")
    set_value(devices[4]["values"], "ray.accelerator.throttle.active",
              {"reason": "hbm_thermal"}, 1)  # ... unless its limiter says so
    set_value(devices[5]["values"], "ray.accelerator.throttle.active",
              {"reason": "sw_power_cap"}, 1)  # power, not heat
    set_value(devices[7]["values"], "ray.accelerator.throttle.active",
              {"reason": "hw_slowdown"}, 1)  # heat, a power brake or over-current: not said
    temperature(6, 80, "edge")
    view = build_view([NodeState(node_id(0), "http://x", "host-0",
                                 data=reduce_snapshot(copy.deepcopy(doc)))], refresh_s=5)
    hot = [cell["index"] for cell in view.heatmap[0]["devices"] if cell["hot"]]
    assert sorted(hot) == ["0", "2", "4"]
    for encoded in (columns_document(view), json.loads(columns_body(view))):
        flags = dict(zip(encoded["devices"]["index"], encoded["devices"]["flags"], strict=True))
        assert sorted(i for i, f in flags.items() if f & encoded["flags"]["hot"]) == ["0", "2", "4"]
        assert encoded["flags"]["hot"] == HOT
    down = fleet_member(with_device_down(template, 0), 1)
    down["taken_at"] = time.time()
    down["devices"][0]["values"]["hw.temperature"] = [
        {"labels": {"sensor": "gpu"}, "value": 95}]
    view = build_view([NodeState(node_id(1), "http://x", "host-1",
                                 data=reduce_snapshot(down))], refresh_s=5)
    assert [cell["hot"] for cell in view.heatmap[0]["devices"] if cell["index"] == "0"] == [False]
