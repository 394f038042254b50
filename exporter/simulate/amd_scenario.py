"""The AMD part of a scenario: devices with ``"vendor": "amd"`` and amdsmi error rules.

An AMD device holds what the ``amdsmi`` Python API returns, in its units (MB of
VRAM, watts, microjoules, MHz, KB over XGMI); docs/simulation.md lists every
key. The simulated ``amdsmi`` module (``fake_amdsmi``) reads these devices from
the expanded scenario, while the fake NVML library never sees them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from ..backends.amd.status import AMDSMI_STATUS
from . import checks
from .checks import ScenarioError

AMD = "amd"
NVIDIA = "nvidia"
VENDORS = (NVIDIA, AMD)


# Every amdsmi function the fake module simulates (tests check the module against it).
AMDSMI_FUNCTIONS: tuple[str, ...] = (
    "amdsmi_init",
    "amdsmi_shut_down",
    "amdsmi_get_lib_version",
    "amdsmi_get_socket_handles",
    "amdsmi_get_processor_handles",
    "amdsmi_get_processor_type",
    "amdsmi_get_processor_handle_from_bdf",
    "amdsmi_get_gpu_device_uuid",
    "amdsmi_get_gpu_device_bdf",
    "amdsmi_get_gpu_asic_info",
    "amdsmi_get_gpu_driver_info",
    "amdsmi_get_gpu_kfd_info",
    "amdsmi_get_gpu_activity",
    "amdsmi_get_gpu_vram_usage",
    "amdsmi_get_power_info",
    "amdsmi_get_power_cap_info",
    "amdsmi_get_energy_count",
    "amdsmi_get_temp_metric",
    "amdsmi_get_clock_info",
    "amdsmi_get_violation_status",
    "amdsmi_get_gpu_metrics_info",
    "amdsmi_get_gpu_total_ecc_count",
    "amdsmi_get_pcie_info",
    "amdsmi_get_link_metrics",
    "amdsmi_get_gpu_xgmi_link_status",
    "amdsmi_topo_get_link_type",
    "amdsmi_topo_get_link_weight",
    "amdsmi_topo_get_numa_node_number",
    "amdsmi_is_P2P_accessible",
    "amdsmi_get_link_topology_nearest",
    "amdsmi_get_gpu_compute_partition",
    "amdsmi_get_gpu_memory_partition",
    "amdsmi_get_gpu_process_list",
)
AMD_WILDCARD = "amdsmi_*"
IMPORT_ERRORS = ("KeyError", "AttributeError", "ImportError")
# Python API releases whose answer keys the fake can give (see docs/simulation.md).
INTERFACES = ("6.3", "7.0")

COMPUTE_PARTITIONS = {"SPX": 1, "DPX": 2, "TPX": 3, "QPX": 4, "CPX": 5}
MEMORY_PARTITIONS = {"NPS1": 1, "NPS2": 2, "NPS4": 4, "NPS8": 8}
# amdsmi_violation_status_t members a scenario can throttle, by their amdsmi suffix.
VIOLATIONS = ("prochot_thrm", "ppt_pwr", "socket_thrm", "vr_thrm", "hbm_thrm")
MAX_XGMI_LINKS = 8  # AMDSMI_MAX_NUM_XGMI_LINKS: the link slots the Python API returns
MAX_PARTITIONS = 7  # secondary partitions of one GPU (CPX on an 8-XCD MI300X)
MAX_XCC = 8  # AMDSMI_MAX_NUM_XCC (and AMDSMI_MAX_NUM_XCP): XCCs one GPU reports
# xcc_clock_below_limit_percent key -> what held the XCC's clock below the host limit
CLOCK_LIMITERS = ("power", "thermal", "low_utilization")
_VERSION = re.compile(r"^\d+\.\d+\.\d+$")


def vendor_of(device: Mapping[str, Any]) -> str:
    """The vendor of a scenario device: ``"amd"`` or ``"nvidia"`` (the default)."""
    return str(device.get("vendor") or NVIDIA)


def check_vendor(value: Any, path: str, expected: str | None = None) -> str:
    """A device's ``vendor`` key: one of VENDORS, or exactly `expected` when given."""
    if value not in VENDORS:
        raise checks.fail(path, f'expected "nvidia" or "amd", got {value!r}')
    if expected is not None and value != expected:
        raise checks.fail(path,
                          f"must be {expected!r} here (AMD defaults go in amd_device_defaults)")
    return value


