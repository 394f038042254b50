"""Impossible AMD readings, played by the simulated amdsmi with `raw_values`, are refused.

The same rule as for NVIDIA (tests/test_validation_raw_values.py): the fake answers exactly
what the scenario asks through amdsmi's Python API, the backend reads it, and the
agent's reading checks drop and count what cannot be true.
"""

from __future__ import annotations

import pytest
from amd_support import amd_scenario, simulation

from ray_accel.exporter import catalog as m
from ray_accel.exporter.backends.amd import AmdBackend
from ray_accel.exporter.sampler import Sampler
from ray_accel.exporter.simulate import ScenarioError, load_scenario
from ray_accel.exporter.store import SnapshotStore

IMPOSSIBLE = {"gfx_activity_percent": 150, "vram_used_mb": 300000, "socket_power_w": -50}


def _raw_scenario() -> dict:
    doc = amd_scenario(devices=2)
    doc["devices"][0].update(raw_values=True, **IMPOSSIBLE)
    return doc


def _values(sample) -> dict[tuple, float]:
    return {(r.metric, r.labels): r.value for r in sample.readings}


def test_without_raw_values_the_scenario_check_refuses_them():
    doc = amd_scenario(devices=1)
    doc["devices"][0]["gfx_activity_percent"] = 150
    with pytest.raises(ScenarioError, match="gfx_activity_percent"):
        load_scenario(doc)
    assert load_scenario(_raw_scenario())["devices"][0]["raw_values"] is True


def test_the_fake_answers_them_and_the_agent_drops_and_counts_them(tmp_path):
    with simulation(tmp_path) as start:
        start(_raw_scenario())
        backend = AmdBackend()
        devices = backend.open()
        try:
            read = _values(backend.sample(devices[0]))
        finally:
            backend.close()
        assert read[(m.GPU_UTILIZATION, (("task", "general"),))] == 1.5
        assert read[(m.MEMORY_USAGE, ())] > read[(m.MEMORY_LIMIT, ())]
        assert read[(m.POWER, ())] == -50
        sampler = Sampler([AmdBackend()], SnapshotStore(), interval_s=0.5)
        try:
            snapshot = [sampler.run_cycle() for _ in range(3)][-1]
        finally:
            sampler.stop()
    raw, sane = sorted(snapshot.devices, key=lambda s: s.device.index)
    refused = {m.POWER, m.MEMORY_USAGE}
    assert refused.isdisjoint(metric for metric, _ in _values(raw))
    assert (m.GPU_UTILIZATION, (("task", "general"),)) not in _values(raw)
    assert _values(raw)[(m.MEMORY_LIMIT, ())] == 196592 * 2**20
    assert _values(sane)[(m.POWER, ())] == 350
    kinds = {(kind, fn) for (backend_name, kind, fn) in snapshot.error_counts
             if backend_name == "amd"}
    assert {("out_of_range", m.POWER), ("out_of_range", m.GPU_UTILIZATION),
            ("over_limit", m.MEMORY_USAGE)} <= kinds
