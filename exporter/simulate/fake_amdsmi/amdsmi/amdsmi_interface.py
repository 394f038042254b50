"""The simulated amdsmi Python API: the real function names, arguments and return shapes.

Each function answers what ``amdsmi_interface.py`` of the real wheel (7.0.x)
returns: the same dict keys, the same units (VRAM in MB, power in W, power cap
in uW, energy as accumulator x resolution in uJ, clocks in MHz, XGMI data in
KB, engine time in ns) and "N/A" where the real one reports a value as not
available. A value the scenario does not define raises AmdSmiLibraryException
with AMDSMI_STATUS_NOT_SUPPORTED; a secondary compute partition answers only
partition-level queries (identity, VRAM, activity, processes), like the real one.
"""

from __future__ import annotations

import ctypes
import math
from enum import IntEnum
from typing import Any

from ray_accel.exporter.simulate.checks import normalize_pci_bus_id
from ray_accel.exporter.simulate.signals import counter_at, integral, value_at

from . import amdsmi_wrapper
from ._simulation import SIMULATION, Target, handle_value, library_error, not_supported
from .amdsmi_exception import AmdSmiBdfFormatException, AmdSmiParameterException

processor_handle = ctypes.c_void_p

AMDSMI_MAX_NUM_XGMI_LINKS = 8
MAX_NUM_PROCESSES = 1024
_MT_PER_S = {1: 2500, 2: 5000, 3: 8000, 4: 16000, 5: 32000, 6: 64000}
_NA = "N/A"
_DEFAULT_RESOLUTION_UJ = 15.259
_DEFAULT_LIB_VERSION = "25.5.1"
AMDSMI_MAX_NUM_XCP = 8
AMDSMI_MAX_NUM_XCC = 8
AMDSMI_MAX_NUM_JPEG_ENG_V1 = 40
AMDSMI_MAX_NUM_VCN = 4
_TICKS_PER_S = 100  # the simulated SMU advances its accumulation_counter every 10 ms
# what the scenario's xcc_clock_below_limit_percent keys feed, in the 1.8 table and violation status
_LIMITERS = (("power", "xcp_stats.gfx_below_host_limit_ppt_acc", "gfx_clk_below_host_limit_pwr"),
             ("thermal", "xcp_stats.gfx_below_host_limit_thm_acc", "gfx_clk_below_host_limit_thm"),
             ("low_utilization", "xcp_stats.gfx_low_utilization_acc", "low_utilization"))


class AmdSmiInitFlags(IntEnum):
    INIT_ALL_PROCESSORS = amdsmi_wrapper.AMDSMI_INIT_ALL_PROCESSORS
    INIT_AMD_CPUS = amdsmi_wrapper.AMDSMI_INIT_AMD_CPUS
    INIT_AMD_GPUS = amdsmi_wrapper.AMDSMI_INIT_AMD_GPUS
    INIT_AMD_APUS = amdsmi_wrapper.AMDSMI_INIT_AMD_APUS
    INIT_NON_AMD_CPUS = amdsmi_wrapper.AMDSMI_INIT_NON_AMD_CPUS
    INIT_NON_AMD_GPUS = amdsmi_wrapper.AMDSMI_INIT_NON_AMD_GPUS


class AmdSmiProcessorType(IntEnum):
    UNKNOWN = amdsmi_wrapper.AMDSMI_PROCESSOR_TYPE_UNKNOWN
    AMDSMI_PROCESSOR_TYPE_AMD_GPU = amdsmi_wrapper.AMDSMI_PROCESSOR_TYPE_AMD_GPU
    AMDSMI_PROCESSOR_TYPE_AMD_CPU = amdsmi_wrapper.AMDSMI_PROCESSOR_TYPE_AMD_CPU
    AMDSMI_PROCESSOR_TYPE_NON_AMD_GPU = amdsmi_wrapper.AMDSMI_PROCESSOR_TYPE_NON_AMD_GPU
    AMDSMI_PROCESSOR_TYPE_NON_AMD_CPU = amdsmi_wrapper.AMDSMI_PROCESSOR_TYPE_NON_AMD_CPU


class AmdSmiClkType(IntEnum):
    SYS = amdsmi_wrapper.AMDSMI_CLK_TYPE_SYS
    GFX = amdsmi_wrapper.AMDSMI_CLK_TYPE_GFX
    DF = amdsmi_wrapper.AMDSMI_CLK_TYPE_DF
    DCEF = amdsmi_wrapper.AMDSMI_CLK_TYPE_DCEF
    SOC = amdsmi_wrapper.AMDSMI_CLK_TYPE_SOC
    MEM = amdsmi_wrapper.AMDSMI_CLK_TYPE_MEM
    PCIE = amdsmi_wrapper.AMDSMI_CLK_TYPE_PCIE
    VCLK0 = amdsmi_wrapper.AMDSMI_CLK_TYPE_VCLK0
    VCLK1 = amdsmi_wrapper.AMDSMI_CLK_TYPE_VCLK1
    DCLK0 = amdsmi_wrapper.AMDSMI_CLK_TYPE_DCLK0
    DCLK1 = amdsmi_wrapper.AMDSMI_CLK_TYPE_DCLK1


