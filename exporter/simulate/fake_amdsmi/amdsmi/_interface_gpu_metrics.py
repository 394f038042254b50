"""The SMU's GPU metrics table and violation status: accumulators over its
accumulation counter, per-XCP/XCC lists, the keys of each Python API release."""

from __future__ import annotations

import math
from typing import Any

from ray_accel.exporter.simulate.signals import counter_at, integral, value_at

from ._interface_common import NA, board_target, optional_int, required, with_process_load
from ._interface_types import (
    AMDSMI_MAX_NUM_JPEG_ENG_V1,
    AMDSMI_MAX_NUM_VCN,
    AMDSMI_MAX_NUM_XCC,
    AMDSMI_MAX_NUM_XCP,
    AMDSMI_MAX_NUM_XGMI_LINKS,
)
from ._simulation import SIMULATION

_TICKS_PER_S = 100  # the simulated SMU advances its accumulation_counter every 10 ms
# what the scenario's xcc_clock_below_limit_percent keys feed, in the 1.8 table and violation status
_LIMITERS = (("power", "xcp_stats.gfx_below_host_limit_ppt_acc", "gfx_clk_below_host_limit_pwr"),
             ("thermal", "xcp_stats.gfx_below_host_limit_thm_acc", "gfx_clk_below_host_limit_thm"),
             ("low_utilization", "xcp_stats.gfx_low_utilization_acc", "low_utilization"))


def _xcp_lists(value: Any = NA, width: int = AMDSMI_MAX_NUM_XCC) -> list[list[Any]]:
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
    target = board_target(SIMULATION.enter("amdsmi_get_violation_status", processor_handle))
    device = target.device
    throttle = required(device, "throttle_percent")
    t = SIMULATION.time()
    ticks = _ticks(t)
    status: dict[str, Any] = {"reference_timestamp": int(t * 1e6),
                              "violation_timestamp": int(t * 1e6),
                              "acc_counter": ticks}
    for name in ("prochot_thrm", "ppt_pwr", "socket_thrm", "vr_thrm", "hbm_thrm"):
        signal = throttle.get(name)
        percent = None if signal is None else round(value_at(signal, t))
        status[f"acc_{name}"] = NA if signal is None else _residency(signal, ticks)
        status[f"per_{name}"] = NA if percent is None else percent
        status[f"active_{name}"] = NA if percent is None else percent > 0
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
            active = [[v if v == NA else v > 0 for v in row] for row in per]
        status[f"acc_{field}"], status[f"per_{field}"], status[f"active_{field}"] = acc, per, active
    for prefix in ("acc", "per", "active"):  # 1.7's one total, superseded by ..._total in 1.8
        status[f"{prefix}_gfx_clk_below_host_limit"] = NA
    return status


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
        device, lambda i: NA if busy[i] is None
        else with_process_load(device, owners[slots[i][0]], round(value_at(busy[i], t))))
    # "accumulated %": each tick adds the percent of that tick
    found["xcp_stats.gfx_busy_acc"] = _xcc_grid(
        device, lambda i: NA if busy[i] is None
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
    target = board_target(SIMULATION.enter("amdsmi_get_gpu_metrics_info", processor_handle))
    device = target.device
    t = SIMULATION.time()
    metrics: dict[str, Any] = dict.fromkeys(_GPU_METRICS_KEYS, NA)
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
        metrics[name] = optional_int(target, key)
    metrics["average_gfx_activity"] = with_process_load(device, device,
                                                        metrics["average_gfx_activity"])
    if (throttle := device.get("throttle_percent")) is not None:
        metrics["throttle_status"] = any(value_at(s, t) > 0 for s in throttle.values())
    if (link := device.get("pcie_link")) is not None:
        metrics["pcie_link_width"] = link["width_current"]
    if (links := device.get("xgmi_links")) is not None:
        pad = [NA] * (AMDSMI_MAX_NUM_XGMI_LINKS - len(links))
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
