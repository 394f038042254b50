"""The NVIDIA part of a scenario: the keys of one simulated GPU or MIG device, checked.

`DEVICE_CHECKS` and `MIG_CHECKS` map every key docs/simulation.md lists for an
NVIDIA device (and a MIG device of it) to the function that checks its value;
`check_device` checks a whole device once ``device_defaults`` are merged in
(`merge_device`).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from typing import Any

from . import amd_scenario, checks, nvml_gpm
from .nvml_fabric import check_fabric
from .nvml_vocabulary import (
    ARCHITECTURES,
    BRANDS,
    COMPUTE_MODES,
    DRIVER_MODELS,
    FIELD_VALUE_TYPES,
    MAX_CPUS,
    MAX_MIG_DEVICES,
    MAX_NAME,
    MAX_NVLINKS,
    MAX_PART_NUMBER,
    MAX_SERIAL,
    MAX_UUID,
    MAX_VBIOS_VERSION,
    NVLINK_REMOTE_TYPES,
    P2P_CAPS,
    P2P_STATUSES,
    PROCESS_TYPES,
    TOPOLOGY_LEVELS,
)

_GPU_UUID = re.compile(rf"^GPU-{checks.UUID_BODY}$")
_MIG_UUID = re.compile(rf"^MIG-{checks.UUID_BODY}$")
_CPU_RANGE = re.compile(r"^(\d+)-(\d+)$")


# --------------------------------------------------------------------------
# Field values
# --------------------------------------------------------------------------


def field_value(value: Any, path: str) -> tuple[int, Any]:
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


def is_scope_map(value: Any) -> bool:
    """True for a field entry given per scope (link): {"0": ..., "*": ...}."""
    return (
        isinstance(value, Mapping)
        and bool(value)
        and all(isinstance(k, str) and (k == "*" or k.isdigit()) for k in value)
    )


# --------------------------------------------------------------------------
# Device keys
# --------------------------------------------------------------------------


def _check_uuid(value: Any, path: str, pattern: re.Pattern[str], prefix: str) -> None:
    checks.string(value, path, MAX_UUID)
    if not pattern.match(value):
        raise checks.fail(path, f'expected "{prefix}" followed by a UUID (8-4-4-4-12 hex digits)')


def _check_processes(value: Any, path: str, max_percent: int = 100) -> None:
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
                "sm_activity_percent",
                "from_s",
                "until_s",
            ),
            required=("pid",),
        )
        checks.process_window(proc, where)
        if proc.get("sm_activity_percent") is not None:
            checks.number(proc["sm_activity_percent"], f"{where}.sm_activity_percent", lo=0,
                          hi=100)
        checks.boolean(proc.get("while_alive", False), f"{where}.while_alive")
        checks.integer(proc["pid"], f"{where}.pid", lo=1, hi=2**32 - 1)
        checks.integer(proc.get("used_memory_bytes", 0), f"{where}.used_memory_bytes", lo=0)
        for key in ("sm_percent", "memory_percent", "encoder_percent", "decoder_percent"):
            checks.integer(proc.get(key, 0), f"{where}.{key}", lo=0, hi=max_percent)
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
        if is_scope_map(entry):
            for scope, scoped in entry.items():
                if scope != "*" and int(scope) >= 2**32:
                    raise checks.fail(f"{where}.{scope}", "scope id out of range")
                field_value(scoped, f"{where}.{scope}")
        else:
            field_value(entry, where)


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


def p2p_statuses(value: Any, path: str) -> list[int]:
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
        p2p_statuses(entry, f"{path}.{other}")


def _check_compute_capability(value: Any, path: str) -> None:
    """`[major, minor]`, as nvmlDeviceGetCudaComputeCapability answers it."""
    pair = checks.sequence(value, path, 2)
    if len(pair) != 2:
        raise checks.fail(path, "expected [major, minor], e.g. [9, 0]")
    checks.integer(pair[0], f"{path}[0]", lo=1, hi=99)
    checks.integer(pair[1], f"{path}[1]", lo=0, hi=9)


def _check_conf_compute_memory(value: Any, path: str) -> None:
    sizes = checks.mapping(value, path)
    checks.keys(sizes, path, ("protected", "unprotected"), required=("protected", "unprotected"))
    checks.integer(sizes["protected"], f"{path}.protected")
    checks.integer(sizes["unprotected"], f"{path}.unprotected")


def _check_architecture(value: Any, path: str) -> None:
    if isinstance(value, int) and not isinstance(value, bool):
        checks.integer(value, path, hi=2**32 - 1)
    else:
        checks.enum(value, path, ARCHITECTURES, "GPU architecture")


DEVICE_CHECKS: dict[str, Callable[[Any, str], None]] = {
    "vendor": lambda v, p: amd_scenario.check_vendor(v, p, "nvidia"),
    "name": checks.str_check(MAX_NAME),
    "uuid": lambda v, p: _check_uuid(v, p, _GPU_UUID, "GPU-"),
    "serial": checks.str_check(MAX_SERIAL),
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
    "raw_values": checks.boolean,
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
    "pcie_link": checks.pcie_link,
    "pcie_throughput_kbps": _check_pcie_throughput,
    "numa_node": checks.int_check(lo=0, hi=MAX_CPUS),
    "cpu_affinity": cpu_list,
    "topology": _check_topology,
    "p2p": _check_p2p,
    "fabric": check_fabric,
    "gpm_supported": checks.boolean,
    "gpm": nvml_gpm.check_gpm,
    # Board facts other monitoring tools read (absent: the call answers NOT_SUPPORTED)
    "board_part_number": checks.str_check(MAX_PART_NUMBER),
    "vbios_version": checks.str_check(MAX_VBIOS_VERSION),
    "bar1_total_bytes": checks.int_check(),
    "bar1_used_bytes": checks.signal_check(),
    "fan_count": checks.int_check(hi=64),
    "fan_speed_percent": checks.signal_check(0, 100),
    "persistence_mode": checks.boolean,
    "compute_mode": lambda v, p: checks.enum(v, p, COMPUTE_MODES, "compute mode"),
    "display_mode": checks.boolean,
    "display_active": checks.boolean,
    "driver_model": lambda v, p: checks.enum(v, p, DRIVER_MODELS, "driver model"),
    "cuda_compute_capability": _check_compute_capability,
    "brand": lambda v, p: checks.enum(v, p, BRANDS, "brand"),
    "conf_compute_memory_kib": _check_conf_compute_memory,
    "power_limit_min_mw": checks.int_check(hi=2**32 - 1),
    "power_limit_max_mw": checks.int_check(hi=2**32 - 1),
    "power_limit_default_mw": checks.int_check(hi=2**32 - 1),
    "gpu_cores": checks.int_check(hi=2**32 - 1),
    "memory_bus_width_bits": checks.int_check(hi=2**32 - 1),
}

MIG_CHECKS: dict[str, Callable[[Any, str], None]] = {
    "name": DEVICE_CHECKS["name"],
    "uuid": lambda v, p: _check_uuid(v, p, _MIG_UUID, "MIG-"),
    "gpu_instance_id": checks.int_check(hi=2**32 - 2),
    "compute_instance_id": checks.int_check(hi=2**32 - 2),
    "memory_total_bytes": DEVICE_CHECKS["memory_total_bytes"],
    "memory_reserved_bytes": DEVICE_CHECKS["memory_reserved_bytes"],
    "memory_used_bytes": DEVICE_CHECKS["memory_used_bytes"],
    "processes": _check_processes,
    "gpm": nvml_gpm.check_gpm,
    "bar1_total_bytes": DEVICE_CHECKS["bar1_total_bytes"],
    "bar1_used_bytes": DEVICE_CHECKS["bar1_used_bytes"],
}

DEVICE_KEYS = tuple(DEVICE_CHECKS)

# With "raw_values": true these signals may take any finite value, and the simulated
# library answers them as given: percentages above 100, negative power wrapped
# through uint32, memory used above total (docs/simulation.md, "Raw values"); its
# processes' engine percentages may exceed 100.
RAW_SIGNAL_KEYS = (
    "memory_used_bytes", "utilization_gpu_percent", "utilization_memory_percent",
    "encoder_percent", "decoder_percent", "power_mw", "temperature_c",
    "clock_sm_mhz", "clock_memory_mhz", "clock_graphics_mhz", "clock_video_mhz",
)
RAW_DEVICE_CHECKS: dict[str, Callable[[Any, str], None]] = {
    **DEVICE_CHECKS, **{key: checks.signal_check(lo=None) for key in RAW_SIGNAL_KEYS},
    "processes": lambda v, p: _check_processes(v, p, max_percent=2**32 - 1),
}
MIG_DEVICE_KEYS = tuple(MIG_CHECKS)


def _check_mig_devices(device: Mapping[str, Any], path: str) -> None:
    migs = device.get("mig_devices")
    if migs is None:
        return
    limit = device.get("mig_max_devices") or 7
    for i, mig in enumerate(checks.sequence(migs, f"{path}.mig_devices", limit)):
        where = f"{path}.mig_devices[{i}]"
        checks.keys_with(checks.mapping(mig, where), where, MIG_CHECKS)
        checks.keys(mig, where, MIG_DEVICE_KEYS,
                    required=("gpu_instance_id", "compute_instance_id"))
    if device.get("mig_mode") is None and migs:
        raise checks.fail(f"{path}.mig_devices", "needs mig_mode (true or false) on the device")


def check_device(device: Mapping[str, Any], path: str, count: int) -> None:
    checks.keys_with(device, path, RAW_DEVICE_CHECKS if device.get("raw_values") else DEVICE_CHECKS)
    _check_mig_devices(device, path)
    for key in ("topology", "p2p"):
        for other in device.get(key) or {}:
            if other != "*" and int(other) >= count:
                raise checks.fail(f"{path}.{key}.{other}", f"no device {other} (there are {count})")


# --------------------------------------------------------------------------
# Errors and delays
# --------------------------------------------------------------------------


def merge_device(defaults: Mapping[str, Any], device: Mapping[str, Any]) -> dict[str, Any]:
    """device over defaults; a null in device removes the default (kept as None)."""
    merged = {**copy.deepcopy(dict(defaults)), **copy.deepcopy(dict(device))}
    for clock in ("clock", "max_clock"):
        graphics, sm = f"{clock}_graphics_mhz", f"{clock}_sm_mhz"
        if graphics not in merged and merged.get(sm) is not None:
            merged[graphics] = copy.deepcopy(merged[sm])
    return merged