def _check_processes(value: Any, path: str) -> None:
    for i, proc in enumerate(checks.sequence(value, path)):
        where = f"{path}[{i}]"
        checks.keys(checks.mapping(proc, where), where,
                    ("pid", "name", "used_memory_bytes", "gtt_bytes", "cpu_bytes", "gfx_percent",
                     "enc_percent", "while_alive", "from_s", "until_s"), required=("pid",))
        checks.process_window(proc, where)
        checks.integer(proc["pid"], f"{where}.pid", lo=1, hi=2**32 - 1)
        if "name" in proc:
            checks.string(proc["name"], f"{where}.name", 31)
        for key in ("used_memory_bytes", "gtt_bytes", "cpu_bytes"):
            checks.integer(proc.get(key, 0), f"{where}.{key}")
        for key in ("gfx_percent", "enc_percent"):
            checks.integer(proc.get(key, 0), f"{where}.{key}", hi=100)
        checks.boolean(proc.get("while_alive", False), f"{where}.while_alive")


def _check_throttle(value: Any, path: str) -> None:
    throttle = checks.mapping(value, path)
    checks.keys(throttle, path, VIOLATIONS)
    percent = checks.signal_check(0, 100)
    for key, signal in throttle.items():
        percent(signal, f"{path}.{key}")


def _check_xgmi_links(value: Any, path: str) -> None:
    for i, link in enumerate(checks.sequence(value, path, MAX_XGMI_LINKS)):
        where = f"{path}[{i}]"
        checks.keys(checks.mapping(link, where), where,
                    ("remote_pci_bus_id", "state", "bit_rate_gbps", "max_bandwidth_gbps", "read_kb",
                     "write_kb"), required=("remote_pci_bus_id",))
        checks.normalize_pci_bus_id(link["remote_pci_bus_id"], f"{where}.remote_pci_bus_id")
        checks.boolean(link.get("state", True), f"{where}.state")
        for key in ("bit_rate_gbps", "max_bandwidth_gbps"):
            checks.integer(link.get(key, 0), f"{where}.{key}", hi=2**32 - 1)
        for key in ("read_kb", "write_kb"):
            checks.counter(link.get(key, 0), f"{where}.{key}")


def _check_xcc_signals(value: Any, path: str) -> None:
    """One signal 0-100 for every XCC, or a list of one per XCC."""
    percent = checks.signal_check(0, 100)
    if isinstance(value, list):
        for i, signal in enumerate(checks.sequence(value, path, MAX_XCC)):
            percent(signal, f"{path}[{i}]")
    else:
        percent(value, path)


def _check_clock_limiters(value: Any, path: str) -> None:
    limiters = checks.mapping(value, path)
    checks.keys(limiters, path, CLOCK_LIMITERS)
    for key, signals in limiters.items():
        _check_xcc_signals(signals, f"{path}.{key}")


def _check_xcc_layout(device: Mapping[str, Any], path: str) -> None:
    """Per-XCC keys need `num_xcc`, lists of that length, XCCs split evenly over the XCPs."""
    count = device.get("num_xcc")
    per_xcc = {"xcc_gfx_busy_percent": device.get("xcc_gfx_busy_percent"),
               **{f"xcc_clock_below_limit_percent.{k}": v
                  for k, v in (device.get("xcc_clock_below_limit_percent") or {}).items()}}
    if count is None:
        given = next((key for key, value in per_xcc.items() if value is not None), None)
        if given is not None:
            raise checks.fail(f"{path}.{given}", "needs num_xcc on the device")
        return
    for key, value in per_xcc.items():
        if isinstance(value, list) and len(value) != count:
            raise checks.fail(f"{path}.{key}",
                              f"lists {len(value)} XCCs, the device has num_xcc {count}")
    partitions = 1 + len(device.get("partitions") or ())
    if count % partitions:
        raise checks.fail(f"{path}.num_xcc",
                          f"{count} XCCs cannot be split evenly over {partitions} partitions")


