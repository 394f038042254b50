"""The interpreter's cyclic garbage collector, paced for a sampling agent.

CPython collects its youngest generation whenever 700 more container objects
(tuples, lists, dicts, instances) were made than freed. A cycle of the simulated
8-GPU node makes a few thousand that live until the next cycle replaces them
(readings, samples, the snapshot and its history frame), so the collector ran
about every other cycle, scanning objects that plain reference counting frees a
second later anyway: 0.15-0.2 ms of CPU a cycle at 1 s, about a tenth of the
sampler thread's (docs/benchmarks.md). `YOUNG_THRESHOLD` lies above what one
cycle leaves alive, so young collections become rare; the cyclic garbage they
exist for waits at most that many objects longer.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 3000


def tune_gc(young_threshold: int = YOUNG_THRESHOLD) -> None:
    """Collect the youngest generation after `young_threshold` net new container objects;
    the older generations' thresholds stay as they are."""
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(young_threshold, middle, oldest)
