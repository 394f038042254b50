"""`ray-accel demo`: a private Ray cluster on a simulated 8x H200 node, a workload, the agent.

It starts simulated hardware, a Ray head node on it (in a temp dir of its own,
so it never touches another Ray cluster on the machine), the agent attributing
to that node, and a small workload with one actor that holds a GPU and does
nothing. Once the agent sees the workload it prints who holds which device,
then serves until interrupted, and cleans everything up.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..agent import Agent, AgentConfig
from ..model import NodeSnapshot
from ..simulate import SimulatedHardware
from ..simulate.contexts import for_real_processes
from .local_cluster import LocalRayCluster

EXPECTED_HOLDERS = 5  # trainer, idle holder, two half-GPU servers, one task
READY_TIMEOUT_S = 240


def _start_workload(cluster: LocalRayCluster, out: Path) -> subprocess.Popen:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "driver.log", "w") as log:  # Ray's own chatter stays out of the demo
        return subprocess.Popen(
            [sys.executable, "-m", "ray_accel.exporter.demo.workload",
             "--address", cluster.gcs_address, "--out", str(out)],
            env=cluster.env, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
            text=True,
        )


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def holder_table(snapshot: NodeSnapshot) -> str:
    """Who holds which device, and whether they use it, as text."""
    from ..attribution.join import allocations
    from ..catalog import GPU_UTILIZATION

    rows = [f"{'GPU':<4}{'util':>6}  {'holder':<28}{'job':<10}{'share':>6}  state"]
    for sample in snapshot.devices:
        util = next((r.value for r in sample.readings
                     if r.metric == GPU_UTILIZATION and r.labels == (("task", "general"),)), None)
        found = allocations(sample, snapshot.holders)
        if not found:
            rows.append(f"{sample.device.index:<4}{_percent(util):>6}  {'(not allocated)':<28}")
        for allocation in found:
            who = allocation.holder.identity
            name = who.actor_class or who.task_name or f"pid {who.pid}"
            rows.append(f"{sample.device.index:<4}{_percent(util):>6}  {name:<28}"
                        f"{who.job_id:<10}{allocation.holder.fraction:>6g}  "
                        f"{'IDLE' if allocation.idle else 'busy'}")
    return "\n".join(rows)


async def _wait_for_workload(agent: Agent, stop: asyncio.Event) -> NodeSnapshot | None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline and not stop.is_set():
        snapshot = agent.store.latest
        if snapshot and sum(len(h) for h in snapshot.holders.values()) >= EXPECTED_HOLDERS:
            return snapshot
        await asyncio.sleep(0.5)
    return None


async def _serve(cluster: LocalRayCluster, port: int, out: Path) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    agent = Agent(AgentConfig(port=port, ray_address=cluster.gcs_address))
    await agent.start()
    workload = _start_workload(cluster, out)
    try:
        print("Waiting for the workload to start on the simulated GPUs...", flush=True)
        snapshot = await _wait_for_workload(agent, stop)
        if snapshot is not None:
            print(f"\nRay node {snapshot.attribution.node_id}, as the agent sees it:\n")
            print(holder_table(snapshot))
        elif not stop.is_set():
            print("The workload did not show up in time; the agent keeps serving.")
        print(f"\nMetrics:  {agent.url}/metrics\nSnapshot: {agent.url}/api/v1/snapshot\n"
              f"Health:   {agent.url}/healthz\nPress Ctrl-C to stop.", flush=True)
        await stop.wait()
    finally:
        with contextlib.suppress(BrokenPipeError):
            workload.stdin.close()
        workload.terminate()
        await agent.stop()


def run(scenario: str = "hgx-h200", port: int = 9478) -> int:
    """Run the demo until interrupted; returns the exit code."""
    with tempfile.TemporaryDirectory(prefix="ray-accel-demo-") as folder:
        hardware = SimulatedHardware.start(for_real_processes(scenario),
                                           state_dir=Path(folder) / "hardware")
        hardware.activate()  # the agent in this process reads the same simulated GPUs
        cluster = LocalRayCluster(prefix="ray-accel-demo-")
        try:
            print("Starting a Ray head node on the simulated hardware...", flush=True)
            cluster.start_head(hardware.environ(), "--num-cpus=4")
            asyncio.run(_serve(cluster, port, Path(folder) / "workload"))
        finally:
            print("Stopping the demo's Ray cluster...", flush=True)
            cluster.stop()
    return 0
