"""What one agent's questions about running tasks cost the head's dashboard, by how many
tasks the cluster runs.

A real local Ray head (token authentication on) runs one async actor holding `N`
method calls in flight, so the GCS has `N` RUNNING tasks. The bench then asks the
head's State API, as an agent would, in two ways, `--calls` times each, and reads
from /proc the CPU time of the dashboard (with the module subprocess serving the
State API) and of the GCS around each batch:

- the node listing: tasks filtered on a node and `state=RUNNING` (what each agent
  asked every attribution refresh before it asked its workers instead). The GCS
  applies only the state filter, so the dashboard converts every running task of
  the cluster before it keeps the node's;
- the lookup by task id (what an agent now asks, once per long-running task):
  a filter the GCS applies from its index.

Run by hand: `python bench/head_state_api_load.py [--tasks 100,1000,4000] [--calls 20]`.
It prints one JSON line per size.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from measure import process_cpu_s

from ray_accel.demo.local_cluster import LocalRayCluster, pid_of, processes, with_descendants
from ray_accel.exporter.attribution.ray_sources import RaySources
from ray_accel.exporter.attribution.state_api import list_tasks

_DRIVER = r"""
import asyncio, sys, ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)

@ray.remote(num_cpus=0, max_concurrency=100_000)
class Holder:
    async def hold(self):
        await asyncio.sleep(3600)
    async def ready(self):
        return 1

holder = Holder.remote()
ray.get(holder.ready.remote())
calls = []
for line in sys.stdin:
    calls += [holder.hold.remote() for _ in range(int(line) - len(calls))]
    print("holding", len(calls), flush=True)
"""


def _running_count(url: str, node_id: str) -> int:
    return len(list_tasks(url, [("node_id", "=", node_id), ("state", "=", "RUNNING")],
                          10_000, 30, detail=False))


def head_processes(root: Path) -> dict[str, list[int]]:
    """The processes that answer a State API call: the dashboard with its module
    subprocesses (the State API runs in one), and the GCS."""
    dashboard = with_descendants({pid_of("dashboard/dashboard.py", str(root))}, processes())
    return {"dashboard": sorted(dashboard), "gcs": [pid_of("/gcs_server ", str(root))]}


def _cpu(pids: list[int]) -> float:
    return sum(process_cpu_s(pid) for pid in pids)


def _batch(head: dict[str, list[int]], calls: int, ask) -> dict[str, float]:
    cpu, began = {k: _cpu(p) for k, p in head.items()}, time.monotonic()
    for _ in range(calls):
        ask()
    wall = time.monotonic() - began
    return {**{f"{k}_cpu_ms": (_cpu(p) - cpu[k]) / calls * 1000 for k, p in head.items()},
            "wall_ms": wall / calls * 1000}


def measure(sizes: list[int], calls: int) -> list[dict]:
    cluster = LocalRayCluster(prefix="hl-")
    results = []
    try:
        cluster.start_head({}, "--num-cpus=1")
        script = cluster.root / "driver.py"
        script.write_text(_DRIVER)
        driver = subprocess.Popen([sys.executable, str(script), cluster.gcs_address],
                                  env=cluster.env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        sources = RaySources.discover(cluster.gcs_address)
        head = head_processes(cluster.root)
        url = sources.state_api_url()
        node = sources.node.node_id
        for size in sizes:
            driver.stdin.write(f"{size}\n")
            driver.stdin.flush()
            driver.stdout.readline()
            deadline = time.monotonic() + 120
            while (running := _running_count(url, node)) < size:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"only {running} of {size} tasks reached RUNNING")
                time.sleep(1)
            some_id = list_tasks(url, [("state", "=", "RUNNING")], 1, 10, False)[0]["task_id"]
            listing = _batch(head, calls, lambda: list_tasks(
                url, [("node_id", "=", node), ("state", "=", "RUNNING")], 10_000, 30, False))
            lookup = _batch(head, calls, lambda task_id=some_id: sources.task_detail(task_id))
            row = {"running_tasks": running, "node_listing": listing, "task_lookup": lookup}
            print(json.dumps(row), flush=True)
            results.append(row)
        driver.stdin.close()
        driver.wait(timeout=30)
        sources.close()
    finally:
        cluster.stop()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="100,1000,4000",
                        help="running tasks to measure at, comma-separated")
    parser.add_argument("--calls", type=int, default=20, help="calls of each kind per size")
    args = parser.parse_args(argv)
    measure([int(n) for n in args.tasks.split(",")], args.calls)
    return 0


if __name__ == "__main__":
    sys.exit(main())
