"""`ray-accel demo`: a private Ray cluster on a simulated 8x H200 node, a workload, the agent.

It starts simulated hardware, a Ray head node on it (in a temp dir of its own,
so it never touches another Ray cluster on the machine), the agent attributing
to that node, and a small workload with one actor that holds a device and does
nothing. Once the agent sees the workload it prints who holds which device,
then serves until interrupted, and cleans everything up.

The workload runs on the scenario's NVIDIA GPUs, or, on a node without them,
on its AMD GPUs (`--scenario mi300x-8`, `mi355x-8`: Ray is told how many, as
it cannot find simulated ones), TPU chips, NeuronCores or Gaudi cards
(`--scenario tpu-v5e-8`, `trn1-32xl`, `gaudi2-8`). Those devices start idle
and empty where their vendor library would show a workload (NVIDIA, AMD,
Neuron, Gaudi), so the idle holder's device is seen idle.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..agent import Agent, AgentConfig
from ..model import NodeSnapshot
from ..simulate import ScenarioError, SimulatedHardware, load_scenario
from ..simulate.contexts import for_real_processes
from ..simulate.gaudi_fake import driven_by_workloads
from ..simulate.neuron_fake import driven_by_processes
from .local_cluster import LocalRayCluster
from .workload import ACCELERATORS

READY_TIMEOUT_S = 240
NO_WORKLOAD_DEVICES = ("has no NVIDIA or AMD GPUs, TPU chips, NeuronCores or Gaudi cards for "
                       "the demo's workload")


@dataclass(frozen=True)
class WorkloadFamily:
    """The devices of a scenario the demo's workload runs on."""

    accelerator: str  # the workload's --accelerator
    prepare: Callable[[Mapping[str, Any]], dict[str, Any]]  # scenario -> driven by the workload
    resources: Callable[[Mapping[str, Any]], dict[str, int]]  # what `ray start` must be told


_FAMILIES = {
    "gpu": WorkloadFamily("gpu", for_real_processes, lambda doc: {}),  # Ray finds GPUs itself
    # Ray looks for AMD GPUs through ROCm SMI, which has no simulated counterpart
    "amd": WorkloadFamily("gpu", for_real_processes, lambda doc: {"GPU": sum(
        1 for d in doc["devices"] if d.get("vendor") == "amd")}),
    "tpu": WorkloadFamily("tpu", load_scenario, lambda doc: {"TPU": len(doc["tpu"]["chips"])}),
    "neuron": WorkloadFamily("neuron", driven_by_processes, lambda doc: {
        "neuron_cores": doc["neuron"]["neuron_device_count"]
        * doc["neuron"]["neuroncore_per_device_count"]}),
    "gaudi": WorkloadFamily("hpu", driven_by_workloads,
                            lambda doc: {"HPU": len(doc["gaudi"]["devices"])}),
}


def workload_family(scenario: Mapping[str, Any]) -> WorkloadFamily | None:
    """The devices of an expanded scenario the workload runs on: NVIDIA GPUs first."""
    if any(d.get("vendor", "nvidia") == "nvidia" for d in scenario["devices"]):
        return _FAMILIES["gpu"]
    if any(d.get("vendor") == "amd" for d in scenario["devices"]):
        return _FAMILIES["amd"]
    return next((family for section, family in _FAMILIES.items() if scenario.get(section)),
                None)


def _start_workload(cluster: LocalRayCluster, out: Path, accelerator: str) -> subprocess.Popen:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "driver.log", "w") as log:  # Ray's own chatter stays out of the demo
        return subprocess.Popen(
            [sys.executable, "-m", "ray_accel.exporter.demo.workload",
             "--address", cluster.gcs_address, "--out", str(out),
             "--accelerator", accelerator],
            env=cluster.env, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
            text=True,
        )


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def holder_table(snapshot: NodeSnapshot) -> str:
    """Who holds which device, and whether they use it, as text."""
    from ..attribution.join import allocations
    from ..catalog import GPU_UTILIZATION

    parts = Counter(s.device.parent_uuid for s in snapshot.devices if s.device.parent_uuid)
    rows = [f"{'dev':<4}{'util':>6}  {'holder':<28}{'job':<10}{'share':>6}  state"]
    for sample in snapshot.devices:
        util = next((r.value for r in sample.readings
                     if r.metric == GPU_UTILIZATION and r.labels == (("task", "general"),)), None)
        found = allocations(sample, snapshot.holders)
        if not found:
            # Ray allocates a split device (MIG, NeuronCores) by its parts, listed on their own
            split = parts.get(sample.device.uuid)
            note = f"(split into {split} parts)" if split else "(not allocated)"
            rows.append(f"{sample.device.index:<4}{_percent(util):>6}  {note:<28}")
        for allocation in found:
            who = allocation.holder.identity
            name = who.actor_class or who.task_name or f"pid {who.pid}"
            rows.append(f"{sample.device.index:<4}{_percent(util):>6}  {name:<28}"
                        f"{who.job_id:<10}{allocation.holder.fraction:>6g}  "
                        f"{'IDLE' if allocation.idle else 'busy'}")
    return "\n".join(rows)


async def _wait_for_workload(agent: Agent, stop: asyncio.Event,
                             holders: int) -> NodeSnapshot | None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline and not stop.is_set():
        snapshot = agent.store.latest
        # named: Ray's State API (which names tasks) may lag the raylet by a cycle
        if snapshot and sum(1 for found in snapshot.holders.values() for h in found
                            if h.identity.actor_class or h.identity.task_name) >= holders:
            return snapshot
        await asyncio.sleep(0.5)
    return None


async def _serve(cluster: LocalRayCluster, port: int, out: Path,
                 family: WorkloadFamily) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    agent = Agent(AgentConfig(port=port, ray_address=cluster.gcs_address))
    await agent.start()
    workload = _start_workload(cluster, out, family.accelerator)
    try:
        print("Waiting for the workload to start on the simulated devices...", flush=True)
        holders = ACCELERATORS[family.accelerator].holders()
        snapshot = await _wait_for_workload(agent, stop, holders)
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
    """Run the demo until interrupted; returns the exit code.

    Raises:
        ScenarioError: the scenario is invalid, or has no devices the workload runs on.
    """
    expanded = load_scenario(scenario)
    family = workload_family(expanded)
    if family is None:
        raise ScenarioError(f"{expanded['name']} {NO_WORKLOAD_DEVICES}")
    resources = family.resources(expanded)
    gpus = resources.pop("GPU", None)  # `ray start` takes GPUs as --num-gpus only
    with (tempfile.TemporaryDirectory(prefix="ray-accel-demo-") as folder,
          SimulatedHardware.start(family.prepare(expanded),
                                  state_dir=Path(folder) / "hardware") as hardware):
        hardware.activate()  # the agent in this process reads the same simulated devices
        cluster = LocalRayCluster(prefix="ray-accel-demo-")
        try:
            print("Starting a Ray head node on the simulated hardware...", flush=True)
            cluster.start_head(hardware.environ(), "--num-cpus=4",
                               *([f"--num-gpus={gpus}"] if gpus else []),
                               *([f"--resources={json.dumps(resources)}"] if resources else []))
            asyncio.run(_serve(cluster, port, Path(folder) / "workload", family))
        finally:
            print("Stopping the demo's Ray cluster...", flush=True)
            cluster.stop()
    return 0
