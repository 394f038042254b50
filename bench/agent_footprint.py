"""The agent as a process: resident memory under process churn, and CPU at an interval.

The agent runs as `ray-accel agent` on the simulated node, as it would on a GPU
host; this process plays the rest of the world: it replaces the node's GPU
processes (short tasks coming and going) and scrapes `/metrics`, and reads the
agent's memory and CPU time from /proc.
"""

from __future__ import annotations

import copy
import os
import sys
import time
from pathlib import Path
from typing import Any

from ray_accel.exporter.simulate import SimulatedHardware

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
from agent_process import AgentProcess

AGENT_ARGS = ("--backend", "nvidia")


def agent_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        kib = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return kib / 1024


def agent_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def churn_processes(hardware: SimulatedHardware, scenario: dict, step: int) -> None:
    """New made-up processes on every device (old ones gone), as short tasks would leave."""
    updated = copy.deepcopy(scenario)
    for index, device in enumerate(updated["devices"]):
        device["processes"] = [{"pid": 100_000 + step * 100 + index * 4 + k,
                                "used_memory_bytes": 2**30, "sm_percent": 20}
                               for k in range(4)]
    hardware.update(updated)


def memory_under_churn(hardware: SimulatedHardware, cycles: int,
                       interval_s: float = 0.05) -> dict[str, Any]:
    """RSS at 10%, 50% and 100% of `cycles`, processes replaced every 50 cycles.

    Every tenth cycle's /metrics is scraped (uncached: a new cycle each time).
    """
    scenario = hardware.scenario
    wanted = [cycles // 10, cycles // 2, cycles]
    marks: list[tuple[int, float]] = []
    with AgentProcess(*AGENT_ARGS, "--interval", str(interval_s), env=hardware.environ()) as agent:
        pid = agent.proc.pid
        agent.wait_for(lambda d: d["status"] == "ok", path="/healthz", timeout=60)
        start = agent_rss_mib(pid)
        churned = 0
        while wanted:
            cycle = agent.json("/healthz")["cycle"]
            if cycle // 50 > churned:
                churned = cycle // 50
                churn_processes(hardware, scenario, churned)
            if cycle >= wanted[0]:
                marks.append((cycle, agent_rss_mib(pid)))
                wanted.pop(0)
            agent.get("/metrics")
            time.sleep(interval_s * 10)
    return {"start": start, "marks": marks, "cycles": cycles, "interval_s": interval_s}


def cpu_share(hardware: SimulatedHardware, interval_s: float = 1.0, seconds: float = 60.0,
              scrape_every_s: float = 15.0) -> float:
    """The agent's CPU per second of wall time, at `interval_s`, scraped like Prometheus does."""
    with AgentProcess(*AGENT_ARGS, "--interval", str(interval_s), env=hardware.environ()) as agent:
        pid = agent.proc.pid
        agent.wait_for(lambda d: d["status"] == "ok" and d["cycle"] >= 15, path="/healthz",
                       timeout=60)  # past start-up and the first reads of slow calls
        began, cpu = time.monotonic(), agent_cpu_s(pid)
        while time.monotonic() - began < seconds:
            agent.get("/metrics")
            time.sleep(scrape_every_s)
        return (agent_cpu_s(pid) - cpu) / (time.monotonic() - began)