def _uuid(value: Any, path: str) -> None:
    """amdsmi's UUID form: 8-4-4-4-12 hex digits, no prefix."""
    checks.string(value, path, 37)
    if not checks.PLAIN_UUID.match(value):
        raise checks.fail(path, "expected a UUID (8-4-4-4-12 hex digits, as amdsmi prints it)")


def _partition_enum(names: Mapping[str, int], what: str) -> Callable[[Any, str], None]:
    def check(value: Any, path: str) -> None:
        if not isinstance(value, str):
            raise checks.fail(path, f"expected a {what} name: one of {', '.join(names)}")
        checks.enum(value, path, names, what)

    return check


_PARTITION_CHECKS: dict[str, Callable[[Any, str], None]] = {
    "uuid": _uuid,
    "vram_total_mb": checks.int_check(hi=2**32 - 1),
    "vram_used_mb": checks.signal_check(),
    "gfx_activity_percent": checks.signal_check(0, 100),
    "umc_activity_percent": checks.signal_check(0, 100),
    "processes": _check_processes,
}


def _check_partitions(value: Any, path: str) -> None:
    for i, partition in enumerate(checks.sequence(value, path, MAX_PARTITIONS)):
        where = f"{path}[{i}]"
        checks.keys_with(checks.mapping(partition, where), where, _PARTITION_CHECKS)
        checks.keys(partition, where, tuple(_PARTITION_CHECKS), required=("uuid",))


AMD_DEVICE_CHECKS: dict[str, Callable[[Any, str], None]] = {
    "vendor": lambda v, p: check_vendor(v, p, AMD),
    "name": checks.str_check(255),
    "uuid": _uuid,
    "serial": checks.str_check(31),
    "pci_bus_id": checks.normalize_pci_bus_id,
    "device_id": checks.int_check(hi=0xFFFF),
    "rev_id": checks.int_check(hi=0xFF),
    "target_graphics_version": checks.str_check(31),
    "num_compute_units": checks.int_check(hi=2**32 - 2),
    "oam_id": checks.int_check(hi=2**32 - 2),
    "driver_version": checks.str_check(79),
    "vram_total_mb": checks.int_check(hi=2**32 - 1),
    "vram_used_mb": checks.signal_check(),
    "vram_type": checks.str_check(31),
    "vram_vendor": checks.str_check(31),
    "gfx_activity_percent": checks.signal_check(0, 100),
    "umc_activity_percent": checks.signal_check(0, 100),
    "mm_activity_percent": checks.signal_check(0, 100),
    "socket_power_w": checks.signal_check(0, 0xFFFE),
    "power_cap_w": checks.int_check(hi=0xFFFE),
    "energy_start_uj": checks.int_check(),
    "energy_resolution_uj": lambda v, p: checks.number(v, p, lo=1e-6),
    "temperature_edge_c": checks.signal_check(),
    "temperature_hotspot_c": checks.signal_check(),
    "temperature_vram_c": checks.signal_check(),
    "clock_gfx_mhz": checks.signal_check(0, 0xFFFE),
    "clock_mem_mhz": checks.signal_check(0, 0xFFFE),
    "min_clock_gfx_mhz": checks.int_check(hi=0xFFFE),
    "max_clock_gfx_mhz": checks.int_check(hi=0xFFFE),
    "min_clock_mem_mhz": checks.int_check(hi=0xFFFE),
    "max_clock_mem_mhz": checks.int_check(hi=0xFFFE),
    "throttle_percent": _check_throttle,
    "num_xcc": checks.int_check(lo=1, hi=MAX_XCC),
    "xcc_gfx_busy_percent": _check_xcc_signals,
    "xcc_clock_below_limit_percent": _check_clock_limiters,
    "ecc_correctable": checks.counter,
    "ecc_uncorrectable": checks.counter,
    "ecc_deferred": checks.counter,
    "pcie_link": checks.pcie_link,
    "pcie_bandwidth_mbps": checks.signal_check(),
    "pcie_replay": checks.counter,
    "xgmi_links": _check_xgmi_links,
    "numa_node": checks.int_check(hi=1024),
    "compute_partition": _partition_enum(COMPUTE_PARTITIONS, "compute partition"),
    "memory_partition": _partition_enum(MEMORY_PARTITIONS, "memory partition"),
    "partitions": _check_partitions,
    "processes": _check_processes,
    "load_from_processes": checks.boolean,
    "lost_at_s": lambda v, p: checks.number(v, p, lo=0),
}
AMD_DEVICE_CHECKS["raw_values"] = checks.boolean
AMD_DEVICE_KEYS = tuple(AMD_DEVICE_CHECKS)
# With "raw_values": true these signals may take any finite value, and the simulated
# amdsmi answers them as given: activity above 100 %, negative power, VRAM used above
# the total (docs/simulation.md, "Raw values").
RAW_AMD_SIGNAL_KEYS = (
    "vram_used_mb", "gfx_activity_percent", "umc_activity_percent", "mm_activity_percent",
    "socket_power_w", "temperature_edge_c", "temperature_hotspot_c", "temperature_vram_c",
    "clock_gfx_mhz", "clock_mem_mhz",
)
RAW_AMD_DEVICE_CHECKS: dict[str, Callable[[Any, str], None]] = {
    **AMD_DEVICE_CHECKS, **{key: checks.signal_check(lo=None) for key in RAW_AMD_SIGNAL_KEYS},
}


