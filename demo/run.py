"""`ray-accel demo`: a private Ray cluster on a simulated 8x H200 node, a workload, the agent.

It starts simulated hardware, a Ray head node on it (in a temp dir of its own,
so it never touches another Ray cluster on the machine) with its dashboard and
the Accelerators tab loaded, the agent attributing to that node, a small
workload with one actor that holds a device and does nothing, and a local
Prometheus (demo/prometheus.py) scraping Ray and the agent with the
alert rules loaded. Once the agent sees the workload it prints who holds which
device, then, when the tab and Prometheus answer, where to find them; it serves
until interrupted, and cleans everything up.

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
import logging
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

from ray._common.network_utils import find_free_port

from ..dashboard_module.bootstrap import ENABLE_VARIABLE
from ..dashboard_module.standalone import ray_dashboard_url
from ..exporter.agent import Agent
from ..exporter.cluster.sd_file import default_path, write_atomically
from ..exporter.config import AgentConfig
from ..exporter.model import NodeSnapshot
from ..exporter.simulate import ScenarioError, SimulatedHardware, load_scenario
from ..exporter.simulate.contexts import for_real_processes
from ..exporter.simulate.gaudi_fake import driven_by_workloads
from ..exporter.simulate.neuron_fake import driven_by_processes
from .endpoints import DemoEndpoints, wait_for_tab
from .local_cluster import LOOPBACK, LocalRayCluster
from .prometheus import MISSING as PROMETHEUS_MISSING
from .prometheus import DemoPrometheus, find_binary
from .workload import ACCELERATORS

READY_TIMEOUT_S = 240
REGISTER_INTERVAL_S = 2.0
DISCOVERY_INTERVAL_S = 2.0
# The documented opt-in (docs/dashboard.md), and the tab refreshing as often as the agent.
TAB_IN_RAYS_DASHBOARD = {ENABLE_VARIABLE: "1", "RAY_ACCEL_DASHBOARD_REFRESH_S": "2"}
log = logging.getLogger(__name__)
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
            [sys.executable, "-m", "ray_accel.demo.workload",
             "--address", cluster.gcs_address, "--out", str(out),
             "--accelerator", accelerator],
            env=cluster.env, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
            text=True,
        )


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def holder_table(snapshot: NodeSnapshot) -> str:
    """Who holds which device, and whether they use it, as text."""
    from ..exporter.attribution.join import allocations
    from ..exporter.catalog import GPU_UTILIZATION, TASK_GENERAL

    parts = Counter(s.device.parent_uuid for s in snapshot.devices if s.device.parent_uuid)
    rows = [f"{'dev':<4}{'util':>6}  {'holder':<28}{'job':<10}{'share':>6}  state"]
    for sample in snapshot.devices:
        util = next((r.value for r in sample.readings
                     if r.metric == GPU_UTILIZATION
                     and r.labels == (("task", TASK_GENERAL),)), None)
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


async def _wait_for_workload(agent: Agent, stop: asyncio.Event, holders: int,
                             started: Path) -> NodeSnapshot | None:
    """The first snapshot taken after the workload wrote `started` (every holder then uses
    its devices) that names `holders` holders."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    started_at = None
    while time.monotonic() < deadline and not stop.is_set():
        if started_at is None and started.exists():
            started_at = time.time()
        snapshot = agent.store.latest
        # named: Ray's State API (which names tasks) may lag the raylet by a cycle
        if (started_at is not None and snapshot
                and snapshot.taken_at - snapshot.cycle_duration_s > started_at
                and sum(1 for found in snapshot.holders.values() for h in found
                        if h.identity.actor_class or h.identity.task_name) >= holders):
            return snapshot
        await asyncio.sleep(0.5)
    return None


async def _keep_discovery_file(gcs_address: str, path: Path, stop: asyncio.Event) -> None:
    """Keep the agents' Prometheus discovery file up to date, as `ray-accel sd-file --watch`."""
    from ..exporter.cluster.deploy import write_discovery
    from ..exporter.cluster.gcs import ClusterGcs

    try:
        gcs = await asyncio.to_thread(ClusterGcs, gcs_address)
    except Exception as error:
        print(f"The agents' discovery file cannot be written ({error}): Prometheus will not "
              "find the agent.", flush=True)
        return
    try:
        while not stop.is_set():
            try:
                await asyncio.to_thread(write_discovery, gcs, path)
            except Exception as error:  # the next round tries again
                log.debug("discovery file not written: %s", error)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), DISCOVERY_INTERVAL_S)
    finally:
        await asyncio.to_thread(gcs.close)


