"""A synthetic fleet's agents in a process of their own, for benchmarks and scale tests.

    python -m ray_accel.dashboard_module.fleet_agents NODES [--change F] [--down-every K]
                                                     [--spread] [--share I/K]

Serves NODES fake agents (summaries with ETags and 304s, full snapshots for the
node page) made from one real snapshot of the simulated 8x H200 node, until its
stdin closes; prints one JSON line first: the URL and the body sizes. They answer
from a minimal HTTP/1.1 responder (fleet_responder.py), which costs a fraction of
a real agent's aiohttp server, so that the head is what a benchmark measures. In a process
of its own (or several: `FleetProcess(processes=K)`), the head that fetches from it
is measured (or tested) alone.

- `--change F`: every refresh interval a share F of the nodes gets a new summary
  (1 W more on its first device, as power readings would make).
- `--down-every K`: every K-th node (0, K, 2K, ...) has one device that does not
  answer (device n mod 8 of node n), in its summary and its snapshot alike.
- `--spread`: nodes sit in racks of 16 (each its own NVLink domain) and three node
  pools, and their devices' utilization, engine activity, power and temperature in the
  summaries vary from node to node (so equal values are no more common than in a real
  fleet); the full snapshots keep the template's values.
- `--share I/K`: the process is asked for nodes I, I+K, I+2K, ... only; their summaries
  are made before it prints its line (as a real agent's is ready before the head asks).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import random
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..exporter.sinks.summary import content_version, encode
from .collector import AgentTarget
from .fleet import Fleet, node_id
from .fleet_responder import FleetResponder

REFRESH_S = 5.0
RACK_SIZE = 16
NODE_POOLS = ("h200-train", "h200-serve", "h200-batch")


def _all_answering(doc: dict[str, Any]) -> bool:
    return bool(doc["devices"]) and all(d["up"] and not d["stale"] and d["links"]
                                        for d in doc["devices"])


def template_document(scenario: str = "hgx-h200", timeout_s: float = 120.0) -> dict[str, Any]:
    """One snapshot document of a simulated node, as its agent serves it, taken once every
    device answers (on a loaded machine a cycle can find one late, and copies of it would
    all have it down)."""
    from ..exporter.backends.nvidia import NvidiaBackend
    from ..exporter.sampler import Sampler
    from ..exporter.simulate import SimulatedHardware
    from ..exporter.sinks.json import snapshot_document
    from ..exporter.store import SnapshotStore

    hardware = SimulatedHardware.start(scenario)
    hardware.activate()
    sampler = Sampler([NvidiaBackend()], SnapshotStore(), interval_s=1.0)
    deadline = time.monotonic() + timeout_s
    try:
        sampler.run_cycle()
        while True:
            doc = json.loads(json.dumps(snapshot_document(sampler.run_cycle())))
            if _all_answering(doc):
                return doc
            if time.monotonic() > deadline:
                raise RuntimeError(f"{scenario}: not every device answered within {timeout_s} s")
    finally:
        sampler.stop()


def with_device_down(template: dict[str, Any], position: int) -> dict[str, Any]:
    """A copy of `template` whose device at `position` does not answer (as an agent
    reports a lost GPU: no values, links or processes)."""
    doc = copy.deepcopy(template)
    doc["devices"][position].update(up=False, values={}, links=[], processes=[],
                                    errors={"nvmlDeviceGetHandleByIndex": "gpu_is_lost"})
    return doc


def spread_placement(number: int) -> dict[str, str]:
    """Node `number`'s rack, NVLink domain and node pool in a spread fleet."""
    rack = number // RACK_SIZE
    return {"zone": f"zone-{rack % 3}", "region": "region-1", "rack": f"rack-{rack:04d}",
            "slice": "", "nvlink_domain": f"nvl-{rack:04d}",
            "node_pool": NODE_POOLS[number % len(NODE_POOLS)]}


def _spread_summary(body: bytes, number: int) -> tuple[bytes, str]:
    doc = json.loads(body)
    doc["placement"] = spread_placement(number)
    rng = random.Random(number)
    base = rng.random()
    for device in doc["devices"]:
        if "utilization" in device:
            device["utilization"] = round(min(1.0, max(0.0, base + rng.uniform(-0.2, 0.2))), 3)
        # the figures a real fleet's devices differ in, at the summary's own resolution
        for name in ("activity", "pipe_activity"):
            if device.get(name):
                device[name] = {engine: round(min(1.0, max(0.0, ratio + rng.uniform(-0.1, 0.1))), 2)
                                for engine, ratio in device[name].items()}
        for name, spread in (("power_watts", 40), ("temperature_celsius", 6)):
            if isinstance(device.get(name), int | float):
                device[name] = round(device[name] + rng.uniform(-spread, spread))
    doc["version"] = content_version(doc)
    return encode(doc)


@dataclass
class FleetShape:
    """Which nodes differ from the template, and how."""

    down_every: int = 0
    spread: bool = False

    def has_down_device(self, number: int) -> bool:
        return self.down_every > 0 and number % self.down_every == 0