def check_amd_device(device: Mapping[str, Any], path: str) -> None:
    """Checks one (merged) AMD device; raises ScenarioError naming the offending key."""
    checks.keys_with(device, path,
                     RAW_AMD_DEVICE_CHECKS if device.get("raw_values") else AMD_DEVICE_CHECKS)
    if device.get("partitions") and device.get("compute_partition") is None:
        raise checks.fail(f"{path}.partitions",
                          "needs compute_partition (e.g. \"CPX\") on the device")
    _check_xcc_layout(device, path)


def check_amd_top_level(top: Mapping[str, Any]) -> dict[str, Any]:
    """The AMD top-level keys of a scenario, checked."""
    out: dict[str, Any] = {}
    version = top.get("amdsmi_version")
    if version is not None:
        if not _VERSION.match(checks.string(version, "amdsmi_version", 40)):
            raise checks.fail("amdsmi_version", f'expected "major.minor.release", got {version!r}')
        out["amdsmi_version"] = version
    failure = top.get("amdsmi_import_error")
    if failure is not None:
        if failure not in IMPORT_ERRORS:
            raise checks.fail("amdsmi_import_error", f"expected one of {', '.join(IMPORT_ERRORS)}, "
                                                     f"got {failure!r}")
        out["amdsmi_import_error"] = failure
    interface = top.get("amdsmi_interface")
    if interface is not None:
        if interface not in INTERFACES:
            raise checks.fail("amdsmi_interface",
                              f"expected one of {', '.join(INTERFACES)}, got {interface!r}")
        out["amdsmi_interface"] = interface
    return out


def is_amd_function(name: str) -> bool:
    """True for an amdsmi rule target (``amdsmi_*`` or one simulated amdsmi function)."""
    return name.startswith("amdsmi_")


def check_amd_function(name: str, path: str) -> str:
    """An amdsmi function name in an error or delay rule."""
    if name != AMD_WILDCARD and name not in AMDSMI_FUNCTIONS:
        raise checks.fail(path, f'unknown amdsmi function {name!r} (not simulated; '
                          f'"{AMD_WILDCARD}" matches any)')
    return name


def amd_error_code(value: Any, path: str) -> int:
    """An amdsmi status given by name (``NOT_SUPPORTED`` or ``AMDSMI_STATUS_...``) or number."""
    if isinstance(value, str):
        name = value.upper().removeprefix("AMDSMI_STATUS_")
        if name in AMDSMI_STATUS:
            return AMDSMI_STATUS[name]
        raise checks.fail(path, f"unknown amdsmi status {value!r} (e.g. NOT_SUPPORTED, NOT_FOUND)")
    return checks.integer(value, path, lo=1, hi=2**32 - 1)


__all__ = [
    "AMD",
    "AMDSMI_FUNCTIONS",
    "AMDSMI_STATUS",
    "AMD_DEVICE_KEYS",
    "NVIDIA",
    "ScenarioError",
    "amd_error_code",
    "check_amd_device",
    "check_amd_function",
    "check_amd_top_level",
    "is_amd_function",
    "vendor_of",
]
