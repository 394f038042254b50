"""Running-process lists in one driver call each (exporter/backends/nvidia/process_samples.py).

The backend asks for a device's compute and graphics processes with a buffer it keeps
per device, instead of the binding's count query and list call (the calls are counted
in tests/test_nvidia_cadence.py); the answers must be
the binding's, on GPUs and MIG instances, and a failing list call costs only that
list; no utilization sample since the last one is an empty answer, not an error. The
real nvidia-ml-py binding reads the fake libnvidia-ml.so.1, time frozen so that the
processes the scenarios list stay put.
"""

from __future__ import annotations

import copy
import time

import pynvml
import pytest

from ray_accel.exporter import catalog as m
from ray_accel.exporter.backends.nvidia.process_samples import (
    SampleBuffer,
    nvmlDeviceGetComputeRunningProcesses,
    nvmlDeviceGetGraphicsRunningProcesses,
    nvmlDeviceGetProcessUtilization,
    process_buffer,
)
from ray_accel.exporter.simulate import load_scenario

NO_INSTANCE = 0xFFFFFFFF  # the instance ids of a process not in a MIG instance
LISTS = ((nvmlDeviceGetComputeRunningProcesses, pynvml.nvmlDeviceGetComputeRunningProcesses),
         (nvmlDeviceGetGraphicsRunningProcesses, pynvml.nvmlDeviceGetGraphicsRunningProcesses))


def _frozen(name: str) -> dict:
    doc = copy.deepcopy(load_scenario(name))
    doc["freeze_at_s"] = 5.0
    doc["delays"] = []
    return doc


def _crowded(pids: range) -> dict:
    """hgx-h200 with GPU 7 (empty in the scenario) holding a process per pid, every other
    one a graphics one."""
    doc = _frozen("hgx-h200")
    doc["devices"][7]["processes"] = [
        {"pid": pid, "used_memory_bytes": (1 + n) * 2**20, "sm_percent": 1,
         "type": "graphics" if n % 2 else "compute"} for n, pid in enumerate(pids)]
    return doc


def _binding(fn, handle) -> list[tuple]:
    return [(p.pid, p.usedGpuMemory, p.gpuInstanceId, p.computeInstanceId) for p in fn(handle)]


def test_the_lists_are_the_bindings_on_gpus_and_mig_instances(open_backend):
    backend, devices, _ = open_backend(_frozen("a100-mig"))
    listed = []
    for device in devices:
        handle = backend._tracked[device.uuid].handle
        for ours, theirs in LISTS:
            found = [tuple(p) for p in ours(handle, process_buffer())]
            assert found == _binding(theirs, handle)
            listed.extend((device.index, p) for p in found)
    # the MIG instance's process, on its own handle and on its GPU's, with its instance ids
    mig = [(index, p) for index, p in listed if p[2] != NO_INSTANCE]
    assert len({p for _, p in mig}) == 1
    indices = sorted(index for index, _ in mig)
    assert len(indices) == 2 and indices[0] == "0" and indices[1].startswith("0/")


def test_a_failing_list_call_costs_only_its_list(open_backend):
    doc = _crowded(range(61001, 61005))
    doc["errors"] = [{"function": "nvmlDeviceGetComputeRunningProcesses", "device": 7,
                      "code": "TIMEOUT"},
                     {"function": "nvmlDeviceGetGraphicsRunningProcesses", "device": 6,
                      "code": "NOT_SUPPORTED"}]
    backend, devices, _ = open_backend(doc)
    by_index = {d.index: d for d in devices}
    seven = backend.sample(by_index["7"])
    assert seven.up and seven.errors["nvmlDeviceGetComputeRunningProcesses"] == "timeout"
    assert {p.pid for p in seven.processes} == {61002, 61004}  # the graphics ones
    assert any(r.metric == m.GPU_UTILIZATION for r in seven.readings)
    six = [backend.sample(by_index["6"]) for _ in range(2)]
    assert all(s.up and s.errors["nvmlDeviceGetGraphicsRunningProcesses"] == "not_supported"
               for s in six)  # permanent: absent, never asked again
    assert "nvmlDeviceGetGraphicsRunningProcesses" in backend._tracked[
        by_index["6"].uuid].calls.unsupported
    assert [p.pid for p in six[1].processes] == [p.pid for p in six[0].processes] != []


def test_no_utilization_sample_since_is_an_empty_answer_not_an_error(open_backend):
    backend, devices, _ = open_backend(_frozen("hgx-h200"))
    gpu = devices[0]
    handle = backend._tracked[gpu.uuid].handle
    later_us = int((time.time() + 3600) * 1e6)  # no sample can be newer than this
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetProcessUtilization(handle, later_us)
    assert nvmlDeviceGetProcessUtilization(handle, later_us, SampleBuffer()) == []
    samples = nvmlDeviceGetProcessUtilization(handle, 0, SampleBuffer())
    assert samples and {s.pid for s in samples} <= {p.pid for p in backend.sample(gpu).processes}
    assert "nvmlDeviceGetProcessUtilization" not in backend.sample(gpu).errors
