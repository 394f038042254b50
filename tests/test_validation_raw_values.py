"""Impossible values played by the simulated hardware, read as a driver would give them.

A device with `"raw_values": true` answers what its scenario asks through the real
NVML ABI (utilization 150 %, power -50 W wrapped through uint32, memory used above
total); the real nvidia-ml-py binding reads them; the agent drops, counts and logs
them once, and a counter the hardware runs backwards is never exported lower.
"""

from __future__ import annotations

import copy
import time

import pynvml
import pytest
from agent_process import AgentProcess, write_scenario
from metrics_text import by_index, series
from nvml_scenarios import scenario

from ray_accel.exporter import catalog as m
from ray_accel.exporter.backends.base import ErrorTally
from ray_accel.exporter.backends.nvidia import NvidiaBackend
from ray_accel.exporter.sampler import Sampler
from ray_accel.exporter.simulate import ScenarioError, available_scenarios, load_scenario
from ray_accel.exporter.store import SnapshotStore
from ray_accel.exporter.validation import (
    COUNTER_DECREASED,
    OUT_OF_RANGE,
    OVER_LIMIT,
    ReadingValidator,
)

TOTAL = 150754820096  # the H200 defaults' memory_total_bytes
IMPOSSIBLE = {
    "raw_values": True,
    "utilization_gpu_percent": 150,
    "utilization_memory_percent": 250,
    "power_mw": -50_000,
    "memory_used_bytes": TOTAL + 2**30,
    "temperature_c": -5,
}
WRAPPED_POWER_MW = 2**32 - 50_000  # 4294917296


def _raw_scenario(freeze_at_s: float | None = 10.0) -> dict:
    """Device 0 answers impossible values, device 1 sane ones."""
    doc = scenario(devices=2, freeze_at_s=freeze_at_s)
    doc["devices"][0].update(copy.deepcopy(IMPOSSIBLE))
    return doc


def _values(sample) -> dict[tuple[str, tuple], float]:
    return {(r.metric, r.labels): r.value for r in sample.readings}


def test_the_real_binding_reads_exactly_what_a_raw_device_is_asked(open_backend):
    open_backend(_raw_scenario())
    raw, sane = pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlDeviceGetHandleByIndex(1)
    rates = pynvml.nvmlDeviceGetUtilizationRates(raw)
    assert (rates.gpu, rates.memory) == (150, 250)
    assert pynvml.nvmlDeviceGetPowerUsage(raw) == WRAPPED_POWER_MW
    assert pynvml.nvmlDeviceGetTemperature(raw, pynvml.NVML_TEMPERATURE_GPU) == 2**32 - 5
    memory = pynvml.nvmlDeviceGetMemoryInfo(raw, pynvml.nvmlMemory_v2)
    assert (memory.used, memory.total, memory.free) == (TOTAL + 2**30, TOTAL, 0)
    rates = pynvml.nvmlDeviceGetUtilizationRates(sane)
    assert (rates.gpu, rates.memory) == (55, 31)
    assert pynvml.nvmlDeviceGetPowerUsage(sane) == 350_000


@pytest.mark.parametrize(("key", "value", "message"), [
    ("utilization_gpu_percent", 150, "must be <= 100"),
    ("power_mw", -50_000, "must be >= 0"),
    ("raw_values", "yes", "expected true or false"),
    ("processes", [{"pid": 7, "sm_percent": 150}], "must be <= 100"),
])
def test_without_raw_values_the_scenario_check_still_refuses_them(key, value, message):
    doc = scenario(devices=1)
    doc["devices"][0][key] = value
    with pytest.raises(ScenarioError, match=rf"devices\[0\]\.{key}\S*: {message}"):
        load_scenario(doc)


def test_raw_values_is_a_per_device_choice():
    doc = _raw_scenario()
    doc["devices"][1]["power_mw"] = -1
    with pytest.raises(ScenarioError, match=r"devices\[1\]\.power_mw: must be >= 0"):
        load_scenario(doc)


def test_the_backend_reads_them_and_the_sampler_drops_and_counts_them(open_backend):
    backend, devices, _ = open_backend(_raw_scenario())
    read = _values(backend.sample(devices[0]))
    assert read[(m.GPU_UTILIZATION, (("task", "general"),))] == 1.5
    assert read[(m.MEMORY_BANDWIDTH_UTILIZATION, ())] == 2.5
    assert read[(m.POWER, ())] == pytest.approx(4294917.296)
    assert read[(m.MEMORY_USAGE, ())] > read[(m.MEMORY_LIMIT, ())]

    sampler = Sampler([NvidiaBackend()], SnapshotStore(), interval_s=0.5)
    try:
        snapshot = [sampler.run_cycle() for _ in range(3)][-1]
    finally:
        sampler.stop()
    raw, sane = snapshot.devices
    assert {metric for metric, _ in _values(raw)}.isdisjoint(
        {m.POWER, m.MEMORY_USAGE, m.MEMORY_BANDWIDTH_UTILIZATION, m.TEMPERATURE})
    assert (m.GPU_UTILIZATION, (("task", "general"),)) not in _values(raw)
    assert _values(raw)[(m.GPU_UTILIZATION, (("task", "encoder"),))] == 0.04  # sane: kept
    assert _values(raw)[(m.MEMORY_LIMIT, ())] == TOTAL
    assert _values(sane)[(m.POWER, ())] == 350.0
    counts = {(kind, fn): n for (backend_name, kind, fn), n in snapshot.error_counts.items()
              if backend_name == "nvidia"}
    sampled = counts[(OUT_OF_RANGE, m.POWER)]  # once per cycle that sampled the device
    assert sampled >= 2
    assert counts[(OUT_OF_RANGE, m.GPU_UTILIZATION)] == sampled
    assert counts[(OUT_OF_RANGE, m.MEMORY_BANDWIDTH_UTILIZATION)] == sampled
    assert counts[(OUT_OF_RANGE, m.TEMPERATURE)] == sampled
    assert counts[(OVER_LIMIT, m.MEMORY_USAGE)] == sampled
    assert raw.errors[m.POWER].startswith("out_of_range: 4.29492e+06 is outside")


