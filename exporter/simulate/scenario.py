"""Scenario files for the simulated NVIDIA hardware: load, validate, expand, render.

A scenario is JSON (or an equivalent dict) describing GPUs and how their values
move over time; docs/simulation.md documents every key. `load_scenario` checks
it and returns the expanded form (``device_defaults`` merged into each device),
and `render_state` turns that into the flat text "state file" that the C
library reads (its format is documented at the top of fakenvml/fakenvml.c).
"""

from __future__ import annotations

import copy
import importlib
import json
import math
import os
import pathlib
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from . import checks
from .checks import ScenarioError

SCENARIO_DIR = pathlib.Path(__file__).resolve().parent / "scenarios"
STATE_FORMAT_HEADER = "fakenvml 1"

# Limits shared with fakenvml.c (MAX_DEVICES, MAX_MIG, CPU_WORDS * 64).
MAX_DEVICES = 64
MAX_MIG_DEVICES = 8
MAX_CPUS = 1024
MAX_NVLINKS = 36  # NVML_NVLINK_MAX_LINKS
MAX_DELAY_S = 86400.0

# Buffer sizes of the NVML calls that return these strings, less the NUL.
_MAX_NAME = 95
_MAX_UUID = 95
_MAX_SERIAL = 29
_MAX_VERSION = 79

NVML_ERROR_CODES: dict[str, int] = {
    "UNINITIALIZED": 1,
    "INVALID_ARGUMENT": 2,
    "NOT_SUPPORTED": 3,
    "NO_PERMISSION": 4,
    "ALREADY_INITIALIZED": 5,
    "NOT_FOUND": 6,
    "INSUFFICIENT_SIZE": 7,
    "INSUFFICIENT_POWER": 8,
    "DRIVER_NOT_LOADED": 9,
    "TIMEOUT": 10,
    "IRQ_ISSUE": 11,
    "LIBRARY_NOT_FOUND": 12,
    "FUNCTION_NOT_FOUND": 13,
    "CORRUPTED_INFOROM": 14,
    "GPU_IS_LOST": 15,
    "RESET_REQUIRED": 16,
    "OPERATING_SYSTEM": 17,
    "LIB_RM_VERSION_MISMATCH": 18,
    "IN_USE": 19,
    "MEMORY": 20,
    "NO_DATA": 21,
    "VGPU_ECC_NOT_SUPPORTED": 22,
    "INSUFFICIENT_RESOURCES": 23,
    "FREQ_NOT_SUPPORTED": 24,
    "ARGUMENT_VERSION_MISMATCH": 25,
    "DEPRECATED": 26,
    "NOT_READY": 27,
    "GPU_NOT_FOUND": 28,
    "INVALID_STATE": 29,
    "RESET_TYPE_NOT_SUPPORTED": 30,
    "UNKNOWN": 999,
}

ARCHITECTURES: dict[str, int] = {
    "kepler": 2,
    "maxwell": 3,
    "pascal": 4,
    "volta": 5,
    "turing": 6,
    "ampere": 7,
    "ada": 8,
    "hopper": 9,
    "blackwell": 10,
}
TOPOLOGY_LEVELS: dict[str, int] = {
    "INTERNAL": 0,
    "SINGLE": 10,
    "MULTIPLE": 20,
    "HOSTBRIDGE": 30,
    "NODE": 40,
    "SYSTEM": 50,
}
P2P_STATUSES: dict[str, int] = {
    "OK": 0,
    "CHIPSET_NOT_SUPPORTED": 1,
    "GPU_NOT_SUPPORTED": 2,
    "IOH_TOPOLOGY_NOT_SUPPORTED": 3,
    "DISABLED_BY_REGKEY": 4,
    "NOT_SUPPORTED": 5,
    "UNKNOWN": 6,
}
P2P_CAPS = ("read", "write", "nvlink", "atomics", "pci")  # nvmlGpuP2PCapsIndex_t order
FABRIC_STATES: dict[str, int] = {
    "NOT_SUPPORTED": 0,
    "NOT_STARTED": 1,
    "IN_PROGRESS": 2,
    "COMPLETED": 3,
}
NVLINK_REMOTE_TYPES: dict[str, int] = {"gpu": 0, "ibmnpu": 1, "switch": 2, "unknown": 255}
FIELD_VALUE_TYPES: dict[str, int] = {
    "double": 0,
    "uint": 1,
    "ulong": 2,
    "ull": 3,
    "sll": 4,
    "int": 5,
    "ushort": 6,
}
PROCESS_TYPES: dict[str, int] = {"compute": 1, "graphics": 2, "both": 3}

