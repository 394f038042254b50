"""Shared by the AMD tests: a small MI300X scenario and in-process simulated machines."""

from __future__ import annotations

import contextlib
import copy
import os
import sys
from collections.abc import Iterator

from ray_accel.exporter.backends.amd import AmdBackend
from ray_accel.exporter.simulate import STATE_ENV, SimulatedHardware

MIB = 2**20
GIB = 2**30

MI300X = {
    "name": "AMD Instinct MI300X",
    "device_id": 0x74A1,
    "target_graphics_version": "gfx942",
    "num_compute_units": 304,
    "driver_version": "6.12.12",
    "vram_total_mb": 196592,
    "vram_used_mb": 40960,
    "gfx_activity_percent": 55,
    "umc_activity_percent": 31,
    "mm_activity_percent": 7,
    "socket_power_w": 350,
    "power_cap_w": 750,
    "energy_start_uj": 9_000_000_000,
    "temperature_hotspot_c": 61,
    "temperature_vram_c": 50,
    "clock_gfx_mhz": 2100,
    "clock_mem_mhz": 1300,
    "max_clock_gfx_mhz": 2100,
    "max_clock_mem_mhz": 1300,
    "throttle_percent": {"ppt_pwr": 100, "socket_thrm": 0, "prochot_thrm": 0, "vr_thrm": 0},
    "ecc_correctable": 12,
    "ecc_uncorrectable": 1,
    "ecc_deferred": 2,
    "pcie_link": {"gen_current": 4, "gen_max": 5, "width_current": 16, "width_max": 16},
    "pcie_replay": 5,
    "compute_partition": "SPX",
    "memory_partition": "NPS1",
    "processes": [],
}


def bus(i: int) -> str:
    return f"0000:{0x18 + i:02x}:00.0"


def uuid(i: int) -> str:
    return f"00ff74a1-0000-1000-8000-00000000000{i}"


def amd_scenario(devices: int = 3, freeze_at_s: float | None = 10.0, **top) -> dict:
    """Identical MI300Xs, each with an XGMI link to every other, frozen in time by default."""
    doc = {
        "name": "amd-test",
        "amdsmi_version": "25.5.1",
        "amd_device_defaults": copy.deepcopy(MI300X),
        "devices": [
            {"vendor": "amd", "uuid": uuid(i), "pci_bus_id": bus(i),
             "serial": f"D8C3A9F2B1E0442{i}", "numa_node": 0 if i < 2 else 1,
             "xgmi_links": [{"remote_pci_bus_id": bus(j), "bit_rate_gbps": 32,
                             "max_bandwidth_gbps": 512, "read_kb": 1000 * (j + 1),
                             "write_kb": 2000 * (j + 1)}
                            for j in range(devices) if j != i]}
            for i in range(devices)
        ],
    }
    if freeze_at_s is not None:
        doc["freeze_at_s"] = freeze_at_s
    doc.update(top)
    return doc


def forget_amdsmi() -> None:
    """Drop any imported amdsmi, so that the next import runs the package again."""
    for name in [n for n in sys.modules if n == "amdsmi" or n.startswith("amdsmi.")]:
        del sys.modules[name]


@contextlib.contextmanager
def simulation(state_dir) -> Iterator:
    """`start(source)` starts simulated hardware in this process, activated; undone on exit."""
    previous = os.environ.get(STATE_ENV)

    def start(source) -> SimulatedHardware:
        hardware = SimulatedHardware.start(source, state_dir=state_dir)
        hardware.activate()
        return hardware

    try:
        yield start
    finally:
        if previous is None:
            os.environ.pop(STATE_ENV, None)
        else:
            os.environ[STATE_ENV] = previous


@contextlib.contextmanager
def amdsmi_modules(start) -> Iterator:
    """`run(source)` starts hardware with `start`, imports and initialises the simulated amdsmi;
    returns (module, hardware); shut down on exit."""
    started = []

    def run(source):
        hardware = start(source)
        import amdsmi as module

        module.amdsmi_init(module.AmdSmiInitFlags.INIT_AMD_GPUS)
        started.append(module)
        return module, hardware

    try:
        yield run
    finally:
        for module in started:
            module.amdsmi_shut_down()


@contextlib.contextmanager
def amd_backends(start) -> Iterator:
    """`open(source)` starts hardware with `start` and opens an AMD backend; closed on exit."""
    opened: list[AmdBackend] = []

    def open_backend(source) -> tuple[AmdBackend, list, SimulatedHardware]:
        hardware = start(source)
        backend = AmdBackend()
        devices = backend.open()
        opened.append(backend)
        return backend, list(devices), hardware

    try:
        yield open_backend
    finally:
        for backend in opened:
            backend.close()
