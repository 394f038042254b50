"""Cluster aggregation benchmark: the dashboard module over N simulated 8-GPU nodes.

    python bench/aggregation.py NODES [--change FRACTION] [--rounds R] [--agent-processes K]
                                      [--silent S] [--fetch-timeout SECONDS]

Prints one JSON object. Run by bench/run.py in a fresh process per size, so that
the resident-memory figures belong to that size alone. The nodes are copies of
one real snapshot of the simulated 8x H200 node, served over loopback HTTP by the
fake agents of dashboard_module/fleet_agents.py in processes of their own (so the
head's CPU and memory are the head's alone; two by default, each serving half the
nodes, so that a node page's snapshot queues behind half the fleet's summaries, not
all of them, where each real node's agent serves only its own): each node's summary
(made before they serve, as a real agent's is ready) with its ETag and 304s, and its
full snapshot for the node page, answered by a minimal HTTP/1.1 responder rather
than the agents' aiohttp server, whose CPU would otherwise compete with the head's
for this machine's cores. The fleet is spread (racks,
NVLink domains, node pools; utilization, activity, power and temperature vary by
node), so the head finds no more equal values to share than in a real fleet.
Every refresh interval a `--change` share of the nodes gets a new summary (as
power readings would make). The collector runs its rounds as in production (5 s
refresh, fetches spread over the interval) while a client asks for the summary
and both heatmap forms every 0.25 s and a random node's page every 0.5 s through
the standalone dashboard's HTTP stack. The start-up (a fresh head: every summary
new, nodes never asked admitted at the rate the head parses them) runs until
every node is in the view with its data and is reported on its own (`start_up`:
its rounds, how soon the view listed the whole cluster, when the last node came
in, its CPU; the client's answers meanwhile in `during_start_up`); `rounds` are
the rounds after it. `--silent S` adds S agents that take the head's requests and
never answer (a listener that accepts and stays quiet, as a hung agent or a host
gone behind a kept-alive connection): the rounds then count the requests that
waited on them (`quiet`), those left for a later round (`not_asked`) and the
nodes shown `stale`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import resource
import socket
import statistics
import sys
import threading
import time
from typing import Any

from aiohttp import ClientSession, ClientTimeout
from aiohttp.test_utils import TestServer
from footprint import rss_mib

from ray_accel.dashboard_module.api import AcceleratorsApi
from ray_accel.dashboard_module.collector import AgentTarget, Collector
from ray_accel.dashboard_module.fleet import node_id
from ray_accel.dashboard_module.fleet_agents import FleetProcess, FleetShape, discovery
from ray_accel.dashboard_module.standalone import build_app

REFRESH_S = 5.0
DEFAULT_CHANGE = 0.1
DEFAULT_ROUNDS = 6
DEFAULT_AGENT_PROCESSES = 2
DEFAULT_FETCH_TIMEOUT_S = 10.0  # no fetch of a healthy fake agent comes near it
MAX_START_UP_ROUNDS = 60  # a limit for a head that never fills its view, not a target


def silent_agents(first_number: int, count: int) -> list[AgentTarget]:
    """`count` agents (numbered from `first_number`) behind one listener that accepts every
    connection and never answers; it serves until the process exits."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=4096)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            held.append(listener.accept()[0])

    threading.Thread(target=accept, name="silent-agents", daemon=True).start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    return [AgentTarget(node_id(n), f"{url}/n/{n}", f"silent-{n}")
            for n in range(first_number, first_number + count)]


