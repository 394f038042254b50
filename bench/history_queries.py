"""The cluster history's cost in a real Prometheus: every device's series against the recorded ones.

Backfills a Prometheus TSDB (`promtool tsdb create-blocks-from openmetrics`) with N
nodes x 8 devices of the series the cluster scope reads (general utilization, memory
in use, power, device up, one allocation and its idle flag per device) over a window at
one sample a minute, plus the recording rules' series (grafana/alerts/recording.py) at
their 10 s interval, computed from the same values; then serves it with
/usr/bin/prometheus and runs the tab's own cluster queries (`scope_queries`, on
`PrometheusHistory.grid`) both ways: wall time of the five concurrent range queries,
Prometheus' CPU time for them, and the samples it read (`stats=all`). Run by hand:

    .venv/bin/python bench/history_queries.py --nodes 100 300 --window 1d
    .venv/bin/python bench/history_queries.py --nodes 10000 --window 7d --ranges 7d \
        --recorded-only
    .venv/bin/python bench/history_queries.py --nodes 1000 10000 --window 10m --rule-cost

It prints a Markdown table; its figures are in docs/benchmarks.md, section 5.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp

from ray_accel.dashboard_module.prometheus_history import (
    RANGES,
    PrometheusHistory,
    PrometheusSettings,
    Scope,
    on_grid,
    scope_queries,
)
from ray_accel.exporter import catalog as m
from ray_accel.grafana.alerts.recording import INTERVAL_S, record_name, recording_rules
from ray_accel.grafana.promql import duration, metric

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
from measure import process_cpu_s
from prometheus_server import PrometheusServer

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
SESSION, CLUSTER = "session_bench", "bench"
_SCOPE = f'SessionName="{SESSION}",ray_io_cluster="{CLUSTER}"'
DEVICES_PER_NODE = 8
RAW_INTERVAL_S = 60
REPEATS = 3
# The raw series of each device the cluster scope reads, by `device_values` key
RAW_FAMILIES = {"utilization": m.GPU_UTILIZATION, "memory": m.MEMORY_USAGE, "power": m.POWER,
                "up": m.DEVICE_UP, "idle": m.ALLOCATION_IDLE, "allocation": m.ALLOCATION}


def device_values(device: int, tick: int) -> dict[str, float]:
    """Deterministic readings of one device at one raw sample."""
    return {"utilization": ((device * 7 + tick * 13) % 101) / 100,
            "memory": float(((device * 3 + tick) % 80) * 10**9),
            "power": 100.0 + (device * 11 + tick * 5) % 600,
            "up": 0.0 if (device + tick) % 997 == 0 else 1.0,
            "idle": 1.0 if (device + tick) % 5 == 0 else 0.0}


def device_series(devices: int, ticks: range, start: int | None = None) -> Iterator[str]:
    """OpenMetrics text of the devices' raw series over `ticks`, `start` the first tick's
    timestamp (None: one scrape's text, without timestamps)."""
    names = {key: metric(otel_name) for key, otel_name in RAW_FAMILIES.items()
             if key != "allocation"}
    labels = [f'{_SCOPE},ray_node_id="n{d // DEVICES_PER_NODE:05d}",uuid="GPU-{d:06d}"'
              for d in range(devices)]

    def at(tick: int) -> str:
        return "" if start is None else f" {start + tick * RAW_INTERVAL_S}"

    for key, name in names.items():
        extra = ',task="general"' if key == "utilization" else ',pid="4000"' * (key == "idle")
        yield f"# TYPE {name} gauge\n"
        for tick in ticks:
            yield "".join(f"{name}{{{labels[d]}{extra}}} {device_values(d, tick)[key]!r}"
                          f"{at(tick)}\n" for d in range(devices))
    allocation = metric(RAW_FAMILIES["allocation"])
    yield f"# TYPE {allocation} gauge\n"
    for tick in ticks:
        yield "".join(f'{allocation}{{{labels[d]},pid="4000"}} 1.0{at(tick)}\n'
                      for d in range(devices))


def _families(devices: int, ticks: range, start: int) -> Iterator[str]:
    """OpenMetrics text of the raw series, then of the recorded ones."""
    yield from device_series(devices, ticks, start)
    yield from _recorded(devices, ticks, start)


def _fleet_parts(devices: int, tick: int) -> dict[str, float]:
    """The recorded series' values at one raw sample, the devices' values summed."""
    values = [device_values(d, tick) for d in range(devices)]
    return {"utilization_sum": sum(v["utilization"] for v in values),
            "utilization_count": float(devices),
            "memory_used_bytes": sum(v["memory"] for v in values),
            "power_watts": sum(v["power"] for v in values),
            "idle_allocations": sum(v["idle"] for v in values),
            "devices_down": float(sum(v["up"] == 0 for v in values))}


def _fleet_parts_alone(devices: int, tick: int) -> dict[str, float]:
    """Values of the recorded series where no device series is backfilled: the same
    magnitudes, made without reading every device (what Prometheus reads does not depend
    on them)."""
    share = ((tick * 13) % 101) / 100
    return {"utilization_sum": devices * share, "utilization_count": float(devices),
            "memory_used_bytes": devices * share * 80e9, "power_watts": devices * 400.0,
            "idle_allocations": float(devices // 5), "devices_down": float(tick % 3)}


def _recorded(devices: int, ticks: range, start: int, parts_of=_fleet_parts) -> Iterator[str]:
    per_tick = [parts_of(devices, tick) for tick in ticks]
    evaluations = RAW_INTERVAL_S // round(INTERVAL_S)
    for part in per_tick[0]:
        name = record_name(part)
        yield f"# TYPE {name} gauge\n"
        for tick, parts in zip(ticks, per_tick, strict=True):
            yield "".join(f"{name}{{{_SCOPE}}} {parts[part]!r} "
                          f"{start + tick * RAW_INTERVAL_S + i * round(INTERVAL_S)}\n"
                          for i in range(evaluations))


def backfill(folder: Path, nodes: int, window_s: int, end: int,
             recorded_only: bool = False) -> int:
    """A TSDB in `folder`/tsdb (where `PrometheusServer` keeps its own) holding `nodes` x 8
    devices over `window_s` up to `end` (with `recorded_only`, only the recording rules'
    series of that many devices); returns the raw sample count."""
    devices = nodes * DEVICES_PER_NODE
    ticks = range(window_s // RAW_INTERVAL_S + 1)
    start = end - (len(ticks) - 1) * RAW_INTERVAL_S
    chunks = (_recorded(devices, ticks, start, _fleet_parts_alone) if recorded_only
              else _families(devices, ticks, start))
    text = folder / "input.om"
    with text.open("w") as out:
        for chunk in chunks:
            out.write(chunk)
        out.write("# EOF\n")
    tsdb = folder / "tsdb"
    subprocess.run([PROMTOOL, "tsdb", "create-blocks-from", "openmetrics",
                    "--max-block-duration=24h", str(text), str(tsdb)],
                   check=True, capture_output=True, timeout=3600)
    text.unlink()
    return 0 if recorded_only else devices * len(RAW_FAMILIES) * len(ticks)


def _served(folder: Path) -> PrometheusServer:
    """Prometheus on the TSDB `backfill` wrote under `folder`, keeping all of it."""
    return PrometheusServer("global: {scrape_interval: 1m}\n", folder,
                            extra_flags=("--storage.tsdb.retention.time=30d",),
                            start_timeout_s=120)


def _cpu_s(served: PrometheusServer) -> float:
    """Prometheus' CPU time so far (user + system), from /proc."""
    assert served.process is not None
    return process_cpu_s(served.process.pid)


def _history(served: PrometheusServer) -> PrometheusHistory:
    return PrometheusHistory(PrometheusSettings(served.url, session_name=SESSION,
                                                cluster=CLUSTER, timeout_s=60))


async def _timed(served: PrometheusServer, history: PrometheusHistory, range_name: str,
                 recorded: bool, now: float) -> dict[str, Any]:
    """One cluster history's five range queries, concurrent as the tab runs them."""
    start, end, step = history.grid(range_name, now)
    queries = scope_queries(Scope("cluster"), history.filters, step, recorded)
    url = f"{served.url}/api/v1/query_range"

    async def one(session: aiohttp.ClientSession, expr: str) -> dict[str, Any]:
        form = {"query": expr, "start": str(start), "end": str(end), "step": str(step),
                "stats": "all"}
        async with session.post(url, data=form) as reply:
            return json.loads(await reply.read())

    cpu, began = _cpu_s(served), time.perf_counter()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        answers = await asyncio.gather(*(one(session, q) for q in queries.values()))
    wall, cpu = time.perf_counter() - began, _cpu_s(served) - cpu
    errors = [a.get("error", "") for a in answers if a.get("status") != "success"]
    samples = sum(a["data"].get("stats", {}).get("samples", {}).get("totalQueryableSamples", 0)
                  for a in answers if a.get("status") == "success")
    return {"wall_s": wall, "cpu_s": cpu, "samples": samples, "errors": errors}


def measure(served: PrometheusServer, range_name: str, now: float,
            ways: tuple[bool, ...] = (False, True)) -> dict[str, Any]:
    """Raw and recorded (`ways`: recorded or not), alternated, REPEATS times each; medians."""
    history = _history(served)
    runs: dict[bool, list[dict[str, Any]]] = {recorded: [] for recorded in ways}
    for _ in range(REPEATS):
        for recorded in ways:
            runs[recorded].append(asyncio.run(_timed(served, history, range_name, recorded,
                                                     now)))
    found = {}
    for recorded, done in runs.items():
        found["recorded" if recorded else "raw"] = {
            "wall_s": statistics.median(r["wall_s"] for r in done),
            "cpu_s": statistics.median(r["cpu_s"] for r in done),
            "samples": done[-1]["samples"], "errors": done[-1]["errors"]}
    return found


def agree(served: PrometheusServer, range_name: str, now: float,
          raw_too: bool = True) -> dict[str, Any]:
    """The tab's own answer (PrometheusHistory.series): whether it read the recorded series,
    and (`raw_too`) the largest relative difference from the raw answer on the same grid."""
    history = _history(served)
    answer = asyncio.run(history.series(Scope("cluster"), range_name, now))
    if not raw_too:
        return {"tab_recorded": answer["recorded"], "max_rel_diff": None}
    raw = asyncio.run(_values(served, history, range_name, now))
    worst = 0.0
    for name, values in raw.items():
        for a, b in zip(answer[name], values, strict=True):
            if a is not None and b is not None:
                worst = max(worst, abs(a - b) / max(abs(b), 1e-12))
    return {"tab_recorded": answer["recorded"], "max_rel_diff": worst}


async def _values(served: PrometheusServer, history: PrometheusHistory, range_name: str,
                  now: float) -> dict[str, list[float | None]]:
    start, end, step = history.grid(range_name, now)
    count = (end - start) // step + 1
    found = {}
    async with aiohttp.ClientSession() as session:
        for name, expr in scope_queries(Scope("cluster"), history.filters, step).items():
            form = {"query": expr, "start": str(start), "end": str(end), "step": str(step)}
            async with session.post(f"{served.url}/api/v1/query_range", data=form) as reply:
                result = (await reply.json())["data"]["result"]
            found[name] = on_grid(result[0], start, step, count) if result else [None] * count
    return found


def rule_costs(served: PrometheusServer, at: int) -> dict[str, Any]:
    """One evaluation of the recording group's rules at `at` (each as the instant query
    Prometheus runs for it, one after another as a group runs them), REPEATS times: the
    medians of the round's wall time, Prometheus' CPU and the samples it read."""
    async def evaluate(session: aiohttp.ClientSession, expr: str) -> int:
        form = {"query": expr, "time": str(at), "stats": "all"}
        async with session.post(f"{served.url}/api/v1/query", data=form) as reply:
            answer = json.loads(await reply.read())
        if answer.get("status") != "success" or not answer["data"]["result"]:
            raise RuntimeError(f"{expr}: {answer.get('error', 'no result')}")
        return answer["data"]["stats"]["samples"]["totalQueryableSamples"]

    async def one_round() -> dict[str, Any]:
        cpu, began = _cpu_s(served), time.perf_counter()
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
            samples = [await evaluate(session, expr) for expr in recording_rules().values()]
        return {"wall_s": time.perf_counter() - began, "cpu_s": _cpu_s(served) - cpu,
                "samples": sum(samples)}

    rounds = [asyncio.run(one_round()) for _ in range(REPEATS)]
    return {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[100, 300])
    parser.add_argument("--window", default="1d", help="how much history to backfill (1d)")
    parser.add_argument("--ranges", nargs="+", default=["6h", "24h"], choices=list(RANGES))
    parser.add_argument("--recorded-only", action="store_true",
                        help="backfill only the recording rules' series (of that many nodes' "
                             "devices) and query only them: what the tab reads at any size")
    parser.add_argument("--rule-cost", action="store_true",
                        help="instead, time one evaluation of the recording rules over the "
                             "backfilled device series (back-fill a short --window, e.g. 10m)")
    args = parser.parse_args()
    ways = (True,) if args.recorded_only else (False, True)
    from ray_accel.grafana.promql import parse_duration

    window_s = int(parse_duration(args.window))
    print(f"load before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores", file=sys.stderr)
    rows = []
    if args.rule_cost:
        print("| Nodes x 8 devices | One evaluation of the rules: wall | Prometheus CPU | "
              f"samples read | CPU share at one evaluation every {INTERVAL_S:g} s |")
        print("|---|---|---|---|---|")
    for nodes in args.nodes:
        with tempfile.TemporaryDirectory(prefix="history-bench-") as folder:
            now = time.time()
            end = int(now // RAW_INTERVAL_S) * RAW_INTERVAL_S
            began = time.perf_counter()
            samples = backfill(Path(folder), nodes, window_s, end, args.recorded_only)
            built = time.perf_counter() - began
            with _served(Path(folder)) as served:
                if args.rule_cost:
                    cost = rule_costs(served, end)
                    print(f"| {nodes:,} x 8 | {cost['wall_s'] * 1000:.0f} ms | "
                          f"{cost['cpu_s'] * 1000:.0f} ms | {cost['samples']:,} | "
                          f"{cost['cpu_s'] / INTERVAL_S:.3f} core |", flush=True)
                    continue
                for range_name in args.ranges:
                    figures = measure(served, range_name, now, ways)
                    check = agree(served, range_name, now, raw_too=not args.recorded_only)
                    rows.append((nodes, range_name, samples, built, figures, check))
                    print(json.dumps({"nodes": nodes, "range": range_name, "samples": samples,
                                      "backfill_s": round(built, 1), **figures, **check}),
                          file=sys.stderr, flush=True)
    print(f"load after: {os.getloadavg()[0]:.2f}", file=sys.stderr)
    if args.rule_cost:
        return 0
    print(f"| Nodes x 8 devices | Backfilled ({duration(window_s)} at 60 s) | Range | "
          "Raw: wall / Prometheus CPU / samples read | Recorded: wall / CPU / samples read | "
          "Tab read recorded |")
    print("|---|---|---|---|---|---|")
    for nodes, range_name, samples, _, figures, check in rows:
        cells = ["not backfilled" if f is None else
                 f"{f['wall_s'] * 1000:.0f} ms / {f['cpu_s'] * 1000:.0f} ms / "
                 f"{f['samples']:,}" + (f" ({f['errors'][0][:60]})" if f["errors"] else "")
                 for f in (figures.get("raw"), figures["recorded"])]
        differs = ("" if check["max_rel_diff"] is None
                   else f" (max rel. diff {check['max_rel_diff']:.1e})")
        print(f"| {nodes:,} x 8 | {samples:,} raw samples | {range_name} | {cells[0]} | "
              f"{cells[1]} | {check['tab_recorded']}{differs} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
