"""The pyhlml functions the backend uses, with pyhlml 1.24's names, arguments and return types.

Each returns what the real binding returns (ints, bytes, ctypes structures)
or raises HLMLError with the code libhlml would give, for the values of the
simulated device at scenario time t.
"""

import ctypes
import time
from collections.abc import Mapping
from typing import Any

from ray_accel.exporter.simulate.signals import counter_at, value_at

from . import hlml_types as hlml_t
from ._simulation import SIMULATION, error, not_supported
from .hlml_error import ErrorsAsClass, HLMLError

__all__ = [
    "HLMLError",
    "hlmlDeviceGetBoardID",
    "hlmlDeviceGetClockInfo",
    "hlmlDeviceGetCount",
    "hlmlDeviceGetCurrPCIELinkGeneration",
    "hlmlDeviceGetCurrPCIELinkWidth",
    "hlmlDeviceGetCurrentClocksThrottleReasons",
    "hlmlDeviceGetHLRevision",
    "hlmlDeviceGetHandleByIndex",
    "hlmlDeviceGetHandleByPCIBusID",
    "hlmlDeviceGetHandleByUUID",
    "hlmlDeviceGetMacAddrInfo",
    "hlmlDeviceGetMaxClockInfo",
    "hlmlDeviceGetMemoryInfo",
    "hlmlDeviceGetMinorNumber",
    "hlmlDeviceGetModuleID",
    "hlmlDeviceGetName",
    "hlmlDeviceGetPCIEReplayCounter",
    "hlmlDeviceGetPCIEThroughput",
    "hlmlDeviceGetPCIInfo",
    "hlmlDeviceGetPerformanceState",
    "hlmlDeviceGetPowerManagementDefaultLimit",
    "hlmlDeviceGetPowerManagementLimit",
    "hlmlDeviceGetPowerUsage",
    "hlmlDeviceGetReplacedRowsCount",
    "hlmlDeviceGetReplacedRowsPendingStatus",
    "hlmlDeviceGetSerial",
    "hlmlDeviceGetTemperature",
    "hlmlDeviceGetTotalECCErrors",
    "hlmlDeviceGetTotalEnergyConsumption",
    "hlmlDeviceGetUUID",
    "hlmlDeviceGetUtilizationRates",
    "hlmlDeviceNicGetLink",
    "hlmlDeviceNicGetStatistics",
    "hlmlGetDriverVersion",
    "hlmlGetHLMLVersion",
    "hlmlGetNicDriverVersion",
    "hlmlInit",
    "hlmlInitWithFlags",
    "hlmlShutdown",
    "hlml_t",
]

_CLOCKS = ("soc", "ic", "mme", "tpc")  # by HLML_CLOCK_TYPE value
_SENSORS = {0: "aip", 1: "board", 3: "hbm", 4: "vrm"}  # HLML_TEMPERATURE_SENSORS value -> key
# Per-port NIC counters, under the names the habanalabs driver gives them.
_NIC_COUNTERS = (("rx_Octets", "rx_bytes"), ("tx_Octets", "tx_bytes"),
                 ("rx_Pkts", "rx_bytes"), ("tx_Pkts", "tx_bytes"))
_NIC_NAME_SLOT = 34  # HABANA_LINK_STR_LEN + 2: where libhlml writes each counter name
_PACKET_BYTES = 4096  # the simulated packet size, for the packet counters


def _required(device: Mapping[str, Any], key: str) -> Any:
    value = device.get(key)
    if value is None:
        raise not_supported()
    return value


def _now() -> float:
    return SIMULATION.time()


def _signal(device: Mapping[str, Any], key: str) -> float:
    return value_at(_required(device, key), _now())


def _with_workloads(device: Mapping[str, Any], key: str, value: float) -> float:
    """`value` plus what the card's live workloads add to `key` (HLML cannot see them)."""
    return value + sum(w[key] for w in SIMULATION.workloads_on(device))


def _counter(device: Mapping[str, Any], key: str) -> int:
    return counter_at(_required(device, key), _now())


def _bus_id(device: Mapping[str, Any]) -> tuple[int, int, int, int]:
    head, function = device["pci_bus_id"].rsplit(".", 1)
    domain, bus, slot = (int(part, 16) for part in head.split(":"))
    return domain, bus, slot, int(function)


# -- life cycle and versions ---------------------------------------------------

def hlmlInit() -> None:
    """Initialise HLML (finds the simulated machine)."""
    ErrorsAsClass()
    SIMULATION.init()