# Every symbol the C library exports (tests check this against the library).
NVML_FUNCTIONS: tuple[str, ...] = (
    "nvmlInit",
    "nvmlInit_v2",
    "nvmlInitWithFlags",
    "nvmlShutdown",
    "nvmlErrorString",
    "nvmlSystemGetDriverVersion",
    "nvmlSystemGetNVMLVersion",
    "nvmlSystemGetCudaDriverVersion",
    "nvmlSystemGetCudaDriverVersion_v2",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetCount_v2",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetHandleByUUID",
    "nvmlDeviceGetHandleByPciBusId",
    "nvmlDeviceGetHandleByPciBusId_v2",
    "nvmlDeviceGetIndex",
    "nvmlDeviceGetName",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetSerial",
    "nvmlDeviceGetPciInfo_v3",
    "nvmlDeviceGetMinorNumber",
    "nvmlDeviceGetArchitecture",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetMemoryInfo_v2",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetEncoderUtilization",
    "nvmlDeviceGetDecoderUtilization",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetPowerManagementLimit",
    "nvmlDeviceGetTotalEnergyConsumption",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetMaxClockInfo",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetPerformanceState",
    "nvmlDeviceGetEccMode",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetRetiredPages",
    "nvmlDeviceGetRetiredPages_v2",
    "nvmlDeviceGetRetiredPagesPendingStatus",
    "nvmlDeviceGetPcieReplayCounter",
    "nvmlDeviceGetComputeRunningProcesses_v2",
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetGraphicsRunningProcesses_v2",
    "nvmlDeviceGetGraphicsRunningProcesses_v3",
    "nvmlDeviceGetProcessUtilization",
    "nvmlDeviceGetProcessesUtilizationInfo",
    "nvmlEventSetCreate",
    "nvmlEventSetFree",
    "nvmlDeviceGetSupportedEventTypes",
    "nvmlDeviceRegisterEvents",
    "nvmlEventSetWait",
    "nvmlEventSetWait_v2",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceIsMigDeviceHandle",
    "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
    "nvmlDeviceGetGpuInstanceId",
    "nvmlDeviceGetComputeInstanceId",
    "nvmlDeviceGetFieldValues",
    "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetNvLinkVersion",
    "nvmlDeviceGetNvLinkRemotePciInfo_v2",
    "nvmlDeviceGetNvLinkRemoteDeviceType",
    "nvmlDeviceGetCurrPcieLinkGeneration",
    "nvmlDeviceGetCurrPcieLinkWidth",
    "nvmlDeviceGetMaxPcieLinkGeneration",
    "nvmlDeviceGetMaxPcieLinkWidth",
    "nvmlDeviceGetGpuMaxPcieLinkGeneration",
    "nvmlDeviceGetPcieThroughput",
    "nvmlDeviceGetNumaNodeId",
    "nvmlDeviceGetCpuAffinity",
    "nvmlDeviceGetTopologyCommonAncestor",
    "nvmlDeviceGetP2PStatus",
    "nvmlDeviceGetGpuFabricInfo",
    "nvmlDeviceGetGpuFabricInfoV",
)

_VERSION_SUFFIX = re.compile(r"_v\d+$")
_INIT_FUNCTIONS = frozenset({"nvmlInit", "nvmlInit_v2", "nvmlInitWithFlags"})
_RULE_FUNCTIONS = frozenset(
    {"*", *NVML_FUNCTIONS, *(_VERSION_SUFFIX.sub("", f) for f in NVML_FUNCTIONS)}
)
_GPU_UUID = re.compile(rf"^GPU-{checks.UUID_BODY}$")
_MIG_UUID = re.compile(rf"^MIG-{checks.UUID_BODY}$")
_CPU_RANGE = re.compile(r"^(\d+)-(\d+)$")


# --------------------------------------------------------------------------
# Field values
# --------------------------------------------------------------------------


def _field_value(value: Any, path: str) -> tuple[int, Any]:
    """(NVML value type, signal or counter) of one field value."""
    if isinstance(value, Mapping) and "value" in value:
        checks.keys(value, path, ("type", "value"), required=("type", "value"))
        value_type = checks.enum(value["type"], f"{path}.type", FIELD_VALUE_TYPES, "value type")
        inner = value["value"]
        if checks.is_counter(inner):
            checks.counter(inner, f"{path}.value")
        else:
            checks.signal(inner, f"{path}.value", lo=None)
        return value_type, inner
    if checks.is_counter(value):
        checks.counter(value, path)
        return FIELD_VALUE_TYPES["ull"], value
    checks.signal(value, path, lo=None)
    return FIELD_VALUE_TYPES["double"], value


def _is_scope_map(value: Any) -> bool:
    return (
        isinstance(value, Mapping)
        and bool(value)
        and all(isinstance(k, str) and (k == "*" or k.isdigit()) for k in value)
    )


# --------------------------------------------------------------------------
# Device keys
# --------------------------------------------------------------------------


def _check_uuid(value: Any, path: str, pattern: re.Pattern[str], prefix: str) -> None:
    checks.string(value, path, _MAX_UUID)
    if not pattern.match(value):
        raise checks.fail(path, f'expected "{prefix}" followed by a UUID (8-4-4-4-12 hex digits)')


def _check_processes(value: Any, path: str) -> None:
    for i, proc in enumerate(checks.sequence(value, path)):
        where = f"{path}[{i}]"
        checks.keys(
            checks.mapping(proc, where),
            where,
            (
                "pid",
                "used_memory_bytes",
                "sm_percent",
                "memory_percent",
                "encoder_percent",
                "decoder_percent",
                "type",
                "while_alive",
            ),
            required=("pid",),
        )
        checks.boolean(proc.get("while_alive", False), f"{where}.while_alive")
        checks.integer(proc["pid"], f"{where}.pid", lo=1, hi=2**32 - 1)
        checks.integer(proc.get("used_memory_bytes", 0), f"{where}.used_memory_bytes", lo=0)
        for key in ("sm_percent", "memory_percent", "encoder_percent", "decoder_percent"):
            checks.integer(proc.get(key, 0), f"{where}.{key}", lo=0, hi=100)
        checks.enum(proc.get("type", "compute"), f"{where}.type", PROCESS_TYPES, "process type")


def _check_remapped_rows(value: Any, path: str) -> None:
    rows = checks.mapping(value, path)
    checks.keys(rows, path, ("correctable", "uncorrectable", "pending", "failure"))
    checks.integer(rows.get("correctable", 0), f"{path}.correctable")
    checks.integer(rows.get("uncorrectable", 0), f"{path}.uncorrectable")
    checks.boolean(rows.get("pending", False), f"{path}.pending")
    checks.boolean(rows.get("failure", False), f"{path}.failure")


