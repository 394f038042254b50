"""The Gaudi part of a scenario: the ``"gaudi"`` section, served by the fake ``pyhlml``.

A Gaudi device holds what pyhlml returns, in its units (bytes of HBM, mW,
mJ, MHz, percent); docs/simulation.md lists every key. Values may be signals
and counters (see scenario.py), so they move over time like the NVIDIA ones.
The fake NVML library never sees this section.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..backends.gaudi.status import HLML_RETURN
from . import checks
from .checks import ScenarioError
from .nvml_vocabulary import MAX_DELAY_S

MAX_DEVICES = 64
MAX_PORTS = 128  # two 64-bit port masks (HLML_DEFINES.PORTS_ARR_SIZE)
WILDCARD = "hlml*"
IMPORT_ERRORS = ("ImportError",)
# hlmlInit failures a scenario can ask for: UNINITIALIZED is what pyhlml raises
# when /usr/lib/habanalabs/libhlml.so cannot be loaded.
INIT_ERRORS = ("UNINITIALIZED", "DRIVER_NOT_LOADED", "UNKNOWN")
CLOCKS = ("soc", "ic", "mme", "tpc")  # HLML_CLOCK_TYPE members, lower case
TEMPERATURES = ("aip", "board", "hbm", "vrm")  # HLML_TEMPERATURE_ON_AIP, _ON_BOARD, _HBM, _VRM
THROTTLE_REASONS = ("power", "thermal")  # HLML_CLOCKS_THROTTLE_REASON_POWER / _THERMAL

# Every pyhlml function the fake simulates (tests check the fake against it).
PYHLML_FUNCTIONS: tuple[str, ...] = (
    "hlmlInit",
    "hlmlInitWithFlags",
    "hlmlShutdown",
    "hlmlGetDriverVersion",
    "hlmlGetHLMLVersion",
    "hlmlGetNicDriverVersion",
    "hlmlDeviceGetCount",
    "hlmlDeviceGetHandleByIndex",
    "hlmlDeviceGetHandleByUUID",
    "hlmlDeviceGetHandleByPCIBusID",
    "hlmlDeviceGetName",
    "hlmlDeviceGetUUID",
    "hlmlDeviceGetSerial",
    "hlmlDeviceGetPCIInfo",
    "hlmlDeviceGetModuleID",
    "hlmlDeviceGetBoardID",
    "hlmlDeviceGetMinorNumber",
    "hlmlDeviceGetHLRevision",
    "hlmlDeviceGetUtilizationRates",
    "hlmlDeviceGetMemoryInfo",
    "hlmlDeviceGetPowerUsage",
    "hlmlDeviceGetPowerManagementLimit",
    "hlmlDeviceGetPowerManagementDefaultLimit",
    "hlmlDeviceGetTotalEnergyConsumption",
    "hlmlDeviceGetTemperature",
    "hlmlDeviceGetClockInfo",
    "hlmlDeviceGetMaxClockInfo",
    "hlmlDeviceGetCurrentClocksThrottleReasons",
    "hlmlDeviceGetPerformanceState",
    "hlmlDeviceGetTotalECCErrors",
    "hlmlDeviceGetPCIEThroughput",
    "hlmlDeviceGetPCIEReplayCounter",
    "hlmlDeviceGetCurrPCIELinkGeneration",
    "hlmlDeviceGetCurrPCIELinkWidth",
    "hlmlDeviceGetReplacedRowsCount",
    "hlmlDeviceGetReplacedRowsPendingStatus",
    "hlmlDeviceGetMacAddrInfo",
    "hlmlDeviceNicGetLink",
    "hlmlDeviceNicGetStatistics",
)

_SECTION_KEYS = ("driver_version", "hlml_version", "nic_driver_version", "import_error",
                 "init_error", "device_defaults", "devices", "errors", "delays",
                 "unsupported", "workloads")
_WORKLOAD_KEYS = ("pid", "modules", "utilization_percent", "memory_bytes", "while_alive")


def _check_nic(value: Any, path: str) -> None:
    nic = checks.mapping(value, path)
    checks.keys(nic, path, ("ports", "external", "down", "tx_bytes", "rx_bytes",
                            "stats_latency_s"))
    checks.number(nic.get("stats_latency_s", 0), f"{path}.stats_latency_s", lo=0, hi=1)
    ports = checks.integer(nic.get("ports", 0), f"{path}.ports", hi=MAX_PORTS)
    for key in ("external", "down"):
        for i, port in enumerate(checks.sequence(nic.get(key, []), f"{path}.{key}", MAX_PORTS)):
            checks.integer(port, f"{path}.{key}[{i}]", hi=max(ports - 1, 0))
            if port >= ports:
                raise checks.fail(f"{path}.{key}[{i}]", f"no port {port} (the device has {ports})")
    for key in ("tx_bytes", "rx_bytes"):
        checks.counter(nic.get(key, 0), f"{path}.{key}")


def _check_pcie_link(value: Any, path: str) -> None:
    link = checks.mapping(value, path)
    checks.keys(link, path, ("gen", "width"))
    checks.integer(link.get("gen", 0), f"{path}.gen", hi=6)
    checks.integer(link.get("width", 0), f"{path}.width", hi=32)


def _check_named_signals(names: Sequence[str], lo: float = 0, hi: float | None = None
                         ) -> Callable[[Any, str], None]:
    signal = checks.signal_check(lo, hi)

    def check(value: Any, path: str) -> None:
        values = checks.mapping(value, path)
        checks.keys(values, path, names)
        for key, item in values.items():
            signal(item, f"{path}.{key}")

    return check


def _check_named_ints(names: Sequence[str], hi: int) -> Callable[[Any, str], None]:
    def check(value: Any, path: str) -> None:
        values = checks.mapping(value, path)
        checks.keys(values, path, names)
        for key, item in values.items():
            checks.integer(item, f"{path}.{key}", hi=hi)

    return check


DEVICE_CHECKS: dict[str, Callable[[Any, str], None]] = {
    "name": checks.str_check(31),  # HL_FIELD_MAX_SIZE - 1
    "uuid": checks.str_check(127),  # VERSION_MAX_LEN - 1
    "serial": checks.str_check(31),
    "pci_bus_id": checks.normalize_pci_bus_id,
    "pci_device_id": checks.int_check(hi=0xFFFF),
    "module_id": checks.int_check(hi=2**32 - 1),
    "board_id": checks.int_check(hi=2**32 - 1),
    "minor_number": checks.int_check(hi=2**32 - 1),
    "hl_revision": checks.int_check(hi=2**31 - 1),
    "utilization_percent": checks.signal_check(0, 100),
    "memory_utilization_percent": checks.signal_check(0, 100),
    "memory_total_bytes": checks.int_check(hi=2**64 - 1),
    "memory_used_bytes": checks.signal_check(),
    "power_mw": checks.signal_check(0, 2**32 - 1),
    "power_limit_mw": checks.int_check(hi=2**32 - 1),
    "power_default_limit_mw": checks.int_check(hi=2**32 - 1),
    "energy_mj": checks.counter,
    "temperatures_c": _check_named_signals(TEMPERATURES),
    "clocks_mhz": _check_named_signals(CLOCKS, hi=2**32 - 1),
    "max_clocks_mhz": _check_named_ints(CLOCKS, hi=2**32 - 1),
    "throttle": _check_named_signals(THROTTLE_REASONS, hi=1),
    "performance_state": checks.int_check(hi=15),
    "ecc_corrected": checks.counter,
    "ecc_uncorrected": checks.counter,
    "pcie_link": _check_pcie_link,
    "pcie_tx_bytes_per_s": checks.signal_check(0, 2**32 - 1),
    "pcie_rx_bytes_per_s": checks.signal_check(0, 2**32 - 1),
    "pcie_replay": checks.counter,
    "replaced_rows_sbe": checks.int_check(hi=2**32 - 1),
    "replaced_rows_dbe": checks.int_check(hi=2**32 - 1),
    "replaced_rows_pending": checks.boolean,
    "nic": _check_nic,
    "lost_at_s": lambda v, p: checks.number(v, p, lo=0),
}
DEVICE_KEYS = tuple(DEVICE_CHECKS)


def error_code(value: Any, path: str) -> int:
    """An HLML return code given by name (``NOT_SUPPORTED`` or ``HLML_ERROR_...``) or number."""
    if isinstance(value, str):
        name = value.upper().removeprefix("HLML_ERROR_")
        if name in HLML_RETURN:
            return HLML_RETURN[name]
        raise checks.fail(path, f"unknown HLML error {value!r} (e.g. NOT_SUPPORTED, AIP_IS_LOST)")
    return checks.integer(value, path, lo=1, hi=2**31 - 1)


def _function(value: Any, path: str) -> str:
    name = checks.string(value, path, 100)
    if name != WILDCARD and name not in PYHLML_FUNCTIONS:
        raise checks.fail(path, f'unknown pyhlml function {name!r} (not simulated; "{WILDCARD}" '
                          "matches any)")
    return name


def _normalize_rules(rules: Any, path: str, count: int, keys: tuple[str, ...],
                     own: Callable[[Mapping[str, Any], str], dict[str, Any]]
                     ) -> list[dict[str, Any]]:
    """Rules naming a pyhlml function, optionally a card and a time window, and the
    `keys` that `own` checks (the first of them required)."""
    out = []
    for i, rule in enumerate(checks.sequence(rules, path)):
        where = f"{path}[{i}]"
        checks.keys(checks.mapping(rule, where), where,
                    ("function", "device", *keys, "from_s", "until_s"),
                    required=("function", keys[0]))
        device = rule.get("device")
        if device is not None:
            checks.integer(device, f"{where}.device")
            if device >= count:
                raise checks.fail(f"{where}.device",
                                  f"no Gaudi device {device} (there are {count})")
        start = checks.number(rule.get("from_s", 0), f"{where}.from_s", lo=0)
        until = rule.get("until_s")
        if until is not None and checks.number(until, f"{where}.until_s", lo=0) <= start:
            raise checks.fail(f"{where}.until_s", "must be after from_s")
        out.append({"function": _function(rule["function"], f"{where}.function"),
                    "device": device, **own(rule, where), "from_s": start, "until_s": until})
    return out


def _normalize_errors(rules: Any, path: str, count: int) -> list[dict[str, Any]]:
    """`errors`: a call raises HLMLError(`code`) in the window."""
    return _normalize_rules(rules, path, count, ("code",), lambda rule, where: {
        "code": error_code(rule["code"], f"{where}.code")})


def _normalize_delays(rules: Any, path: str, count: int) -> list[dict[str, Any]]:
    """`delays`: a call takes `seconds` (spent on the CPU when `busy`) in the window, then
    answers as it would have."""
    return _normalize_rules(rules, path, count, ("seconds", "busy"), lambda rule, where: {
        "seconds": checks.number(rule["seconds"], f"{where}.seconds", lo=0, hi=MAX_DELAY_S),
        "busy": checks.boolean(rule.get("busy", False), f"{where}.busy")})


def _normalize_workloads(value: Any, path: str, modules: Sequence[int]) -> list[dict[str, Any]]:
    """Processes using cards (HLML cannot see them): they add load to their modules' cards."""
    out = []
    for i, workload in enumerate(checks.sequence(value, path)):
        where = f"{path}[{i}]"
        checks.keys(checks.mapping(workload, where), where, _WORKLOAD_KEYS,
                    required=("pid", "modules"))
        used = checks.sequence(workload["modules"], f"{where}.modules", MAX_DEVICES)
        for j, module in enumerate(used):
            checks.integer(module, f"{where}.modules[{j}]", hi=2**32 - 1)
            if module not in modules:
                raise checks.fail(f"{where}.modules[{j}]", f"no card has module id {module}")
        out.append({
            "pid": checks.integer(workload["pid"], f"{where}.pid", lo=1, hi=2**31 - 1),
            "modules": list(used),
            "utilization_percent": checks.number(workload.get("utilization_percent", 0),
                                                 f"{where}.utilization_percent", lo=0, hi=100),
            "memory_bytes": checks.integer(workload.get("memory_bytes", 0),
                                           f"{where}.memory_bytes", hi=2**64 - 1),
            "while_alive": checks.boolean(workload.get("while_alive", False),
                                          f"{where}.while_alive"),
        })
    return out


