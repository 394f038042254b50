"""A small Ray workload on simulated accelerators, with one actor that holds a device and idles.

Run as a Ray driver: `python -m ray_accel.demo.workload --address ADDR --out DIR`.
It starts the workload, writes `DIR/identities.json` (what each worker sees of
itself from inside: pid and Ray ids), then obeys commands read from standard
input, one per line, until it is closed:

- `kill ROLE`: kill that actor (e.g. `kill idle`) and report its pid as gone;
- `burst N SECONDS`: run N short device tasks of SECONDS each, then report `burst-done`.

`--accelerator` picks the devices (`gpu` by default; `tpu`, `neuron`, `hpu`).
Every device user starts using its devices the way the simulated vendor
library sees it: a GPU user opens a simulated CUDA context, a TPU user opens
its chips' device files, a Neuron user starts a simulated Neuron runtime on
its NeuronCores, a Gaudi user loads its cards (HLML sees the load, not the
process). The idle holder never does. The `spinner` role (GPUs only, not in
the default roles) holds a whole GPU and keeps it busy with its SMs nearly
idle, as a worker stuck in a hung collective does.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray

GiB = 2**30


def _use_gpus(memory_bytes: int, busy_percent: int, memory_busy_percent: int) -> None:
    from ..exporter.simulate.contexts import open_context

    open_context(memory_bytes=memory_bytes, sm_percent=busy_percent,
                 memory_percent=memory_busy_percent)


def _use_tpu_chips(memory_bytes: int, busy_percent: int, memory_busy_percent: int) -> None:
    from ..exporter.simulate.tpu_fake import open_chips

    open_chips()  # the chips' load is the scenario's: libtpu reports it per chip


def _use_neuron_cores(memory_bytes: int, busy_percent: int, memory_busy_percent: int) -> None:
    from ..exporter.simulate.neuron_fake import open_runtime

    open_runtime(memory_bytes=memory_bytes, utilization_percent=busy_percent)


def _use_gaudi_cards(memory_bytes: int, busy_percent: int, memory_busy_percent: int) -> None:
    from ..exporter.simulate.gaudi_fake import open_modules

    open_modules(memory_bytes=memory_bytes, utilization_percent=busy_percent)


@dataclass(frozen=True)
class Accelerator:
    """How the workload asks Ray for one kind of device and uses what it gets."""

    resource: str  # the Ray resource
    # run inside a worker: (memory bytes, busy percent, memory busy percent)
    use: Callable[[int, int, int], None]
    trainer_units: int  # what the trainer holds
    fractional: bool  # whether two servers can share one device

    def request(self, units: float) -> dict:
        """Ray options asking for `units` of this device and no CPU."""
        if self.resource != "GPU":
            return {"resources": {self.resource: units}, "num_cpus": 0}
        return {"num_gpus": units, "num_cpus": 0}

    def holders(self) -> int:
        """Device holders of the whole workload: trainer, idle holder, servers, task."""
        return self.trainer_units + 1 + (2 if self.fractional else 0) + 1

    def task(self, function: Callable, units: float) -> Any:
        """`function` as a Ray task holding `units` of this device.

        Declared as `@ray.remote(...)` would declare it, so Ray's defaults hold:
        a task holding GPUs runs in a fresh worker process each time (max_calls=1).
        """
        return ray.remote(**self.request(units))(function)


ACCELERATORS = {
    "gpu": Accelerator("GPU", _use_gpus, 1, fractional=True),
    "tpu": Accelerator("TPU", _use_tpu_chips, 4, fractional=False),
    "neuron": Accelerator("neuron_cores", _use_neuron_cores, 4, fractional=False),
    "hpu": Accelerator("HPU", _use_gaudi_cards, 4, fractional=False),
}


def identity(role: str) -> dict:
    """This worker as Ray sees it, from inside."""
    ctx = ray.get_runtime_context()
    return {
        "role": role, "pid": os.getpid(), "job_id": ctx.get_job_id(),
        "worker_id": ctx.get_worker_id(), "actor_id": ctx.get_actor_id() or "",
        "task_id": ctx.get_task_id() or "", "node_id": ctx.get_node_id(),
        "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
    }


@ray.remote
class Trainer:
    """Busy: much device memory and most of the engines."""

    def __init__(self, accelerator: Accelerator) -> None:
        accelerator.use(60 * GiB, 85, 40)

    def identity(self) -> dict:
        return identity("trainer")


@ray.remote
class IdleHolder:
    """Holds a whole device and never touches it: what the idle-allocation alert is for."""

    def identity(self) -> dict:
        return identity("idle")


@ray.remote
class Spinner:
    """Holds a whole GPU and spins on it: busy by NVML, SMs nearly idle (a hung collective)."""

    def __init__(self) -> None:
        from ..exporter.simulate.contexts import open_context

        open_context(memory_bytes=20 * GiB, sm_percent=100, memory_percent=1,
                     sm_activity_percent=2)

    def identity(self) -> dict:
        return identity("spinner")


@ray.remote
class Server:
    """Half a GPU each; two of them share one device."""

    def __init__(self, accelerator: Accelerator) -> None:
        accelerator.use(12 * GiB, 30, 10)

    def identity(self, role: str) -> dict:
        return identity(role)


def preprocess(accelerator: Accelerator, out: str, seconds: float) -> None:
    """A long device task; writes its identity once running."""
    accelerator.use(4 * GiB, 60, 20)
    _write(Path(out) / "task.json", identity("task"))
    time.sleep(seconds)


def short_step(accelerator: Accelerator, seconds: float) -> int:
    """One of many short device tasks."""
    accelerator.use(GiB, 50, 5)
    time.sleep(seconds)
    return os.getpid()


def _write(path: Path, data: object) -> None:
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(data))
    temporary.rename(path)


def start(out: Path, roles: list[str], accelerator: Accelerator = ACCELERATORS["gpu"]) -> dict:
    """Start the actors and tasks named in `roles`; returns the actor handles by role."""
    handles: dict = {}
    reports = []
    if "trainer" in roles:
        handles["trainer"] = Trainer.options(
            **accelerator.request(accelerator.trainer_units)).remote(accelerator)
        reports.append(handles["trainer"].identity.remote())
    if "idle" in roles:
        handles["idle"] = IdleHolder.options(**accelerator.request(1)).remote()
        reports.append(handles["idle"].identity.remote())
    if "spinner" in roles and accelerator.resource == "GPU":
        handles["spinner"] = Spinner.options(**accelerator.request(1)).remote()
        reports.append(handles["spinner"].identity.remote())
    if "servers" in roles and accelerator.fractional:
        for name in ("server-a", "server-b"):
            handles[name] = Server.options(**accelerator.request(0.5)).remote(accelerator)
            reports.append(handles[name].identity.remote(name))
    identities = {r["role"]: r for r in ray.get(reports, timeout=120)}
    if "task" in roles:
        handles["task"] = accelerator.task(preprocess, 1).remote(accelerator, str(out), 3600)
        deadline = time.monotonic() + 120
        while not (out / "task.json").exists():
            if time.monotonic() > deadline:
                raise TimeoutError("the GPU task did not start")
            time.sleep(0.1)
        identities["task"] = json.loads((out / "task.json").read_text())
    identities["driver"] = {"job_id": ray.get_runtime_context().get_job_id()}
    _write(out / "identities.json", identities)
    return handles


def obey(handles: dict, out: Path, accelerator: Accelerator = ACCELERATORS["gpu"]) -> None:
    """Carry out commands from standard input until it closes."""
    for line in sys.stdin:
        words = line.split()
        if words[:1] == ["kill"] and words[1] in handles:
            ray.kill(handles.pop(words[1]))
            print(f"killed {words[1]}", flush=True)
        elif words[:1] == ["burst"]:
            count, seconds = int(words[1]), float(words[2])
            step = accelerator.task(short_step, 0.25 if accelerator.fractional else 1)
            pids = ray.get([step.remote(accelerator, seconds) for _ in range(count)],
                           timeout=600)
            _write(out / "burst.json", {"tasks": count, "pids": sorted(set(pids))})
            print("burst-done", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", required=True, help="GCS address of the Ray cluster")
    parser.add_argument("--out", required=True, type=Path, help="folder for identities.json")
    parser.add_argument("--roles", default="trainer,idle,servers,task",
                        help="comma-separated subset of trainer,idle,servers,task "
                             "(servers only on GPUs, which two servers can share)")
    parser.add_argument("--accelerator", choices=sorted(ACCELERATORS), default="gpu",
                        help="the devices the workload asks Ray for")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    accelerator = ACCELERATORS[args.accelerator]
    ray.init(address=args.address, logging_level="ERROR", log_to_driver=False)
    handles = start(args.out, args.roles.split(","), accelerator)
    print("workload-ready", flush=True)
    obey(handles, args.out, accelerator)


if __name__ == "__main__":
    main()