class FleetMembers:
    """Every node's summary (made ahead for the nodes a process serves, as a real agent has
    its summary ready before the head asks; remade as generations change) and snapshot
    text."""

    def __init__(self, template: dict[str, Any], nodes: int, shape: FleetShape) -> None:
        self.shape = shape
        self._normal = Fleet(template)
        count = len(template.get("devices", ()))
        self._down = [Fleet(with_device_down(template, p)) for p in range(count)]
        self.generation = [0] * nodes
        self._summaries: list[tuple[bytes, str] | None] = [None] * nodes
        self._made_at = [0] * nodes  # the generation each node's last summary was made at

    def _fleet(self, number: int) -> Fleet:
        if self.shape.has_down_device(number) and self._down:
            return self._down[number % len(self._down)]
        return self._normal

    def _summary(self, number: int) -> tuple[bytes, str]:
        body, etag = self._fleet(number).summary(number, self.generation[number])
        return _spread_summary(body, number) if self.shape.spread else (body, etag)

    def summary(self, number: int) -> tuple[bytes, str]:
        found = self._summaries[number]
        generation = self.generation[number]
        if found is None:
            found = self._summary(number)
        elif self._made_at[number] != generation:
            found = _more_power(found[0], generation - self._made_at[number])
        self._summaries[number], self._made_at[number] = found, generation
        return found

    def make_ahead(self, numbers: range) -> None:
        """Make the summaries of nodes `numbers` now, not when first asked for (making them
        on the head's first request took the fake agents as much CPU as the head)."""
        for number in numbers:
            self.summary(number)

    def change(self, number: int) -> None:
        """Node `number`'s next generation: 1 W more on its first device (its summary is
        remade from the last one when next asked for, a third of the work of a new one)."""
        self.generation[number] += 1

    def snapshot(self, number: int) -> bytes:
        return self._fleet(number).text(number).encode()


def _more_power(body: bytes, watts: int) -> tuple[bytes, str]:
    doc = json.loads(body)
    if doc["devices"]:
        first = doc["devices"][0]
        first["power_watts"] = (first.get("power_watts") or 0.0) + watts
    doc["version"] = content_version(doc)
    return encode(doc)


async def serve(nodes: int, change: float, shape: FleetShape, refresh_s: float = REFRESH_S,
                template: dict[str, Any] | None = None, share: tuple[int, int] = (0, 1)) -> None:
    """Serve `nodes` fake agents until stdin closes; prints the URL, then sizes, as JSON.
    `share` (i, k): this process is asked for nodes i, i + k, i + 2k, ... (their summaries
    are made before the URL is printed)."""
    members = FleetMembers(template or template_document(), nodes, shape)
    members.make_ahead(range(share[0], nodes, share[1]))

    async def churn() -> None:
        rng = random.Random(7)
        while True:
            await asyncio.sleep(refresh_s)
            for n in rng.sample(range(nodes), int(nodes * change)):
                members.change(n)

    async with FleetResponder(members.snapshot, members.summary) as server:
        print(json.dumps({"url": server.url, "summary_bytes": len(members.summary(0)[0]),
                          "snapshot_bytes": len(members.snapshot(0))}), flush=True)
        changing = asyncio.ensure_future(churn())
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        changing.cancel()


class FleetProcess:
    """The fake agents of `nodes` nodes served by `processes` child processes (node n by
    process n mod `processes`, so that one node's answer does not queue behind the
    whole fleet's in one process); a context manager."""

    def __init__(self, nodes: int, change: float = 0.0, shape: FleetShape | None = None,
                 python: str = sys.executable, processes: int = 1) -> None:
        if processes < 1:
            raise ValueError(f"processes must be at least 1, got {processes}")
        shape = shape or FleetShape()
        self.nodes = nodes
        args = [python, "-m", __name__, str(nodes), "--change", str(change),
                "--down-every", str(shape.down_every), *(["--spread"] if shape.spread else [])]
        # every child knows the whole fleet (the same churn), each is asked for its share
        self._procs = [subprocess.Popen([*args, "--share", f"{i}/{processes}"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                       for i in range(processes)]
        infos = []
        for proc in self._procs:
            line = proc.stdout.readline()
            if not line:
                self.close()
                raise RuntimeError(f"the fake agents did not start (exit {proc.returncode})")
            infos.append(json.loads(line))
        self.info: dict[str, Any] = infos[0]
        self.urls: list[str] = [info["url"] for info in infos]
        self.url: str = self.urls[0]

    def targets(self) -> list[AgentTarget]:
        """How a collector finds every node of the fleet."""
        urls = self.urls
        return [AgentTarget(node_id(n), f"{urls[n % len(urls)]}/n/{n}", f"host-{n}")
                for n in range(self.nodes)]

    def close(self) -> None:
        for proc in self._procs:
            if proc.stdin and not proc.stdin.closed:
                proc.stdin.close()
        for proc in self._procs:
            proc.wait(timeout=60)

    def __enter__(self) -> FleetProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def discovery(targets: list[AgentTarget]) -> Callable[[], Any]:
    """A collector's discovery function that always finds `targets`."""
    async def discover() -> list[AgentTarget]:
        return targets
    return discover


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("nodes", type=int)
    parser.add_argument("--change", type=float, default=0.0,
                        help="share of nodes whose summary changes each interval")
    parser.add_argument("--down-every", type=int, default=0,
                        help="every K-th node has one device down (0: none)")
    parser.add_argument("--spread", action="store_true",
                        help="racks, NVLink domains, node pools and utilization vary by node")
    parser.add_argument("--share", default="0/1", metavar="I/K",
                        help="this process serves nodes I, I+K, I+2K, ... (default 0/1: all)")
    args = parser.parse_args(argv[1:])
    if args.nodes < 1:
        parser.error("NODES must be at least 1")
    if not 0.0 <= args.change <= 1.0:
        parser.error("--change must be between 0 and 1")
    if args.down_every < 0:
        parser.error("--down-every must be 0 or more")
    try:
        index, count = (int(part) for part in args.share.split("/"))
    except ValueError:
        parser.error(f"--share must be I/K (two integers), got {args.share!r}")
    if not 0 <= index < count:
        parser.error(f"--share I/K needs 0 <= I < K, got {args.share!r}")
    asyncio.run(serve(args.nodes, args.change, FleetShape(args.down_every, args.spread),
                      share=(index, count)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
