"""What the agent spends on one attribution refresh's worker listing, by how many workers
the node runs.

A real local Ray head on the simulated 8-GPU node (token authentication on, one actor
holding a GPU) runs `N` more idle actors, each a worker process of its own. The bench
then asks for the node's workers as every attribution refresh does
(`RaySources.workers`: the raylet's `GetNodeStats`, the records made of it, the actors'
names) `--calls` times at the refresh's 2 s pace, and counts the thread CPU of each call.

Run by hand: `python bench/node_workers_cost.py [--actors 1,50,120] [--calls 20]`.
It prints one JSON line per size.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from agent_footprint import ray_head

from ray_accel.exporter.simulate import SimulatedHardware

_IDLE_ACTORS = """
import sys, ray
ray.init(address=sys.argv[1])

@ray.remote(num_cpus=0)
class Idle:
    def ping(self):
        return 1

actors = [Idle.remote() for _ in range(int(sys.argv[2]))]
ray.get([actor.ping.remote() for actor in actors])
print("ready", flush=True)
sys.stdin.read()
"""
PACE_S = 2.0  # the attribution refresh's default interval


def _started(driver: subprocess.Popen) -> None:
    """Wait for the driver's actors (Ray's own warnings may come first on its stdout)."""
    for line in driver.stdout:
        if line.strip() == "ready":
            return
    raise RuntimeError("the benchmark's idle actors did not start")


def measure(actors: int, calls: int) -> dict:
    from ray_accel.exporter.attribution.ray_sources import RaySources

    with SimulatedHardware.start("hgx-h200") as hardware, ray_head(hardware) as (cluster, _):
        driver = subprocess.Popen([sys.executable, "-c", _IDLE_ACTORS, cluster.gcs_address,
                                   str(actors)], env=cluster.env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        try:
            _started(driver)
            os.environ.update(cluster.env)
            sources = RaySources.discover(cluster.gcs_address, None)
            for _ in range(3):  # connections open, actor names cached
                sources.workers(timeout_s=10)
            spent, workers = [], []
            for _ in range(calls):
                time.sleep(PACE_S)
                started = time.thread_time()
                workers = sources.workers(timeout_s=10)
                spent.append(time.thread_time() - started)
            sources.close()
        finally:
            driver.stdin.close()
            driver.wait(timeout=60)
    spent.sort()
    return {"idle_actors": actors, "workers": len(workers), "calls": calls,
            "cpu_ms_mean": 1000 * sum(spent) / len(spent),
            "cpu_ms_median": 1000 * spent[len(spent) // 2]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actors", default="1,50,120",
                        help="comma-separated numbers of idle actors, one run each")
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    for actors in (int(n) for n in args.actors.split(",")):
        print(json.dumps(measure(actors, args.calls)), flush=True)


if __name__ == "__main__":
    main()
