"""The ``tpu`` section of a scenario: one TPU host of a slice, served by `tpu_fake`.

Chips hold what libtpu's runtime metric service reports, in its units (bytes,
percent); latencies are distributions of microseconds. Values are signals and
counters like the NVIDIA ones, so they move over time. docs/simulation.md
lists every key.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from . import checks
from .checks import ScenarioError
from .nvml_vocabulary import MAX_DELAY_S

MAX_CHIPS = 64
DEVICE_FILES = ("vfio", "accel")
# gRPC status codes a rule may answer with (names of grpc.StatusCode)
STATUSES = ("NOT_FOUND", "UNIMPLEMENTED", "INVALID_ARGUMENT", "INTERNAL", "UNAVAILABLE",
            "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED", "UNKNOWN")
# latency key -> libtpu distribution it stands for (see backends/tpu/proto.py)
LATENCY_KEYS = ("collective_e2e", "dcn_outbound", "dcn_inbound", "host_to_device",
                "device_to_host")
WILDCARD = "*"

_CHIP_CHECKS: dict[str, Callable[[Any, str], None]] = {
    "pci_bus_id": checks.normalize_pci_bus_id,
    "numa_node": checks.int_check(hi=1024),
    "hbm_total_bytes": checks.int_check(hi=2**50),
    "hbm_used_bytes": checks.signal_check(),
    "duty_cycle_percent": checks.signal_check(0, 100),
    "hbm_bandwidth_percent": checks.signal_check(0, 100),
    "tensorcore_utilization_percent": checks.signal_check(0, 100),
    # from then on the chip's device file is gone (a lost chip), before it is back
    "lost_at_s": lambda v, p: checks.number(v, p, lo=0),
}
CHIP_KEYS = tuple(_CHIP_CHECKS)


def _check_latency(value: Any, path: str) -> None:
    latency = checks.mapping(value, path)
    checks.keys(latency, path, ("count", "latency_us"), required=("count", "latency_us"))
    checks.counter(latency["count"], f"{path}.count")
    checks.signal_check(1, 1e12)(latency["latency_us"], f"{path}.latency_us")


def _window(rule: Mapping[str, Any], path: str) -> tuple[float, float | None]:
    """A rule's `from_s` (default 0) and `until_s` (default None: for good)."""
    start = checks.number(rule.get("from_s", 0), f"{path}.from_s", lo=0)
    until = rule.get("until_s")
    if until is not None and checks.number(until, f"{path}.until_s", lo=0) <= start:
        raise checks.fail(f"{path}.until_s", "must be after from_s")
    return start, until


def _rule(value: Any, path: str) -> dict[str, Any]:
    rule = checks.mapping(value, path)
    checks.keys(rule, path, ("metric", "status", "from_s", "until_s"),
                required=("metric", "status"))
    checks.string(rule["metric"], f"{path}.metric", 200)
    if rule["status"] not in STATUSES:
        raise checks.fail(f"{path}.status", f"expected one of {', '.join(STATUSES)}, "
                                            f"got {rule['status']!r}")
    start, until = _window(rule, path)
    return {"metric": rule["metric"], "status": rule["status"], "from_s": start,
            "until_s": until}


def _delay(value: Any, path: str) -> dict[str, Any]:
    """A `delays` rule: the runtime answers the metric `seconds` late (a libtpu that hangs:
    past the caller's deadline)."""
    rule = checks.mapping(value, path)
    checks.keys(rule, path, ("metric", "seconds", "from_s", "until_s"),
                required=("metric", "seconds"))
    checks.string(rule["metric"], f"{path}.metric", 200)
    seconds = checks.number(rule["seconds"], f"{path}.seconds", lo=0, hi=MAX_DELAY_S)
    start, until = _window(rule, path)
    return {"metric": rule["metric"], "seconds": seconds, "from_s": start, "until_s": until}