def hlmlInitWithFlags(flags: int = 0) -> None:
    """Initialise HLML with flags (only 0 is supported)."""
    ErrorsAsClass()
    SIMULATION.init()


def hlmlShutdown() -> None:
    """Shut HLML down."""
    SIMULATION.shutdown()


def _version(function: str, key: str) -> bytes:
    SIMULATION.check(function)
    return str(SIMULATION.section.get(key) or "").encode()


def hlmlGetDriverVersion() -> bytes:
    return _version("hlmlGetDriverVersion", "driver_version")


def hlmlGetHLMLVersion() -> bytes:
    return _version("hlmlGetHLMLVersion", "hlml_version")


def hlmlGetNicDriverVersion() -> bytes:
    return _version("hlmlGetNicDriverVersion", "nic_driver_version")


# -- finding devices ---------------------------------------------------------

def hlmlDeviceGetCount() -> int:
    SIMULATION.check("hlmlDeviceGetCount")
    return len(SIMULATION.devices())


def hlmlDeviceGetHandleByIndex(index: int) -> ctypes.c_void_p:
    SIMULATION.check("hlmlDeviceGetHandleByIndex")
    devices = SIMULATION.devices()
    if not 0 <= index < len(devices):
        raise error("INVALID_ARGUMENT")
    return SIMULATION.handle(devices[index])


def _handle_where(function: str, key: str, value: str) -> ctypes.c_void_p:
    SIMULATION.check(function)
    for device in SIMULATION.devices():
        if str(device.get(key, "")).lower() == value.lower():
            return SIMULATION.handle(device)
    raise error("NOT_FOUND")


def hlmlDeviceGetHandleByUUID(uuid: str) -> ctypes.c_void_p:
    return _handle_where("hlmlDeviceGetHandleByUUID", "uuid", uuid)


def hlmlDeviceGetHandleByPCIBusID(pci_addr: str) -> ctypes.c_void_p:
    SIMULATION.check("hlmlDeviceGetHandleByPCIBusID")
    for device in SIMULATION.devices():
        domain, bus, slot, function = _bus_id(device)
        short = f"{bus:02x}:{slot:02x}.{function}"
        forms = {f"{domain:04x}:{short}", short}
        if pci_addr.lower() in forms:
            return SIMULATION.handle(device)
    raise error("NOT_FOUND")


# -- identity ------------------------------------------------------------------

def hlmlDeviceGetName(device: ctypes.c_void_p) -> bytes:
    return str(_required(SIMULATION.device("hlmlDeviceGetName", device), "name")).encode()


def hlmlDeviceGetUUID(device: ctypes.c_void_p) -> bytes:
    return str(SIMULATION.device("hlmlDeviceGetUUID", device)["uuid"]).encode()


def hlmlDeviceGetSerial(device: ctypes.c_void_p) -> bytes:
    return str(_required(SIMULATION.device("hlmlDeviceGetSerial", device), "serial")).encode()


def hlmlDeviceGetPCIInfo(device: ctypes.c_void_p) -> hlml_t.c_hlml_pci_info:
    found = SIMULATION.device("hlmlDeviceGetPCIInfo", device)
    domain, bus, slot, function = _bus_id(found)
    info = hlml_t.c_hlml_pci_info()
    info.bus, info.device, info.domain = bus, slot, domain
    info.bus_id = f"{domain:04x}:{bus:02x}:{slot:02x}.{function}".encode()
    info.pci_device_id = int(found.get("pci_device_id") or 0)
    link = found.get("pcie_link") or {}
    if link:
        info.caps.link_speed = f"Gen{link.get('gen', 0)}".encode()
        info.caps.link_width = f"x{link.get('width', 0)}".encode()
    return info


def _integer_key(function: str, key: str, device: ctypes.c_void_p) -> int:
    return int(_required(SIMULATION.device(function, device), key))


def hlmlDeviceGetModuleID(device: ctypes.c_void_p) -> int:
    return _integer_key("hlmlDeviceGetModuleID", "module_id", device)


def hlmlDeviceGetBoardID(device: ctypes.c_void_p) -> int:
    return _integer_key("hlmlDeviceGetBoardID", "board_id", device)


def hlmlDeviceGetMinorNumber(device: ctypes.c_void_p) -> int:
    return _integer_key("hlmlDeviceGetMinorNumber", "minor_number", device)


