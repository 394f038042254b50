"""Section 2 of the benchmarks: rendering /metrics from a snapshot, at 1k to 100k series.

`python bench/scrape.py` reruns this section alone and rewrites it in
docs/benchmarks.md; unlike section 1's rerun, it leaves "Against the targets" as it is.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

from hand_notes import RERUN_NOTE
from measure import measure, spread, with_section

from ray_accel.exporter.model import NodeSnapshot
from ray_accel.exporter.sinks.prometheus import PrometheusRenderer, snapshot_families

ROOT = Path(__file__).resolve().parents[1]
SECTION = "## 2. Scrape cost"


def synthetic_snapshot(template: NodeSnapshot, series: int) -> NodeSnapshot:
    """`template`'s devices copied (new uuids) until the snapshot has about `series` series."""
    per_snapshot = sum(len(f.samples) for f in snapshot_families(template))
    copies = max(1, round(series / per_snapshot))
    devices = []
    for copy_index in range(copies):
        for sample in template.devices:
            device = replace(sample.device, uuid=f"{sample.device.uuid}-{copy_index}",
                             index=f"{copy_index}.{sample.device.index}")
            devices.append(replace(sample, device=device))
    return replace(template, devices=tuple(devices))


def scrape(results: dict, template: NodeSnapshot) -> None:
    """Render time of /metrics at 1k, 10k and 100k series, and what processes and links add."""
    renderer = PrometheusRenderer(include_process_metrics=False)
    rows, firsts = [], []
    for target in (1_000, 10_000, 100_000):
        snapshot = synthetic_snapshot(template, target)
        series = sum(len(f.samples) for f in snapshot_families(snapshot))
        rounds = max(1, 2_000 // max(target // 100, 1))
        # a new cycle number each call, so the renderer's per-cycle cache never answers
        counter = iter(range(10**9))

        def render(snapshot=snapshot, counter=counter) -> bytes:
            return renderer.render(replace(snapshot, cycle=next(counter)), False)[0]

        render()  # the label sets' first render, as after the agent's first cycle
        timings = measure(render, rounds=rounds, repeats=5)
        cached = measure(lambda snapshot=snapshot: renderer.render(snapshot, False), rounds=50,
                         repeats=5)
        first = measure(lambda snapshot=snapshot: PrometheusRenderer(
            include_process_metrics=False).render(snapshot, False), rounds=max(1, rounds // 4),
            repeats=5)
        rows.append((series, timings, cached, len(render())))
        firsts.append(first)
    bare = replace(template, devices=tuple(replace(s, processes=(), links=())
                                           for s in template.devices))
    count = lambda snapshot: sum(len(f.samples) for f in snapshot_families(snapshot))  # noqa: E731
    no_links = replace(template, devices=tuple(replace(s, links=()) for s in template.devices))
    results["scrape"] = {
        "rows": rows, "first_renders": firsts, "node_series": count(template),
        "bare_series": count(bare),
        "process_series": count(no_links) - count(bare),
        "link_series": count(template) - count(no_links),
    }


def scrape_section(results: dict, note: str = "") -> list[str]:
    """Section 2 of docs/benchmarks.md from `results["scrape"]`."""
    s = results["scrape"]
    lines = [SECTION, ""]
    if note:
        lines += [note, ""]
    lines += [
        "Rendering `/metrics` (Prometheus text) from a snapshot, without the cache",
        "(a new cycle each time), and with it (repeated scrapes within one cycle). The",
        "renderer keeps each series' line up to its value from one render to the next",
        "(exporter/sinks/line_prefixes.py, about 12,000 at most), so a new cycle of the same",
        "series writes only the values; the first render of a set of series (a new renderer)",
        "writes the labels too.",
        "",
        "| series | render (uncached) | first render | render (cached) | body |",
        "|---|---|---|---|---|",
    ]
    for (series, timings, cached, size), first in zip(s["rows"], s["first_renders"],
                                                      strict=True):
        lines.append(f"| {series:,} | {spread(timings)} | {spread(first)} | "
                     f"{spread(cached, 1e6, 'us')} | {size / 1024:,.0f} KiB |")
    lines += [
        "",
        f"The simulated 8x H200 node exports {s['node_series']} series: {s['bare_series']} "
        f"device and agent series, {s['process_series']} per-process series and "
        f"{s['link_series']} per-link series (18 NVLinks and the PCIe link per GPU).",
        "",
    ]
    return lines


def with_scrape_rerun(document: str, results: dict, note: str) -> str:
    """`document` (a report) with section 2 from `results`."""
    return "\n".join(with_section(document.split("\n"), SECTION, scrape_section(results, note)))


def simulated_template() -> NodeSnapshot:
    """A cycle of the simulated 8x H200 node (its second: link rates known)."""
    from ray_accel.exporter.backends.nvidia import NvidiaBackend
    from ray_accel.exporter.sampler import Sampler
    from ray_accel.exporter.simulate import SimulatedHardware
    from ray_accel.exporter.store import SnapshotStore

    hardware = SimulatedHardware.start("hgx-h200")
    hardware.activate()
    sampler = Sampler([NvidiaBackend()], SnapshotStore(), interval_s=1.0)
    try:
        sampler.run_cycle()
        return sampler.run_cycle()
    finally:
        sampler.stop()
        hardware.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    results: dict = {}
    scrape(results, simulated_template())
    note = (f"{RERUN_NOTE} (`python bench/scrape.py`, "
            f"{time.strftime('%Y-%m-%d', time.gmtime())}, load average {load:.1f} at its "
            f"start, {os.getloadavg()[0]:.1f} at its end: CPU time per render, which a "
            "busy machine inflates), not with the whole `make bench`.")
    args.out.write_text(with_scrape_rerun(args.out.read_text(), results, note))
    print(f"rewrote section 2 of {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
