"""What the agent's gRPC client to Ray costs it: between calls, and per call at the
attribution refresh's pace.

A real local Ray head (token authentication on, one actor holding a GPU of the
simulated node) is asked for its raylet's `GetNodeStats`, as each attribution
refresh asks it, through the agent's own `GrpcEndpoint`, from a process of its
own so that only the client's CPU is counted (all threads, from getrusage):

- idle: no call for `--idle` seconds after the first few (grpcio's own threads
  keep waking up while its channel is open);
- back to back: `--calls` calls in a row, caches and threads warm;
- paced: `--calls` calls each `--gap` seconds apart (the refresh's 2 s), less
  what the idle rate accounts for in each gap.

Run by hand: `python bench/ray_rpc_cost.py [--calls 10] [--gap 2] [--idle 10]`.
It prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

_CLIENT = r"""
import json, os, resource, sys, time
from ray_accel.exporter.attribution.ray_generated import generated
from ray_accel.exporter.attribution.ray_grpc import GrpcEndpoint, rpc_method

def cpu_s():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime

address, calls = sys.argv[1], int(sys.argv[2])
gap_s, idle_s = float(sys.argv[3]), float(sys.argv[4])
endpoint = GrpcEndpoint(address, "raylet")
method = rpc_method("node_manager_pb2", "NodeManagerService", "GetNodeStats")
request = generated("node_manager_pb2").GetNodeStatsRequest(include_memory_info=False)
def ask():
    return endpoint.call(method, request, 2.0)
for _ in range(3):
    reply = ask()
started = cpu_s(); time.sleep(idle_s); idle = (cpu_s() - started) / idle_s
started = cpu_s()
for _ in range(calls):
    ask()
warm = (cpu_s() - started) / calls
started = cpu_s()
for _ in range(calls):
    ask()
    time.sleep(gap_s)
paced = (cpu_s() - started - idle * gap_s * calls) / calls
print(json.dumps({"idle_cpu_share": idle, "warm_call_cpu_s": warm, "paced_call_cpu_s": paced,
                  "threads": len(os.listdir("/proc/self/task")),
                  "reply_bytes": reply.ByteSize(), "workers": len(reply.core_workers_stats)}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--gap", type=float, default=2.0, help="seconds between paced calls")
    parser.add_argument("--idle", type=float, default=10.0, help="seconds without calls")
    args = parser.parse_args()
    if args.calls < 1 or args.gap < 0 or args.idle <= 0:
        parser.error("--calls must be at least 1, --gap not negative, --idle positive")

    from agent_footprint import ray_head

    from ray_accel.exporter.attribution.ray_sources import RaySources
    from ray_accel.exporter.simulate import SimulatedHardware

    with SimulatedHardware.start("hgx-h200") as hardware, ray_head(hardware) as (cluster, _):
        env = {**os.environ, **cluster.env}
        with RaySources.discover(cluster.gcs_address) as sources:
            address = sources.node.raylet_address
        began = time.monotonic()
        finished = subprocess.run(
            [sys.executable, "-c", _CLIENT, address, str(args.calls), str(args.gap),
             str(args.idle)], env=env, capture_output=True, text=True, check=True, timeout=600)
        result = json.loads(finished.stdout.strip().splitlines()[-1])
    result.update(calls=args.calls, gap_s=args.gap, idle_s=args.idle,
                  wall_s=round(time.monotonic() - began, 1),
                  load=round(os.getloadavg()[0], 1))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
