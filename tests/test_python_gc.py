"""The agent's pace for the interpreter's cyclic collector (exporter/python_gc.py).

Each sampling cycle leaves a few thousand container objects alive until the next
cycle replaces them; at CPython's default young threshold the collector scanned
them every few cycles for nothing. Counted with `gc.callbacks` in fresh
interpreters running the sampler and history on the simulated 8-GPU node.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys

from ray_accel.exporter.python_gc import YOUNG_THRESHOLD, tune_gc

CYCLES = 60
_COUNT_YOUNG_COLLECTIONS = f"""
import gc, json, os, sys
from ray_accel.exporter.simulate import SimulatedHardware
hardware = SimulatedHardware.start("hgx-h200", state_dir=sys.argv[2]); hardware.activate()
from ray_accel.exporter.backends import load_backends
from ray_accel.exporter.python_gc import tune_gc
from ray_accel.exporter.record.history import History
from ray_accel.exporter.sampler import Sampler
from ray_accel.exporter.store import SnapshotStore
if sys.argv[1] == "tuned":
    tune_gc()
store, history = SnapshotStore(), History()
store.subscribe(history.add)
# A long deadline, so that every cycle's reads come back in it even on a loaded machine:
# a cycle that ends before its reads makes other objects than one that has them.
sampler = Sampler(load_backends(["nvidia"]), store, interval_s=1.0)
for _ in range(10):  # devices open, first reads and layouts made
    sampler.run_cycle()
young = []
gc.callbacks.append(lambda phase, info: young.append(1)
                    if phase == "start" and info["generation"] == 0 else None)
for _ in range({CYCLES}):
    sampler.run_cycle()
print(json.dumps({{"young": len(young)}}))
sys.stdout.flush()
os._exit(0)  # the simulated driver's files go with the test's temporary directory
"""


def _young_collections(mode: str, state_dir: str) -> int:
    done = subprocess.run([sys.executable, "-c", _COUNT_YOUNG_COLLECTIONS, mode, state_dir],
                          capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout.splitlines()[-1])["young"]


def test_sampling_cycles_rarely_wake_the_young_collector(tmp_path) -> None:
    default = _young_collections("default", str(tmp_path / "default"))
    tuned = _young_collections("tuned", str(tmp_path / "tuned"))
    assert default >= 3 and tuned <= default // 3, (tuned, default)


def test_only_the_youngest_generations_threshold_changes() -> None:
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 7, 9)
        tune_gc()
        assert gc.get_threshold() == (YOUNG_THRESHOLD, 7, 9)
        tune_gc(1234)
        assert gc.get_threshold() == (1234, 7, 9)
    finally:
        gc.set_threshold(*before)
