"""Activity, VRAM, power, energy, temperatures, clocks and ECC counts."""

from __future__ import annotations

import ctypes
import math

from ray_accel.exporter.simulate.signals import counter_at, integral, value_at

from ._interface_common import (
    NA,
    board_target,
    check_enum,
    optional_int,
    process_load,
    required,
    with_process_load,
)
from ._interface_types import AmdSmiClkType, AmdSmiTemperatureMetric, AmdSmiTemperatureType
from ._simulation import SIMULATION, Target, not_supported

_DEFAULT_RESOLUTION_UJ = 15.259


def _signal(target: Target, key: str) -> float:
    """A signal of the partition or device at the current time; NOT_SUPPORTED if undefined."""
    signal = target.value(key)
    if signal is None:
        raise not_supported()
    return value_at(signal, SIMULATION.time())


def amdsmi_get_gpu_activity(processor_handle):
    target = SIMULATION.enter("amdsmi_get_gpu_activity", processor_handle)
    keys = ("gfx_activity_percent", "umc_activity_percent", "mm_activity_percent")
    if all(target.value(key) is None for key in keys):
        raise not_supported()
    activity = {key.removesuffix("_percent"): optional_int(target, key) for key in keys}
    owner = target.partition or target.device
    activity["gfx_activity"] = with_process_load(target.device, owner, activity["gfx_activity"])
    if target.partition_id:
        activity["mm_activity"] = NA  # the media engines report per physical GPU
    return activity


def amdsmi_get_gpu_vram_usage(processor_handle):
    target = SIMULATION.enter("amdsmi_get_gpu_vram_usage", processor_handle)
    total = target.value("vram_total_mb")
    if total is None:
        raise not_supported()
    used = target.value("vram_used_mb")
    _, process_bytes = process_load(target.device, target.partition or target.device)
    used_mb = (0 if used is None else value_at(used, SIMULATION.time())) + process_bytes / 2**20
    if not target.device.get("raw_values"):
        used_mb = min(used_mb, total)
    return {"vram_total": int(total), "vram_used": int(used_mb)}


def amdsmi_get_power_info(processor_handle):
    target = board_target(SIMULATION.enter("amdsmi_get_power_info", processor_handle))
    watts = round(_signal(target, "socket_power_w"))
    cap = target.device.get("power_cap_w")
    return {"socket_power": watts, "current_socket_power": watts, "average_socket_power": NA,
            "gfx_voltage": NA, "soc_voltage": NA, "mem_voltage": NA,
            "power_limit": NA if cap is None else cap}


def amdsmi_get_power_cap_info(processor_handle):
    target = board_target(SIMULATION.enter("amdsmi_get_power_cap_info", processor_handle))
    cap = required(target.device, "power_cap_w")
    return {"power_cap": cap * 1_000_000, "default_power_cap": cap * 1_000_000, "dpm_cap": 0,
            "min_power_cap": 0, "max_power_cap": cap * 1_000_000}


def amdsmi_get_energy_count(processor_handle):
    target = board_target(SIMULATION.enter("amdsmi_get_energy_count", processor_handle))
    power = required(target.device, "socket_power_w")
    t = SIMULATION.time()
    resolution = ctypes.c_float(target.device.get("energy_resolution_uj")
                                or _DEFAULT_RESOLUTION_UJ).value
    microjoules = target.device.get("energy_start_uj", 0) + integral(power, t) * 1e6
    return {"energy_accumulator": math.floor(microjoules / resolution),
            "counter_resolution": resolution, "timestamp": int(t * 1e9)}


_SENSORS = {
    AmdSmiTemperatureType.EDGE: "temperature_edge_c",
    AmdSmiTemperatureType.HOTSPOT: "temperature_hotspot_c",
    AmdSmiTemperatureType.VRAM: "temperature_vram_c",
}


def amdsmi_get_temp_metric(processor_handle, sensor_type, metric):
    target = board_target(SIMULATION.enter("amdsmi_get_temp_metric", processor_handle))
    check_enum(sensor_type, AmdSmiTemperatureType)
    check_enum(metric, AmdSmiTemperatureMetric)
    if sensor_type not in _SENSORS or metric != AmdSmiTemperatureMetric.CURRENT:
        raise not_supported()
    return round(_signal(target, _SENSORS[sensor_type]))


_CLOCKS = {AmdSmiClkType.GFX: "gfx", AmdSmiClkType.MEM: "mem"}


def amdsmi_get_clock_info(processor_handle, clock_type):
    target = board_target(SIMULATION.enter("amdsmi_get_clock_info", processor_handle))
    check_enum(clock_type, AmdSmiClkType)
    if clock_type not in _CLOCKS:
        raise not_supported()
    domain = _CLOCKS[clock_type]
    current = round(_signal(target, f"clock_{domain}_mhz"))
    return {"clk": current,
            "min_clk": target.device.get(f"min_clock_{domain}_mhz", NA),
            "max_clk": target.device.get(f"max_clock_{domain}_mhz", NA),
            "clk_locked": False,
            "clk_deep_sleep": 0}


def amdsmi_get_gpu_total_ecc_count(processor_handle):
    target = board_target(SIMULATION.enter("amdsmi_get_gpu_total_ecc_count", processor_handle))
    keys = ("ecc_correctable", "ecc_uncorrectable", "ecc_deferred")
    if all(target.device.get(key) is None for key in keys):
        raise not_supported()
    t = SIMULATION.time()
    correctable, uncorrectable, deferred = (counter_at(target.device.get(key) or 0, t)
                                            for key in keys)
    return {"correctable_count": correctable, "uncorrectable_count": uncorrectable,
            "deferred_count": deferred}
