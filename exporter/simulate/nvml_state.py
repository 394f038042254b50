"""Writes an expanded scenario as the state file the simulated NVML library reads.

The state file's format is documented at the top of fake_nvml/fake_nvml.c; only
the NVIDIA devices and NVML rules of a scenario go into it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from . import amd_scenario, checks
from .nvml_devices import cpu_list, field_value, is_scope_map, p2p_statuses
from .nvml_fabric import fabric_line
from .nvml_gpm import gpm_lines
from .nvml_vocabulary import (
    ARCHITECTURES,
    BRANDS,
    COMPUTE_CAPABILITIES,
    COMPUTE_MODES,
    DRIVER_MODELS,
    NVLINK_REMOTE_TYPES,
    NVML_ERROR_CODES,
    PROCESS_TYPES,
    TOPOLOGY_LEVELS,
)
from .scenario import FAMILY_SECTIONS

STATE_FORMAT_HEADER = "fakenvml 1"


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


def _flag(value: Any) -> str:
    return "1" if value else "0"


def _enum(value: Any, names: Mapping[str, int]) -> str:
    return _num(value if isinstance(value, int) else names[value.upper()])


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
    "ecc_mode": ("ecc_mode", _flag),
    "load_from_processes": ("load_from_processes", _flag),
    "raw_values": ("raw_values", _flag),
    "ecc_corrected": ("ecc_corrected", _counter_text),
    "ecc_uncorrected": ("ecc_uncorrected", _counter_text),
    "pcie_replay": ("pcie_replay", _counter_text),
    "lost_at_s": ("lost_at_s", _num),
    "mig_mode": ("mig_mode", _flag),
    "mig_max_devices": ("mig_max_devices", _num),
    "gpu_instance_id": ("gpu_instance_id", _num),
    "compute_instance_id": ("compute_instance_id", _num),
    "numa_node": ("numa_node", _num),
    "board_part_number": ("board_part_number", str),
    "vbios_version": ("vbios_version", str),
    "bar1_total_bytes": ("bar1_total_bytes", _num),
    "bar1_used_bytes": ("bar1_used_bytes", _signal_text),
    "fan_count": ("fan_count", _num),
    "fan_speed_percent": ("fan_speed_percent", _signal_text),
    "persistence_mode": ("persistence_mode", _flag),
    "compute_mode": ("compute_mode", lambda v: _enum(v, COMPUTE_MODES)),
    "display_mode": ("display_mode", _flag),
    "display_active": ("display_active", _flag),
    "driver_model": ("driver_model", lambda v: _enum(v, DRIVER_MODELS)),
    "brand": ("brand", lambda v: _enum(v, BRANDS)),
    "power_limit_min_mw": ("power_limit_min_mw", _num),
    "power_limit_max_mw": ("power_limit_max_mw", _num),
    "gpu_cores": ("gpu_cores", _num),
    "memory_bus_width_bits": ("memory_bus_width_bits", _num),
}


def _board_fact_lines(d: Mapping[str, Any]) -> list[str]:
    """Board facts with two values, or whose default follows from other keys."""
    lines = []
    capability = d.get("cuda_compute_capability")
    architecture = d.get("architecture")
    if capability is None and isinstance(architecture, str):
        capability = COMPUTE_CAPABILITIES.get(architecture.lower())
    if capability is not None:
        lines += [f"cuda_cc_major {capability[0]}", f"cuda_cc_minor {capability[1]}"]
    default_limit = d.get("power_limit_default_mw", d.get("power_limit_mw"))
    if default_limit is not None:
        lines.append(f"power_limit_default_mw {_num(default_limit)}")
    if (sizes := d.get("conf_compute_memory_kib")) is not None:
        lines += [f"conf_compute_protected_kib {sizes['protected']}",
                  f"conf_compute_unprotected_kib {sizes['unprotected']}"]
    return lines


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
        if p.get("sm_activity_percent") is not None:
            flags += f" sm_activity {_num(p['sm_activity_percent'])}"
        if p.get("from_s") is not None or p.get("until_s") is not None:
            until = math.inf if p.get("until_s") is None else p["until_s"]
            flags += f" window {_num(p.get('from_s') or 0)} {_num(until)}"
        lines.append("process " + " ".join(_num(v) for v in values) + flags)
    return lines


def _field_lines(fields: Mapping[str, Any], link_count: int) -> list[str]:
    entries: dict[tuple[int, int], Any] = {}
    for field_id, entry in fields.items():
        scoped = entry if is_scope_map(entry) else {"0": entry}
        for scope in range(max(link_count, 1)) if "*" in scoped else ():
            entries[(int(field_id), scope)] = scoped["*"]
        for scope, value in scoped.items():
            if scope != "*":
                entries[(int(field_id), int(scope))] = value
    lines = [f"fields {len(entries)}"]
    for (field_id, scope), value in sorted(entries.items()):
        value_type, inner = field_value(value, "fields")
        kind, text = (
            ("c", _counter_text(inner)) if checks.is_counter(inner) else ("s", _signal_text(inner))
        )
        body = f"{kind} {text}"
        lines.append(f"field {field_id} {scope} {value_type} {body}")
    return lines


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
            statuses = " ".join(str(s) for s in p2p_statuses(entry, "p2p"))
            lines.append(f"p2p {-1 if other == '*' else int(other)} {statuses}")
    if (fabric := d.get("fabric")) is not None:
        lines.append(fabric_line(fabric))
    return lines


def _device_lines(d: Mapping[str, Any], index: int) -> list[str]:
    lines = []
    for key, (state_key, render) in _SCALARS.items():
        if d.get(key) is not None:
            lines.append(f"{state_key} {render(d[key])}")
    lines += _composite_lines(d, index)
    lines += gpm_lines(d, _signal_text)
    if index >= 0:  # a physical GPU (MIG devices have only their BAR1 scalars)
        lines += _board_fact_lines(d)
    return lines


def _nvml_view(scenario: Mapping[str, Any]) -> tuple[list[Any], list[Any], list[Any]]:
    """The NVIDIA devices and the NVML rules, with rule devices renumbered to NVML indices.

    AMD devices and amdsmi rules are left out: the fake NVML library must not
    list them. A node with only other vendors' devices (AMD devices, or a TPU,
    Neuron or Gaudi section) has no NVIDIA driver either.
    """
    amd = amd_scenario
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