def _check_retired_pages(value: Any, path: str) -> None:
    pages = checks.mapping(value, path)
    checks.keys(pages, path, ("single_bit", "double_bit", "pending"))
    checks.integer(pages.get("single_bit", 0), f"{path}.single_bit", hi=checks.MAX_LIST_ITEMS)
    checks.integer(pages.get("double_bit", 0), f"{path}.double_bit", hi=checks.MAX_LIST_ITEMS)
    checks.boolean(pages.get("pending", False), f"{path}.pending")


def _check_xid_events(value: Any, path: str) -> None:
    for i, event in enumerate(checks.sequence(value, path)):
        where = f"{path}[{i}]"
        checks.keys(checks.mapping(event, where), where, ("at_s", "xid"), required=("at_s", "xid"))
        checks.number(event["at_s"], f"{where}.at_s", lo=0)
        checks.integer(event["xid"], f"{where}.xid", lo=0, hi=2**32 - 1)


def _check_nvlinks(value: Any, path: str) -> None:
    for i, link in enumerate(checks.sequence(value, path, MAX_NVLINKS)):
        where = f"{path}[{i}]"
        checks.keys(
            checks.mapping(link, where),
            where,
            ("state", "version", "remote_pci_bus_id", "remote_device_type"),
            required=("version", "remote_pci_bus_id", "remote_device_type"),
        )
        checks.boolean(link.get("state", True), f"{where}.state")
        checks.integer(link["version"], f"{where}.version", lo=0, hi=255)
        checks.normalize_pci_bus_id(link["remote_pci_bus_id"], f"{where}.remote_pci_bus_id")
        checks.enum(
            link["remote_device_type"],
            f"{where}.remote_device_type",
            NVLINK_REMOTE_TYPES,
            "remote device type",
        )


def check_pcie_link(value: Any, path: str) -> None:
    """A device's `pcie_link`: current and maximum generation and width."""
    link = checks.mapping(value, path)
    required = ("gen_current", "gen_max", "width_current", "width_max")
    checks.keys(link, path, (*required, "gen_gpu_max"), required=required)
    for key in (*required, "gen_gpu_max"):
        if key in link:
            checks.integer(link[key], f"{path}.{key}", lo=0, hi=64)


def _check_pcie_throughput(value: Any, path: str) -> None:
    rates = checks.mapping(value, path)
    checks.keys(rates, path, ("tx", "rx"), required=("tx", "rx"))
    checks.signal(rates["tx"], f"{path}.tx")
    checks.signal(rates["rx"], f"{path}.rx")


def _check_fields(value: Any, path: str) -> None:
    for field_id, entry in checks.mapping(value, path).items():
        where = f"{path}.{field_id}"
        if not field_id.isdigit() or not 0 < int(field_id) < 2**32:
            raise checks.fail(where,
                              "field ids are positive integers (NVML_FI_*), written as strings")
        if _is_scope_map(entry):
            for scope, scoped in entry.items():
                if scope != "*" and int(scope) >= 2**32:
                    raise checks.fail(f"{where}.{scope}", "scope id out of range")
                _field_value(scoped, f"{where}.{scope}")
        else:
            _field_value(entry, where)


def cpu_list(value: Any, path: str) -> list[int]:
    """Expands a cpu_affinity list (ids and "first-last" ranges) to CPU ids."""
    cpus: set[int] = set()
    for i, item in enumerate(checks.sequence(value, path, MAX_CPUS)):
        where = f"{path}[{i}]"
        if isinstance(item, str) and (match := _CPU_RANGE.match(item)):
            first, last = int(match[1]), int(match[2])
            if first > last or last >= MAX_CPUS:
                raise checks.fail(where, f"bad CPU range {item!r} (CPUs are 0..{MAX_CPUS - 1})")
            cpus.update(range(first, last + 1))
        else:
            if isinstance(item, str):
                raise checks.fail(where, f'expected a CPU id or a "first-last" range, got {item!r}')
            cpus.add(checks.integer(item, where, lo=0, hi=MAX_CPUS - 1))
    return sorted(cpus)


def _check_topology(value: Any, path: str) -> None:
    for other, level in checks.mapping(value, path).items():
        if not other.isdigit():
            raise checks.fail(f"{path}.{other}", 'keys are other device indices, like "1"')
        checks.enum(level, f"{path}.{other}", TOPOLOGY_LEVELS, "topology level")


def _p2p_statuses(value: Any, path: str) -> list[int]:
    """The five per-capability statuses of one p2p entry."""
    if isinstance(value, Mapping):
        checks.keys(value, path, P2P_CAPS)
        return [
            checks.enum(value.get(cap, "OK"), f"{path}.{cap}", P2P_STATUSES, "P2P status")
            for cap in P2P_CAPS
        ]
    return [checks.enum(value, path, P2P_STATUSES, "P2P status")] * len(P2P_CAPS)


def _check_p2p(value: Any, path: str) -> None:
    for other, entry in checks.mapping(value, path).items():
        if other != "*" and not other.isdigit():
            raise checks.fail(f"{path}.{other}", 'keys are other device indices or "*"')
        _p2p_statuses(entry, f"{path}.{other}")


def _check_fabric(value: Any, path: str) -> None:
    fabric = checks.mapping(value, path)
    checks.keys(
        fabric,
        path,
        ("cluster_uuid", "clique_id", "state", "status", "health_mask", "health_summary"),
    )
    if "cluster_uuid" in fabric:
        checks.string(fabric["cluster_uuid"], f"{path}.cluster_uuid")
        if not checks.PLAIN_UUID.match(fabric["cluster_uuid"]):
            raise checks.fail(f"{path}.cluster_uuid", "expected a UUID (8-4-4-4-12 hex digits)")
    checks.integer(fabric.get("clique_id", 0), f"{path}.clique_id", hi=2**32 - 1)
    checks.enum(fabric.get("state", "COMPLETED"), f"{path}.state", FABRIC_STATES, "fabric state")
    _error_code(fabric.get("status", 0), f"{path}.status", allow_success=True)
    checks.integer(fabric.get("health_mask", 0), f"{path}.health_mask", hi=2**32 - 1)
    checks.integer(fabric.get("health_summary", 0), f"{path}.health_summary", hi=255)


