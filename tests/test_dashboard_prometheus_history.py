"""The tab's history from a real Prometheus scraping real agents, and its fallbacks.

Two agents on simulated hardware (8x H200 and 4x L4) are scraped every second by one
Prometheus, each as a node of its own Ray session: the scrape adds `SessionName` and
`ray_node_id` (as Ray's own agent would) and `ray_io_cluster` (as KubeRay's PodMonitor
does), both on the same node id so that only the session tells them apart. The head's
series are checked against the raw samples Prometheus holds, read back with a range
selector, not through the head's own queries.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from agent_process import AgentProcess
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_server import PROMETHEUS, PrometheusServer, free_port

from ray_accel.dashboard_module import prometheus_history
from ray_accel.dashboard_module.api import AcceleratorsApi
from ray_accel.dashboard_module.collector import AgentTarget, Collector
from ray_accel.dashboard_module.history import History, memory_series
from ray_accel.dashboard_module.prometheus_history import (
    RANGES,
    SESSION_CHECK_S,
    SESSION_RETRY_S,
    PrometheusError,
    PrometheusHistory,
    PrometheusSettings,
    Scope,
    TabHistory,
    configured,
)
from ray_accel.dashboard_module.standalone import build_app
from ray_accel.exporter import catalog as m
from ray_accel.grafana.alerts import recording
from ray_accel.grafana.promql import metric

pytestmark = pytest.mark.skipif(not Path(PROMETHEUS).exists(),
                                reason="prometheus is not installed (tools/system-deps.sh)")

NODE = "ab" * 28
THIS, OTHER, CLUSTER = "session_2026-12-01_10-00-00_000001_1", "session_other", "c1"
LOOKBACK_MS = 300_000  # Prometheus' default lookback delta
POINTS = 3600  # one point a second over the 1 h range, so a short test has many
SETTLE_S = 2.0  # a point this long before a request has every scrape it will have


def _scrape_job(name: str, agent: AgentProcess, session: str) -> dict[str, Any]:
    return {"job_name": name, "static_configs": [{
        "targets": [agent.url.removeprefix("http://")],
        "labels": {"SessionName": session, "ray_node_id": NODE, "ray_io_cluster": CLUSTER}}]}


@pytest.fixture(scope="module")
def agents():
    with AgentProcess("--simulate", "hgx-h200", "--interval", "0.5") as h200, \
            AgentProcess("--simulate", "l4-pcie", "--interval", "0.5") as l4:
        yield h200, l4


@pytest.fixture(scope="module")
def prometheus(agents, tmp_path_factory):
    h200, l4 = agents
    config = json.dumps({"global": {"scrape_interval": "1s"},
                         "scrape_configs": [_scrape_job("this", h200, THIS),
                                            _scrape_job("other", l4, OTHER)]})
    with PrometheusServer(config, tmp_path_factory.mktemp("prometheus")) as prom:
        power = metric(m.POWER)
        prom.wait_until(lambda: all(
            len(series["values"]) >= 8
            for series in _raw(prom, f'{power}{{SessionName=~"{THIS}|{OTHER}"}}')
        ) and len(_raw(prom, power)) == 12, "eight scrapes of all twelve GPUs")
        yield prom


def _raw(prom: PrometheusServer, selector: str, at: float | None = None) -> list[dict]:
    """The samples Prometheus stored for `selector` over the last 10 minutes."""
    params = {"query": f"{selector}[10m]", **({"time": f"{at:.3f}"} if at else {})}
    return prom.api("query", **params)["result"]


def _latest(samples: list[list], at_s: float) -> float | None:
    """What an instant query at `at_s` reads from raw samples: the newest at or before it."""
    at_ms = round(at_s * 1000)
    found = None
    for stamp, text in samples:
        stamp_ms = round(float(stamp) * 1000)
        if stamp_ms <= at_ms and at_ms - stamp_ms <= LOOKBACK_MS:
            found = float(text)
    return found


def _history(prom: PrometheusServer, session: str = THIS, cluster: str = CLUSTER,
             timeout_s: float = 5.0, points: int = POINTS) -> PrometheusHistory:
    return PrometheusHistory(PrometheusSettings(prom.url, session_name=session, cluster=cluster,
                                                timeout_s=timeout_s), max_points=points)


def _api(prometheus: PrometheusHistory | None, agent: AgentProcess | None = None,
         error: str = "") -> AcceleratorsApi:
    async def discover():
        return [AgentTarget(NODE, agent.url, "h200-host")] if agent else []

    return AcceleratorsApi(Collector(discover, refresh_s=1, fetch_timeout_s=2), "standalone",
                           prometheus=prometheus, prometheus_error=error)


async def _get_all(api: AcceleratorsApi, *queries: dict[str, str],
                   rounds: int = 0) -> list[tuple[int, dict]]:
    """GET history with each of `queries` from the standalone app over real HTTP."""
    async with TestClient(TestServer(build_app(api))) as client:
        for _ in range(rounds):
            await api.collector.refresh()
        answers = []
        for params in queries:
            reply = await client.get("/accelerators/api/history", params=params)
            answers.append((reply.status, await reply.json()))
        return answers


def _settled(answer: dict, asked_at: float, *names: str) -> dict[str, list]:
    """`answer`'s timestamps and series `names` at the points that were past when it was
    asked for (a scrape that started before a later point may still have been in flight)."""
    keep = [i for i, t in enumerate(answer["timestamps"]) if t <= asked_at - SETTLE_S]
    return {name: [answer[name][i] for i in keep] for name in ("timestamps", *names)}


def _nested(name: str, uuid: str) -> str:
    return f"{name}/{uuid}"


def test_device_and_node_series_equal_what_prometheus_scraped(agents, prometheus):
    h200 = agents[0]
    uuids = [d["uuid"] for d in h200.json("/api/v1/snapshot")["devices"]]
    asked_at = time.time()
    (status, device), (_, node) = asyncio.run(_get_all(
        _api(_history(prometheus)), {"uuid": uuids[3], "range": "1h"},
        {"node_id": NODE, "range": "1h"}))
    assert status == 200 and device["source"] == "prometheus" and device["error"] == ""
    assert device["step_s"] == 1 and len(device["timestamps"]) == POINTS
    # the last point is the first whole step from when it was asked: the current values
    assert asked_at <= device["timestamps"][-1] < asked_at + 1 + SETTLE_S
    assert device["utilization"][-1] is not None and node["power_watts"][-1] is not None

    util = metric(m.GPU_UTILIZATION)
    scope = f'SessionName="{THIS}",task="general"'
    stored = {s["metric"]["uuid"]: s["values"]
              for s in _raw(prometheus, f"{util}{{{scope}}}", at=asked_at)}
    assert sorted(stored) == sorted(uuids)
    past = _settled(device, asked_at, "utilization", "memory_used_bytes")
    expected = [_latest(stored[uuids[3]], t) for t in past["timestamps"]]
    assert sum(v is not None for v in expected) >= 4  # eight scrapes a second apart
    assert past["utilization"] == expected
    memory = _raw(prometheus, f'{metric(m.MEMORY_USAGE)}{{SessionName="{THIS}",'
                              f'uuid="{uuids[3]}"}}', at=asked_at)
    assert past["memory_used_bytes"] == [_latest(memory[0]["values"], t)
                                         for t in past["timestamps"]]

    assert node["source"] == "prometheus" and node["node_id"] == NODE
    assert sorted(node["devices"]) == sorted(uuids)  # the other session's L4 is not here
    flat = {**node, **{_nested("utilization", uuid): node["devices"][uuid]["utilization"]
                       for uuid in uuids}}
    past = _settled(flat, asked_at, "utilization",
                    *(_nested("utilization", uuid) for uuid in uuids))
    for uuid in uuids:
        assert past[_nested("utilization", uuid)] == [
            _latest(stored[uuid], t) for t in past["timestamps"]]
    for at, mean in zip(past["timestamps"], past["utilization"], strict=True):
        values = [_latest(stored[uuid], at) for uuid in uuids]
        present = [v for v in values if v is not None]
        assert mean == (pytest.approx(sum(present) / len(present), rel=1e-12) if present
                        else None)


def test_series_are_scoped_to_the_session_and_cluster(prometheus):
    async def ask(history: PrometheusHistory, scope: Scope) -> dict:
        return await history.series(scope, "1h")

    power = metric(m.POWER)
    asked_at = time.time()
    this = asyncio.run(ask(_history(prometheus), Scope("cluster")))
    other = asyncio.run(ask(_history(prometheus, session=OTHER), Scope("node", NODE)))
    everyone = asyncio.run(ask(_history(prometheus, session=""), Scope("cluster")))
    elsewhere = asyncio.run(ask(_history(prometheus, cluster="c2"), Scope("cluster")))
    stored = {s["metric"]["SessionName"] + s["metric"]["uuid"]: s["values"]
              for s in _raw(prometheus, power, at=asked_at)}

    def total(prefix: str, when: float) -> float:
        return sum(v for k, samples in stored.items() if k.startswith(prefix)
                   if (v := _latest(samples, when)) is not None)

    past = {name: _settled(answer, asked_at, "power_watts")
            for name, answer in (("this", this), ("other", other), ("everyone", everyone))}
    checked = [(t, p) for t, p in zip(*past["this"].values(), strict=True) if p is not None]
    assert len(checked) >= 4
    for when, watts in checked:
        assert watts == pytest.approx(total(THIS, when), rel=1e-12)
    assert len(other["devices"]) == 4 and next(iter(other["devices"])).startswith("GPU-")
    for name, prefix in (("other", OTHER), ("everyone", "")):
        when, watts = past[name]["timestamps"][-1], past[name]["power_watts"][-1]
        assert watts == pytest.approx(total(prefix, when), rel=1e-12)
    assert total("", checked[-1][0]) > total(THIS, checked[-1][0]) > 0
    assert this["devices_down"][-1] == 0.0  # every device up, and devices are reporting
    assert set(elsewhere["power_watts"]) == {None}
    assert set(elsewhere["devices_down"]) == {None}  # no devices: no count, not zero


@pytest.mark.parametrize("range_name,step", [("24h", 288), ("7d", 2016)])
def test_long_ranges_end_with_the_current_values(agents, prometheus, range_name, step):
    uuid = agents[0].json("/api/v1/snapshot")["devices"][3]["uuid"]
    asked_at = time.time()
    week = asyncio.run(_history(prometheus, points=300).series(Scope("device", uuid),
                                                               range_name))
    answered_at = time.time()
    assert week["step_s"] == step and asked_at <= week["timestamps"][-1] < asked_at + step
    # the scrapes began less than a step ago: only the last two points can hold them (the
    # one before when a whole step began since), and the last one does
    assert set(week["utilization"][:-2]) == {None} and week["utilization"][-1] is not None
    (stored,) = _raw(prometheus, f'{metric(m.GPU_UTILIZATION)}{{SessionName="{THIS}",'
                                 f'task="general",uuid="{uuid}"}}', at=answered_at + 1)
    recent = {float(v) for t, v in stored["values"] if asked_at - 5 <= float(t) <= answered_at}
    assert week["utilization"][-1] in recent


def test_a_job_without_allocations_has_no_values_and_valid_queries(prometheus):
    body = asyncio.run(_history(prometheus).series(Scope("job", "02000000"), "6h"))
    assert body["step_s"] == 6
    assert {name: set(body[name]) for name in (
        "devices_held", "idle_allocations", "utilization", "memory_used_bytes")} == {
        name: {None} for name in (
            "devices_held", "idle_allocations", "utilization", "memory_used_bytes")}


def test_a_down_or_silent_prometheus_falls_back_to_memory_with_the_error(agents):
    h200 = agents[0]
    down = PrometheusHistory(PrometheusSettings(f"http://127.0.0.1:{free_port()}",
                                                timeout_s=2.0))
    with socket.socket() as silent:  # accepts connections (the backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        slow = PrometheusHistory(PrometheusSettings(
            f"http://127.0.0.1:{silent.getsockname()[1]}", timeout_s=0.5))
        (status, cluster), (_, node) = asyncio.run(_get_all(
            _api(down, h200), {}, {"node_id": NODE, "range": "7d"}, rounds=2))
        ((slow_status, late),) = asyncio.run(_get_all(_api(slow, h200), {"range": "24h"},
                                                      rounds=1))
    assert status == 200 and cluster["source"] == "memory"
    assert cluster["error"].startswith(f"Prometheus at {down.settings.url}: Client")
    assert len(cluster["utilization"]) == len(cluster["timestamps"]) >= 2
    assert cluster["utilization"][-1] is not None
    # not asked again so soon: the same error, from memory, for the node too
    assert node["source"] == "memory" and node["error"] == cluster["error"]
    assert node["range"] == "7d" and len(node["devices"]) == 8
    assert all(len(d["utilization"]) == len(node["timestamps"]) >= 2
               for d in node["devices"].values())
    assert slow_status == 200 and late["source"] == "memory"
    assert late["error"] == f"Prometheus at {slow.settings.url} did not answer within 0.5 s"


def _load_recording_rules(prom: PrometheusServer) -> None:
    """Add the recording rules (evaluated every second, as the scrape) and reload."""
    (prom.folder / "recording.yml").write_text(recording.render(interval_s=1.0))
    config = json.loads(prom.config_path.read_text())
    prom.config_path.write_text(json.dumps({**config, "rule_files": ["recording.yml"]}))
    prom.process.send_signal(signal.SIGHUP)


def _scrapes(prom: PrometheusServer, at: float) -> dict[float, float]:
    """{scrape time: total power of this session's GPUs} from the raw samples."""
    totals: dict[float, float] = {}
    for series in _raw(prom, f'{metric(m.POWER)}{{SessionName="{THIS}"}}', at=at):
        for stamp, text in series["values"]:
            totals[float(stamp)] = totals.get(float(stamp), 0.0) + float(text)
    return totals


def test_the_cluster_reads_the_recorded_series_once_the_rules_run(prometheus):
    long_points = RANGES["6h"] // 2  # a point every 2 s (Prometheus answers 11,000 at most)
    before = _history(prometheus, points=long_points)
    asked_at = time.time()
    raw = asyncio.run(before.series(Scope("cluster"), "6h"))
    assert raw["recorded"] is False and raw["step_s"] == 2
    totals = _scrapes(prometheus, asked_at)
    past = _settled(raw, asked_at, "power_watts")
    checked = [(t, w) for t, w in zip(*past.values(), strict=True) if w is not None]
    assert len(checked) >= 2  # eight scrapes a second apart, on a 2 s grid
    for at, watts in checked:  # without the rules: every device's series, summed
        assert watts == pytest.approx(totals[max(s for s in totals if s <= at)], rel=1e-12)

    _load_recording_rules(prometheus)
    power = recording.record_name("power_watts")
    # settled points (SETTLE_S before asking) on the 2 s grid: at least two once the first
    # evaluation is this long ago
    prometheus.wait_until(lambda: any(
        float(series["values"][0][0]) <= time.time() - SETTLE_S - 5
        for series in _raw(prometheus, f'{power}{{SessionName="{THIS}"}}')),
        "the recording rules evaluated for 7 s")
    asked_at = time.time()
    ((status, answer),) = asyncio.run(_get_all(_api(_history(prometheus, points=long_points)),
                                               {"range": "6h"}))
    assert status == 200 and answer["source"] == "prometheus" and answer["recorded"] is True
    # the first client checked before the rules ran and remembers it for minutes
    assert asyncio.run(before.series(Scope("cluster"), "6h"))["recorded"] is False

    def stored(part: str) -> list[list]:
        (series,) = _raw(prometheus, f'{recording.record_name(part)}{{SessionName="{THIS}",'
                                     f'ray_io_cluster="{CLUSTER}"}}', at=asked_at)
        return series["values"]

    past = _settled(answer, asked_at, "power_watts", "utilization", "devices_down")
    recorded = {part: stored(part) for part in ("power_watts", "utilization_sum",
                                                "utilization_count", "devices_down")}
    shown = [i for i, w in enumerate(past["power_watts"]) if w is not None]
    assert len(shown) >= 2
    for i in shown:  # the tab's points are the recorded series' (the mean from sum and count)
        at = past["timestamps"][i]
        assert past["power_watts"][i] == _latest(recorded["power_watts"], at)
        assert past["utilization"][i] == pytest.approx(
            _latest(recorded["utilization_sum"], at) / _latest(recorded["utilization_count"],
                                                                at), rel=1e-12)
        assert past["devices_down"][i] == _latest(recorded["devices_down"], at) == 0.0
    # each recorded value is the sum of every device's raw series at its evaluation: of
    # the newest scrape then, or of the one before while the newest was still being written
    totals = _scrapes(prometheus, asked_at)
    for stamp, text in recorded["power_watts"]:
        newest = sorted(s for s in totals if s <= float(stamp))[-2:]
        assert any(float(text) == pytest.approx(totals[s], rel=1e-12) for s in newest)


MATRIX = {"status": "success", "data": {"resultType": "matrix", "result": []}}


@pytest.mark.parametrize("status,answer,words", [
    (400, {"status": "error", "errorType": "bad_data", "error": "1:1: parse error"},
     "refused a query (HTTP 400): 1:1: parse error"),
    (200, "<html>a proxy's login page</html>", "answered HTTP 200 that is not JSON"),
    (200, {"status": "success", "data": {"resultType": "vector", "result": []}},
     "answered a 'vector', not a matrix"),
    (200, {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {}, "values": [[1, "not a number"]]}]}}, "answered a malformed matrix"),
    (200, {"status": "success", "data": [1, 2]}, "answered a 'None', not a matrix"),
    (200, {"status": "success", "data": {"resultType": "matrix", "result": "abc"}},
     "answered a matrix that is not a list"),
    (200, {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {}, "values": [["Inf", "1"], [1e300, "2"]]}]}},  # points off any grid
     "holds none of these series over the range"),
])
def test_prometheus_errors_and_headers_reach_the_answer(status, answer, words):
    seen: list[dict[str, str]] = []

    async def fake_prometheus(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        form = await request.post()
        if "uuid=" not in form["query"]:  # only the device's utilization query fails
            return web.json_response(MATRIX)
        if isinstance(answer, str):
            return web.Response(text=answer, status=status)
        return web.json_response(answer, status=status)

    async def scenario() -> dict:
        app = web.Application()
        app.router.add_post("/api/v1/query_range", fake_prometheus)
        async with TestServer(app) as server:
            history, error = configured(
                {"RAY_PROMETHEUS_HOST": str(server.make_url("/")),
                 "RAY_PROMETHEUS_HEADERS": '[["Authorization", "Bearer x"], ["X-Org", "7"]]'},
                session_name=THIS)
            assert error == "" and history is not None
            async with TestClient(TestServer(build_app(_api(history)))) as client:
                reply = await client.get("/accelerators/api/history", params={"uuid": "GPU-1"})
                assert reply.status == 200
                return await reply.json()

    body = asyncio.run(scenario())
    assert body["source"] == "memory" and body["scope"] == "device"
    assert body["error"].startswith("Prometheus at http://127.0.0.1:") and words in body["error"]
    assert seen and all(h["Authorization"] == "Bearer x" and h["X-Org"] == "7" for h in seen)


def test_whether_the_recorded_series_exist_is_asked_once_and_remembered():
    asked: list[tuple[str, str]] = []

    async def fake_prometheus(request: web.Request) -> web.Response:
        form = await request.post()
        asked.append((request.path.rsplit("/", 1)[1], form["query"]))
        if request.path.endswith("/query"):  # the check: the recorded series are there
            return web.json_response({"status": "success", "data": {
                "resultType": "vector", "result": [{"metric": {}, "value": [form["time"], "1"]}]}})
        return web.json_response({"status": "success", "data": {"resultType": "matrix",
                                  "result": [{"metric": {}, "values": [[form["end"], "2"]]}]}})

    async def scenario() -> list[dict]:
        app = web.Application()
        app.router.add_post("/api/v1/query", fake_prometheus)
        app.router.add_post("/api/v1/query_range", fake_prometheus)
        async with TestServer(app) as server:
            history = PrometheusHistory(PrometheusSettings(str(server.make_url("")),
                                                           session_name="s1"))
            return [await history.series(Scope("cluster"), name) for name in ("24h", "7d", "1h")]

    day, week, hour = asyncio.run(scenario())
    checks = [query for path, query in asked if path == "query"]
    assert checks == ['group(ray_accel_cluster:ray_accelerator_device_up:count_down'
                      '{SessionName=~"s1",ray_io_cluster=~".*"})']
    ranges = [query for path, query in asked if path == "query_range"]
    assert len(ranges) == 15
    assert all("ray_accel_cluster:" in q and "hw_power_watts{" not in q for q in ranges[:10])
    assert not any("ray_accel_cluster:" in q for q in ranges[10:])  # 1 h: the devices' own
    assert day["recorded"] and week["recorded"] and not hour["recorded"]
    assert day["power_watts"][-1] == 2.0


def test_unusable_settings_and_bad_requests_change_nothing():
    history, error = configured({"RAY_PROMETHEUS_HOST": "http://p:9090",
                                 "RAY_PROMETHEUS_HEADERS": '{"a": 1}'})
    assert history is None and "RAY_PROMETHEUS_HEADERS must be" in error
    assert configured({}) == (None, "")
    assert configured({"RAY_PROMETHEUS_HOST": "p:9090"})[0] is None
    for unusable in ("http://[::1", "http://p:9090/#frag", "http://p:99999"):
        history, error = configured({"RAY_PROMETHEUS_HOST": unusable})
        assert history is None and "a Prometheus URL looks like http://host:9090" in error
    slow, _ = configured({"RAY_PROMETHEUS_HOST": "http://p:9090/",
                          "RAY_ACCEL_PROMETHEUS_TIMEOUT_S": "20",
                          "RAY_ACCEL_PROMETHEUS_CLUSTER": "c1"}, session_name=THIS)
    assert slow.settings == PrometheusSettings("http://p:9090", (), THIS, "c1", 20.0)
    assert "RAY_ACCEL_PROMETHEUS_TIMEOUT_S must be seconds between 0.1 and 60, got 'soon'" in \
        configured({"RAY_PROMETHEUS_HOST": "http://p:9090",
                    "RAY_ACCEL_PROMETHEUS_TIMEOUT_S": "soon"})[1]
    api = _api(None, error=error)
    answers = asyncio.run(_get_all(api, {}, {"range": "2h"}, {"uuid": "GPU-1", "job_id": "01"},
                                   {"uuid": "GPU 1"}, {"node_id": NODE}))
    (status, body), *bad, (unknown, _) = answers
    assert status == 200 and body["source"] == "memory" and body["error"] == error
    assert [(s, b["error"].split(";")[0].split(":")[0]) for s, b in bad] == [
        (400, "range must be one of 1h, 6h, 24h, 7d, got '2h'"),
        (400, "give at most one of node_id, uuid, job_id"),
        (400, "malformed device uuid 'GPU 1'")]
    assert unknown == 404  # in memory only, an unknown node has no series


def test_the_standalone_refuses_a_prometheus_that_is_not_a_url():
    result = subprocess.run([sys.executable, "-m", "ray_accel.exporter.cli", "dashboard",
                             "--prometheus", "prometheus:9090"], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2
    assert "--prometheus: a Prometheus URL looks like http://host:9090, got 'prometheus:9090'" \
        in result.stderr


def test_answers_are_cached_and_a_failed_prometheus_is_not_asked_again_at_once():
    asked: list[str] = []
    failing = [False]

    async def fake_prometheus(request: web.Request) -> web.Response:
        form = await request.post()
        asked.append(form["query"])
        if failing[0]:
            return web.json_response({"status": "error", "error": "overloaded"}, status=503)
        if "ray_job_id" in form["query"]:
            return web.json_response(MATRIX)  # no series of that job
        return web.json_response({"status": "success", "data": {"resultType": "matrix",
                                  "result": [{"metric": {}, "values": [[form["end"], "1"]]}]}})

    async def scenario() -> tuple[list[dict], list[int], dict, str]:
        app = web.Application()
        app.router.add_post("/api/v1/query_range", fake_prometheus)
        async with TestServer(app) as server:
            api = _api(PrometheusHistory(PrometheusSettings(str(server.make_url("")))))
            async with TestClient(TestServer(build_app(api))) as client:

                async def ask(**params: str) -> dict:
                    return await (await client.get("/accelerators/api/history",
                                                   params=params)).json()

                answers = [await ask(uuid="GPU-1"), await ask(uuid="GPU-1")]
                counts = [len(asked)]
                answers.append(await ask(uuid="GPU-1", range="6h"))  # another series: asked
                counts.append(len(asked))
                empty = await ask(job_id="02000000")
                asked.clear()
                failing[0] = True
                answers += [await ask(uuid="GPU-2"), await ask(uuid="GPU-3")]
                counts.append(len(asked))
                api.tab_history.retry_after_s = 0.0
                answers.append(await ask(uuid="GPU-3"))
                counts.append(len(asked))
                return answers, counts, empty, str(server.make_url("")).rstrip("/")

    answers, counts, empty, url = asyncio.run(scenario())
    assert counts == [3, 6, 3, 6]  # three queries per device answer
    assert answers[0]["utilization"][-1] == 1.0
    assert empty["source"] == "memory" and empty["devices_held"] == []
    assert empty["error"] == f"Prometheus at {url} holds none of these series over the range"
    assert [a["source"] for a in answers] == ["prometheus"] * 3 + ["memory"] * 3
    assert answers[3]["error"] == answers[4]["error"]  # the second: from memory, not asked
    assert "(HTTP 503): overloaded" in answers[5]["error"]


def _fake_prometheus(answer_for) -> web.Application:
    """A Prometheus stand-in: `answer_for(request, form)` gives each query's answer."""
    async def handle(request: web.Request) -> web.StreamResponse:
        return await answer_for(request, await request.post())

    app = web.Application()
    app.router.add_post("/api/v1/query", handle)
    app.router.add_post("/api/v1/query_range", handle)
    return app


def _matrix_of(points: int, end: str, step: str) -> bytes:
    values = [[int(end) - i * int(step), "0.5"] for i in range(points)]
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"uuid": "GPU-1"}, "values": values[::-1]}]}}).encode()