def percentiles(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    return {"p50": statistics.median(ordered),
            "p99": ordered[max(int(len(ordered) * 0.99) - 1, 0)],
            "max": ordered[-1], "count": len(ordered)}


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# -- the head ------------------------------------------------------------------------------
async def timed_get(client: ClientSession, path: str, into: list[float]) -> None:
    # A plain session: aiohttp's TestClient keeps every response (and its body) until
    # it closes, which would count as the head's memory.
    started = time.perf_counter()
    async with client.get(path, timeout=ClientTimeout(total=120)) as reply:
        await reply.read()
        assert reply.status == 200, (path, reply.status)
    into.append(time.perf_counter() - started)


def new_timings() -> dict[str, list[float]]:
    return {"summary": [], "heatmap": [], "heatmap_columns": [], "node_page": []}


async def ask_while_rounds_run(client: ClientSession, nodes: int, until: asyncio.Event,
                               phases: dict[str, dict[str, list[float]]]) -> None:
    """Ask as the tab does until `until`; each answer's time goes to `phases["now"]` (the
    phase the rounds are in when it is asked)."""
    rng = random.Random(11)
    tick = 0
    while not until.is_set():
        timings = phases["now"]
        await timed_get(client, "/accelerators/api/summary", timings["summary"])
        await timed_get(client, "/accelerators/api/heatmap", timings["heatmap"])
        await timed_get(client, "/accelerators/api/heatmap?form=columns",
                        timings["heatmap_columns"])
        if tick % 2 == 0:
            await timed_get(client, f"/accelerators/api/nodes/{node_id(rng.randrange(nodes))}",
                            timings["node_page"])
        tick += 1
        await asyncio.sleep(0.25)


def round_figures(collector: Collector, wall_s: float, cpu: float) -> dict[str, Any]:
    stats = collector.last_round
    return {"wall_s": wall_s, "cpu_s": cpu, "requests": stats.requests,
            "summaries": stats.summaries, "not_modified": stats.not_modified,
            "snapshots": stats.snapshots, "failures": stats.failures,
            "body_bytes": stats.body_bytes, "rebuilt_nodes": stats.rebuilt_nodes,
            "deferred": stats.deferred, "quiet": stats.quiet, "not_asked": stats.not_asked,
            "waiting": collector.view.summary["nodes"]["waiting"],
            "stale": collector.view.summary["nodes"]["stale"]}


async def start_up(collector: Collector, nodes: int) -> dict[str, Any]:
    """The rounds from a fresh head until every node is in the view with its data, paced
    as in production (new nodes are admitted at the rate the head parses them, the rest
    `waiting`), and how soon the view first listed the whole cluster."""
    began, cpu_began = time.perf_counter(), cpu_s()
    first_view: list[float] = []

    async def watch() -> None:
        while collector.view.summary["nodes"]["total"] < nodes:
            await asyncio.sleep(0.01)
        first_view.append(time.perf_counter() - began)

    watching = asyncio.ensure_future(watch())
    rounds = []
    while True:
        started, cpu = time.perf_counter(), cpu_s()
        await collector.refresh()
        rounds.append(round_figures(collector, time.perf_counter() - started, cpu_s() - cpu))
        if rounds[-1]["waiting"] == 0 or len(rounds) >= MAX_START_UP_ROUNDS:
            break
        await asyncio.sleep(collector.pause_after(time.perf_counter() - started))
    watching.cancel()
    return {"rounds": rounds, "to_full_view_s": time.perf_counter() - began,
            "cpu_s": cpu_s() - cpu_began,
            "first_view_s": first_view[0] if first_view else None}


async def measure(nodes: int, change: float, rounds: int,
                  agent_processes: int = DEFAULT_AGENT_PROCESSES, silent: int = 0,
                  fetch_timeout_s: float = DEFAULT_FETCH_TIMEOUT_S) -> dict[str, Any]:
    agents = FleetProcess(nodes, change, FleetShape(spread=True), processes=agent_processes)
    results: dict[str, Any] = {"nodes": nodes, "devices_per_node": 8, "change": change,
                               "refresh_s": REFRESH_S, "agent_processes": agent_processes,
                               **{k: agents.info[k] for k in (
                                   "summary_bytes", "snapshot_bytes")},
                               "silent": silent, "fetch_timeout_s": fetch_timeout_s}
    try:
        before = rss_mib()
        targets = agents.targets() + silent_agents(nodes, silent)
        collector = Collector(discovery(targets), refresh_s=REFRESH_S,
                              fetch_timeout_s=fetch_timeout_s)
        api = AcceleratorsApi(collector, "standalone", "http://127.0.0.1:8265")
        server = TestServer(build_app(api, None))
        await server.start_server()  # starts the collector's rounds too
        await collector.stop()
        client = ClientSession(base_url=str(server.make_url("")))
        try:
            # The start-up: every summary is new. The tab asks from when the view lists
            # the cluster (at once: the nodes not yet asked are `waiting`).
            phases = {"now": new_timings()}
            starting = asyncio.ensure_future(start_up(collector, nodes))
            while collector.view.summary["nodes"]["total"] < nodes and not starting.done():
                await asyncio.sleep(0.01)
            done = asyncio.Event()
            asking = asyncio.ensure_future(ask_while_rounds_run(client, nodes, done, phases))
            results["start_up"] = await starting
            results["first_round"] = results["start_up"]["rounds"][0]
            results["during_start_up"] = {k: percentiles(v) for k, v in phases["now"].items()
                                          if v}
            after_first = rss_mib()
            timings = phases["now"] = new_timings()
            per_round = []
            window_wall, window_cpu = time.perf_counter(), cpu_s()
            for _ in range(rounds):
                started, cpu = time.perf_counter(), cpu_s()
                await collector.refresh()
                per_round.append(round_figures(collector, time.perf_counter() - started,
                                               cpu_s() - cpu))
                await asyncio.sleep(max(REFRESH_S - (time.perf_counter() - started), 0.0))
            done.set()
            await asking
            results["rounds"] = per_round
            results["cpu_share"] = (cpu_s() - window_cpu) / (time.perf_counter() - window_wall)
            results["rss_mib"] = {"before": before, "after_start_up": after_first,
                                  "after": rss_mib()}
            results["during_rounds"] = {k: percentiles(v) for k, v in timings.items()}
            results["node_page_fetches"] = collector.details.fetches
        finally:
            await client.close()
            await server.close()
            await collector.stop()
    finally:
        agents.close()
    return results


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("nodes", type=int)
    parser.add_argument("--change", type=float, default=DEFAULT_CHANGE,
                        help="share of nodes whose summary changes each interval")
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS)
    parser.add_argument("--agent-processes", type=int, default=DEFAULT_AGENT_PROCESSES,
                        help="processes serving the fake agents")
    parser.add_argument("--silent", type=int, default=0,
                        help="agents that take requests and never answer, beside NODES")
    parser.add_argument("--fetch-timeout", type=float, default=DEFAULT_FETCH_TIMEOUT_S,
                        help="the collector's timeout for one agent's answer (seconds)")
    args = parser.parse_args(argv[1:])
    if not 0.0 <= args.change <= 1.0:
        parser.error("--change must be between 0 and 1")
    if args.agent_processes < 1:
        parser.error("--agent-processes must be at least 1")
    if args.silent < 0 or not args.fetch_timeout > 0:
        parser.error("--silent must be 0 or more and --fetch-timeout above 0")
    print(json.dumps(asyncio.run(measure(args.nodes, args.change, args.rounds,
                                         args.agent_processes, args.silent,
                                         args.fetch_timeout))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
