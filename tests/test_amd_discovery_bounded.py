"""Opening the AMD backend is bounded per GPU, as sampling is (docs/reliability.md).

amdsmi lists every GPU at once; each is then identified on its own worker. A
GPU whose identification hangs from the first call hides no other GPU, is
listed stale with its reason, and joins with its topology when it answers.
"""

from __future__ import annotations

import time

from amd_support import amd_scenario, simulation

from ray_accel.exporter.backends.amd import AmdBackend
from ray_accel.exporter.health import health
from ray_accel.exporter.sampler import Sampler
from ray_accel.exporter.store import SnapshotStore

HANG_S = 4.0


def test_a_gpu_hanging_from_the_first_call_hides_no_other(tmp_path):
    doc = amd_scenario(devices=4, freeze_at_s=None)
    doc["delays"] = [{"function": "amdsmi_get_gpu_asic_info", "device": 2, "seconds": HANG_S,
                      "until_s": 1.0}]
    with simulation(tmp_path) as start:
        start(doc)
        sampler = Sampler([AmdBackend()], SnapshotStore(), interval_s=0.5)
        try:
            first = sampler.run_cycle()
            by_index = {s.device.index: s for s in first.devices}
            assert [i for i, s in sorted(by_index.items()) if s.up] == ["0", "1", "3"]
            hung = by_index["2"]
            assert not hung.up and hung.stale and hung.device.uuid == "amd-index-2"
            assert hung.errors == {"discovery": "not answering"}
            body, _ = health(first, sampler_alive=True, now=first.taken_at)
            second = {s.device.index: s for s in sampler.run_cycle().devices}
            assert {p.index for p in second["0"].device.peers} == {"1", "3"}
            assert body["status"] == "degraded"
            deadline = time.monotonic() + HANG_S + 10
            while time.monotonic() < deadline:
                joined = {s.device.index: s for s in sampler.run_cycle().devices}
                if all(s.up for s in joined.values()):
                    break
                time.sleep(0.2)
            assert all(s.up for s in joined.values())
            assert joined["2"].device.uuid != "amd-index-2"
            assert {p.index for p in joined["0"].device.peers} == {"1", "2", "3"}
            assert {p.index for p in joined["2"].device.peers} == {"0", "1", "3"}
        finally:
            sampler.stop()