async def _streamed(request: web.Request, body: bytes) -> web.StreamResponse:
    """`body` written in 16 KiB pieces, as a large answer arrives over a network."""
    reply = web.StreamResponse(headers={"Content-Type": "application/json"})
    await reply.prepare(request)
    for at in range(0, len(body), 16384):
        await reply.write(body[at:at + 16384])
        await asyncio.sleep(0)
    await reply.write_eof()
    return reply


def test_a_large_answer_is_read_whole_and_one_past_the_limit_is_refused(monkeypatch):
    padding = {"pad": 0}

    async def answer(request: web.Request, form) -> web.StreamResponse:
        body = _matrix_of(300, form["end"], form["step"])
        return await _streamed(request, body + b" " * padding["pad"])

    async def scenario() -> tuple[dict, str]:
        async with TestServer(_fake_prometheus(answer)) as server:
            history = PrometheusHistory(PrometheusSettings(str(server.make_url("")),
                                                           session_name="s1"))
            padding["pad"] = 600_000  # about 0.6 MB an answer: many network reads
            whole = await history.series(Scope("device", "GPU-1"), "1h")
            monkeypatch.setattr(prometheus_history, "MAX_ANSWER_BYTES", 2**20)
            padding["pad"] = 2**20
            try:
                await history.series(Scope("device", "GPU-1"), "1h")
            except PrometheusError as error:
                return whole, str(error)
            return whole, ""

    whole, refused = asyncio.run(scenario())
    assert whole["utilization"] == [0.5] * 300
    assert refused.endswith("answered more than 1 MiB")