class AmdSmiTemperatureType(IntEnum):
    EDGE = amdsmi_wrapper.AMDSMI_TEMPERATURE_TYPE_EDGE
    HOTSPOT = amdsmi_wrapper.AMDSMI_TEMPERATURE_TYPE_HOTSPOT
    JUNCTION = amdsmi_wrapper.AMDSMI_TEMPERATURE_TYPE_JUNCTION
    VRAM = amdsmi_wrapper.AMDSMI_TEMPERATURE_TYPE_VRAM
    HBM_0 = amdsmi_wrapper.AMDSMI_TEMPERATURE_TYPE_HBM_0
    HBM_1 = amdsmi_wrapper.AMDSMI_TEMPERATURE_TYPE_HBM_1
    HBM_2 = amdsmi_wrapper.AMDSMI_TEMPERATURE_TYPE_HBM_2
    HBM_3 = amdsmi_wrapper.AMDSMI_TEMPERATURE_TYPE_HBM_3
    PLX = amdsmi_wrapper.AMDSMI_TEMPERATURE_TYPE_PLX


class AmdSmiTemperatureMetric(IntEnum):
    CURRENT = amdsmi_wrapper.AMDSMI_TEMP_CURRENT
    MAX = amdsmi_wrapper.AMDSMI_TEMP_MAX
    MIN = amdsmi_wrapper.AMDSMI_TEMP_MIN
    MAX_HYST = amdsmi_wrapper.AMDSMI_TEMP_MAX_HYST
    MIN_HYST = amdsmi_wrapper.AMDSMI_TEMP_MIN_HYST
    CRITICAL = amdsmi_wrapper.AMDSMI_TEMP_CRITICAL
    CRITICAL_HYST = amdsmi_wrapper.AMDSMI_TEMP_CRITICAL_HYST
    EMERGENCY = amdsmi_wrapper.AMDSMI_TEMP_EMERGENCY
    EMERGENCY_HYST = amdsmi_wrapper.AMDSMI_TEMP_EMERGENCY_HYST
    CRIT_MIN = amdsmi_wrapper.AMDSMI_TEMP_CRIT_MIN
    CRIT_MIN_HYST = amdsmi_wrapper.AMDSMI_TEMP_CRIT_MIN_HYST
    OFFSET = amdsmi_wrapper.AMDSMI_TEMP_OFFSET
    LOWEST = amdsmi_wrapper.AMDSMI_TEMP_LOWEST
    HIGHEST = amdsmi_wrapper.AMDSMI_TEMP_HIGHEST


class AmdSmiLinkType(IntEnum):
    AMDSMI_LINK_TYPE_INTERNAL = amdsmi_wrapper.AMDSMI_LINK_TYPE_INTERNAL
    AMDSMI_LINK_TYPE_XGMI = amdsmi_wrapper.AMDSMI_LINK_TYPE_XGMI
    AMDSMI_LINK_TYPE_PCIE = amdsmi_wrapper.AMDSMI_LINK_TYPE_PCIE
    AMDSMI_LINK_TYPE_NOT_APPLICABLE = amdsmi_wrapper.AMDSMI_LINK_TYPE_NOT_APPLICABLE
    AMDSMI_LINK_TYPE_UNKNOWN = amdsmi_wrapper.AMDSMI_LINK_TYPE_UNKNOWN


class AmdSmiComputePartitionType(IntEnum):
    SPX = amdsmi_wrapper.AMDSMI_COMPUTE_PARTITION_SPX
    DPX = amdsmi_wrapper.AMDSMI_COMPUTE_PARTITION_DPX
    TPX = amdsmi_wrapper.AMDSMI_COMPUTE_PARTITION_TPX
    QPX = amdsmi_wrapper.AMDSMI_COMPUTE_PARTITION_QPX
    CPX = amdsmi_wrapper.AMDSMI_COMPUTE_PARTITION_CPX
    INVALID = amdsmi_wrapper.AMDSMI_COMPUTE_PARTITION_INVALID


class AmdSmiMemoryPartitionType(IntEnum):
    NPS1 = amdsmi_wrapper.AMDSMI_MEMORY_PARTITION_NPS1
    NPS2 = amdsmi_wrapper.AMDSMI_MEMORY_PARTITION_NPS2
    NPS4 = amdsmi_wrapper.AMDSMI_MEMORY_PARTITION_NPS4
    NPS8 = amdsmi_wrapper.AMDSMI_MEMORY_PARTITION_NPS8
    UNKNOWN = amdsmi_wrapper.AMDSMI_MEMORY_PARTITION_UNKNOWN


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


def _check_enum(value: Any, enum: type[IntEnum]) -> None:
    if not isinstance(value, enum):
        raise AmdSmiParameterException(value, enum)


def _signal(target: Target, key: str) -> float:
    """A signal of the partition or device at the current time; NOT_SUPPORTED if undefined."""
    signal = target.value(key)
    if signal is None:
        raise not_supported()
    return value_at(signal, SIMULATION.time())


def _optional(target: Target, key: str) -> Any:
    """A signal rounded to the integer the C struct holds, or "N/A" when undefined."""
    signal = target.value(key)
    return _NA if signal is None else round(value_at(signal, SIMULATION.time()))


