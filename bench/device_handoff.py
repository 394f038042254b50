"""CPU of one cycle's eight device reads by the way they are handed to their workers, on the
simulated 8xH200 node, in one process, the ways alternating round by round.

- all at once: each read handed to its device's worker, each on its own thread, in one go;
- paced: the caller hands out read i+1 once read i finished (or 30 ms passed), waking
  between two reads;
- chained: read i's worker hands out read i+1 when it finishes (the caller wakes once);
- one lane: each read handed to its device's worker, every worker on one shared thread
  (what the sampler does while every device answers promptly, exporter/runner.py);
- inline: the reads on the caller's own thread, no handoff at all: the floor.

`python bench/device_handoff.py [cycles] [rounds]` prints, per way, the process CPU per cycle
(median over the rounds, then each round's) and the context switches per cycle, with the
load average: other processes change the figures.
"""

from __future__ import annotations

import concurrent.futures as futures
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence

from ray_accel.exporter.call_worker import Lane, Worker
from ray_accel.exporter.simulate import SimulatedHardware

PAUSE_S = 0.05  # between cycles: the workers go back to sleep, as between two cycles
STEP_S = 0.03  # how long the paced way waits for one read before handing out the next
WAIT_S = 1.0


class Reads:
    """One cycle's reads of every device, handed out in each of the ways."""

    def __init__(self, sample: Callable[[object], object], devices: Sequence[object]) -> None:
        self._sample = sample
        self._devices = list(devices)
        self._workers = [Worker(f"ray-accel-bench-{i}") for i in range(len(self._devices))]
        self._lane = Lane("ray-accel-bench")
        self._lane_workers = [Worker(f"ray-accel-bench-lane-{i}", self._lane)
                              for i in range(len(self._devices))]

    def _taken(self) -> None:
        for worker in self._workers:
            worker.take_result()

    def all_at_once(self, workers: Sequence[Worker] | None = None) -> None:
        workers = self._workers if workers is None else workers
        started = [w.submit(self._sample, d) for w, d in zip(workers, self._devices,
                                                             strict=True)]
        futures.wait(started, timeout=WAIT_S)
        for worker in workers:
            worker.take_result()

    def one_lane(self) -> None:
        self.all_at_once(self._lane_workers)

    def paced(self) -> None:
        started = []
        for worker, device in zip(self._workers, self._devices, strict=True):
            started.append(worker.submit(self._sample, device))
            futures.wait(started[-1:], timeout=STEP_S)
        futures.wait(started, timeout=WAIT_S)
        self._taken()

    def chained(self) -> None:
        at_end = threading.Event()

        def start(i: int) -> None:
            if i == len(self._devices):
                at_end.set()
                return
            future = self._workers[i].submit(self._sample, self._devices[i])
            future.add_done_callback(lambda _: start(i + 1))

        start(0)
        at_end.wait(WAIT_S)
        self._taken()

    def inline(self) -> None:
        for device in self._devices:
            self._sample(device)

    def shutdown(self) -> None:
        for worker in self._workers:
            worker.shutdown()
        self._lane.close()


def cpu_per_cycle(cycle: Callable[[], object], cycles: int) -> tuple[float, float]:
    """(process CPU seconds, context switches) per cycle over `cycles` cycles."""
    before, cpu = resource.getrusage(resource.RUSAGE_SELF), time.process_time()
    for _ in range(cycles):
        cycle()
        time.sleep(PAUSE_S)
    after = resource.getrusage(resource.RUSAGE_SELF)
    switches = (after.ru_nvcsw - before.ru_nvcsw) + (after.ru_nivcsw - before.ru_nivcsw)
    return (time.process_time() - cpu) / cycles, switches / cycles


def main(cycles: int = 100, rounds: int = 6) -> dict[str, dict[str, object]]:
    from ray_accel.exporter.backends.nvidia import NvidiaBackend

    hardware = SimulatedHardware.start("hgx-h200", state_dir=tempfile.mkdtemp() + "/hw")
    hardware.activate()
    backend = NvidiaBackend()
    reads = Reads(backend.sample, backend.open())
    ways = {"all at once": reads.all_at_once, "paced": reads.paced,
            "chained": reads.chained, "one lane": reads.one_lane, "inline": reads.inline}
    cpu: dict[str, list[float]] = {way: [] for way in ways}
    switches: dict[str, list[float]] = {way: [] for way in ways}
    try:
        for way in ways.values():  # the slow reads' first round done, every thread started
            cpu_per_cycle(way, 10)
        for number in range(rounds):
            for way in (list(ways) if number % 2 == 0 else list(reversed(ways))):
                seconds, switched = cpu_per_cycle(ways[way], cycles)
                cpu[way].append(seconds)
                switches[way].append(switched)
    finally:
        reads.shutdown()
        backend.close()
        hardware.close()
    return {way: {"cpu_ms": round(statistics.median(cpu[way]) * 1e3, 3),
                  "rounds_ms": [round(s * 1e3, 2) for s in cpu[way]],
                  "switches": round(statistics.median(switches[way]), 1)} for way in ways}


if __name__ == "__main__":
    load = os.getloadavg()[0]
    found = main(*[int(a) for a in sys.argv[1:3]])
    print(f"load {load:.2f} -> {os.getloadavg()[0]:.2f}")
    for way, figures in found.items():
        print(f"{way}: {figures['cpu_ms']} ms CPU per cycle {figures['rounds_ms']}, "
              f"{figures['switches']} context switches")