def _check_architecture(value: Any, path: str) -> None:
    if isinstance(value, int) and not isinstance(value, bool):
        checks.integer(value, path, hi=2**32 - 1)
    else:
        checks.enum(value, path, ARCHITECTURES, "GPU architecture")


_DEVICE_CHECKS: dict[str, Callable[[Any, str], None]] = {
    "vendor": lambda v, p: _amd().check_vendor(v, p, "nvidia"),
    "name": checks.str_check(_MAX_NAME),
    "uuid": lambda v, p: _check_uuid(v, p, _GPU_UUID, "GPU-"),
    "serial": checks.str_check(_MAX_SERIAL),
    "pci_bus_id": checks.normalize_pci_bus_id,
    "pci_device_id": checks.int_check(hi=2**32 - 1),
    "pci_subsystem_id": checks.int_check(hi=2**32 - 1),
    "minor_number": checks.int_check(hi=2**32 - 1),
    "architecture": _check_architecture,
    "memory_total_bytes": checks.int_check(),
    "memory_reserved_bytes": checks.int_check(),
    "memory_used_bytes": checks.signal_check(),
    "utilization_gpu_percent": checks.signal_check(0, 100),
    "utilization_memory_percent": checks.signal_check(0, 100),
    "encoder_percent": checks.signal_check(0, 100),
    "decoder_percent": checks.signal_check(0, 100),
    "power_mw": checks.signal_check(),
    "power_limit_mw": checks.int_check(hi=2**32 - 1),
    "energy_start_mj": checks.int_check(),
    "temperature_c": checks.signal_check(),
    "clock_sm_mhz": checks.signal_check(),
    "clock_memory_mhz": checks.signal_check(),
    "clock_graphics_mhz": checks.signal_check(),
    "clock_video_mhz": checks.signal_check(),
    "max_clock_sm_mhz": checks.int_check(hi=2**32 - 1),
    "max_clock_memory_mhz": checks.int_check(hi=2**32 - 1),
    "max_clock_graphics_mhz": checks.int_check(hi=2**32 - 1),
    "max_clock_video_mhz": checks.int_check(hi=2**32 - 1),
    "clocks_event_reasons": checks.signal_check(0, 2**53, whole=True),
    "performance_state": checks.signal_check(0, 15, whole=True),
    "ecc_mode": checks.boolean,
    "load_from_processes": checks.boolean,
    "ecc_corrected": checks.counter,
    "ecc_uncorrected": checks.counter,
    "remapped_rows": _check_remapped_rows,
    "retired_pages": _check_retired_pages,
    "pcie_replay": checks.counter,
    "processes": _check_processes,
    "xid_events": _check_xid_events,
    "lost_at_s": lambda v, p: checks.number(v, p, lo=0),
    "mig_mode": checks.boolean,
    "mig_max_devices": checks.int_check(lo=1, hi=MAX_MIG_DEVICES),
    "mig_devices": lambda v, p: None,  # checked by _check_device, which knows the limits
    "fields": _check_fields,
    "nvlinks": _check_nvlinks,
    "pcie_link": check_pcie_link,
    "pcie_throughput_kbps": _check_pcie_throughput,
    "numa_node": checks.int_check(lo=0, hi=MAX_CPUS),
    "cpu_affinity": cpu_list,
    "topology": _check_topology,
    "p2p": _check_p2p,
    "fabric": _check_fabric,
}

_MIG_CHECKS: dict[str, Callable[[Any, str], None]] = {
    "name": _DEVICE_CHECKS["name"],
    "uuid": lambda v, p: _check_uuid(v, p, _MIG_UUID, "MIG-"),
    "gpu_instance_id": checks.int_check(hi=2**32 - 2),
    "compute_instance_id": checks.int_check(hi=2**32 - 2),
    "memory_total_bytes": _DEVICE_CHECKS["memory_total_bytes"],
    "memory_reserved_bytes": _DEVICE_CHECKS["memory_reserved_bytes"],
    "memory_used_bytes": _DEVICE_CHECKS["memory_used_bytes"],
    "processes": _check_processes,
}

DEVICE_KEYS = tuple(_DEVICE_CHECKS)
MIG_DEVICE_KEYS = tuple(_MIG_CHECKS)


def _check_mig_devices(device: Mapping[str, Any], path: str) -> None:
    migs = device.get("mig_devices")
    if migs is None:
        return
    limit = device.get("mig_max_devices") or 7
    for i, mig in enumerate(checks.sequence(migs, f"{path}.mig_devices", limit)):
        where = f"{path}.mig_devices[{i}]"
        checks.keys_with(checks.mapping(mig, where), where, _MIG_CHECKS)
        checks.keys(mig, where, MIG_DEVICE_KEYS,
                    required=("gpu_instance_id", "compute_instance_id"))
    if device.get("mig_mode") is None and migs:
        raise checks.fail(f"{path}.mig_devices", "needs mig_mode (true or false) on the device")


def _check_device(device: Mapping[str, Any], path: str, count: int) -> None:
    checks.keys_with(device, path, _DEVICE_CHECKS)
    _check_mig_devices(device, path)
    for key in ("topology", "p2p"):
        for other in device.get(key) or {}:
            if other != "*" and int(other) >= count:
                raise checks.fail(f"{path}.{key}.{other}", f"no device {other} (there are {count})")