def _process_load(device: Any, owner: Any) -> tuple[int, int]:
    """GFX percent and VRAM bytes the live processes of `owner` (the device or one of its
    partitions) add to it, on a device with `load_from_processes`; (0, 0) otherwise."""
    if not device.get("load_from_processes"):
        return 0, 0
    live = SIMULATION.live_processes(owner.get("processes"))
    return (sum(p.get("gfx_percent", 0) for p in live),
            sum(p.get("used_memory_bytes", 0) for p in live))


def _loaded(device: Any, owner: Any, percent: Any) -> Any:
    """A GFX percent with the owner's processes' load added (at most 100); "N/A" stays."""
    gfx, _ = _process_load(device, owner)
    if percent == _NA or not gfx:
        return percent
    return percent + gfx if device.get("raw_values") else min(100, percent + gfx)


def _board(target: Target | None) -> Target:
    """The target of a board-level query: secondary partitions do not answer them."""
    assert target is not None
    if target.partition_id:
        raise not_supported()
    return target


def _bdf(bus_id: str) -> str:
    """amdsmi's BDF form, "0000:05:00.0", of a normalised "00000000:05:00.0" bus id."""
    domain, bus, rest = bus_id.split(":")
    device, function = rest.split(".")
    return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}.{int(function, 16):x}"


def _hex(value: int, width: int) -> str:
    return "0x" + format(value, "x").zfill(width)


def _xgmi_peer(source: Target, other: Target) -> bool:
    bus = str(other.device.get("pci_bus_id", "")).lower()
    return any(normalize_pci_bus_id(link["remote_pci_bus_id"], "").lower() == bus
               for link in source.device.get("xgmi_links") or ())


# --------------------------------------------------------------------------
# Library and discovery
# --------------------------------------------------------------------------


def amdsmi_init(flag=AmdSmiInitFlags.INIT_AMD_GPUS):
    if not isinstance(flag, AmdSmiInitFlags):
        raise AmdSmiParameterException(flag, AmdSmiInitFlags)
    SIMULATION.init()


def amdsmi_shut_down():
    SIMULATION.shut_down()


def amdsmi_get_lib_version():
    SIMULATION.enter("amdsmi_get_lib_version", device_call=False, check_init=False)
    version = SIMULATION.scenario.get("amdsmi_version") or _DEFAULT_LIB_VERSION
    major, minor, release = (int(part) for part in version.split("."))
    return {"major": major, "minor": minor, "release": release, "build": version}


def amdsmi_get_socket_handles():
    SIMULATION.enter("amdsmi_get_socket_handles", device_call=False)
    return [amdsmi_wrapper.amdsmi_socket_handle(handle_value(target.ordinal))
            for target in SIMULATION.devices()]


def amdsmi_get_processor_handles():
    SIMULATION.enter("amdsmi_get_processor_handles", device_call=False)
    return [amdsmi_wrapper.amdsmi_processor_handle(value) for value in SIMULATION.handles()]


def amdsmi_get_processor_handle_from_bdf(bdf):
    SIMULATION.enter("amdsmi_get_processor_handle_from_bdf", device_call=False)
    try:
        bus_id = normalize_pci_bus_id(bdf, "bdf")
    except ValueError:
        raise AmdSmiBdfFormatException(bdf) from None
    for target in SIMULATION.devices():
        if str(target.device.get("pci_bus_id", "")).lower() == bus_id.lower():
            return amdsmi_wrapper.amdsmi_processor_handle(handle_value(target.ordinal))
    raise library_error(amdsmi_wrapper.AMDSMI_STATUS_NOT_FOUND)


def amdsmi_get_processor_type(processor_handle):
    SIMULATION.enter("amdsmi_get_processor_type", processor_handle)
    return {"processor_type": AmdSmiProcessorType.AMDSMI_PROCESSOR_TYPE_AMD_GPU.name}


# --------------------------------------------------------------------------
# Identity and static information
# --------------------------------------------------------------------------


def amdsmi_get_gpu_device_uuid(processor_handle):
    target = SIMULATION.enter("amdsmi_get_gpu_device_uuid", processor_handle)
    uuid = (target.partition or target.device).get("uuid")
    if uuid is None:
        raise not_supported()
    return uuid


def amdsmi_get_gpu_device_bdf(processor_handle):
    target = SIMULATION.enter("amdsmi_get_gpu_device_bdf", processor_handle)
    bus_id = target.device.get("pci_bus_id")
    if bus_id is None:
        raise not_supported()
    return _bdf(bus_id)


def amdsmi_get_gpu_asic_info(processor_handle):
    target = SIMULATION.enter("amdsmi_get_gpu_asic_info", processor_handle)
    device = target.device
    serial = device.get("serial") or _NA
    if all(c in "0123456789abcdefABCDEF" for c in serial):  # hex, as the real one prints it
        serial = f"0x{int(serial, 16):016X}"
    device_id = device.get("device_id")
    cus = device.get("num_compute_units")
    return {
        "market_name": device.get("name") or _NA,
        "vendor_id": "0x1002",
        "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]",
        "subvendor_id": "0x1002",
        "device_id": _hex(device_id, 4) if device_id is not None else _NA,
        "rev_id": _hex(device.get("rev_id", 0), 2),
        "asic_serial": serial,
        "oam_id": device.get("oam_id", _NA),
        "num_compute_units": _NA if cus is None else cus // (1 + len(device.get("partitions")
                                                                   or ())),
        "target_graphics_version": device.get("target_graphics_version", _NA),
        "subsystem_id": _hex(device_id, 4) if device_id is not None else _NA,
    }