def hlmlDeviceGetHLRevision(device: ctypes.c_void_p) -> int:
    return _integer_key("hlmlDeviceGetHLRevision", "hl_revision", device)


# -- activity, memory, power -------------------------------------------------

def hlmlDeviceGetUtilizationRates(device: ctypes.c_void_p) -> hlml_t.c_hlml_utilization:
    found = SIMULATION.device("hlmlDeviceGetUtilizationRates", device)
    rates = hlml_t.c_hlml_utilization()
    busy = _with_workloads(found, "utilization_percent", _signal(found, "utilization_percent"))
    rates.aip = round(min(busy, 100))
    if found.get("memory_utilization_percent") is not None:
        rates.memory = round(_signal(found, "memory_utilization_percent"))
    return rates


def hlmlDeviceGetMemoryInfo(device: ctypes.c_void_p) -> hlml_t.c_hlml_memory:
    found = SIMULATION.device("hlmlDeviceGetMemoryInfo", device)
    total = int(_required(found, "memory_total_bytes"))
    used = min(int(_with_workloads(found, "memory_bytes", _signal(found, "memory_used_bytes"))),
               total)
    memory = hlml_t.c_hlml_memory()
    memory.total, memory.used, memory.free = total, used, total - used
    return memory


def hlmlDeviceGetPowerUsage(device: ctypes.c_void_p) -> int:
    return round(_signal(SIMULATION.device("hlmlDeviceGetPowerUsage", device), "power_mw"))


def hlmlDeviceGetPowerManagementLimit(device: ctypes.c_void_p) -> int:
    return _integer_key("hlmlDeviceGetPowerManagementLimit", "power_limit_mw", device)


def hlmlDeviceGetPowerManagementDefaultLimit(device: ctypes.c_void_p) -> int:
    return _integer_key("hlmlDeviceGetPowerManagementDefaultLimit", "power_default_limit_mw",
                        device)


def hlmlDeviceGetTotalEnergyConsumption(device: ctypes.c_void_p) -> int:
    return _counter(SIMULATION.device("hlmlDeviceGetTotalEnergyConsumption", device), "energy_mj")


# -- thermals and clocks -------------------------------------------------------

def hlmlDeviceGetTemperature(device: ctypes.c_void_p, sensor_type: int) -> int:
    found = SIMULATION.device("hlmlDeviceGetTemperature", device)
    sensor = _SENSORS.get(int(sensor_type))
    value = (found.get("temperatures_c") or {}).get(sensor) if sensor else None
    if value is None:
        raise not_supported()
    return round(value_at(value, _now()))


def _clock(function: str, key: str, device: ctypes.c_void_p, clock_type: int) -> int:
    found = SIMULATION.device(function, device)
    if not 0 <= int(clock_type) < len(_CLOCKS):
        raise error("INVALID_ARGUMENT")
    value = (found.get(key) or {}).get(_CLOCKS[int(clock_type)])
    if value is None:
        raise not_supported()
    return round(value_at(value, _now()))


def hlmlDeviceGetClockInfo(device: ctypes.c_void_p, clock_type: int = 0) -> int:
    return _clock("hlmlDeviceGetClockInfo", "clocks_mhz", device, clock_type)


def hlmlDeviceGetMaxClockInfo(device: ctypes.c_void_p, clock_type: int = 0) -> int:
    return _clock("hlmlDeviceGetMaxClockInfo", "max_clocks_mhz", device, clock_type)


def hlmlDeviceGetCurrentClocksThrottleReasons(device: ctypes.c_void_p) -> int:
    found = SIMULATION.device("hlmlDeviceGetCurrentClocksThrottleReasons", device)
    throttle = _required(found, "throttle")
    bits = 0
    for name, bit in (("power", hlml_t.HLML_DEFINE.HLML_CLOCKS_THROTTLE_REASON_POWER),
                      ("thermal", hlml_t.HLML_DEFINE.HLML_CLOCKS_THROTTLE_REASON_THERMAL)):
        if throttle.get(name) is not None and value_at(throttle[name], _now()) >= 0.5:
            bits |= bit
    return bits


def hlmlDeviceGetPerformanceState(device: ctypes.c_void_p) -> int:
    return _integer_key("hlmlDeviceGetPerformanceState", "performance_state", device)


# -- errors and memory health --------------------------------------------------