# --------------------------------------------------------------------------
# Errors and delays
# --------------------------------------------------------------------------


def _error_code(value: Any, path: str, allow_success: bool = False) -> int:
    if isinstance(value, str):
        name = value.upper().removeprefix("NVML_ERROR_")
        if allow_success and name in ("SUCCESS", "NVML_SUCCESS"):
            return 0
        if name in NVML_ERROR_CODES:
            return NVML_ERROR_CODES[name]
        raise checks.fail(path, f"unknown NVML error {value!r} (e.g. NOT_SUPPORTED, GPU_IS_LOST)")
    return checks.integer(value, path, lo=0 if allow_success else 1, hi=2**31 - 1)


def _amd() -> Any:
    """The AMD scenario module (imported late: it builds on this one)."""
    from . import amd_scenario

    return amd_scenario


def _rule_function(value: Any, path: str) -> str:
    name = checks.string(value, path, 95)
    if _amd().is_amd_function(name):
        return _amd().check_amd_function(name, path)
    if name in _INIT_FUNCTIONS:
        return "nvmlInit"
    if name not in _RULE_FUNCTIONS:
        raise checks.fail(path, f'unknown NVML function {name!r} (not simulated; "*" matches any)')
    return name


def _rule_window(rule: Mapping[str, Any], path: str) -> tuple[float, float | None]:
    start = checks.number(rule.get("from_s", 0), f"{path}.from_s")
    until = rule.get("until_s")
    if until is not None and checks.number(until, f"{path}.until_s") <= start:
        raise checks.fail(f"{path}.until_s", "must be after from_s")
    return start, until


def _rule_device(value: Any, path: str, vendors: Sequence[str], function: str) -> int | None:
    """A rule's device: an index into the scenario's devices, of the function's vendor."""
    if value is None:
        return None
    checks.integer(value, path, lo=0)
    if value >= len(vendors):
        raise checks.fail(path, f"no device {value} (there are {len(vendors)})")
    amd = _amd()
    wanted = amd.AMD if amd.is_amd_function(function) else amd.NVIDIA
    if vendors[value] != wanted:
        raise checks.fail(path, f"device {value} is an {vendors[value]} device;"
                                f" {function} is {wanted}'s")
    return value


def _rule_code(value: Any, path: str, function: str) -> int:
    if _amd().is_amd_function(function):
        return _amd().amd_error_code(value, path)
    return _error_code(value, path)


def _normalize_errors(rules: Any, path: str, vendors: Sequence[str]) -> list[dict[str, Any]]:
    out = []
    for i, rule in enumerate(checks.sequence(rules, path)):
        where = f"{path}[{i}]"
        checks.keys(
            checks.mapping(rule, where),
            where,
            ("function", "device", "code", "from_s", "until_s"),
            required=("function", "code"),
        )
        start, until = _rule_window(rule, where)
        function = _rule_function(rule["function"], f"{where}.function")
        out.append(
            {
                "function": function,
                "device": _rule_device(rule.get("device"), f"{where}.device", vendors, function),
                "code": _rule_code(rule["code"], f"{where}.code", function),
                "from_s": start,
                "until_s": until,
            }
        )
    return out


def _normalize_delays(rules: Any, path: str, vendors: Sequence[str]) -> list[dict[str, Any]]:
    out = []
    for i, rule in enumerate(checks.sequence(rules, path)):
        where = f"{path}[{i}]"
        checks.keys(
            checks.mapping(rule, where),
            where,
            ("function", "device", "seconds", "from_s", "until_s", "busy"),
            required=("function", "seconds"),
        )
        start, until = _rule_window(rule, where)
        function = _rule_function(rule["function"], f"{where}.function")
        out.append(
            {
                "function": function,
                "device": _rule_device(rule.get("device"), f"{where}.device", vendors, function),
                "seconds": checks.number(rule["seconds"], f"{where}.seconds", lo=0, hi=MAX_DELAY_S),
                "from_s": start,
                "until_s": until,
                "busy": checks.boolean(rule.get("busy", False), f"{where}.busy"),
            }
        )
    return out


# --------------------------------------------------------------------------
# Loading and expansion
# --------------------------------------------------------------------------

_TOP_LEVEL_KEYS = (
    "name",
    "description",
    "driver_version",
    "nvml_version",
    "cuda_driver_version",
    "freeze_at_s",
    "device_defaults",
    "devices",
    "errors",
    "delays",
    # AMD devices (exporter/simulate/amd_scenario.py)
    "amd_device_defaults",
    "amdsmi_version",
    "amdsmi_import_error",
    # Other accelerator families: one section each (FAMILY_SECTIONS)
    "tpu",
    "neuron",
    "gaudi",
)

# Scenario sections of other accelerator families -> the module of this package
# that checks and expands one: it defines `normalize_section(value, path) -> dict`
# raising ScenarioError. Its fake (see FAMILY_FAKES in __init__.py) serves it.
FAMILY_SECTIONS = {
    "tpu": "tpu_scenario",
    "neuron": "neuron_scenario",
    "gaudi": "gaudi_scenario",
}


def available_scenarios() -> list[str]:
    """Names of the scenarios shipped with the package."""
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.json"))


