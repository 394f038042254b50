"""CPU cost of checking every reading against its valid range (exporter/validation.py).

Samples the simulated 8x H200 node once, then times `ReadingValidator.check` on
those samples cycle after cycle (nothing refused: the common case). Prints one
JSON line: readings per cycle, CPU ms per cycle (median and range over the
repeats) and CPU µs per reading.
"""

from __future__ import annotations

import json
import statistics
import time

from ray_accel.exporter.backends.base import ErrorTally
from ray_accel.exporter.backends.nvidia import NvidiaBackend
from ray_accel.exporter.model import DeviceSample
from ray_accel.exporter.simulate import SimulatedHardware
from ray_accel.exporter.validation import ReadingValidator

CYCLES = 300
REPEATS = 7


def node_samples(scenario: str = "hgx-h200") -> list[DeviceSample]:
    """One sample of every device of a simulated node."""
    with SimulatedHardware.start(scenario) as hardware:
        hardware.activate()
        backend = NvidiaBackend()
        try:
            return [backend.sample(device) for device in backend.open()]
        finally:
            backend.close()


def readings_of(samples: list[DeviceSample]) -> int:
    return sum(len(s.readings) + sum(len(link.readings) for link in s.links)
               + sum(len(p.readings) for p in s.processes) for s in samples)


def main() -> None:
    samples = node_samples()
    tally = ErrorTally()
    validator = ReadingValidator(tally, "nvidia")
    per_cycle = []
    for _ in range(REPEATS):
        start = time.process_time()
        for _ in range(CYCLES):
            for sample in samples:
                validator.check(sample)
        per_cycle.append((time.process_time() - start) / CYCLES)
    readings = readings_of(samples)
    median = statistics.median(per_cycle)
    print(json.dumps({
        "devices": len(samples), "readings_per_cycle": readings,
        "cpu_ms_per_cycle": round(median * 1e3, 3),
        "cpu_ms_per_cycle_range": [round(min(per_cycle) * 1e3, 3), round(max(per_cycle) * 1e3, 3)],
        "cpu_us_per_reading": round(median / readings * 1e6, 3),
        "refused": sum(tally.snapshot().values()),
    }))


if __name__ == "__main__":
    main()
