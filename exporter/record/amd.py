"""An AMD GPU's recorded series -> its scenario keys, in amdsmi's units.

The inverse of the AMD backend's probes: readings in base units go back to
what amdsmi answered (MB of VRAM, W, MHz, percent, KB over XGMI, uJ of
energy). Residency ratios (throttling, XCC clocks held below the host limit)
average the interval before their sample, as the accumulators they come from
do, so they are placed at its middle. A series never read stays absent, so the
replay answers NOT_SUPPORTED where the node did.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import catalog as m
from ..backends.amd.interconnect import KB, XGMI
from ..backends.amd.probes import MHZ, MIB, VIOLATIONS
from ..backends.amd.xcp import XCC_RESIDENCY
from ..model import Device
from ..simulate.amd_scenario import AMD, AMD_WILDCARD
from ..simulate.checks import PLAIN_UUID
from .processes import put_processes
from .scenario_keys import (
    Row,
    energy_start,
    max_clocks,
    put,
    put_error_counts,
    put_gauges,
    put_last,
    scaled,
)
from .series import DeviceSeries, Points, label_map
from .timeline import counter_signal, gauge_signal, midpoints
from .vendors import LinkFacts, Numa, VendorRecorder

GAUGES: tuple[Row, ...] = (
    (m.GPU_UTILIZATION, {"task": m.TASK_GENERAL}, "gfx_activity_percent", 100),
    (m.MEMORY_BANDWIDTH_UTILIZATION, {}, "umc_activity_percent", 100),
    (m.GPU_UTILIZATION, {"task": "multimedia"}, "mm_activity_percent", 100),
    (m.MEMORY_USAGE, {}, "vram_used_mb", 1 / MIB),
    (m.POWER, {}, "socket_power_w", 1),
    (m.TEMPERATURE, {"sensor": "edge"}, "temperature_edge_c", 1),
    (m.TEMPERATURE, {"sensor": "hotspot"}, "temperature_hotspot_c", 1),
    (m.TEMPERATURE, {"sensor": "memory"}, "temperature_vram_c", 1),
    (m.CLOCK_FREQUENCY, {"clock": m.CLOCK_SM}, "clock_gfx_mhz", 1 / MHZ),
    (m.CLOCK_FREQUENCY, {"clock": m.CLOCK_MEMORY}, "clock_mem_mhz", 1 / MHZ),
)
PARTITION_GAUGES = tuple(row for row in GAUGES if row[2] in (
    "gfx_activity_percent", "umc_activity_percent", "vram_used_mb"))
FIXED: tuple[Row, ...] = (
    (m.MEMORY_LIMIT, {}, "vram_total_mb", 1 / MIB),
    (m.POWER_LIMIT, {}, "power_cap_w", 1),
    *max_clocks("max_clock_gfx_mhz", "max_clock_mem_mhz"),
)
ERROR_COUNTS = {m.ECC_CORRECTED: "ecc_correctable", m.ECC_UNCORRECTED: "ecc_uncorrectable",
                m.ECC_DEFERRED: "ecc_deferred", m.PCIE_REPLAY: "pcie_replay"}
# facts -> scenario keys, as the backend's discovery read them
FACT_KEYS = (("architecture", "target_graphics_version"), ("driver_version", "driver_version"),
             ("compute_partition", "compute_partition"), ("memory_partition", "memory_partition"))
# what held an XCC's clock below the host limit, also the scenario's keys ("any", their
# sum, follows from them)
LIMITERS = tuple(reason for _, reason in XCC_RESIDENCY if reason != "any")
# Residencies count whole accumulator ticks (about 100 a second): a 1 s ratio is good to
# about a percent, and keyframes finer than that would follow the tick jitter.
RESIDENCY_RESOLUTION = 1.0
PROCESS_ENGINES = ((m.ENGINE_SM, "gfx_percent"), (m.ENGINE_ENCODER, "enc_percent"))
# The sampling calls a hung GPU's replay hangs: the first the agent makes of each probe.
HUNG_CALLS = ("amdsmi_get_gpu_activity", "amdsmi_get_gpu_vram_usage",
              "amdsmi_get_gpu_metrics_info", "amdsmi_get_power_info", "amdsmi_get_temp_metric",
              "amdsmi_get_clock_info", "amdsmi_get_gpu_process_list")


def device_scenario(device: Device, series: DeviceSeries, link_facts: LinkFacts,
                    interval_s: float, partitions: list[dict[str, Any]]) -> dict[str, Any]:
    """The scenario device object of one recorded physical AMD GPU (with its partitions)."""
    out: dict[str, Any] = {"vendor": AMD, "name": device.model}
    if PLAIN_UUID.match(device.uuid):
        out["uuid"] = device.uuid
    put(out, "pci_bus_id", device.pci_bus_id or None)
    facts = device.facts
    if facts.get("serial"):
        out["serial"] = facts["serial"].removeprefix("0x")
    for fact, key in FACT_KEYS:
        put(out, key, facts.get(fact) or None)
    if facts.get("numa_node", "").isdigit():
        out["numa_node"] = int(facts["numa_node"])
    put_gauges(out, series, GAUGES)
    put_last(out, series, FIXED)
    put_error_counts(out, series, ERROR_COUNTS)
    put(out, "energy_start_uj", energy_start(series, 1e6))
    _throttle(out, series, interval_s)
    _xccs(out, series, interval_s)
    put(out, "pcie_link", series.pcie_link())
    _xgmi(out, series, link_facts)
    if partitions:
        out["partitions"] = partitions
    put_processes(out, series, PROCESS_ENGINES)
    return out


def partition_scenario(device: Device, series: DeviceSeries, interval_s: float
                       ) -> dict[str, Any]:
    """The `partitions` entry of one recorded secondary compute partition."""
    out: dict[str, Any] = {"uuid": device.uuid}
    put_last(out, series, FIXED[:1])  # VRAM total
    put_gauges(out, series, PARTITION_GAUGES)
    put_processes(out, series, PROCESS_ENGINES)
    return out


def _throttle(out: dict[str, Any], series: DeviceSeries, interval_s: float) -> None:
    """`throttle_percent` per limiter: its residency where the metrics table gave one, else
    whether the violation status called it active (100 %) or not."""
    throttle: dict[str, Any] = {}
    for member, reason in VIOLATIONS:
        residency = series.device(m.THROTTLE_RESIDENCY, reason=reason)
        if residency:
            signal = gauge_signal(midpoints(scaled(residency, 100), interval_s),
                                  absolute=RESIDENCY_RESOLUTION)
        else:
            active = series.device(m.THROTTLE_ACTIVE, reason=reason)
            signal = gauge_signal(scaled(active, 100), step=True) if active else None
        put(throttle, member, signal)
    if throttle:
        out["throttle_percent"] = throttle


def _per_xcc(series: DeviceSeries, metric: str, **labels: str) -> dict[int, Points]:
    """Points of a per-XCC series by the XCC's place on the GPU (XCCs are split evenly over
    the compute partitions: XCP p holds the p-th share)."""
    found: dict[tuple[int, int], Points] = {}
    for key, points in series.matching("d", metric):
        names = label_map(key)
        if all(names.get(k) == v for k, v in labels.items()):
            found[(int(names["xcp"]), int(names["xcc"]))] = points
    per_xcp = max((xcc for _, xcc in found), default=-1) + 1
    return {xcp * per_xcp + xcc: points for (xcp, xcc), points in found.items()}


def _xccs(out: dict[str, Any], series: DeviceSeries, interval_s: float) -> None:
    busy = _per_xcc(series, m.XCP_GFX_UTILIZATION)
    if not busy or sorted(busy) != list(range(len(busy))):
        return  # no per-XCC table, or one whose XCCs cannot be placed
    out["num_xcc"] = len(busy)
    out["xcc_gfx_busy_percent"] = [gauge_signal(scaled(busy[i], 100)) for i in sorted(busy)]
    limits: dict[str, Any] = {}
    for reason in LIMITERS:
        held = _per_xcc(series, m.XCP_GFX_BELOW_HOST_LIMIT, reason=reason)
        if sorted(held) == sorted(busy):
            limits[reason] = [gauge_signal(midpoints(scaled(held[i], 100), interval_s),
                                        absolute=RESIDENCY_RESOLUTION) for i in sorted(held)]
    if limits:
        out["xcc_clock_below_limit_percent"] = limits


def _xgmi(out: dict[str, Any], series: DeviceSeries, link_facts: LinkFacts) -> None:
    indices = sorted(index for link_type, index in link_facts if link_type == XGMI)
    if not indices or indices != list(range(len(indices))):
        return
    links = []
    for index in indices:
        facts = link_facts[(XGMI, index)]
        link: dict[str, Any] = {"remote_pci_bus_id": facts.get("remote_pci_bus_id", "")}
        up = series.points.get(("l", XGMI, index, m.LINK_UP, ()))
        if up:
            link["state"] = bool(up[-1][1])
        for direction, key in ((m.RECEIVE, "read_kb"), (m.TRANSMIT, "write_kb")):
            points = series.points.get(("l", XGMI, index, m.LINK_IO,
                                        (("direction", direction),)))
            put(link, key, counter_signal(points or [], scale=1 / KB))
        links.append(link)
    if all(link["remote_pci_bus_id"] for link in links):
        out["xgmi_links"] = links


def no_peer_keys(device: Device, numa: Numa) -> dict[str, Any]:
    """AMD topology follows from the XGMI links and NUMA nodes: no keys of its own."""
    return {}


def top_level(facts: Mapping[str, str]) -> dict[str, Any]:
    """The scenario's amdsmi version, where the backend read it."""
    return {"amdsmi_version": facts["amdsmi_version"]} if facts.get("amdsmi_version") else {}


RECORDER = VendorRecorder(
    vendor=AMD, device=device_scenario, child=partition_scenario, peers=no_peer_keys,
    top_level=top_level, call_prefix="amdsmi_",
    absent_kinds=frozenset({"not_supported", "not_yet_implemented", "no_perm",
                            "fail_load_symbol", "function_not_found", "parameter",
                            "not_found"}),
    hung_calls=HUNG_CALLS, lost_kinds=frozenset({"not_found"}), wildcard=AMD_WILDCARD)