def test_a_user_and_password_in_the_url_are_never_shown():
    async def answer(request: web.Request, form) -> web.Response:
        return web.json_response({"status": "error", "error": "overloaded"}, status=503)

    async def scenario() -> tuple[dict, str]:
        async with TestServer(_fake_prometheus(answer)) as server:
            url = str(server.make_url("")).replace("http://", "http://reader:s3cret@")
            api = _api(PrometheusHistory(PrometheusSettings(url, session_name="s1")))
            async with TestClient(TestServer(build_app(api))) as client:
                reply = await client.get("/accelerators/api/history", params={"uuid": "GPU-1"})
                return await reply.json(), str(server.make_url("")).rstrip("/")

    body, plain = asyncio.run(scenario())
    assert body["source"] == "memory"
    assert body["error"].startswith(f"Prometheus at {plain} refused a query")
    assert "s3cret" not in json.dumps(body) and "reader" not in json.dumps(body)


@pytest.mark.parametrize("headers", ['{"X-Org": "7\\r\\nInjected: 1"}', '{"X Org": "7"}',
                                     '[["X-Org", "a\\u0000b"]]'])
def test_a_header_with_a_line_break_or_a_bad_name_is_an_unusable_setting(headers):
    history, error = configured({"RAY_PROMETHEUS_HOST": "http://p:9090",
                                 "RAY_PROMETHEUS_HEADERS": headers})
    assert history is None
    assert error.startswith("the Prometheus setting is unusable, history is in-memory: "
                            "RAY_PROMETHEUS_HEADERS: ")
    history, error = configured({"RAY_PROMETHEUS_HOST": "http://p:9090",
                                 "RAY_PROMETHEUS_HEADERS": '{"X-Org": "7\\tb"}'})
    assert error == "" and history.settings.headers == (("X-Org", "7\tb"),)