def _read_json(path: pathlib.Path) -> Any:
    try:
        with path.open(encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as err:
        raise ScenarioError(f"{path}: invalid JSON: {err}") from err
    except OSError as err:
        raise ScenarioError(f"{path}: cannot read: {err}") from err


def _source_to_dict(source: str | os.PathLike[str] | Mapping[str, Any]) -> tuple[Any, str]:
    if isinstance(source, Mapping):
        return copy.deepcopy(dict(source)), "scenario"
    path = pathlib.Path(source)
    if path.suffix == ".json" or path.is_file() or os.sep in str(source):
        if not path.is_file():
            raise ScenarioError(f"{path}: no such scenario file")
        return _read_json(path), path.stem
    shipped = SCENARIO_DIR / f"{source}.json"
    if not shipped.is_file():
        names = ", ".join(available_scenarios())
        raise ScenarioError(f"unknown scenario {str(source)!r}; shipped scenarios: {names}")
    return _read_json(shipped), str(source)


def _merge_device(defaults: Mapping[str, Any], device: Mapping[str, Any]) -> dict[str, Any]:
    """device over defaults; a null in device removes the default (kept as None)."""
    merged = {**copy.deepcopy(dict(defaults)), **copy.deepcopy(dict(device))}
    for clock in ("clock", "max_clock"):
        graphics, sm = f"{clock}_graphics_mhz", f"{clock}_sm_mhz"
        if graphics not in merged and merged.get(sm) is not None:
            merged[graphics] = copy.deepcopy(merged[sm])
    return merged


def _check_unique(devices: Sequence[Mapping[str, Any]]) -> None:
    seen: dict[str, str] = {}
    for i, device in enumerate(devices):
        ids = [(f"devices[{i}].uuid", device.get("uuid"))]
        ids += [(f"devices[{i}].pci_bus_id", device.get("pci_bus_id"))]
        for j, mig in enumerate(device.get("mig_devices") or ()):
            ids.append((f"devices[{i}].mig_devices[{j}].uuid", mig.get("uuid")))
        for j, partition in enumerate(device.get("partitions") or ()):
            ids.append((f"devices[{i}].partitions[{j}].uuid", partition.get("uuid")))
        for where, value in ids:
            if value is None:
                continue
            if value in seen:
                raise checks.fail(where, f"{value!r} is also used by {seen[value]}")
            seen[value] = where


def load_scenario(source: str | os.PathLike[str] | Mapping[str, Any]) -> dict[str, Any]:
    """Loads, validates and expands a scenario.

    Args:
        source: the name of a shipped scenario ("hgx-h200"), a path to a JSON
            file, or a dict.

    Returns:
        The expanded scenario: ``device_defaults`` merged into every NVIDIA
        device and ``amd_device_defaults`` into every AMD one (keys removed
        with null stay as None), errors/delays normalized.

    Raises:
        ScenarioError: with the path of the first offending key.
    """
    raw, default_name = _source_to_dict(source)
    top = checks.mapping(raw, "scenario")
    checks.keys(top, "scenario", _TOP_LEVEL_KEYS)
    out: dict[str, Any] = {
        "name": checks.string(top.get("name", default_name), "name", 200),
        "description": checks.string(top.get("description", ""), "description", 4000),
    }
    for key in ("driver_version", "nvml_version"):
        if top.get(key) is not None:
            out[key] = checks.string(top[key], key, _MAX_VERSION)
    if top.get("cuda_driver_version") is not None:
        out["cuda_driver_version"] = checks.integer(top["cuda_driver_version"],
                                                    "cuda_driver_version")
    if top.get("freeze_at_s") is not None:
        out["freeze_at_s"] = checks.number(top["freeze_at_s"], "freeze_at_s", lo=0)
    amd = _amd()
    out.update(amd.check_amd_top_level(top))
    defaults = checks.mapping(top.get("device_defaults") or {}, "device_defaults")
    checks.keys_with(defaults, "device_defaults", _DEVICE_CHECKS)
    amd_defaults = checks.mapping(top.get("amd_device_defaults") or {}, "amd_device_defaults")
    checks.keys_with(amd_defaults, "amd_device_defaults", amd.AMD_DEVICE_CHECKS)
    devices_in = checks.sequence(top.get("devices", []), "devices", MAX_DEVICES)
    vendors = [amd.check_vendor(amd.vendor_of(checks.mapping(d, f"devices[{i}]")),
                                f"devices[{i}].vendor")
               for i, d in enumerate(devices_in)]
    devices = []
    for i, device in enumerate(devices_in):
        path = f"devices[{i}]"
        if vendors[i] == amd.AMD:
            merged = {**copy.deepcopy(dict(amd_defaults)), **copy.deepcopy(dict(device))}
            amd.check_amd_device(merged, path)
        else:
            merged = _merge_device(defaults, device)
            # topology and p2p keys are NVML indices: positions among the NVIDIA devices
            _check_device(merged, path, vendors.count(amd.NVIDIA))
        if merged.get("pci_bus_id") is not None:
            merged["pci_bus_id"] = checks.normalize_pci_bus_id(merged["pci_bus_id"],
                                                               f"{path}.pci_bus_id")
        devices.append(merged)
    _check_unique(devices)
    out["devices"] = devices
    out["errors"] = _normalize_errors(top.get("errors") or [], "errors", vendors)
    out["delays"] = _normalize_delays(top.get("delays") or [], "delays", vendors)
    for section, module in FAMILY_SECTIONS.items():
        if top.get(section) is not None:
            checker = importlib.import_module(f".{module}", __package__)
            out[section] = checker.normalize_section(top[section], section)
    return out


# --------------------------------------------------------------------------
# Rendering to the state file
# --------------------------------------------------------------------------


def _num(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    return "inf" if value == math.inf else repr(float(value))


def _signal_text(value: Any) -> str:
    if checks.is_number(value):
        return _num(value)
    frames = value["keyframes"]
    points = " ".join(f"{_num(t)} {_num(v)}" for t, v in frames)
    period = value.get("period_s") or 0
    mode = value.get("interpolate", "linear")
    return f"k {mode} {_num(period)} {len(frames)} {points}"


def _counter_text(value: Any) -> str:
    if isinstance(value, Mapping):
        return f"{_num(value.get('start', 0))} {_signal_text(value['rate_per_s'])}"
    return f"{_num(value)} 0"


# JSON key -> (state key, how to render the value).
_SCALARS: dict[str, tuple[str, Callable[[Any], str]]] = {
    "name": ("name", str),
    "uuid": ("uuid", str),
    "serial": ("serial", str),
    "pci_bus_id": ("pci_bus_id", str),
    "pci_device_id": ("pci_device_id", _num),
    "pci_subsystem_id": ("pci_subsystem_id", _num),
    "minor_number": ("minor_number", _num),
    "architecture": (
        "architecture",
        lambda v: _num(v if isinstance(v, int) else ARCHITECTURES[v.lower()]),
    ),
    "memory_total_bytes": ("memory_total_bytes", _num),
    "memory_reserved_bytes": ("memory_reserved_bytes", _num),
    "memory_used_bytes": ("memory_used_bytes", _signal_text),
    "utilization_gpu_percent": ("utilization_gpu_percent", _signal_text),
    "utilization_memory_percent": ("utilization_memory_percent", _signal_text),
    "encoder_percent": ("encoder_percent", _signal_text),
    "decoder_percent": ("decoder_percent", _signal_text),
    "power_mw": ("power_mw", _signal_text),
    "power_limit_mw": ("power_limit_mw", _num),
    "energy_start_mj": ("energy_start_mj", _num),
    "temperature_c": ("temperature_c", _signal_text),
    "clock_sm_mhz": ("clock_sm_mhz", _signal_text),
    "clock_memory_mhz": ("clock_memory_mhz", _signal_text),
    "clock_graphics_mhz": ("clock_graphics_mhz", _signal_text),
    "clock_video_mhz": ("clock_video_mhz", _signal_text),
    "max_clock_sm_mhz": ("max_clock_sm_mhz", _num),
    "max_clock_memory_mhz": ("max_clock_memory_mhz", _num),
    "max_clock_graphics_mhz": ("max_clock_graphics_mhz", _num),
    "max_clock_video_mhz": ("max_clock_video_mhz", _num),
    "clocks_event_reasons": ("clocks_event_reasons", _signal_text),
    "performance_state": ("performance_state", _signal_text),
    "ecc_mode": ("ecc_mode", lambda v: "1" if v else "0"),
    "load_from_processes": ("load_from_processes", lambda v: "1" if v else "0"),
    "ecc_corrected": ("ecc_corrected", _counter_text),
    "ecc_uncorrected": ("ecc_uncorrected", _counter_text),
    "pcie_replay": ("pcie_replay", _counter_text),
    "lost_at_s": ("lost_at_s", _num),
    "mig_mode": ("mig_mode", lambda v: "1" if v else "0"),
    "mig_max_devices": ("mig_max_devices", _num),
    "gpu_instance_id": ("gpu_instance_id", _num),
    "compute_instance_id": ("compute_instance_id", _num),
    "numa_node": ("numa_node", _num),
}


def _process_lines(processes: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = [f"processes {len(processes)}"]
    for p in processes:
        kind = PROCESS_TYPES[str(p.get("type", "compute")).lower()]
        values = (
            p["pid"],
            kind,
            p.get("used_memory_bytes", 0),
            p.get("sm_percent", 0),
            p.get("memory_percent", 0),
            p.get("encoder_percent", 0),
            p.get("decoder_percent", 0),
        )
        flags = " live" if p.get("while_alive") else ""
        lines.append("process " + " ".join(_num(v) for v in values) + flags)
    return lines


def _field_lines(fields: Mapping[str, Any], link_count: int) -> list[str]:
    entries: dict[tuple[int, int], Any] = {}
    for field_id, entry in fields.items():
        scoped = entry if _is_scope_map(entry) else {"0": entry}
        for scope in range(max(link_count, 1)) if "*" in scoped else ():
            entries[(int(field_id), scope)] = scoped["*"]
        for scope, value in scoped.items():
            if scope != "*":
                entries[(int(field_id), int(scope))] = value
    lines = [f"fields {len(entries)}"]
    for (field_id, scope), value in sorted(entries.items()):
        value_type, inner = _field_value(value, "fields")
        kind, text = (
            ("c", _counter_text(inner)) if checks.is_counter(inner) else ("s", _signal_text(inner))
        )
        body = f"{kind} {text}"
        lines.append(f"field {field_id} {scope} {value_type} {body}")
    return lines


def _fabric_line(fabric: Mapping[str, Any]) -> str:
    uuid_hex = fabric.get("cluster_uuid", "0" * 32).replace("-", "").lower()
    values = (
        checks.enum(fabric.get("state", "COMPLETED"), "fabric.state", FABRIC_STATES,
                    "fabric state"),
        _error_code(fabric.get("status", 0), "fabric.status", allow_success=True),
        fabric.get("clique_id", 0),
        fabric.get("health_mask", 0),
        fabric.get("health_summary", 0),
    )
    return "fabric " + " ".join(str(v) for v in values) + f" {uuid_hex}"


def _composite_lines(d: Mapping[str, Any], index: int) -> list[str]:
    """State lines of the device keys that are not plain scalars."""
    lines: list[str] = []
    if (rows := d.get("remapped_rows")) is not None:
        lines += [
            f"remapped_correctable {rows.get('correctable', 0)}",
            f"remapped_uncorrectable {rows.get('uncorrectable', 0)}",
            f"remapped_pending {int(bool(rows.get('pending', False)))}",
            f"remapped_failure {int(bool(rows.get('failure', False)))}",
        ]
    if (pages := d.get("retired_pages")) is not None:
        lines += [
            f"retired_single_bit {pages.get('single_bit', 0)}",
            f"retired_double_bit {pages.get('double_bit', 0)}",
            f"retired_pending {int(bool(pages.get('pending', False)))}",
        ]
    if (link := d.get("pcie_link")) is not None:
        lines += [
            f"pcie_gen_current {link['gen_current']}",
            f"pcie_gen_max {link['gen_max']}",
            f"pcie_gen_gpu_max {link.get('gen_gpu_max', link['gen_max'])}",
            f"pcie_width_current {link['width_current']}",
            f"pcie_width_max {link['width_max']}",
        ]
    if (rates := d.get("pcie_throughput_kbps")) is not None:
        lines += [
            f"pcie_tx_kbps {_signal_text(rates['tx'])}",
            f"pcie_rx_kbps {_signal_text(rates['rx'])}",
        ]
    if (processes := d.get("processes")) is not None:
        lines += _process_lines(processes)
    if (events := d.get("xid_events")) is not None:
        lines.append(f"xid_events {len(events)}")
        # time order: the library finds the next undelivered event by bisection
        ordered = sorted(events, key=lambda e: e["at_s"])
        lines += [f"xid {_num(e['at_s'])} {e['xid']}" for e in ordered]
    if (links := d.get("nvlinks")) is not None:
        lines.append(f"nvlinks {len(links)}")
        for link in links:
            remote = NVLINK_REMOTE_TYPES[str(link["remote_device_type"]).lower()]
            bus = checks.normalize_pci_bus_id(link["remote_pci_bus_id"], "remote_pci_bus_id")
            lines.append(f"nvlink {int(link.get('state', True))} {link['version']} {remote} {bus}")
    if (fields := d.get("fields")) is not None:
        lines += _field_lines(fields, len(d.get("nvlinks") or ()))
    if (cpus := d.get("cpu_affinity")) is not None:
        lines.append("cpu_affinity " + " ".join(str(c) for c in cpu_list(cpus, "cpu_affinity")))
    for other, level in (d.get("topology") or {}).items():
        if int(other) != index:
            lines.append(f"topology {other} {checks.enum(level, 'topology', TOPOLOGY_LEVELS, '')}")
    for other, entry in (d.get("p2p") or {}).items():
        if other == "*" or int(other) != index:
            statuses = " ".join(str(s) for s in _p2p_statuses(entry, "p2p"))
            lines.append(f"p2p {-1 if other == '*' else int(other)} {statuses}")
    if (fabric := d.get("fabric")) is not None:
        lines.append(_fabric_line(fabric))
    return lines


def _device_lines(d: Mapping[str, Any], index: int) -> list[str]:
    lines = []
    for key, (state_key, render) in _SCALARS.items():
        if d.get(key) is not None:
            lines.append(f"{state_key} {render(d[key])}")
    lines += _composite_lines(d, index)
    return lines


def _nvml_view(scenario: Mapping[str, Any]) -> tuple[list[Any], list[Any], list[Any]]:
    """The NVIDIA devices and the NVML rules, with rule devices renumbered to NVML indices.

    AMD devices and amdsmi rules are left out: the fake NVML library must not
    list them. A node with only other vendors' devices (AMD devices, or a TPU,
    Neuron or Gaudi section) has no NVIDIA driver either.
    """
    amd = _amd()
    nvml_index: dict[int, int] = {}
    devices = []
    for i, device in enumerate(scenario["devices"]):
        if amd.vendor_of(device) != amd.AMD:
            nvml_index[i] = len(devices)
            devices.append(device)

    def rules(kind: str) -> list[dict[str, Any]]:
        return [{**rule, "device": None if rule["device"] is None else nvml_index[rule["device"]]}
                for rule in scenario[kind] if not amd.is_amd_function(rule["function"])]

    errors = rules("errors")
    others = scenario["devices"] or any(section in scenario for section in FAMILY_SECTIONS)
    if others and not devices:
        errors.insert(0, {"function": "nvmlInit", "device": None, "from_s": 0, "until_s": None,
                          "code": NVML_ERROR_CODES["DRIVER_NOT_LOADED"]})
    return devices, errors, rules("delays")


def _rule_line(kind: str, rule: Mapping[str, Any]) -> str:
    device = -1 if rule["device"] is None else rule["device"]
    amount = rule["code"] if kind == "error" else _num(rule["seconds"])
    until = math.inf if rule["until_s"] is None else rule["until_s"]
    busy = " busy" if rule.get("busy") else ""
    return (f"{kind} {rule['function']} {device} {amount} {_num(rule['from_s'])} {_num(until)}"
            f"{busy}")


def render_state(scenario: Mapping[str, Any], epoch: float) -> str:
    """The state file text for an expanded scenario (see `load_scenario`)."""
    lines = [STATE_FORMAT_HEADER, f"# scenario: {scenario['name']}", f"epoch {epoch!r}"]
    if scenario.get("freeze_at_s") is not None:
        lines.append(f"freeze_at_s {_num(scenario['freeze_at_s'])}")
    for key in ("driver_version", "nvml_version", "cuda_driver_version"):
        if scenario.get(key) is not None:
            lines.append(f"{key} {scenario[key]}")
    devices, errors, delays = _nvml_view(scenario)
    lines.append(f"errors {len(errors)}")
    lines += [_rule_line("error", r) for r in errors]
    lines.append(f"delays {len(delays)}")
    lines += [_rule_line("delay", r) for r in delays]
    for i, device in enumerate(devices):
        lines.append(f"device {i}")
        lines += _device_lines(device, i)
        migs = device.get("mig_devices")
        if migs is not None:
            lines.append(f"mig_devices {len(migs)}")
            for j, mig in enumerate(migs):
                lines.append(f"mig {j}")
                lines += _device_lines(mig, -1)
    lines.append("end")
    return "\n".join(lines) + "\n"
