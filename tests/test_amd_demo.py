"""`ray-accel demo --scenario mi355x-8`: the workload on simulated AMD GPUs, seen by the agent."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from amd_support import GIB, MIB, simulation
from demo_output import demo_output, holder_rows

from ray_accel.exporter.simulate.contexts import for_real_processes

# A Ray worker holding GPU 2 as Ray starts it on a node without NVIDIA GPUs
WORKER = ("import time; from ray_accel.exporter.simulate.contexts import open_context; "
          "print(open_context(memory_bytes=4 * 2**30, sm_percent=40), flush=True); "
          "time.sleep(60)")


def test_a_worker_that_opens_a_context_loads_its_amd_gpu(tmp_path):
    with simulation(tmp_path) as start:
        hardware = start(for_real_processes("mi355x-8"))
        import amdsmi

        amdsmi.amdsmi_init(amdsmi.AmdSmiInitFlags.INIT_AMD_GPUS)
        handle = amdsmi.amdsmi_get_processor_handles()[2]
        assert amdsmi.amdsmi_get_gpu_activity(handle)["gfx_activity"] == 0
        assert amdsmi.amdsmi_get_gpu_process_list(handle) == []
        worker = subprocess.Popen(
            [sys.executable, "-c", WORKER], stdout=subprocess.PIPE, text=True,
            env={**os.environ, **hardware.environ(), "CUDA_VISIBLE_DEVICES": "2"})
        try:
            assert worker.stdout.readline().strip() == "1"  # listed on one device
            deadline = time.monotonic() + 5
            while not amdsmi.amdsmi_get_gpu_process_list(handle):
                assert time.monotonic() < deadline
                time.sleep(0.02)
            (process,) = amdsmi.amdsmi_get_gpu_process_list(handle)
            assert process["pid"] == worker.pid
            assert process["memory_usage"]["vram_mem"] == 4 * GIB
            assert amdsmi.amdsmi_get_gpu_activity(handle)["gfx_activity"] == 40
            assert amdsmi.amdsmi_get_gpu_vram_usage(handle)["vram_used"] == 4 * GIB // MIB
            table = amdsmi.amdsmi_get_gpu_metrics_info(handle)
            assert table["xcp_stats.gfx_busy_inst"][0] == [40] * 8
            other = amdsmi.amdsmi_get_processor_handles()[3]
            assert amdsmi.amdsmi_get_gpu_activity(other)["gfx_activity"] == 0
        finally:
            worker.kill()
            worker.wait()
        assert amdsmi.amdsmi_get_gpu_process_list(handle) == []  # gone with its process
        assert amdsmi.amdsmi_get_gpu_activity(handle)["gfx_activity"] == 0
        amdsmi.amdsmi_shut_down()


@pytest.mark.ray
def test_the_demo_workload_runs_on_amd_gpus():
    output = demo_output("mi355x-8")
    states: dict[str, list[str]] = {}
    for holder, state in holder_rows(output):
        states.setdefault(holder, []).append(state)
    assert states == {"Trainer": ["busy"], "IdleHolder": ["IDLE"], "Server": ["busy", "busy"],
                      "preprocess": ["busy"]}, output
    # the agent read every simulated reading as true: none was refused
    assert not [line for line in output if "dropped a" in line], output