def test_history_follows_the_clusters_ray_session_and_is_in_memory_while_unknown():
    asked: list[str] = []
    sessions = ["", "session_a", "session_a", "session_b"]
    clock = [1000.0]

    async def answer(request: web.Request, form) -> web.Response:
        asked.append(form["query"])
        return web.json_response({"status": "success", "data": {"resultType": "matrix",
                                  "result": [{"metric": {}, "values": [[form["end"], "1"]]}]}})

    async def session_now() -> str:
        return sessions.pop(0)

    async def scenario() -> list[dict]:
        async with TestServer(_fake_prometheus(answer)) as server:
            prometheus = PrometheusHistory(PrometheusSettings(str(server.make_url(""))))
            history = TabHistory(lambda: History(10), lambda _: [], prometheus,
                                 clock=lambda: clock[0], session_source=session_now)
            answers = [await history.series(Scope("device", "GPU-1"), "1h")]
            for step in (SESSION_RETRY_S, SESSION_CHECK_S, SESSION_CHECK_S):
                clock[0] += step
                answers.append(await history.series(Scope("device", "GPU-1"), "1h"))
            return answers

    unknown, first, same, restarted = asyncio.run(scenario())
    assert unknown["source"] == "memory" and "the Ray session is not known yet" in unknown["error"]
    assert [a["source"] for a in (first, same, restarted)] == ["prometheus"] * 3
    scoped = [q for q in asked if "SessionName" in q]
    assert scoped and all('SessionName=~"session_a"' in q for q in scoped[:3])
    assert all('SessionName=~"session_b"' in q for q in scoped[-3:])
    assert len(asked) == 9  # the same session's answer came again from its query, then b's
    assert not sessions


