"""A Gaudi card's recorded series -> its entry in the scenario's `gaudi` section, in HLML units.

The inverse of the Gaudi backend's probes: utilization in percent, memory in
bytes, power and its limit in mW, energy in mJ, temperatures per sensor,
clocks in MHz, throttle reasons as 0/1 step signals, PCIe throughput in
bytes/s, NIC byte counters. HLML lists no processes. A card that stopped
answering becomes `gaudi.delays` rules on its sampling calls, and costly pyhlml
calls `busy` delays there (events.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import catalog as m
from ..backends.gaudi.nic import ROCE
from ..model import Device
from ..simulate.gaudi_scenario import WILDCARD
from .scenario_keys import Row, put, put_error_counts, put_gauges, put_last, scaled
from .series import DeviceSeries
from .timeline import counter_signal, gauge_signal
from .vendors import LinkFacts, Numa, VendorRecorder

SECTION = "gaudi"
GAUGES: tuple[Row, ...] = (
    (m.GPU_UTILIZATION, {"task": m.TASK_GENERAL}, "utilization_percent", 100),
    (m.MEMORY_BANDWIDTH_UTILIZATION, {}, "memory_utilization_percent", 100),
    (m.MEMORY_USAGE, {}, "memory_used_bytes", 1),
    (m.POWER, {}, "power_mw", 1000),
    (m.PCIE_THROUGHPUT, {"direction": m.TRANSMIT}, "pcie_tx_bytes_per_s", 1),
    (m.PCIE_THROUGHPUT, {"direction": m.RECEIVE}, "pcie_rx_bytes_per_s", 1),
)
FIXED: tuple[Row, ...] = (
    (m.MEMORY_LIMIT, {}, "memory_total_bytes", 1),
    (m.POWER_LIMIT, {}, "power_limit_mw", 1000),
    (m.PERFORMANCE_STATE, {}, "performance_state", 1),
    (m.REMAPPED_ROWS, {"cause": "correctable"}, "replaced_rows_sbe", 1),
    (m.REMAPPED_ROWS, {"cause": "uncorrectable"}, "replaced_rows_dbe", 1),
)
ERROR_COUNTS = {m.ECC_CORRECTED: "ecc_corrected", m.ECC_UNCORRECTED: "ecc_uncorrected",
                m.PCIE_REPLAY: "pcie_replay"}
# temperature sensor label -> the section's `temperatures_c` key (the AIP is the chip)
SENSORS = {"gpu": "aip", "board": "board", "memory": "hbm", "vrm": "vrm"}
CLOCKS = ("soc", "ic", "mme", "tpc")
THROTTLE = {"sw_power_cap": "power", "sw_thermal_slowdown": "thermal"}
FACTS = (("module_id", "module_id"), ("hl_revision", "hl_revision"))
# The sampling calls a hung card's replay hangs: the first the backend makes of each probe
# (which call hung is not in the samples).
HUNG_CALLS = ("hlmlDeviceGetUtilizationRates", "hlmlDeviceGetMemoryInfo",
              "hlmlDeviceGetPowerUsage", "hlmlDeviceGetTemperature", "hlmlDeviceGetClockInfo",
              "hlmlDeviceGetCurrentClocksThrottleReasons", "hlmlDeviceGetTotalECCErrors",
              "hlmlDeviceGetReplacedRowsCount", "hlmlDeviceGetCurrPCIELinkGeneration")


def device_scenario(device: Device, series: DeviceSeries, link_facts: LinkFacts,
                    interval_s: float, children: list[dict[str, Any]]) -> dict[str, Any]:
    """The `gaudi.devices` entry of one recorded card."""
    out: dict[str, Any] = {"uuid": device.uuid, "pci_bus_id": device.pci_bus_id,
                           "name": device.model}
    facts = device.facts
    for fact, key in FACTS:
        if facts.get(fact, "").isdigit():
            out[key] = int(facts[fact])
    put(out, "serial", facts.get("serial") or None)
    put_gauges(out, series, GAUGES)
    put_last(out, series, FIXED)
    pending = series.last(m.ROW_REMAP_PENDING)
    if pending is not None:
        out["replaced_rows_pending"] = bool(pending)
    put_error_counts(out, series, ERROR_COUNTS)
    energy = series.device(m.ENERGY)
    put(out, "energy_mj", counter_signal(energy, scale=1000) if energy else None)
    _named(out, "temperatures_c", {key: gauge_signal(series.device(
        m.TEMPERATURE, sensor=sensor)) for sensor, key in SENSORS.items()})
    _named(out, "clocks_mhz", {clock: gauge_signal(scaled(series.device(
        m.CLOCK_FREQUENCY, clock=clock), 1e-6)) for clock in CLOCKS})
    _named(out, "max_clocks_mhz", {clock: None if (v := series.last(
        m.CLOCK_MAX_FREQUENCY, clock=clock)) is None else round(v / 1e6) for clock in CLOCKS})
    _named(out, "throttle", {key: gauge_signal(series.device(
        m.THROTTLE_ACTIVE, reason=reason), step=True) for reason, key in THROTTLE.items()})
    generation = series.last(m.PCIE_GENERATION, state=m.PCIE_CURRENT)
    width = series.last(m.PCIE_WIDTH, state=m.PCIE_CURRENT)
    if generation is not None and width is not None:
        out["pcie_link"] = {"gen": int(generation), "width": int(width)}
    _nic(out, series, link_facts)
    return out


def _named(out: dict[str, Any], key: str, values: Mapping[str, Any]) -> None:
    """A mapping key (temperatures, clocks, ...) of the values that were read, if any."""
    found = {name: value for name, value in values.items() if value is not None}
    if found:
        out[key] = found


def _nic(out: dict[str, Any], series: DeviceSeries, link_facts: LinkFacts) -> None:
    """`nic`: the ports, which face the network, which are down, and one port's byte
    counters (the section gives every port the same)."""
    ports = sorted(index for link_type, index in link_facts if link_type == ROCE)
    if not ports:
        return
    nic: dict[str, Any] = {"ports": max(ports) + 1}
    external = [p for p in ports if link_facts[(ROCE, p)].get("remote_type") == "network"]
    down = [p for p in ports
            if (up := series.points.get(("l", ROCE, p, m.LINK_UP, ()))) and not up[-1][1]]
    if external:
        nic["external"] = external
    if down:
        nic["down"] = down
    for direction, key in ((m.TRANSMIT, "tx_bytes"), (m.RECEIVE, "rx_bytes")):
        counted = next((points for p in ports if p not in down and (points := series.points.get(
            ("l", ROCE, p, m.LINK_IO, (("direction", direction),))))), None)
        put(nic, key, counter_signal(counted) if counted else None)
    out["nic"] = nic


def no_children(device: Device, series: DeviceSeries, interval_s: float) -> dict[str, Any]:
    raise TypeError(f"a Gaudi card has no child devices: {device.uuid}")


def no_peer_keys(device: Device, numa: Numa) -> dict[str, Any]:
    """The section has no topology keys."""
    return {}


def section_facts(facts: Mapping[str, str]) -> dict[str, Any]:
    """The section's driver, HLML and NIC driver versions, where the backend read them."""
    return {key: facts[key] for key in ("driver_version", "hlml_version", "nic_driver_version")
            if facts.get(key)}


RECORDER = VendorRecorder(
    vendor="intel", device=device_scenario, child=no_children, peers=no_peer_keys,
    top_level=section_facts, call_prefix="hlml",
    absent_kinds=frozenset({"not_supported", "invalid_argument", "function_not_found",
                            "aip_is_lost", "driver_not_loaded", "uninitialized"}),
    hung_calls=HUNG_CALLS, section=SECTION, lost_kinds=frozenset({"aip_is_lost"}),
    wildcard=WILDCARD)
