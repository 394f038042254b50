"""A small node snapshot for sink and HTTP tests: one H200 with known readings, one lost MIG."""

from __future__ import annotations

from ray_accel.exporter import catalog as m
from ray_accel.exporter.model import (
    BackendStatus,
    Device,
    DeviceSample,
    NodeSnapshot,
    ProcessSample,
    Reading,
    labels_of,
)

GPU = Device("nvidia", "0", "GPU-aaaa", "NVIDIA H200", "00000000:18:00.0",
             facts={"architecture": "hopper", "driver_version": "570.1"})
MIG = Device("nvidia", "1/3/0", "MIG-bbbb", "NVIDIA A100 MIG 3g.40gb", "00000000:2A:00.0",
             parent_uuid="GPU-cccc")


def sample_snapshot(cycle: int = 7) -> NodeSnapshot:
    """The snapshot of cycle `cycle`: every reading's value known, taken at a fixed time."""
    now = 1_700_000_000.0
    gpu = DeviceSample(
        GPU, up=True, taken_at=now - 0.5,
        readings=(
            Reading(m.GPU_UTILIZATION, 0.75, labels_of({"task": "general"})),
            Reading(m.POWER, 512.5),
            Reading(m.ENERGY, 123456.789),
            Reading(m.HW_ERRORS, 3, labels_of({"error_type": "ecc_corrected"})),
            Reading(m.XID_ERRORS, 2, labels_of({"xid": "79"})),
        ),
        processes=(ProcessSample(4242, (Reading(m.PROCESS_MEMORY_USAGE, 2**30),)),),
    )
    lost = DeviceSample(MIG, up=False, taken_at=now - 10)
    return NodeSnapshot(
        cycle=cycle, taken_at=now, interval_s=1.0, node_labels={"simulated": "true"},
        backends=(BackendStatus("nvidia", "nvidia", True, 2),),
        devices=(gpu, lost), cycle_duration_s=0.004,
        error_counts={("nvidia", "not_supported", "nvmlDeviceGetPowerUsage"): 1},
        agent_facts={"version": "0.1.0", "interval_seconds": "1", "scenario": "test"},
    )
