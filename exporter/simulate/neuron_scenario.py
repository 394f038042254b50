"""The ``neuron`` section of a scenario: AWS Neuron devices as ``neuron-monitor`` reports them.

The simulated ``neuron-monitor`` (``fake_neuron/monitor.py``) reads this section
from the saved scenario on every report; docs/simulation.md lists every key.
Values use neuron-monitor's units: percent, bytes, seconds. Counters (ECC
events, executions) are cumulative here; the fake reports what they grew by
during each report's period, as neuron-monitor does.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from . import checks
from .checks import ScenarioError

__all__ = ["ECC_FIELDS", "ERROR_TYPES", "MEMORY_CATEGORIES", "METRIC_GROUPS",
           "RUNTIME_GROUPS", "SYSTEM_GROUPS", "ScenarioError", "ecc_counters",
           "normalize_section"]

# neuron-monitor's metric groups (its config file's "type" values)
RUNTIME_GROUPS = ("neuroncore_counters", "memory_used", "neuron_runtime_vcpu_usage",
                  "execution_stats")
SYSTEM_GROUPS = ("neuron_hw_counters", "vcpu_usage", "memory_info")
METRIC_GROUPS = (*RUNTIME_GROUPS, *SYSTEM_GROUPS)
# neuron_hw_counters fields of one device
ECC_FIELDS = ("mem_ecc_corrected", "mem_ecc_uncorrected", "sram_ecc_corrected",
              "sram_ecc_uncorrected")
# execution_stats.error_summary keys
ERROR_TYPES = ("generic", "numerical", "transient", "model", "runtime", "hardware")
# memory_used ... neuroncore_memory_usage.<core> keys
MEMORY_CATEGORIES = ("constants", "model_code", "model_shared_scratchpad", "runtime_memory",
                     "tensors")
MAX_DEVICES = 64  # MAX_NEURON_DEVICE_COUNT of the newest Neuron driver
MAX_CORES_PER_DEVICE = 8

_INSTANCE_KEYS = ("instance_name", "instance_id", "instance_type", "instance_availability_zone",
                  "instance_availability_zone_id", "instance_region", "ami_id", "subnet_id")
_DEFAULTS: dict[str, Any] = {
    "neuron_device_type": "trainium",
    "neuron_device_version": "v2",
    "neuroncore_version": "v2",
    "neuron_device_count": 16,
    "neuroncore_per_device_count": 2,
    "neuron_device_memory_size": 32 * 2**30,
    "hardware_error": "",
    "instance": {},
    "ecc": {},
    "runtimes": [],
    "faults": {},
}


def _percent(value: Any, path: str) -> None:
    checks.signal(value, path, 0, 100)


def _per_core_percent(value: Any, path: str) -> None:
    """A signal 0-100 for every core of the runtime, or a list of one per core."""
    if isinstance(value, list):
        for i, item in enumerate(value):
            _percent(item, f"{path}[{i}]")
    else:
        _percent(value, path)


def _check_instance(value: Any, path: str) -> None:
    instance = checks.mapping(value, path)
    checks.keys(instance, path, _INSTANCE_KEYS)
    for key, text in instance.items():
        checks.string(text, f"{path}.{key}", 255)


def _check_ecc(value: Any, path: str) -> None:
    for scope, counters in checks.mapping(value, path).items():
        where = f"{path}.{scope}"
        if scope != "*" and not (isinstance(scope, str) and scope.isdigit()):
            raise checks.fail(where,
                              'expected a device index ("0", "1", ...) or "*" for every device')
        checks.keys(checks.mapping(counters, where), where, ECC_FIELDS)
        for key, counter in counters.items():
            checks.counter(counter, f"{where}.{key}")


def _check_runtime(runtime: Any, path: str, cores: int) -> None:
    runtime_checks: dict[str, Callable[[Any, str], None]] = {
        "pid": lambda v, p: checks.integer(v, p, lo=1, hi=2**32 - 1),
        "tag": lambda v, p: checks.string(v, p, 255),
        "cores": lambda v, p: [checks.integer(c, f"{p}[{i}]", hi=cores - 1)
                               for i, c in enumerate(checks.sequence(v, p, cores))],
        "utilization_percent": _per_core_percent,
        "flops": checks.signal,
        "core_memory_bytes": lambda v, p: _check_memory(v, p),
        "host_memory_bytes": checks.signal,
        "vcpu_user_percent": _percent,
        "vcpu_system_percent": _percent,
        "executions_per_s": checks.signal,
        "errors_per_s": _check_errors,
        "latency_s": checks.signal,
        "error": lambda v, p: checks.string(v, p, 1024),
        "while_alive": checks.boolean,
        "from_s": lambda v, p: checks.number(v, p, lo=0),
        "until_s": lambda v, p: checks.number(v, p, lo=0),
    }
    item = checks.mapping(runtime, path)
    checks.keys(item, path, tuple(runtime_checks), required=("pid", "cores"))
    for key, value in item.items():
        runtime_checks[key](value, f"{path}.{key}")
    if item.get("until_s") is not None and item["until_s"] <= item.get("from_s", 0):
        raise checks.fail(f"{path}.until_s", "must be after from_s")
    per_core = item.get("utilization_percent")
    if isinstance(per_core, list) and len(per_core) != len(item["cores"]):
        raise checks.fail(f"{path}.utilization_percent",
                          f"{len(per_core)} values for {len(item['cores'])} cores")


def _check_memory(value: Any, path: str) -> None:
    memory = checks.mapping(value, path)
    checks.keys(memory, path, MEMORY_CATEGORIES)
    for key, signal in memory.items():
        checks.signal(signal, f"{path}.{key}")


def _check_errors(value: Any, path: str) -> None:
    errors = checks.mapping(value, path)
    checks.keys(errors, path, ERROR_TYPES)
    for key, signal in errors.items():
        checks.signal(signal, f"{path}.{key}")


def _check_faults(value: Any, path: str) -> None:
    faults = checks.mapping(value, path)
    checks.keys(faults, path, ("missing_groups", "group_errors", "exit_after_reports", "silent",
                               "malformed_lines"))
    missing = checks.sequence(faults.get("missing_groups", []), f"{path}.missing_groups")
    for i, group in enumerate(missing):
        if group not in METRIC_GROUPS:
            raise checks.fail(f"{path}.missing_groups[{i}]",
                              f"unknown metric group {group!r} (one of {', '.join(METRIC_GROUPS)})")
    errors = checks.mapping(faults.get("group_errors", {}), f"{path}.group_errors")
    for group, message in errors.items():
        if group not in METRIC_GROUPS:
            raise checks.fail(f"{path}.group_errors.{group}", f"unknown metric group {group!r}")
        checks.string(message, f"{path}.group_errors.{group}", 1024)
    if faults.get("exit_after_reports") is not None:
        checks.integer(faults["exit_after_reports"], f"{path}.exit_after_reports", lo=0)
    for key in ("silent", "malformed_lines"):
        checks.boolean(faults.get(key, False), f"{path}.{key}")


def normalize_section(value: Any, path: str) -> dict[str, Any]:
    """The scenario's ``neuron`` section, checked, with defaults filled in.

    Raises:
        ScenarioError: naming the offending key (e.g. ``neuron.runtimes[0].cores[1]``).
    """
    section = checks.mapping(value, path)
    checks.keys(section, path, tuple(_DEFAULTS))
    out = {**copy.deepcopy(_DEFAULTS), **copy.deepcopy(dict(section))}
    for key in ("neuron_device_type", "neuron_device_version", "neuroncore_version"):
        checks.string(out[key], f"{path}.{key}", 63)
    checks.string(out["hardware_error"], f"{path}.hardware_error", 1024)
    devices = checks.integer(out["neuron_device_count"], f"{path}.neuron_device_count",
                             hi=MAX_DEVICES)
    per_device = checks.integer(out["neuroncore_per_device_count"],
                                f"{path}.neuroncore_per_device_count",
                                lo=1, hi=MAX_CORES_PER_DEVICE)
    checks.integer(out["neuron_device_memory_size"], f"{path}.neuron_device_memory_size")
    _check_instance(out["instance"], f"{path}.instance")
    _check_ecc(out["ecc"], f"{path}.ecc")
    for scope in out["ecc"]:
        if scope != "*" and int(scope) >= devices:
            raise checks.fail(f"{path}.ecc.{scope}", f"no device {scope} (there are {devices})")
    cores = devices * per_device
    pids: set[int] = set()
    for i, runtime in enumerate(checks.sequence(out["runtimes"], f"{path}.runtimes")):
        where = f"{path}.runtimes[{i}]"
        if cores == 0:
            raise checks.fail(where, "a runtime needs NeuronCores (neuron_device_count is 0)")
        _check_runtime(runtime, where, cores)
        if runtime["pid"] in pids:
            raise checks.fail(f"{where}.pid", f"pid {runtime['pid']} is listed twice")
        pids.add(runtime["pid"])
    _check_faults(out["faults"], f"{path}.faults")
    return out


def ecc_counters(section: Mapping[str, Any], device: int) -> dict[str, Any]:
    """The ECC counters of one device: its own entry over the ``"*"`` one."""
    ecc = section.get("ecc") or {}
    return {**(ecc.get("*") or {}), **(ecc.get(str(device)) or {})}
