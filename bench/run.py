"""Benchmarks: collection cost against Ray's own GPU provider, scrape cost, the agent's
footprint and interval, and the dashboard module's aggregation at cluster scale.

Run with `make bench`; it rewrites docs/benchmarks.md with every figure. All
measurements use the simulated 8x H200 node (the fake libnvidia-ml.so.1, whose
slow calls cost the CPU time measured on a real H200). `--real-gpu` runs the
collection comparison alone on a host's real GPUs (docs/benchmarks-real-gpu.md).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

import pynvml
from agent_footprint import agent_process, footprint_sections, footprint_targets
from collection import (
    collection,
    collection_checks,
    collection_section,
    collection_without_gpm,
    real_gpu_report,
    with_collection_rerun,
)
from hand_notes import RERUN_NOTE, kept_notes
from measure import REPEATS, target_line
from scrape import scrape, scrape_section

from ray_accel.exporter.backends.nvidia import NvidiaBackend
from ray_accel.exporter.sampler import Sampler
from ray_accel.exporter.simulate import SimulatedHardware
from ray_accel.exporter.store import SnapshotStore

ROOT = Path(__file__).resolve().parents[1]


AGGREGATION_SIZES = (10, 100, 1000, 10_000)
# The collector that pulled every full snapshot each round (bench/aggregation.py before
# the summaries): nodes -> (round, memory held, summary p99 while rounds ran).
AGGREGATION_BEFORE = {10: ("31.2 ms", "+1.8 MiB", "1.41 ms"),
                      100: ("272 ms", "+27.6 MiB", "56.8 ms"),
                      1000: ("3.9 s", "+154 MiB", "238-489 ms"),
                      10_000: ("36-43 s", "+1,474 MiB", "889 ms")}
# The head whose first round asked every node at once, its fake agents making each summary
# when first asked (same bench, quiet machine, load 0.5-1.6): nodes -> (rounds after the
# first: median / max wall, the first round's wall; head CPU per round, memory held, summary
# / heatmap columns / node page p99 while rounds ran).
AGGREGATION_SUMMARIES_BEFORE = {
    10: ("2.83 / 2.83 s", "0.08 s", "+3 MiB", "3.26 / 1.6 / 37.4 ms"),
    100: ("3.00 / 3.01 s", "0.23 s", "+6 MiB", "4.1 / 9.75 / 53.2 ms"),
    1000: ("3.15 / 3.18 s", "0.73 s", "+40 MiB", "2.9 / 6.03 / 26.5 ms"),
    10_000: ("4.61 / 8.00 s, first 18.4 s", "4.12 s", "+442 MiB", "22.8 / 82.5 / 90.9 ms")}

AGGREGATION_HEADING = "## 5. Cluster aggregation"


def aggregation(results: dict) -> None:
    """The dashboard module over 10 to 10,000 nodes, each size in a process of its own."""
    rows = []
    for nodes in AGGREGATION_SIZES:
        finished = subprocess.run([sys.executable, str(ROOT / "bench" / "aggregation.py"),
                                   str(nodes)], capture_output=True, text=True, check=True)
        rows.append(json.loads(finished.stdout.strip().splitlines()[-1]))
    results["aggregation"] = rows


def slow_clients(results: dict) -> None:
    """Scrape latency of an agent process while 1,500 clients trickle request heads."""
    finished = subprocess.run([sys.executable, str(ROOT / "bench" / "http_slow_clients.py")],
                              capture_output=True, text=True, check=True)
    results["slow_clients"] = json.loads(finished.stdout.strip().splitlines()[-1])


def slow_clients_lines(r: dict) -> list[str]:
    rows = [("alone", r["alone"]), (f"{r['slow_clients']:,} slow clients", r["under_load"])]
    lines = ["| while | kept-alive p50 / p99 / max | fresh connection p50 / p99 / max | "
             "failed |", "|---|---|---|---|"]
    for what, figures in rows:
        cells = [" / ".join(f"{figures[kind][q]:.3g}" for q in ("p50_ms", "p99_ms", "max_ms"))
                 + " ms" for kind in ("kept", "fresh")]
        tried = figures["kept"]["count"] + figures["fresh"]["count"] + figures["failures"]
        lines.append(f"| {what} | {cells[0]} | {cells[1]} | {figures['failures']} of {tried} |")
    return lines


def targets(results: dict) -> list[str]:
    """One line per target of the benchmark plan: met or missed, with the figures."""
    c, s = results["collection"], results["scrape"]
    ten_k = next(statistics.median(t) for series, t, _, _ in s["rows"] if series >= 10_000)
    largest = results["aggregation"][-1]
    checks = [
        *collection_checks(c),
        (ten_k < 0.05, f"10k-series scrape under 50 ms: {ten_k * 1e3:.0f} ms uncached; a "
         "repeated scrape within one cycle is served from the cache"),
        *footprint_targets(results),
        *aggregation_targets(largest),
    ]
    return [target_line(ok, text) for ok, text in checks]


def aggregation_targets(row: dict) -> list[tuple[bool, str]]:
    """The cluster-view targets at the largest size."""
    walls = [r["wall_s"] for r in row["rounds"]]
    during = row["during_rounds"]
    held = row["rss_mib"]["after"] - row["rss_mib"]["before"]
    starting = row.get("during_start_up", {})
    at = f"{row['nodes']:,} nodes x 8 devices"
    cores = statistics.median(r["cpu_s"] for r in row["rounds"]) / row["refresh_s"]
    settled = walls[1:] or walls
    start = row.get("start_up")
    if start is None:  # a run from before the start-up's pacing: one first round
        round_line = (max(walls) <= 5.0, f"{at}: round at most 5 s: "
                      f"{statistics.median(walls):.1f} s median, {max(walls):.1f} s at most "
                      f"(the first round, every summary new, took "
                      f"{row['first_round']['wall_s']:.1f} s; the next found "
                      f"{row['rounds'][0]['summaries']:,} changed and took {walls[0]:.1f} s; "
                      f"the rounds after it {min(settled):.1f}-{max(settled):.1f} s)")
    else:
        start_walls = [r["wall_s"] for r in start["rounds"]]
        round_line = (max(walls + start_walls) <= 5.0, f"{at}: round at most 5 s: "
                      f"{statistics.median(walls):.1f} s median, {max(walls):.1f} s at most "
                      f"once every node is in; the start-up's {len(start_walls)} rounds (nodes "
                      f"never asked admitted at the rate the head parses them) "
                      f"{min(start_walls):.1f}-{max(start_walls):.1f} s; the first full pull: "
                      f"every node in the view with its data after {start['to_full_view_s']:.1f} s "
                      f"({start['cpu_s']:.1f} s of CPU), the whole cluster listed after "
                      f"{start['first_view_s']:.2f} s")
    return [
        round_line,
        (cores <= 1.0, f"{at}: head CPU at most one core on average: a round's CPU over "
         f"the 5 s refresh is {cores:.2f} core ({row['cpu_share']:.2f} core measured over "
         "the rounds after the start-up, the asking client's included)"),
        (held <= 512, f"{at}: held memory at most 512 MiB: {held:+.0f} MiB"),
        (max(during["summary"]["p99"], during["heatmap_columns"]["p99"],
             *(starting[k]["p99"] for k in ("summary", "heatmap_columns") if k in starting))
         <= 0.1,
         f"{at}: summary and heatmap p99 at most 100 ms while rounds run: "
         f"{during['summary']['p99'] * 1e3:.0f} ms and "
         f"{during['heatmap_columns']['p99'] * 1e3:.0f} ms (the heatmap's columns form, which "
         f"the tab asks for; its per-node form: {during['heatmap']['p99'] * 1e3:.0f} ms)"
         f"{_start_up_p99(starting, ('summary', 'heatmap_columns'))}"),
        (max(during["node_page"]["p99"], starting.get("node_page", {}).get("p99", 0.0)) <= 0.3,
         f"{at}: node page p99 at most 300 ms: {during['node_page']['p99'] * 1e3:.0f} ms"
         f"{_start_up_p99(starting, ('node_page',))}"),
    ]


def _start_up_p99(starting: dict, kinds: tuple[str, ...]) -> str:
    """`; during the start-up: ...` with the p99 of each of `kinds` asked then."""
    shown = [f"{starting[k]['p99'] * 1e3:.0f} ms" for k in kinds if k in starting]
    return f"; during the start-up: {' and '.join(shown)}" if shown else ""


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


def aggregation_lines(rows: list[dict]) -> list[str]:
    """Section 5: the dashboard module at each size, before and after the summaries."""
    lines = [
        "| nodes | round wall (median / max) | start-up: rounds, longest, every node in "
        "after (CPU) | head CPU per round | head CPU share | memory "
        "held | bytes (start-up / per round, median) | 304s per round | summary p99 | heatmap "
        "p99 (columns / per node) | node page p99 | before: round, CPU, memory, summary / "
        "heatmap / node page p99 | pulling snapshots: round, memory, summary p99 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        rounds = row["rounds"]
        walls = [r["wall_s"] for r in rounds]
        during = row["during_rounds"]
        before = AGGREGATION_BEFORE.get(row["nodes"], ("-", "-", "-"))
        summaries_before = AGGREGATION_SUMMARIES_BEFORE.get(row["nodes"], ("-",) * 4)
        start = row.get("start_up")
        start_cell = "-" if start is None else (
            f"{len(start['rounds'])}, {max(r['wall_s'] for r in start['rounds']):.2f} s, "
            f"{start['to_full_view_s']:.1f} s ({start['cpu_s']:.1f} s)")
        first_bytes = row["first_round"]["body_bytes"] if start is None else \
            sum(r["body_bytes"] for r in start["rounds"])
        lines.append(
            f"| {row['nodes']:,} | {statistics.median(walls):.2f} / {max(walls):.2f} s | "
            f"{start_cell} | "
            f"{statistics.median(r['cpu_s'] for r in rounds):.2f} s | "
            f"{row['cpu_share']:.2f} core | "
            f"{row['rss_mib']['after'] - row['rss_mib']['before']:+.0f} MiB | "
            f"{first_bytes / 2**20:.1f} / "
            f"{statistics.median(r['body_bytes'] for r in rounds) / 2**20:.2f} MiB | "
            f"{statistics.median(r['not_modified'] for r in rounds):,.0f} | "
            f"{_ms(during['summary']['p99'])} | {_ms(during['heatmap_columns']['p99'])} / "
            f"{_ms(during['heatmap']['p99'])} | {_ms(during['node_page']['p99'])} | "
            f"{', '.join(summaries_before)} | {', '.join(before)} |")
    return lines


def report(results: dict, previous: str = "") -> str:
    """The whole document from `results`, keeping what a person wrote into `previous`'s
    section 5 (hand_notes.py)."""
    aggregation_notes, aggregation_after = kept_notes(previous, AGGREGATION_HEADING)
    lines = [
        "# Benchmarks",
        "",
        "Generated by `make bench` (`bench/run.py`); every figure below comes from one run.",
        "CPU figures are CPU seconds of the process (all threads) per operation: median and",
        f"(min-max) over {REPEATS} repeats unless noted.",
        "",
        f"- Machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
        f"- Python {platform.python_version()}, ray {version('ray')}, nvidia-ml-py "
        f"{version('nvidia-ml-py')}, prometheus-client {version('prometheus-client')}",
        "- Hardware: simulated 8x H200 HGX node (`hgx-h200` scenario, fake NVML in C); its",
        "  slow calls spend the CPU time a real H200 spent (see",
        "  [benchmarks-real-gpu.md](benchmarks-real-gpu.md) for the same comparison there)",
        "",
        *collection_section(results),
        *scrape_section(results),
        *footprint_sections(results),
        AGGREGATION_HEADING,
        "",
        "The dashboard module (collector and API, through the standalone dashboard's HTTP",
        "stack) over N simulated 8-GPU nodes: copies of one snapshot of the simulated node",
        f"({results['aggregation'][0]['snapshot_bytes'] / 1024:.0f} KiB of JSON; its summary "
        f"{results['aggregation'][0]['summary_bytes'] / 1024:.1f} KiB), served over loopback "
        f"HTTP by fake agents in {results['aggregation'][0].get('agent_processes', 1)} "
        "processes of their own (each serving its share of the nodes, so that a node page's "
        "snapshot queues behind that share's summaries, where a real node's agent serves "
        "only its own), with ETags and 304s, from a minimal HTTP/1.1 responder "
        "(`dashboard_module/fleet_responder.py`: an agent's aiohttp server would take as "
        "much of this machine's two CPUs as the head it serves); the fleet is "
        "spread (racks, NVLink domains, node pools; utilization, engine activity, power and "
        "temperature vary by node, so the head finds no more equal values to share than in "
        "a real fleet); each 5 s "
        f"interval {results['aggregation'][0]['change'] * 100:.0f} % of the nodes get a new "
        "summary. Rounds run as in production (5 s refresh, fetches spread over the first "
        "60 % of it) while a client in the head's process asks for the summary and both "
        "heatmap forms every 0.25 s and a "
        "random node's page (a full snapshot fetched on demand) every 0.5 s. The start-up "
        "(a fresh head, every summary new; nodes never asked are admitted at the rate the "
        "head parses them, the others `waiting` in the view, `dashboard_module/new_nodes.py`)"
        " runs until every node is in the view with its data: its rounds, its longest round "
        "and when the last node came in (with the CPU until then) are in their own column, "
        "the other round figures are the rounds after it. One process per "
        "size; memory is the head's resident growth from before the collector to after the "
        "rounds; CPU is the head process's own (user + system), the asking client's included. "
        "The 'before' column is the head whose first round asked every node at once (a "
        "full pull of every summary in one round), its round figure the rounds after that "
        "first one (median / max); the last "
        "column is the collector that pulled every full snapshot each round.",
        "",
        *aggregation_notes,
        *aggregation_lines(results["aggregation"]),
        "",
        *aggregation_after,
        "## 6. Scrapes under slow clients",
        "",
        "`ray-accel agent` on the simulated node, scraped every 0.25 s over one kept-alive",
        "connection and over a fresh connection each time, alone and while "
        f"{results['slow_clients']['slow_clients']:,} clients (in the benchmark's process, "
        "on the same CPUs) each send a request head one byte a second and reconnect when "
        "cut off. The agent's cap is 1,024 connections: a new connection takes the place of "
        "the oldest one without a complete request, so the slow clients keep evicting each "
        "other (held "
        f"{results['slow_clients']['slow_held_median_s']:.2f} s median, "
        f"{results['slow_clients']['slow_held_max_s']:.2f} s at most, "
        f"{results['slow_clients']['slow_connections_cut']:,} connections cut) and a scraper "
        "that sends its request at once is always admitted.",
        "",
        *slow_clients_lines(results["slow_clients"]),
        "",
        "## Against the targets",
        "",
        *targets(results),
        "",
        "## Reproduce",
        "",
        "```sh",
        "make bench",
        "```",
        "",
    ]
    return "\n".join(lines)


def real_gpu_main(out: Path) -> int:
    results: dict = {}
    collection(results, rounds=20)
    pynvml.nvmlInit()
    results["gpu_name"] = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
    results["driver"] = pynvml.nvmlSystemGetDriverVersion()
    pynvml.nvmlShutdown()
    out.write_text(real_gpu_report(results))
    out.with_suffix(".json").write_text(json.dumps(results, indent=1))
    print(f"wrote {out} and {out.with_suffix('.json')}", file=sys.stderr)
    return 0


def collection_main(out: Path) -> int:
    """Section 1 alone, rerun and put in place of the one in `out`."""
    load = os.getloadavg()[0]
    hardware = SimulatedHardware.start("hgx-h200")
    hardware.activate()
    results: dict = {}
    collection(results)
    collection_without_gpm(results, hardware)
    note = (f"{RERUN_NOTE} (`python bench/run.py --section collection`, "
            f"{time.strftime('%Y-%m-%d', time.gmtime())}, load average {load:.1f} at its "
            "start), not with the whole `make bench`; the other sections are from their runs.")
    out.write_text(with_collection_rerun(out.read_text(), results, note))
    print(f"rewrote section 1 of {out}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--cycles", type=int, default=10_000,
                        help="cycles of the footprint run (default 10000)")
    parser.add_argument("--real-gpu", action="store_true",
                        help="only the collection comparison, on this host's real GPUs")
    parser.add_argument("--section", choices=("collection",),
                        help="rerun only this section (1: the collection comparison) and "
                             "rewrite it, and its target lines, in --out")
    args = parser.parse_args(argv)
    if args.real_gpu:
        return real_gpu_main(args.out)
    if args.section == "collection":
        return collection_main(args.out)
    hardware = SimulatedHardware.start("hgx-h200")
    hardware.activate()
    results: dict = {}
    collection(results)
    collection_without_gpm(results, hardware)
    sampler = Sampler([NvidiaBackend()], SnapshotStore(), interval_s=1.0)
    sampler.run_cycle()
    template = sampler.run_cycle()
    sampler.stop()
    scrape(results, template)
    aggregation(results)
    slow_clients(results)
    agent_process(results, hardware, args.cycles)
    previous = args.out.read_text() if args.out.exists() else ""
    args.out.write_text(report(results, previous))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