def test_in_memory_series_of_an_unknown_device_or_node_hold_a_value_per_timestamp():
    history = History(10)
    for at in (1.0, 2.0, 3.0):
        history.record(at, {"device.GPU-1.utilization": 0.5, "cluster.utilization": 0.5})
    for scope, key in (("device", "GPU-2"), ("node", "ab" * 28)):
        body = memory_series(history, scope, key)
        lists = {k: v for k, v in body.items() if isinstance(v, list)}
        assert lists["timestamps"] == [1.0, 2.0, 3.0]
        assert all(v == [None] * 3 for k, v in lists.items() if k != "timestamps"), body
    assert memory_series(history, "device", "GPU-1")["utilization"] == [0.5] * 3


def test_prometheus_warnings_are_passed_on_with_the_series():
    async def answer(request: web.Request, form) -> web.Response:
        return web.json_response({"status": "success", "warnings": [
            "partial response: store 2 did not answer"], "data": {"resultType": "matrix",
            "result": [{"metric": {}, "values": [[form["end"], "1"]]}]}})

    async def scenario() -> dict:
        async with TestServer(_fake_prometheus(answer)) as server:
            history = PrometheusHistory(PrometheusSettings(str(server.make_url("")),
                                                           session_name="s1"))
            return await history.series(Scope("device", "GPU-1"), "1h")

    body = asyncio.run(scenario())
    assert body["warnings"] == ["partial response: store 2 did not answer"]
    assert body["utilization"][-1] == 1.0
