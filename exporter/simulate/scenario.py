"""Scenario files for the simulated hardware: find, load, validate and expand.

A scenario is JSON (or an equivalent dict) describing accelerators and how their
values move over time; docs/simulation.md documents every key. `load_scenario`
checks it and returns the expanded form (``device_defaults`` merged into each
device). The checks live with what they check: NVIDIA devices in nvml_devices.py,
AMD devices in amd_scenario.py, fault rules in scenario_rules.py, the other
families' sections in their own modules (`FAMILY_SECTIONS`); nvml_state.py
writes the expanded scenario for the simulated NVML library.
"""

from __future__ import annotations

import copy
import importlib
import json
import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

from . import amd_scenario, checks, scenario_parameters
from .checks import ScenarioError
from .nvml_devices import DEVICE_CHECKS, check_device, merge_device
from .nvml_vocabulary import MAX_DEVICES, MAX_VERSION
from .scenario_rules import normalize_delays, normalize_errors

__all__ = ["FAMILY_SECTIONS", "SCENARIO_DIR", "ScenarioError", "available_scenarios",
           "load_scenario"]

SCENARIO_DIR = pathlib.Path(__file__).resolve().parent / "scenarios"

_TOP_LEVEL_KEYS = (
    "name",
    "description",
    "driver_version",
    "nvml_version",
    "cuda_driver_version",
    "freeze_at_s",
    "recorded_until_s",
    "device_defaults",
    "devices",
    "errors",
    "delays",
    # AMD devices (exporter/simulate/amd_scenario.py)
    "amd_device_defaults",
    "amdsmi_version",
    "amdsmi_import_error",
    "amdsmi_interface",
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
    except UnicodeDecodeError as err:
        raise ScenarioError(f"{path}: not UTF-8 text: {err}") from err
    except RecursionError:
        raise ScenarioError(f"{path}: invalid JSON: nested too deeply") from None
    except OSError as err:
        raise ScenarioError(f"{path}: cannot read: {err}") from err


def _source_to_dict(source: str | os.PathLike[str] | Mapping[str, Any]) -> tuple[Any, str]:
    """The raw scenario and its default name, with its parameters resolved."""
    given: dict[str, str] = {}
    if isinstance(source, str) and "?" in source and not pathlib.Path(source).is_file():
        source, given = scenario_parameters.split_source(source)
    raw, name = _read_source(source)
    return scenario_parameters.resolve(raw, given, name)


def _read_source(source: str | os.PathLike[str] | Mapping[str, Any]) -> tuple[Any, str]:
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
            out[key] = checks.string(top[key], key, MAX_VERSION)
    if top.get("cuda_driver_version") is not None:
        out["cuda_driver_version"] = checks.integer(top["cuda_driver_version"],
                                                    "cuda_driver_version")
    for key in ("freeze_at_s", "recorded_until_s"):
        if top.get(key) is not None:
            out[key] = checks.number(top[key], key, lo=0)
    amd = amd_scenario
    out.update(amd.check_amd_top_level(top))
    defaults = checks.mapping(top.get("device_defaults") or {}, "device_defaults")
    checks.keys_with(defaults, "device_defaults", DEVICE_CHECKS)
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
            merged = merge_device(defaults, device)
            # topology and p2p keys are NVML indices: positions among the NVIDIA devices
            check_device(merged, path, vendors.count(amd.NVIDIA))
        if merged.get("pci_bus_id") is not None:
            merged["pci_bus_id"] = checks.normalize_pci_bus_id(merged["pci_bus_id"],
                                                               f"{path}.pci_bus_id")
        devices.append(merged)
    _check_unique(devices)
    out["devices"] = devices
    out["errors"] = normalize_errors(top.get("errors") or [], "errors", vendors)
    out["delays"] = normalize_delays(top.get("delays") or [], "delays", vendors)
    for section, module in FAMILY_SECTIONS.items():
        if top.get(section) is not None:
            checker = importlib.import_module(f".{module}", __package__)
            out[section] = checker.normalize_section(top[section], section)
    return out


# --------------------------------------------------------------------------
# Rendering to the state file
# --------------------------------------------------------------------------