def test_an_agent_drops_counts_and_logs_once(tmp_path):
    doc = _raw_scenario(freeze_at_s=None)
    # 700 W for 4 s, then -2000 W: the energy counter (start + integral) runs backwards
    doc["devices"][0]["power_mw"] = {"keyframes": [[0, 700_000], [4, -2_000_000]],
                                     "interpolate": "step"}
    energy = []
    # energy read every cycle (not on the slow cadence), so its decrease is seen within 6 s
    with AgentProcess("--simulate", write_scenario(tmp_path, doc), "--interval", "0.2",
                      "--slow-read-interval", "0", "--backend", "nvidia") as agent:
        agent.wait_for(lambda d: len(d["devices"]) == 2 and all(x["up"] for x in d["devices"]))
        for _ in range(20):
            _, _, body = agent.get("/metrics")
            energy.extend(s.value for s in series(body, "hw_energy_joules_total")
                          if s.labels["index"] == "0")
            time.sleep(0.3)
        snapshot = agent.json("/api/v1/snapshot")
    # The whole log: the first cycle may log its refusals before the line with the URL.
    log = "".join(agent.output) + agent.proc.stdout.read()
    assert set(by_index(series(body, "hw_power_watts"))) == {"1"}
    assert set(by_index(series(body, "hw_gpu_memory_usage_bytes"))) == {"1"}
    assert set(by_index(series(body, "ray_accelerator_memory_bandwidth_utilization_ratio"))) \
        == {"1"}
    general = [s for s in series(body, "hw_gpu_utilization_ratio")
               if s.labels["task"] == "general"]
    assert set(by_index(general)) == {"1"}
    assert set(by_index(series(body, "hw_energy_joules_total"))) == {"1"}
    errors = {(s.labels["kind"], s.labels["function"]): s.value
              for s in series(body, "ray_accelerator_agent_errors_total")
              if s.labels["backend"] == "nvidia"}
    assert errors[(OUT_OF_RANGE, m.GPU_UTILIZATION)] >= 20
    assert errors[(OUT_OF_RANGE, m.POWER)] >= 5
    assert errors[(OVER_LIMIT, m.MEMORY_USAGE)] >= 20
    assert errors[(COUNTER_DECREASED, m.ENERGY)] >= 5
    assert len(set(energy)) >= 3, energy  # it rose while the power was positive...
    assert energy == sorted(energy)  # ...and was never exported lower
    assert {"hw.power", "hw.energy"} <= set(snapshot["devices"][0]["errors"])
    dropped = [line for line in log.splitlines() if "dropped a" in line]
    for metric in (m.POWER, m.GPU_UTILIZATION, m.MEMORY_USAGE, m.ENERGY):
        assert sum(f"dropped a {metric} reading" in line for line in dropped) == 1, dropped
    assert all("device 0 " in line for line in dropped), dropped


@pytest.mark.parametrize(("raw", "expected"), [(False, 100), (True, 130)])
def test_busy_processes_are_capped_at_100_percent_unless_raw(open_backend, raw, expected):
    doc = scenario(devices=1)
    doc["devices"][0].update(
        raw_values=raw, load_from_processes=True, utilization_gpu_percent=70,
        processes=[{"pid": 4242, "sm_percent": 60, "used_memory_bytes": 2**30}])
    open_backend(doc)
    rates = pynvml.nvmlDeviceGetUtilizationRates(pynvml.nvmlDeviceGetHandleByIndex(0))
    assert rates.gpu == expected


@pytest.mark.parametrize("name", [
    n for n in available_scenarios()
    if any(d.get("vendor", "nvidia") == "nvidia" for d in load_scenario(n)["devices"])
])
def test_no_reading_of_a_shipped_scenario_is_refused(open_backend, name):
    backend, devices, _ = open_backend(name)
    tally = ErrorTally()
    validator = ReadingValidator(tally, "nvidia")
    samples = [validator.check(backend.sample(d)) for _ in range(2) for d in devices]
    assert sum(len(s.readings) for s in samples) > 10 * len(devices)
    assert tally.snapshot() == {}


def test_a_raw_device_plays_impossible_process_readings_that_are_dropped(open_backend):
    doc = scenario(devices=1)
    doc["devices"][0].update(raw_values=True, processes=[
        {"pid": 4242, "sm_percent": 150, "memory_percent": 30, "used_memory_bytes": TOTAL + 1}])
    backend, devices, _ = open_backend(doc)
    sample = backend.sample(devices[0])
    (process,) = sample.processes
    read = {(r.metric, r.labels): r.value for r in process.readings}
    assert read[(m.PROCESS_UTILIZATION, (("engine", "sm"),))] == 1.5
    assert read[(m.PROCESS_MEMORY_USAGE, ())] == TOTAL + 1
    tally = ErrorTally()
    (kept,) = ReadingValidator(tally, "nvidia").check(sample).processes
    assert {dict(r.labels)["engine"]: r.value for r in kept.readings} == {
        "memory": 0.3, "encoder": 0.0, "decoder": 0.0}
    assert tally.snapshot() == {(OUT_OF_RANGE, m.PROCESS_UTILIZATION): 1,
                                (OVER_LIMIT, m.PROCESS_MEMORY_USAGE): 1}
