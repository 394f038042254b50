"""Node detail: every device of the selected nodes, its activity, memory, power, clocks."""

from __future__ import annotations

from ray_accel.exporter import catalog as m

from ..promql import eq, one_of
from . import uids
from .common import Board, Query, Section, rate, sel, table, timeseries

DEVICE = "{{vendor}} {{index}} {{ray_node_id}}"


def board() -> Board:
    return Board(
        uid=uids.NODE,
        title="Accelerators: node detail",
        description="The devices of the selected Ray nodes one by one: engine utilization, "
                    "memory, power and energy, temperatures, clocks and performance state.",
        sections=[
            Section("Activity", [
                timeseries("Compute utilization", "Fraction of time the compute/graphics "
                           "engines were busy.",
                           Query(sel(m.GPU_UTILIZATION, eq("task", m.TASK_GENERAL)), DEVICE),
                           unit="percentunit", low=0, high=1),
                timeseries("Memory bandwidth utilization", "Fraction of time device memory was "
                           "read or written.", Query(sel(m.MEMORY_BANDWIDTH_UTILIZATION), DEVICE),
                           unit="percentunit", low=0, high=1),
                timeseries("Memory in use", "Device memory in use, the driver's reservation, "
                           "and the total.",
                           Query(sel(m.MEMORY_USAGE), DEVICE),
                           Query(sel(m.MEMORY_RESERVED), DEVICE + " reserved"),
                           Query(f"max by (ray_node_id) ({sel(m.MEMORY_LIMIT)})",
                                 "total {{ray_node_id}}"), unit="bytes"),
                timeseries("Encoder and decoder utilization", "Fraction of time the video "
                           "engines were busy.",
                           Query(sel(m.GPU_UTILIZATION, one_of("task", "encoder", "decoder")),
                                 DEVICE + " {{task}}"), unit="percentunit", low=0, high=1),
                timeseries("Engine activity (GPM)", "What the device measures its engines did "
                           "(Hopper and newer): graphics engine, SMs busy, SM occupancy, DRAM "
                           "bandwidth. Unlike compute utilization, a kernel spinning reads "
                           "near 0 SM activity.",
                           Query(sel(m.ACTIVITY), DEVICE + " {{engine}}"),
                           unit="percentunit", low=0, high=1),
                timeseries("Pipe activity (GPM)", "Fraction of time the SMs' tensor, FP64, "
                           "FP32, FP16 and integer pipes were busy.",
                           Query(sel(m.PIPE_ACTIVITY), DEVICE + " {{pipe}}"),
                           unit="percentunit", low=0, high=1),
                timeseries("Spinning", "1 while a device is busy by its utilization but its "
                           "SMs and tensor pipes do nothing (a collective waiting on its "
                           "peers).", Query(sel(m.DEVICE_SPINNING), DEVICE), low=0, high=1),
            ]),
            Section("Power, temperature and clocks", [
                timeseries("Power", "Power drawn, and the limit the driver enforces.",
                           Query(sel(m.POWER), DEVICE),
                           Query(sel(m.POWER_LIMIT), DEVICE + " limit"), unit="watt"),
                timeseries("Average power from the energy counter", "Energy used per second, "
                           "from the cumulative energy counter (averages over short spikes).",
                           Query(rate(sel(m.ENERGY)), DEVICE), unit="watt"),
                timeseries("Temperature", "Temperature of each sensor.",
                           Query(sel(m.TEMPERATURE), DEVICE + " {{sensor}}"), unit="celsius"),
                timeseries("Clocks", "Current clock of each domain, and its maximum.",
                           Query(sel(m.CLOCK_FREQUENCY), DEVICE + " {{clock}}"),
                           Query(sel(m.CLOCK_MAX_FREQUENCY), DEVICE + " {{clock}} max"),
                           unit="hertz"),
                timeseries("Performance state", "P-state: 0 is the highest performance, 15 the "
                           "lowest.", Query(sel(m.PERFORMANCE_STATE), DEVICE), low=0, high=15),
                timeseries("Sample age", "Seconds since each device was last read.",
                           Query(sel(m.DEVICE_SAMPLE_AGE), DEVICE), unit="s"),
            ]),
            Section("TPU and Neuron runtimes", [
                timeseries("TPU TensorCore utilization", "Fraction of the TensorCores' peak "
                           "compute used (busy time alone is the compute utilization above).",
                           Query(sel(m.TENSORCORE_UTILIZATION), DEVICE),
                           unit="percentunit", low=0, high=1),
                timeseries("TPU collective and transfer latency", "Quantiles of libtpu's "
                           "collective latency, and of its transfers by path, since the "
                           "previous sample.",
                           Query(sel(m.COLLECTIVE_LATENCY), DEVICE + " collective q{{quantile}}"),
                           Query(sel(m.TRANSFER_LATENCY),
                                 DEVICE + " {{path}} q{{quantile}}"), unit="s"),
                timeseries("NeuronCore memory by category", "Device memory the Neuron "
                           "runtimes hold per NeuronCore: tensors, model code, constants, "
                           "scratchpad, runtime.",
                           Query(sel(m.NEURON_CORE_MEMORY_USAGE), DEVICE + " {{category}}"),
                           unit="bytes"),
                timeseries("Neuron executions", "Executions per second of each Neuron "
                           "runtime, by outcome, and its execution errors by type.",
                           Query(f"sum by (ray_node_id, pid, outcome) "
                                 f"({rate(sel(m.NEURON_EXECUTIONS))})",
                                 "pid {{pid}} {{outcome}}"),
                           Query(f"sum by (ray_node_id, pid, error_type) "
                                 f"({rate(sel(m.NEURON_EXECUTION_ERRORS))})",
                                 "pid {{pid}} error {{error_type}}"), unit="ops"),
                timeseries("Neuron execution latency", "Quantiles of each runtime's execution "
                           "latency in the last period, end to end and on the device.",
                           Query(f"max by (ray_node_id, pid, stage, quantile) "
                                 f"({sel(m.NEURON_EXECUTION_LATENCY)})",
                                 "pid {{pid}} {{stage}} q{{quantile}}"), unit="s"),
                timeseries("Neuron runtime vCPU", "vCPU utilization of each Neuron runtime "
                           "process, by mode.",
                           Query(f"max by (ray_node_id, pid, mode) "
                                 f"({sel(m.NEURON_RUNTIME_VCPU_UTILIZATION)})",
                                 "pid {{pid}} {{mode}}"), unit="percentunit", low=0, high=1),
                timeseries("Neuron runtime host memory", "Host memory each Neuron runtime "
                           "process uses.",
                           Query(f"max by (ray_node_id, pid) "
                                 f"({sel(m.NEURON_RUNTIME_HOST_MEMORY)})", "pid {{pid}}"),
                           unit="bytes"),
            ]),
            Section("AMD XCCs and clock limits", [
                timeseries("XCC graphics busy", "Share of time each XCC (accelerator die) of "
                           "each XCP (compute partition) kept its graphics engine busy: one "
                           "slow XCC drags a whole SPX GPU.",
                           Query(sel(m.XCP_GFX_UTILIZATION),
                                 DEVICE + " xcp {{xcp}} xcc {{xcc}}"),
                           unit="percentunit", low=0, high=1),
                timeseries("Graphics clock below the host limit", "Share of the time the "
                           "graphics clock was held below the host's limit, by reason "
                           "(power, thermal, low_utilization, any), on the most held XCC: "
                           "low_utilization near 1 means the GPU had no work.",
                           Query(f"max by (ray_node_id, vendor, index, reason) "
                                 f"({sel(m.XCP_GFX_BELOW_HOST_LIMIT)})", DEVICE + " {{reason}}"),
                           unit="percentunit", low=0, high=1),
                timeseries("Throttle residency", "Share of the time each limiter held the "
                           "device's clocks down since the previous sample.",
                           Query(sel(m.THROTTLE_RESIDENCY), DEVICE + " {{reason}}"),
                           unit="percentunit", low=0, high=1),
            ]),
            Section("Devices", [
                table("Devices", "Static facts about each device.",
                      Query(sel(m.DEVICE_INFO)), hidden=("Value", "SessionName", "simulated"),
                      links=[{"title": "Device health",
                              "url": f"/d/{uids.HEALTH}?${{__url_time_range}}"
                                     "&${SessionName:queryparam}&${Cluster:queryparam}"
                                     "&var-node=${__data.fields.ray_node_id}"}]),
                table("Placement", "Where each node sits: zone, region, rack, slice, NVLink "
                      "domain.", Query(sel(m.NODE_PLACEMENT)),
                      hidden=("Value", "SessionName", "simulated"), height=5),
            ]),
        ],
    )
