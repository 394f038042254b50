"""The processes on a device or partition."""

from __future__ import annotations

from ._interface_common import NA, required
from ._interface_types import MAX_NUM_PROCESSES
from ._simulation import SIMULATION


def amdsmi_get_gpu_process_list(processor_handle):
    target = SIMULATION.enter("amdsmi_get_gpu_process_list", processor_handle)
    processes = required(target.partition or target.device, "processes")
    seconds = SIMULATION.time()
    found = []
    for process in SIMULATION.live_processes(processes)[:MAX_NUM_PROCESSES]:
        vram = process.get("used_memory_bytes", 0)
        gtt, cpu = process.get("gtt_bytes", 0), process.get("cpu_bytes", 0)
        found.append({
            "name": process.get("name") or NA,
            "pid": process["pid"],
            "mem": vram + gtt + cpu,
            # cumulative engine time, as the driver's fdinfo counts it
            "engine_usage": {"gfx": int(process.get("gfx_percent", 0) / 100 * seconds * 1e9),
                             "enc": int(process.get("enc_percent", 0) / 100 * seconds * 1e9)},
            "memory_usage": {"gtt_mem": gtt, "cpu_mem": cpu, "vram_mem": vram},
            "cu_occupancy": NA,
        })
    return found
