"""Small NVIDIA scenarios for tests: identical H200s with known values, frozen in time."""

from __future__ import annotations

import copy

H200 = {
    "name": "NVIDIA H200",
    "pci_device_id": 0x233510DE,
    "architecture": "hopper",
    "memory_total_bytes": 150754820096,
    "memory_reserved_bytes": 500 * 2**20,
    "memory_used_bytes": 40 * 2**30,
    "utilization_gpu_percent": 55,
    "utilization_memory_percent": 31,
    "encoder_percent": 4,
    "decoder_percent": 7,
    "power_mw": 350_000,
    "power_limit_mw": 700_000,
    "energy_start_mj": 9_000_000,
    "temperature_c": 61,
    "clock_sm_mhz": 1980,
    "clock_memory_mhz": 2619,
    "max_clock_sm_mhz": 1980,
    "max_clock_memory_mhz": 2619,
    "clocks_event_reasons": 0x4 | 0x40,  # sw power cap + hw thermal slowdown
    "performance_state": 0,
    "ecc_mode": True,
    "ecc_corrected": 12,
    "ecc_uncorrected": 1,
    "remapped_rows": {"correctable": 2, "uncorrectable": 1, "pending": True, "failure": False},
    "pcie_replay": 5,
    "processes": [],
}


def scenario(devices: int = 3, freeze_at_s: float | None = 10.0, **top) -> dict:
    """A small scenario of identical H200s, frozen in time so values are exact."""
    doc = {
        "name": "test",
        "description": "test node",
        "driver_version": "570.124.06",
        "nvml_version": "12.570.124.06",
        "cuda_driver_version": 12080,
        "device_defaults": copy.deepcopy(H200),
        "devices": [
            {"uuid": f"GPU-00000000-0000-0000-0000-00000000000{i}",
             "pci_bus_id": f"00000000:{0x18 + i:02X}:00.0", "minor_number": i}
            for i in range(devices)
        ],
    }
    if freeze_at_s is not None:
        doc["freeze_at_s"] = freeze_at_s
    doc.update(top)
    return doc
