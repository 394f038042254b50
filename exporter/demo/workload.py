"""A small Ray workload on simulated GPUs, with one actor that holds a GPU and does nothing.

Run as a Ray driver: `python -m ray_accel.exporter.demo.workload --address ADDR --out DIR`.
It starts the workload, writes `DIR/identities.json` (what each worker sees of
itself from inside: pid and Ray ids), then obeys commands read from standard
input, one per line, until it is closed:

- `kill ROLE`: kill that actor (e.g. `kill idle`) and report its pid as gone;
- `burst N SECONDS`: run N short GPU tasks of SECONDS each, then report `burst-done`.

Every GPU user opens a simulated CUDA context, so the simulated NVML lists its
real pid on the devices Ray assigned it; the idle holder never does.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import ray

from ..simulate.contexts import open_context

GiB = 2**30


def identity(role: str) -> dict:
    """This worker as Ray sees it, from inside."""
    ctx = ray.get_runtime_context()
    return {
        "role": role, "pid": os.getpid(), "job_id": ctx.get_job_id(),
        "worker_id": ctx.get_worker_id(), "actor_id": ctx.get_actor_id() or "",
        "task_id": ctx.get_task_id() or "", "node_id": ctx.get_node_id(),
        "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
    }


@ray.remote(num_gpus=1, num_cpus=0)
class Trainer:
    """Busy: a large context and most SMs."""

    def __init__(self) -> None:
        open_context(memory_bytes=60 * GiB, sm_percent=85, memory_percent=40)

    def identity(self) -> dict:
        return identity("trainer")


@ray.remote(num_gpus=1, num_cpus=0)
class IdleHolder:
    """Holds a whole GPU and never touches it: what the idle-allocation alert is for."""

    def identity(self) -> dict:
        return identity("idle")


@ray.remote(num_gpus=0.5, num_cpus=0)
class Server:
    """Half a GPU each; two of them share one device."""

    def __init__(self) -> None:
        open_context(memory_bytes=12 * GiB, sm_percent=30, memory_percent=10)

    def identity(self, role: str) -> dict:
        return identity(role)


@ray.remote(num_gpus=1, num_cpus=0)
def preprocess(out: str, seconds: float) -> None:
    """A long GPU task; writes its identity once running."""
    open_context(memory_bytes=4 * GiB, sm_percent=60, memory_percent=20)
    _write(Path(out) / "task.json", identity("task"))
    time.sleep(seconds)


@ray.remote(num_gpus=0.25, num_cpus=0)
def short_step(seconds: float) -> int:
    """One of many short GPU tasks."""
    open_context(memory_bytes=GiB, sm_percent=50, memory_percent=5)
    time.sleep(seconds)
    return os.getpid()


def _write(path: Path, data: object) -> None:
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(data))
    temporary.rename(path)


def start(out: Path, roles: list[str]) -> dict:
    """Start the actors and tasks named in `roles`; returns the actor handles by role."""
    handles: dict = {}
    reports = []
    if "trainer" in roles:
        handles["trainer"] = Trainer.remote()
        reports.append(handles["trainer"].identity.remote())
    if "idle" in roles:
        handles["idle"] = IdleHolder.remote()
        reports.append(handles["idle"].identity.remote())
    if "servers" in roles:
        for name in ("server-a", "server-b"):
            handles[name] = Server.remote()
            reports.append(handles[name].identity.remote(name))
    identities = {r["role"]: r for r in ray.get(reports, timeout=120)}
    if "task" in roles:
        handles["task"] = preprocess.remote(str(out), 3600)
        deadline = time.monotonic() + 120
        while not (out / "task.json").exists():
            if time.monotonic() > deadline:
                raise TimeoutError("the GPU task did not start")
            time.sleep(0.1)
        identities["task"] = json.loads((out / "task.json").read_text())
    identities["driver"] = {"job_id": ray.get_runtime_context().get_job_id()}
    _write(out / "identities.json", identities)
    return handles


def obey(handles: dict, out: Path) -> None:
    """Carry out commands from standard input until it closes."""
    for line in sys.stdin:
        words = line.split()
        if words[:1] == ["kill"] and words[1] in handles:
            ray.kill(handles.pop(words[1]))
            print(f"killed {words[1]}", flush=True)
        elif words[:1] == ["burst"]:
            count, seconds = int(words[1]), float(words[2])
            pids = ray.get([short_step.remote(seconds) for _ in range(count)], timeout=600)
            _write(out / "burst.json", {"tasks": count, "pids": sorted(set(pids))})
            print("burst-done", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", required=True, help="GCS address of the Ray cluster")
    parser.add_argument("--out", required=True, type=Path, help="folder for identities.json")
    parser.add_argument("--roles", default="trainer,idle,servers,task",
                        help="comma-separated subset of trainer,idle,servers,task")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    ray.init(address=args.address, logging_level="ERROR", log_to_driver=False)
    handles = start(args.out, args.roles.split(","))
    print("workload-ready", flush=True)
    obey(handles, args.out)


if __name__ == "__main__":
    main()
