"""Cluster aggregation benchmark: the dashboard module over N simulated 8-GPU nodes.

    python bench/aggregation.py NODES

Prints one JSON object. Run by bench/run.py in a fresh process per size, so that
the resident-memory figures belong to that size alone. The nodes are copies of
one real snapshot of the simulated 8x H200 node (dashboard_module/fleet.py),
served over loopback HTTP by one server; the collector fetches, parses and
reduces them as it would real agents, and requests go through the standalone
dashboard's HTTP stack.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from typing import Any

from aiohttp import ClientTimeout
from aiohttp.test_utils import TestClient, TestServer
from footprint import rss_mib

from ray_accel.dashboard_module.api import AcceleratorsApi
from ray_accel.dashboard_module.collector import Collector
from ray_accel.dashboard_module.fleet import Fleet, FleetServer
from ray_accel.dashboard_module.standalone import build_app
from ray_accel.exporter.backends.nvidia import NvidiaBackend
from ray_accel.exporter.sampler import Sampler
from ray_accel.exporter.simulate import SimulatedHardware
from ray_accel.exporter.sinks.json import snapshot_document
from ray_accel.exporter.store import SnapshotStore

ENDPOINTS = ("summary", "nodes", "heatmap", "jobs")
REQUESTS = 200


def template_document() -> dict[str, Any]:
    """One snapshot document of the simulated 8x H200 node, as its agent serves it."""
    hardware = SimulatedHardware.start("hgx-h200")
    hardware.activate()
    sampler = Sampler([NvidiaBackend()], SnapshotStore(), interval_s=1.0)
    sampler.run_cycle()
    snapshot = sampler.run_cycle()
    sampler.stop()
    return json.loads(json.dumps(snapshot_document(snapshot)))


def percentiles(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    return {"p50": statistics.median(ordered), "p99": ordered[int(len(ordered) * 0.99) - 1],
            "max": ordered[-1]}


async def timed_gets(client: TestClient, path: str, count: int) -> list[float]:
    timings = []
    for _ in range(count):
        started = time.perf_counter()
        reply = await client.get(path, timeout=ClientTimeout(total=120))
        await reply.read()
        timings.append(time.perf_counter() - started)
    return timings


async def measure(nodes: int) -> dict[str, Any]:
    fleet = Fleet(template_document())
    bodies = [fleet.text(n).encode() for n in range(nodes)]
    results: dict[str, Any] = {"nodes": nodes, "snapshot_bytes": len(bodies[0])}
    async with FleetServer(lambda n: bodies[n]) as server:
        targets = [server.target(n) for n in range(nodes)]

        async def discover():
            return targets

        before = rss_mib()  # the fleet's bodies are held by the server already
        collector = Collector(discover, refresh_s=5, fetch_timeout_s=60)
        api = AcceleratorsApi(collector, "standalone", "http://127.0.0.1:8265")
        client = TestClient(TestServer(build_app(api, None)))
        await client.start_server()  # starts the collector's background rounds too
        try:
            await collector.stop()  # rounds timed one by one below
            rounds = []
            for _ in range(3):
                started = time.perf_counter()
                await collector.refresh()
                rounds.append(time.perf_counter() - started)
            results["round_s"] = rounds
            results["rss_mib"] = {"before": before, "after": rss_mib()}
            first = {}
            for endpoint in ENDPOINTS:  # the first answer of a view builds it
                await collector.refresh()
                first[endpoint] = (await timed_gets(client, f"/accelerators/api/{endpoint}",
                                                    1))[0]
            results["first_answer_s"] = first
            results["cached"] = {
                endpoint: percentiles(await timed_gets(
                    client, f"/accelerators/api/{endpoint}", REQUESTS // 4))
                for endpoint in ENDPOINTS}
            # Requests while rounds run back to back: what a user sees during refreshes.
            collector.refresh_s = 0.0
            await collector.start()
            await asyncio.sleep(0)
            results["during_refresh"] = percentiles(
                await timed_gets(client, "/accelerators/api/summary", REQUESTS))
            results["rounds_meanwhile"] = collector.rounds
        finally:
            await client.close()
            await collector.stop()
    return results


def main(argv: list[str]) -> int:
    print(json.dumps(asyncio.run(measure(int(argv[1])))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