def hlmlDeviceGetTotalECCErrors(device: ctypes.c_void_p, error_type: int, counter_type: int) -> int:
    found = SIMULATION.device("hlmlDeviceGetTotalECCErrors", device)
    keys = {0: "ecc_corrected", 1: "ecc_uncorrected"}
    if int(error_type) not in keys or int(counter_type) not in (0, 1):
        raise error("INVALID_ARGUMENT")
    return _counter(found, keys[int(error_type)])


def hlmlDeviceGetReplacedRowsCount(device: ctypes.c_void_p, cause: int) -> int:
    found = SIMULATION.device("hlmlDeviceGetReplacedRowsCount", device)
    keys = {0: "replaced_rows_sbe", 1: "replaced_rows_dbe"}
    if int(cause) not in keys:
        raise error("INVALID_ARGUMENT")
    return int(_required(found, keys[int(cause)]))


def hlmlDeviceGetReplacedRowsPendingStatus(device: ctypes.c_void_p) -> int:
    found = SIMULATION.device("hlmlDeviceGetReplacedRowsPendingStatus", device)
    return int(bool(_required(found, "replaced_rows_pending")))


# -- PCIe ------------------------------------------------------------------------

def hlmlDeviceGetPCIEThroughput(device: ctypes.c_void_p, counter_type: int) -> int:
    found = SIMULATION.device("hlmlDeviceGetPCIEThroughput", device)
    keys = {0: "pcie_tx_bytes_per_s", 1: "pcie_rx_bytes_per_s"}
    if int(counter_type) not in keys:
        raise error("INVALID_ARGUMENT")
    return round(_signal(found, keys[int(counter_type)]))


def hlmlDeviceGetPCIEReplayCounter(device: ctypes.c_void_p) -> int:
    return _counter(SIMULATION.device("hlmlDeviceGetPCIEReplayCounter", device), "pcie_replay")


def hlmlDeviceGetCurrPCIELinkGeneration(device: ctypes.c_void_p) -> int:
    found = SIMULATION.device("hlmlDeviceGetCurrPCIELinkGeneration", device)
    return int(_required(_required(found, "pcie_link"), "gen"))


def hlmlDeviceGetCurrPCIELinkWidth(device: ctypes.c_void_p) -> int:
    found = SIMULATION.device("hlmlDeviceGetCurrPCIELinkWidth", device)
    return int(_required(_required(found, "pcie_link"), "width"))


# -- NIC ports ---------------------------------------------------------------------

def _ports(found: Mapping[str, Any]) -> Mapping[str, Any]:
    nic = _required(found, "nic")
    if not nic.get("ports"):
        raise not_supported()
    return nic


def hlmlDeviceGetMacAddrInfo(device: ctypes.c_void_p) -> tuple[tuple[int, int], tuple[int, int]]:
    nic = _ports(SIMULATION.device("hlmlDeviceGetMacAddrInfo", device))
    mask, ext_mask = [0, 0], [0, 0]
    for port in range(nic["ports"]):
        mask[port // 64] |= 1 << (port % 64)
    for port in nic.get("external") or ():
        ext_mask[port // 64] |= 1 << (port % 64)
    return (mask[0], mask[1]), (ext_mask[0], ext_mask[1])


def _port(nic: Mapping[str, Any], port: int) -> int:
    if not 0 <= int(port) < nic["ports"]:
        raise error("INVALID_ARGUMENT")
    return int(port)


def hlmlDeviceNicGetLink(device: ctypes.c_void_p, port: int) -> bool:
    nic = _ports(SIMULATION.device("hlmlDeviceNicGetLink", device))
    return _port(nic, port) not in (nic.get("down") or ())


def hlmlDeviceNicGetStatistics(device: ctypes.c_void_p, port: int,
                               num_of_counts: int | None = None) -> hlml_t.c_hlml_nic_stats_info:
    nic = _ports(SIMULATION.device("hlmlDeviceNicGetStatistics", device))
    number = _port(nic, port)
    time.sleep(nic.get("stats_latency_s", 0))  # a firmware query on real cards
    info = hlml_t.c_hlml_nic_stats_info(number, num_of_counts)
    t = _now()
    for slot, (name, key) in enumerate(_NIC_COUNTERS):
        value = counter_at(nic.get(key, 0), t)
        if name.endswith("Pkts"):
            value //= _PACKET_BYTES
        encoded = name.encode() + b"\0"
        ctypes.memmove(ctypes.addressof(info.str_buf.contents) + slot * _NIC_NAME_SLOT,
                       encoded, len(encoded))
        info.val_buf[slot] = value
    info.num_of_counters_out[0] = len(_NIC_COUNTERS)
    return info