def amdsmi_get_gpu_driver_info(processor_handle):
    target = SIMULATION.enter("amdsmi_get_gpu_driver_info", processor_handle)
    return {"driver_name": "amdgpu",
            "driver_version": target.device.get("driver_version") or _NA,
            "driver_date": "2015/01/01 00:00"}


def amdsmi_get_gpu_kfd_info(processor_handle):
    target = SIMULATION.enter("amdsmi_get_gpu_kfd_info", processor_handle)
    return {"kfd_id": 1000 + 100 * target.ordinal + target.partition_id,
            "node_id": 2 + 8 * target.ordinal + target.partition_id,
            "current_partition_id": target.partition_id}


def amdsmi_get_gpu_compute_partition(processor_handle):
    target = SIMULATION.enter("amdsmi_get_gpu_compute_partition", processor_handle)
    mode = target.device.get("compute_partition")
    if mode is None:
        raise not_supported()
    return mode.upper()


def amdsmi_get_gpu_memory_partition(processor_handle):
    target = SIMULATION.enter("amdsmi_get_gpu_memory_partition", processor_handle)
    mode = target.device.get("memory_partition")
    if mode is None:
        raise not_supported()
    return mode.upper()


# --------------------------------------------------------------------------
# Activity, memory, power, thermals, clocks
# --------------------------------------------------------------------------


def amdsmi_get_gpu_activity(processor_handle):
    target = SIMULATION.enter("amdsmi_get_gpu_activity", processor_handle)
    keys = ("gfx_activity_percent", "umc_activity_percent", "mm_activity_percent")
    if all(target.value(key) is None for key in keys):
        raise not_supported()
    activity = {key.removesuffix("_percent"): _optional(target, key) for key in keys}
    owner = target.partition or target.device
    activity["gfx_activity"] = _loaded(target.device, owner, activity["gfx_activity"])
    if target.partition_id:
        activity["mm_activity"] = _NA  # the media engines report per physical GPU
    return activity


def amdsmi_get_gpu_vram_usage(processor_handle):
    target = SIMULATION.enter("amdsmi_get_gpu_vram_usage", processor_handle)
    total = target.value("vram_total_mb")
    if total is None:
        raise not_supported()
    used = target.value("vram_used_mb")
    _, process_bytes = _process_load(target.device, target.partition or target.device)
    used_mb = (0 if used is None else value_at(used, SIMULATION.time())) + process_bytes / 2**20
    if not target.device.get("raw_values"):
        used_mb = min(used_mb, total)
    return {"vram_total": int(total), "vram_used": int(used_mb)}


def amdsmi_get_power_info(processor_handle):
    target = _board(SIMULATION.enter("amdsmi_get_power_info", processor_handle))
    watts = round(_signal(target, "socket_power_w"))
    cap = target.device.get("power_cap_w")
    return {"socket_power": watts, "current_socket_power": watts, "average_socket_power": _NA,
            "gfx_voltage": _NA, "soc_voltage": _NA, "mem_voltage": _NA,
            "power_limit": _NA if cap is None else cap}


def amdsmi_get_power_cap_info(processor_handle):
    target = _board(SIMULATION.enter("amdsmi_get_power_cap_info", processor_handle))
    cap = target.device.get("power_cap_w")
    if cap is None:
        raise not_supported()
    return {"power_cap": cap * 1_000_000, "default_power_cap": cap * 1_000_000, "dpm_cap": 0,
            "min_power_cap": 0, "max_power_cap": cap * 1_000_000}


def amdsmi_get_energy_count(processor_handle):
    target = _board(SIMULATION.enter("amdsmi_get_energy_count", processor_handle))
    power = target.device.get("socket_power_w")
    if power is None:
        raise not_supported()
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
    target = _board(SIMULATION.enter("amdsmi_get_temp_metric", processor_handle))
    _check_enum(sensor_type, AmdSmiTemperatureType)
    _check_enum(metric, AmdSmiTemperatureMetric)
    if sensor_type not in _SENSORS or metric != AmdSmiTemperatureMetric.CURRENT:
        raise not_supported()
    return round(_signal(target, _SENSORS[sensor_type]))


_CLOCKS = {AmdSmiClkType.GFX: "gfx", AmdSmiClkType.MEM: "mem"}


def amdsmi_get_clock_info(processor_handle, clock_type):
    target = _board(SIMULATION.enter("amdsmi_get_clock_info", processor_handle))
    _check_enum(clock_type, AmdSmiClkType)
    if clock_type not in _CLOCKS:
        raise not_supported()
    domain = _CLOCKS[clock_type]
    current = round(_signal(target, f"clock_{domain}_mhz"))
    return {"clk": current,
            "min_clk": target.device.get(f"min_clock_{domain}_mhz", _NA),
            "max_clk": target.device.get(f"max_clock_{domain}_mhz", _NA),
            "clk_locked": False,
            "clk_deep_sleep": 0}