def _check_unique(devices: Sequence[Mapping[str, Any]], path: str) -> None:
    for key in ("uuid", "pci_bus_id", "module_id"):
        seen: dict[Any, int] = {}
        for i, device in enumerate(devices):
            value = device.get(key)
            if value in seen:
                raise checks.fail(f"{path}.devices[{i}].{key}",
                                  f"{value!r} is also used by devices[{seen[value]}]")
            seen[value] = i


def _choice(value: Any, path: str, allowed: Sequence[str]) -> str:
    if value not in allowed:
        raise checks.fail(path, f"expected one of {', '.join(allowed)}, got {value!r}")
    return value


def normalize_section(value: Any, path: str) -> dict[str, Any]:
    """Checks and expands the ``gaudi`` section; raises ScenarioError naming the offending key.

    The result has ``device_defaults`` merged into every device, ``unsupported``
    folded into ``errors`` (NOT_SUPPORTED on every device), and every key present.
    """
    section = checks.mapping(value, path)
    checks.keys(section, path, _SECTION_KEYS)
    out: dict[str, Any] = {}
    for key, default in (("driver_version", "1.21.3-57"), ("hlml_version", "1.21.3"),
                         ("nic_driver_version", "1.21.3-57")):
        out[key] = checks.string(section.get(key, default), f"{path}.{key}", 127)
    out["import_error"] = (None if section.get("import_error") is None else
                           _choice(section["import_error"], f"{path}.import_error", IMPORT_ERRORS))
    out["init_error"] = (None if section.get("init_error") is None else
                         _choice(section["init_error"], f"{path}.init_error", INIT_ERRORS))
    defaults = checks.mapping(section.get("device_defaults") or {}, f"{path}.device_defaults")
    checks.keys_with(defaults, f"{path}.device_defaults", DEVICE_CHECKS)
    devices = []
    listed = checks.sequence(section.get("devices", []), f"{path}.devices", MAX_DEVICES)
    for i, device in enumerate(listed):
        where = f"{path}.devices[{i}]"
        merged = {**copy.deepcopy(dict(defaults)),
                  **copy.deepcopy(dict(checks.mapping(device, where)))}
        checks.keys_with(merged, where, DEVICE_CHECKS)
        checks.keys(merged, where, DEVICE_KEYS, required=("uuid", "pci_bus_id", "module_id"))
        merged["pci_bus_id"] = checks.normalize_pci_bus_id(merged["pci_bus_id"],
                                                           f"{where}.pci_bus_id")
        devices.append(merged)
    _check_unique(devices, path)
    out["devices"] = devices
    errors = _normalize_errors(section.get("errors") or [], f"{path}.errors", len(devices))
    unsupported = checks.sequence(section.get("unsupported") or [], f"{path}.unsupported")
    for i, name in enumerate(unsupported):
        errors.append({"function": _function(name, f"{path}.unsupported[{i}]"), "device": None,
                       "code": HLML_RETURN["NOT_SUPPORTED"], "from_s": 0.0, "until_s": None})
    out["errors"] = errors
    out["delays"] = _normalize_delays(section.get("delays") or [], f"{path}.delays",
                                      len(devices))
    out["workloads"] = _normalize_workloads(section.get("workloads") or [], f"{path}.workloads",
                                            [d["module_id"] for d in devices])
    return out


__all__ = [
    "DEVICE_KEYS",
    "HLML_RETURN",
    "PYHLML_FUNCTIONS",
    "ScenarioError",
    "error_code",
    "normalize_section",
]