def _start_prometheus(folder: Path, session_dir: Path, port: int | None) -> DemoPrometheus | None:
    binary = find_binary()
    if binary is None or port is None:
        print(PROMETHEUS_MISSING, flush=True)
        return None
    prometheus = DemoPrometheus(binary, folder, session_dir, port)
    try:
        prometheus.start()
    except OSError as error:
        print(f"Prometheus could not be started ({error}): the demo runs without it.",
              flush=True)
        return None
    return prometheus


async def _serve(cluster: LocalRayCluster, port: int, folder: Path, family: WorkloadFamily,
                 ready_file: Path | None, prometheus_port: int | None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    agent = Agent(AgentConfig(port=port, ray_address=cluster.gcs_address,
                              register_interval_s=REGISTER_INTERVAL_S))
    await agent.start()
    workload = _start_workload(cluster, folder / "workload", family.accelerator)
    session_dir = Path(cluster.session_dir())
    prometheus = _start_prometheus(folder / "prometheus", session_dir, prometheus_port)
    discovery = asyncio.create_task(_keep_discovery_file(
        cluster.gcs_address, default_path(str(session_dir)), stop))
    try:
        print("Waiting for the workload to start on the simulated devices...", flush=True)
        holders = ACCELERATORS[family.accelerator].holders()
        snapshot = await _wait_for_workload(agent, stop, holders,
                                            folder / "workload" / "identities.json")
        if snapshot is not None:
            print(f"\nRay node {snapshot.attribution.node_id}, as the agent sees it:\n")
            print(holder_table(snapshot))
        elif not stop.is_set():
            print("The workload did not show up in time; the agent keeps serving.")
        dashboard = ray_dashboard_url(cluster.gcs_address) or ""
        token = cluster.token.read_text().strip()
        problem = await asyncio.to_thread(wait_for_tab, dashboard, token, stop.is_set)
        if problem and not stop.is_set():
            print(f"\n{problem}; see {cluster.root}/ray/session_latest/logs/dashboard*.log")
        if prometheus is not None:
            failed = await asyncio.to_thread(prometheus.wait_ready)
            if failed:
                print(f"{failed}: the demo runs without Prometheus.", flush=True)
                prometheus.stop()
                prometheus = None
        endpoints = DemoEndpoints(dashboard_url=dashboard, token_file=str(cluster.token),
                                  agent_url=agent.url,
                                  prometheus_url=prometheus.url if prometheus else None,
                                  folders=(str(folder), str(cluster.root)))
        if not stop.is_set():
            print(f"\n{endpoints.text()}\nPress Ctrl-C to stop.", flush=True)
            if ready_file is not None:
                write_atomically(ready_file, endpoints.to_json())
        await stop.wait()
    finally:
        stop.set()
        await discovery
        if prometheus is not None:
            await asyncio.to_thread(prometheus.stop)
        with contextlib.suppress(BrokenPipeError):
            workload.stdin.close()
        workload.terminate()
        await agent.stop()


def _metric_ports() -> dict[str, str]:
    """Free ports for the metrics of Ray's dashboard and autoscaler, whose defaults (44227,
    44217) another Ray cluster on the machine may hold: the demo's Prometheus scrapes its own."""
    return {"DASHBOARD_METRIC_PORT": str(find_free_port()),
            "AUTOSCALER_METRIC_PORT": str(find_free_port())}


def run(scenario: str = "hgx-h200", port: int = 9478, ready_file: Path | None = None) -> int:
    """Run the demo until interrupted; returns the exit code.

    `ready_file`, when given, receives the endpoints as JSON once everything serves.

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
        # Ray's dashboard, and the tab in it, learn where the demo's Prometheus will serve
        # (RAY_PROMETHEUS_HOST): the tab's history then comes from it.
        prometheus_port = find_free_port() if find_binary() else None
        on_prometheus = ({"RAY_PROMETHEUS_HOST": f"http://{LOOPBACK}:{prometheus_port}"}
                         if prometheus_port else {})
        try:
            print("Starting a Ray head node with its dashboard and the Accelerators tab on the "
                  "simulated hardware...", flush=True)
            cluster.start_head({**hardware.environ(), **TAB_IN_RAYS_DASHBOARD,
                                **_metric_ports(), **on_prometheus}, "--num-cpus=4",
                               *([f"--num-gpus={gpus}"] if gpus else []),
                               *([f"--resources={json.dumps(resources)}"] if resources else []))
            asyncio.run(_serve(cluster, port, Path(folder), family, ready_file,
                               prometheus_port))
        finally:
            print("Stopping the demo's Ray cluster...", flush=True)
            cluster.stop()
    return 0
