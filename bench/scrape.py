"""Section 2 of the benchmarks: rendering /metrics from a snapshot, at 1k to 100k series."""

from __future__ import annotations

from dataclasses import replace

from measure import measure

from ray_accel.exporter.model import NodeSnapshot
from ray_accel.exporter.sinks.prometheus import PrometheusRenderer, snapshot_families


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
    rows = []
    for target in (1_000, 10_000, 100_000):
        snapshot = synthetic_snapshot(template, target)
        series = sum(len(f.samples) for f in snapshot_families(snapshot))
        rounds = max(1, 2_000 // max(target // 100, 1))
        # a new cycle number each call, so the renderer's per-cycle cache never answers
        counter = iter(range(10**9))

        def render(snapshot=snapshot, counter=counter) -> bytes:
            return renderer.render(replace(snapshot, cycle=next(counter)), False)[0]

        timings = measure(render, rounds=rounds, repeats=5)
        cached = measure(lambda snapshot=snapshot: renderer.render(snapshot, False), rounds=50,
                         repeats=5)
        rows.append((series, timings, cached, len(render())))
    bare = replace(template, devices=tuple(replace(s, processes=(), links=())
                                           for s in template.devices))
    count = lambda snapshot: sum(len(f.samples) for f in snapshot_families(snapshot))  # noqa: E731
    no_links = replace(template, devices=tuple(replace(s, links=()) for s in template.devices))
    results["scrape"] = {
        "rows": rows, "node_series": count(template), "bare_series": count(bare),
        "process_series": count(no_links) - count(bare),
        "link_series": count(template) - count(no_links),
    }