def _xcp_lists(value: Any = _NA, width: int = AMDSMI_MAX_NUM_XCC) -> list[list[Any]]:
    return [[value] * width for _ in range(AMDSMI_MAX_NUM_XCP)]


def _ticks(t: float) -> int:
    """The simulated SMU's accumulation_counter at time t."""
    return math.floor(round(t * _TICKS_PER_S, 6))


def _residency(signal: Any, ticks: int) -> int:
    """Counter ticks, up to `ticks`, during which a 0-100 signal's share of the time held."""
    # rounded first: 100 % for T ticks must count T, not T - 1 through a float's last bit
    return math.floor(round(integral(signal, ticks / _TICKS_PER_S), 6))


def _xcc_slots(device: Any) -> list[tuple[int, int]]:
    """(xcp, xcc) of each of the device's XCCs: split evenly over its compute partitions."""
    count = device.get("num_xcc") or 0
    per_xcp = count // (1 + len(device.get("partitions") or ())) if count else 1
    return [(i // per_xcp, i % per_xcp) for i in range(count)]


def _per_xcc(signals: Any, i: int) -> Any:
    """XCC i's signal of a per-XCC scenario key: one signal for all, or a list of one each."""
    return signals[i] if isinstance(signals, list) else signals


def _xcc_grid(device: Any, value_of) -> list[list[Any]]:
    """A [xcp][xcc] list of lists as amdsmi returns it: value_of(i) for XCC i, else "N/A"."""
    grid = _xcp_lists()
    for i, (xcp, xcc) in enumerate(_xcc_slots(device)):
        grid[xcp][xcc] = value_of(i)
    return grid


def _xcc_busy(device: Any, i: int, xcp: int) -> Any:
    """XCC i's busy signal: the scenario's, else its partition's gfx activity (None: undefined)."""
    if device.get("xcc_gfx_busy_percent") is not None:
        return _per_xcc(device["xcc_gfx_busy_percent"], i)
    partition = device["partitions"][xcp - 1] if xcp else device
    return partition.get("gfx_activity_percent", device.get("gfx_activity_percent"))


def _limiter_ticks(device: Any, ticks: int) -> dict[str, list[int]] | None:
    """Per XCC, counter ticks its clock was below the host limit, by limiter, and "any"."""
    limiters = device.get("xcc_clock_below_limit_percent")
    if limiters is None:
        return None
    count = device.get("num_xcc") or 0
    found = {name: [_residency(_per_xcc(limiters[name], i), ticks) if name in limiters else 0
                    for i in range(count)] for name, _, _ in _LIMITERS}
    # the causes may overlap; "any" is at most the time that passed
    found["any"] = [min(ticks, sum(found[name][i] for name, _, _ in _LIMITERS))
                    for i in range(count)]
    return found


def _limiter_percent(device: Any, i: int, name: str, t: float) -> int:
    limiters = device["xcc_clock_below_limit_percent"]
    if name != "any":
        return round(value_at(_per_xcc(limiters[name], i), t)) if name in limiters else 0
    return min(100, sum(_limiter_percent(device, i, n, t) for n, _, _ in _LIMITERS))


def _interface() -> str:
    """The Python API release whose answer keys the fake gives (amdsmi_interface)."""
    return SIMULATION.scenario.get("amdsmi_interface") or "7.0"


def amdsmi_get_violation_status(processor_handle):
    target = _board(SIMULATION.enter("amdsmi_get_violation_status", processor_handle))
    device = target.device
    throttle = device.get("throttle_percent")
    if throttle is None:
        raise not_supported()
    t = SIMULATION.time()
    ticks = _ticks(t)
    status: dict[str, Any] = {"reference_timestamp": int(t * 1e6),
                              "violation_timestamp": int(t * 1e6),
                              "acc_counter": ticks}
    for name in ("prochot_thrm", "ppt_pwr", "socket_thrm", "vr_thrm", "hbm_thrm"):
        signal = throttle.get(name)
        percent = None if signal is None else round(value_at(signal, t))
        status[f"acc_{name}"] = _NA if signal is None else _residency(signal, ticks)
        status[f"per_{name}"] = _NA if percent is None else percent
        status[f"active_{name}"] = _NA if percent is None else percent > 0
    if _interface() == "6.3":  # before GPU metrics 1.7/1.8: no clock-below-limit fields
        return status
    limited = _limiter_ticks(device, ticks)
    names = [(name, field) for name, _, field in _LIMITERS]
    for name, field in [*names, ("any", "gfx_clk_below_host_limit_total")]:
        if limited is None:
            acc = per = active = _xcp_lists()
        else:
            acc = _xcc_grid(device, lambda i, name=name: limited[name][i])
            per = _xcc_grid(device, lambda i, name=name: _limiter_percent(device, i, name, t))
            active = [[v if v == _NA else v > 0 for v in row] for row in per]
        status[f"acc_{field}"], status[f"per_{field}"], status[f"active_{field}"] = acc, per, active
    for prefix in ("acc", "per", "active"):  # 1.7's one total, superseded by ..._total in 1.8
        status[f"{prefix}_gfx_clk_below_host_limit"] = _NA
    return status


def amdsmi_get_gpu_total_ecc_count(processor_handle):
    target = _board(SIMULATION.enter("amdsmi_get_gpu_total_ecc_count", processor_handle))
    keys = ("ecc_correctable", "ecc_uncorrectable", "ecc_deferred")
    if all(target.device.get(key) is None for key in keys):
        raise not_supported()
    t = SIMULATION.time()
    correctable, uncorrectable, deferred = (counter_at(target.device.get(key) or 0, t)
                                            for key in keys)
    return {"correctable_count": correctable, "uncorrectable_count": uncorrectable,
            "deferred_count": deferred}


# --------------------------------------------------------------------------
# PCIe and XGMI
# --------------------------------------------------------------------------


def amdsmi_get_pcie_info(processor_handle):
    target = _board(SIMULATION.enter("amdsmi_get_pcie_info", processor_handle))
    link = target.device.get("pcie_link")
    if link is None:
        raise not_supported()
    t = SIMULATION.time()
    bandwidth = target.device.get("pcie_bandwidth_mbps")
    replay = target.device.get("pcie_replay")
    return {
        "pcie_static": {
            "max_pcie_width": link["width_max"],
            "max_pcie_speed": _MT_PER_S.get(link["gen_max"], _NA),
            "pcie_interface_version": link["gen_max"],
            "slot_type": "OAM" if target.device.get("xgmi_links") else "PCIE",
        },
        "pcie_metric": {
            "pcie_width": link["width_current"],
            "pcie_speed": _MT_PER_S.get(link["gen_current"], _NA),
            "pcie_bandwidth": _NA if bandwidth is None else round(value_at(bandwidth, t)),
            "pcie_replay_count": _NA if replay is None else counter_at(replay, t),
            "pcie_l0_to_recovery_count": 0,
            "pcie_replay_roll_over_count": 0,
            "pcie_nak_sent_count": 0,
            "pcie_nak_received_count": 0,
            "pcie_lc_perf_other_end_recovery_count": 0,
        },
    }


def _xgmi_links(target: Target) -> list[Any]:
    links = target.device.get("xgmi_links")
    if links is None:
        raise not_supported()
    return list(links)


def amdsmi_get_link_metrics(processor_handle):
    target = _board(SIMULATION.enter("amdsmi_get_link_metrics", processor_handle))
    links = _xgmi_links(target)
    t = SIMULATION.time()
    slots = []
    for i in range(AMDSMI_MAX_NUM_XGMI_LINKS):
        if i < len(links):
            link = links[i]
            slots.append({
                "bdf": _bdf(normalize_pci_bus_id(link["remote_pci_bus_id"], "")),
                "bit_rate": link.get("bit_rate_gbps", 0) if link.get("state", True) else 0,
                "max_bandwidth": link.get("max_bandwidth_gbps", 0),
                "link_type": amdsmi_wrapper.AMDSMI_LINK_TYPE_XGMI,
                "read": counter_at(link.get("read_kb", 0), t),
                "write": counter_at(link.get("write_kb", 0), t),
            })
        else:
            slots.append({"bdf": "0000:00:00.0", "bit_rate": 0, "max_bandwidth": 0,
                          "link_type": amdsmi_wrapper.AMDSMI_LINK_TYPE_INTERNAL,
                          "read": 0, "write": 0})
    return {"num_links": len(links), "links": slots}


def amdsmi_get_gpu_xgmi_link_status(processor_handle):
    target = _board(SIMULATION.enter("amdsmi_get_gpu_xgmi_link_status", processor_handle))
    links = _xgmi_links(target)
    return {"status": ["U" if link.get("state", True) else "D" for link in links],
            "total_links": len(links)}


# Every key the real amdsmi_get_gpu_metrics_info returns, "N/A" unless simulated.
_GPU_METRICS_KEYS = (
    "common_header.structure_size", "common_header.format_revision",
    "common_header.content_revision", "temperature_edge", "temperature_hotspot",
    "temperature_mem", "temperature_vrgfx", "temperature_vrsoc", "temperature_vrmem",
    "average_gfx_activity", "average_umc_activity", "average_mm_activity",
    "average_socket_power", "energy_accumulator", "system_clock_counter",
    "average_gfxclk_frequency", "average_socclk_frequency", "average_uclk_frequency",
    "average_vclk0_frequency", "average_dclk0_frequency", "average_vclk1_frequency",
    "average_dclk1_frequency", "current_gfxclk", "current_socclk", "current_uclk",
    "current_vclk0", "current_dclk0", "current_vclk1", "current_dclk1", "throttle_status",
    "current_fan_speed", "pcie_link_width", "pcie_link_speed", "gfx_activity_acc",
    "mem_activity_acc", "temperature_hbm", "firmware_timestamp", "voltage_soc", "voltage_gfx",
    "voltage_mem", "indep_throttle_status", "current_socket_power", "vcn_activity",
    "gfxclk_lock_status", "xgmi_link_width", "xgmi_link_speed", "pcie_bandwidth_acc",
    "pcie_bandwidth_inst", "pcie_l0_to_recov_count_acc", "pcie_replay_count_acc",
    "pcie_replay_rover_count_acc", "xgmi_read_data_acc", "xgmi_write_data_acc",
    "current_gfxclks", "current_socclks", "current_vclk0s", "current_dclk0s", "jpeg_activity",
    "pcie_nak_sent_count_acc", "pcie_nak_rcvd_count_acc", "accumulation_counter",
    "prochot_residency_acc", "ppt_residency_acc", "socket_thm_residency_acc",
    "vr_thm_residency_acc", "hbm_thm_residency_acc", "num_partition",
    "xcp_stats.gfx_busy_inst", "xcp_stats.jpeg_busy", "xcp_stats.vcn_busy",
    "xcp_stats.gfx_busy_acc", "xcp_stats.gfx_below_host_limit_acc",
    "xcp_stats.gfx_below_host_limit_ppt_acc", "xcp_stats.gfx_below_host_limit_thm_acc",
    "xcp_stats.gfx_low_utilization_acc", "xcp_stats.gfx_below_host_limit_total_acc",
    "pcie_lc_perf_other_end_recovery", "vram_max_bandwidth", "xgmi_link_status",
)
# Keys amdsmi 6.3's Python API does not return yet (GPU metrics 1.7 and 1.8, the header).
_GPU_METRICS_KEYS_AFTER_6_3 = (
    "common_header.structure_size", "common_header.format_revision",
    "common_header.content_revision", "xcp_stats.gfx_below_host_limit_acc",
    "xcp_stats.gfx_below_host_limit_ppt_acc", "xcp_stats.gfx_below_host_limit_thm_acc",
    "xcp_stats.gfx_low_utilization_acc", "xcp_stats.gfx_below_host_limit_total_acc",
    "vram_max_bandwidth", "xgmi_link_status",
)


def _xcp_metrics(device: Any, t: float) -> dict[str, Any]:
    """The table's accumulators and xcp_stats lists that the scenario simulates."""
    found: dict[str, Any] = {}
    ticks = _ticks(t)
    throttle = device.get("throttle_percent")
    if throttle is not None or device.get("num_xcc"):
        found["accumulation_counter"] = ticks
    for name, key in (("prochot_thrm", "prochot_residency_acc"), ("ppt_pwr", "ppt_residency_acc"),
                      ("socket_thrm", "socket_thm_residency_acc"),
                      ("vr_thrm", "vr_thm_residency_acc"), ("hbm_thrm", "hbm_thm_residency_acc")):
        if (throttle or {}).get(name) is not None:
            found[key] = _residency(throttle[name], ticks)
    if not device.get("num_xcc"):
        return found
    slots = _xcc_slots(device)
    busy = [_xcc_busy(device, i, xcp) for i, (xcp, _) in enumerate(slots)]
    owners = [device, *(device.get("partitions") or ())]
    found["xcp_stats.gfx_busy_inst"] = _xcc_grid(
        device, lambda i: _NA if busy[i] is None
        else _loaded(device, owners[slots[i][0]], round(value_at(busy[i], t))))
    # "accumulated %": each tick adds the percent of that tick
    found["xcp_stats.gfx_busy_acc"] = _xcc_grid(
        device, lambda i: _NA if busy[i] is None
        else math.floor(round(integral(busy[i], ticks / _TICKS_PER_S) * _TICKS_PER_S, 6)))
    found["xcp_stats.jpeg_busy"] = _xcp_lists(width=AMDSMI_MAX_NUM_JPEG_ENG_V1)
    found["xcp_stats.vcn_busy"] = _xcp_lists(width=AMDSMI_MAX_NUM_VCN)
    limited = _limiter_ticks(device, ticks)
    if limited is not None:
        for name, key, _ in (*_LIMITERS, ("any", "xcp_stats.gfx_below_host_limit_total_acc", "")):
            found[key] = _xcc_grid(device, lambda i, name=name: limited[name][i])
    # a 1.8 table no longer fills 1.7's one total (xcp_stats.gfx_below_host_limit_acc): "N/A"
    return found


def amdsmi_get_gpu_metrics_info(processor_handle):
    target = _board(SIMULATION.enter("amdsmi_get_gpu_metrics_info", processor_handle))
    device = target.device
    t = SIMULATION.time()
    metrics: dict[str, Any] = dict.fromkeys(_GPU_METRICS_KEYS, _NA)
    metrics.update({"common_header.structure_size": 1352, "common_header.format_revision": 1,
                    "common_header.content_revision":
                        8 if device.get("xcc_clock_below_limit_percent") is not None else 6,
                    "num_partition": 1 + len(device.get("partitions") or ())})
    metrics.update(_xcp_metrics(device, t))
    for key, name in (("temperature_edge_c", "temperature_edge"),
                      ("temperature_hotspot_c", "temperature_hotspot"),
                      ("temperature_vram_c", "temperature_mem"),
                      ("gfx_activity_percent", "average_gfx_activity"),
                      ("umc_activity_percent", "average_umc_activity"),
                      ("mm_activity_percent", "average_mm_activity"),
                      ("socket_power_w", "current_socket_power"),
                      ("clock_gfx_mhz", "current_gfxclk"),
                      ("clock_mem_mhz", "current_uclk")):
        metrics[name] = _optional(target, key)
    metrics["average_gfx_activity"] = _loaded(device, device, metrics["average_gfx_activity"])
    if (throttle := device.get("throttle_percent")) is not None:
        metrics["throttle_status"] = any(value_at(s, t) > 0 for s in throttle.values())
    if (link := device.get("pcie_link")) is not None:
        metrics["pcie_link_width"] = link["width_current"]
    if (links := device.get("xgmi_links")) is not None:
        pad = [_NA] * (AMDSMI_MAX_NUM_XGMI_LINKS - len(links))
        metrics["xgmi_read_data_acc"] = [counter_at(x.get("read_kb", 0), t) for x in links] + pad
        metrics["xgmi_write_data_acc"] = [counter_at(x.get("write_kb", 0), t)
                                          for x in links] + pad
        metrics["xgmi_link_status"] = [int(x.get("state", True)) for x in links] + pad
        metrics["xgmi_link_width"] = 16
        metrics["xgmi_link_speed"] = max((x.get("bit_rate_gbps", 0) for x in links), default=0)
    if _interface() == "6.3":
        for key in _GPU_METRICS_KEYS_AFTER_6_3:
            del metrics[key]
    return metrics


# --------------------------------------------------------------------------
# Topology
# --------------------------------------------------------------------------


def _pair(function: str, source: Any, destination: Any) -> tuple[Target, Target]:
    first = SIMULATION.enter(function, source)
    second = SIMULATION.enter(function, destination)
    if first.ordinal == second.ordinal:
        raise library_error(amdsmi_wrapper.AMDSMI_STATUS_INVAL)
    return first, second


def _same_numa(first: Target, second: Target) -> bool:
    return first.device.get("numa_node") == second.device.get("numa_node")


def amdsmi_topo_get_link_type(processor_handle_src, processor_handle_dst):
    first, second = _pair("amdsmi_topo_get_link_type", processor_handle_src,
                          processor_handle_dst)
    if _xgmi_peer(first, second):
        return {"hops": 1, "type": amdsmi_wrapper.AMDSMI_LINK_TYPE_XGMI}
    return {"hops": 2 if _same_numa(first, second) else 3,
            "type": amdsmi_wrapper.AMDSMI_LINK_TYPE_PCIE}


def amdsmi_topo_get_link_weight(processor_handle_src, processor_handle_dst):
    first, second = _pair("amdsmi_topo_get_link_weight", processor_handle_src,
                          processor_handle_dst)
    if _xgmi_peer(first, second):
        return 15
    return 40 if _same_numa(first, second) else 52


def amdsmi_topo_get_numa_node_number(processor_handle):
    target = SIMULATION.enter("amdsmi_topo_get_numa_node_number", processor_handle)
    node = target.device.get("numa_node")
    if node is None:
        raise not_supported()
    return node


def amdsmi_is_P2P_accessible(processor_handle_src, processor_handle_dst):
    _pair("amdsmi_is_P2P_accessible", processor_handle_src, processor_handle_dst)
    return True


def amdsmi_get_link_topology_nearest(processor_handle, link_type):
    target = SIMULATION.enter("amdsmi_get_link_topology_nearest", processor_handle)
    _check_enum(link_type, AmdSmiLinkType)
    peers = []
    for other in SIMULATION.devices():
        if other.ordinal == target.ordinal:
            continue
        xgmi = _xgmi_peer(target, other)
        if (link_type == AmdSmiLinkType.AMDSMI_LINK_TYPE_XGMI) == xgmi:
            rank = 0 if xgmi else 1 if _same_numa(target, other) else 2
            peers.append((rank, handle_value(other.ordinal)))
    # the real list holds the handles' pointer values (ints), as ctypes reads them back
    return {"processor_list": [value for _, value in sorted(peers)]}


# --------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------


def amdsmi_get_gpu_process_list(processor_handle):
    target = SIMULATION.enter("amdsmi_get_gpu_process_list", processor_handle)
    processes = (target.partition or target.device).get("processes")
    if processes is None:
        raise not_supported()
    seconds = SIMULATION.time()
    found = []
    for process in SIMULATION.live_processes(processes)[:MAX_NUM_PROCESSES]:
        vram = process.get("used_memory_bytes", 0)
        gtt, cpu = process.get("gtt_bytes", 0), process.get("cpu_bytes", 0)
        found.append({
            "name": process.get("name") or _NA,
            "pid": process["pid"],
            "mem": vram + gtt + cpu,
            # cumulative engine time, as the driver's fdinfo counts it
            "engine_usage": {"gfx": int(process.get("gfx_percent", 0) / 100 * seconds * 1e9),
                             "enc": int(process.get("enc_percent", 0) / 100 * seconds * 1e9)},
            "memory_usage": {"gtt_mem": gtt, "cpu_mem": cpu, "vram_mem": vram},
            "cu_occupancy": _NA,
        })
    return found
