"""Processes on an AMD GPU (or compute partition): their VRAM and engine use.

amdsmi reports each process's engine use as cumulative nanoseconds of busy
time (from the driver's fdinfo), so the share of a sample period comes from
two consecutive samples: a process seen for the first time has memory but no
utilization yet. The GFX engine is reported as engine "sm" (the general
compute engine, as on NVIDIA) so that Ray attribution treats both the same.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ... import catalog as m
from ...model import ProcessSample, Reading
from .calls import DeviceCalls, number
from .probes import reading

ENGINES = (("gfx", "sm"), ("enc", "encoder"))  # amdsmi engine_usage key -> engine label


@dataclass
class EngineClock:
    """Per-device memory of each process's busy-time counters, between cycles."""

    seen: dict[int, tuple[int, dict[str, float]]] = field(default_factory=dict)


def _engine_readings(pid: int, usage: Any, clock: EngineClock, now_ns: int) -> list[Reading]:
    counters = {key: value for key, _ in ENGINES
                if isinstance(usage, dict) and (value := number(usage.get(key))) is not None}
    previous = clock.seen.get(pid)
    clock.seen[pid] = (now_ns, counters)
    if previous is None:
        return []
    elapsed = now_ns - previous[0]
    found = []
    for key, engine in ENGINES:
        if key in counters and key in previous[1] and elapsed > 0:
            busy = counters[key] - previous[1][key]
            if busy >= 0:  # a counter that went back (process restarted its context): skip
                found.append(reading(m.PROCESS_UTILIZATION, min(busy / elapsed, 1.0),
                                     engine=engine))
    return found


def processes(amd: DeviceCalls, handle: Any, clock: EngineClock) -> tuple[ProcessSample, ...]:
    """Processes using the device, with VRAM and (from the second sample on) engine use."""
    listed = amd.call("amdsmi_get_gpu_process_list", handle) or []
    now_ns = time.monotonic_ns()
    samples = []
    for process in listed:
        pid = process.get("pid")
        if not isinstance(pid, int):
            continue
        vram = number((process.get("memory_usage") or {}).get("vram_mem"))
        readings = [] if vram is None else [reading(m.PROCESS_MEMORY_USAGE, vram)]
        readings += _engine_readings(pid, process.get("engine_usage"), clock, now_ns)
        samples.append(ProcessSample(pid, tuple(readings)))
    alive = {sample.pid for sample in samples}
    for pid in [pid for pid in clock.seen if pid not in alive]:
        del clock.seen[pid]
    return tuple(sorted(samples, key=lambda sample: sample.pid))