def _chips(section: Mapping[str, Any], path: str) -> list[dict[str, Any]]:
    defaults = checks.mapping(section.get("chip_defaults") or {}, f"{path}.chip_defaults")
    checks.keys_with(defaults, f"{path}.chip_defaults", _CHIP_CHECKS)
    chips_in = checks.sequence(section.get("chips", []), f"{path}.chips", MAX_CHIPS)
    if not chips_in:
        raise checks.fail(f"{path}.chips", "needs at least one chip")
    chips, seen = [], {}
    for i, chip in enumerate(chips_in):
        where = f"{path}.chips[{i}]"
        merged = {**copy.deepcopy(dict(defaults)),
                  **copy.deepcopy(dict(checks.mapping(chip, where)))}
        checks.keys_with(merged, where, _CHIP_CHECKS)
        checks.keys(merged, where, CHIP_KEYS, required=("pci_bus_id", "hbm_total_bytes"))
        merged["pci_bus_id"] = checks.normalize_pci_bus_id(merged["pci_bus_id"],
                                                           f"{where}.pci_bus_id")
        if merged["pci_bus_id"] in seen:
            raise checks.fail(f"{where}.pci_bus_id", f"also used by {seen[merged['pci_bus_id']]}")
        seen[merged["pci_bus_id"]] = where
        chips.append(merged)
    return chips


_TOP_KEYS = ("accelerator_type", "slice_name", "worker_id", "topology", "device_files",
             "pci_device_id", "runtime_service", "device_plugin", "device_plugin_model",
             "accelerator_id", "unsupported_metrics", "errors", "delays", "chip_defaults",
             "chips", "latencies")


def normalize_section(value: Any, path: str) -> dict[str, Any]:
    """Checks and expands a scenario's ``tpu`` section.

    Raises:
        ScenarioError: naming the offending key (e.g. ``tpu.chips[3].duty_cycle_percent``).
    """
    section = checks.mapping(value, path)
    checks.keys(section, path, _TOP_KEYS, required=("chips",))
    out: dict[str, Any] = {
        "accelerator_type": checks.string(section.get("accelerator_type", "v5litepod-8"),
                                          f"{path}.accelerator_type", 64),
        "slice_name": checks.string(section.get("slice_name", ""), f"{path}.slice_name", 128),
        "worker_id": checks.integer(section.get("worker_id", 0), f"{path}.worker_id", hi=4096),
        "topology": checks.string(section.get("topology", ""), f"{path}.topology", 32),
        "pci_device_id": checks.string(section.get("pci_device_id", "0x0063"),
                                       f"{path}.pci_device_id", 6),
        "runtime_service": checks.boolean(section.get("runtime_service", True),
                                          f"{path}.runtime_service"),
        "device_plugin": checks.boolean(section.get("device_plugin", False),
                                        f"{path}.device_plugin"),
        "device_plugin_model": checks.string(
            section.get("device_plugin_model", "tpu-v5-lite-podslice"),
            f"{path}.device_plugin_model", 64),
        "accelerator_id": checks.string(section.get("accelerator_id", "4804690994094478883"),
                                        f"{path}.accelerator_id", 64),
    }
    files = section.get("device_files", "vfio")
    if files not in DEVICE_FILES:
        raise checks.fail(f"{path}.device_files", f'expected "vfio" or "accel", got {files!r}')
    out["device_files"] = files
    device_id = out["pci_device_id"]
    if not (device_id.startswith("0x") and len(device_id) == 6
            and all(c in "0123456789abcdef" for c in device_id[2:])):
        raise checks.fail(f"{path}.pci_device_id", f'expected "0x" and 4 lowercase hex digits, '
                                                   f"got {device_id!r}")
    unsupported = checks.sequence(section.get("unsupported_metrics", []),
                                  f"{path}.unsupported_metrics")
    out["unsupported_metrics"] = [checks.string(name, f"{path}.unsupported_metrics[{i}]", 200)
                                  for i, name in enumerate(unsupported)]
    rules = checks.sequence(section.get("errors", []), f"{path}.errors")
    out["errors"] = [_rule(rule, f"{path}.errors[{i}]") for i, rule in enumerate(rules)]
    delays = checks.sequence(section.get("delays", []), f"{path}.delays")
    out["delays"] = [_delay(rule, f"{path}.delays[{i}]") for i, rule in enumerate(delays)]
    out["chips"] = _chips(section, path)
    latencies = checks.mapping(section.get("latencies") or {}, f"{path}.latencies")
    checks.keys(latencies, f"{path}.latencies", LATENCY_KEYS)
    for key, latency in latencies.items():
        _check_latency(latency, f"{path}.latencies.{key}")
    out["latencies"] = copy.deepcopy(dict(latencies))
    return out


__all__ = ["CHIP_KEYS", "LATENCY_KEYS", "STATUSES", "ScenarioError", "normalize_section"]
