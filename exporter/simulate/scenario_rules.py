"""A scenario's injected faults: `errors` (a call answers an error code) and `delays` (it is slow).

Rules name an NVML function (checked against what the fake library exports) or an
amdsmi one (amd_scenario.py), optionally one device and a time window; the
normalized rules carry device indices into the scenario's devices.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from . import amd_scenario, checks
from .nvml_vocabulary import MAX_DELAY_S, NVML_FUNCTIONS, error_code

_VERSION_SUFFIX = re.compile(r"_v\d+$")
_INIT_FUNCTIONS = frozenset({"nvmlInit", "nvmlInit_v2", "nvmlInitWithFlags"})
_RULE_FUNCTIONS = frozenset(
    {"*", *NVML_FUNCTIONS, *(_VERSION_SUFFIX.sub("", f) for f in NVML_FUNCTIONS)}
)


def _rule_function(value: Any, path: str) -> str:
    name = checks.string(value, path, 95)
    if amd_scenario.is_amd_function(name):
        return amd_scenario.check_amd_function(name, path)
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
    wanted = amd_scenario.AMD if amd_scenario.is_amd_function(function) else amd_scenario.NVIDIA
    if vendors[value] != wanted:
        raise checks.fail(path, f"device {value} is an {vendors[value]} device;"
                                f" {function} is {wanted}'s")
    return value


def _rule_code(value: Any, path: str, function: str) -> int:
    if amd_scenario.is_amd_function(function):
        return amd_scenario.amd_error_code(value, path)
    return error_code(value, path)


def _normalize(rules: Any, path: str, vendors: Sequence[str], keys: tuple[str, ...],
               own: Callable[[Mapping[str, Any], str, str], dict[str, Any]]
               ) -> list[dict[str, Any]]:
    """Rules with `function`, `device`, a window and the `keys` that `own` checks."""
    out = []
    for i, rule in enumerate(checks.sequence(rules, path)):
        where = f"{path}[{i}]"
        checks.keys(checks.mapping(rule, where), where,
                    ("function", "device", *keys, "from_s", "until_s"),
                    required=("function", keys[0]))
        start, until = _rule_window(rule, where)
        function = _rule_function(rule["function"], f"{where}.function")
        out.append({
            "function": function,
            "device": _rule_device(rule.get("device"), f"{where}.device", vendors, function),
            **own(rule, where, function),
            "from_s": start,
            "until_s": until,
        })
    return out


def normalize_errors(rules: Any, path: str, vendors: Sequence[str]) -> list[dict[str, Any]]:
    """The `errors` rules: a call answers `code` (an NVML or amdsmi error) in the window."""
    return _normalize(rules, path, vendors, ("code",), lambda rule, where, function: {
        "code": _rule_code(rule["code"], f"{where}.code", function)})


def normalize_delays(rules: Any, path: str, vendors: Sequence[str]) -> list[dict[str, Any]]:
    """The `delays` rules: a call takes `seconds` (on the CPU when `busy`) in the window."""
    return _normalize(rules, path, vendors, ("seconds", "busy"), lambda rule, where, _: {
        "seconds": checks.number(rule["seconds"], f"{where}.seconds", lo=0, hi=MAX_DELAY_S),
        "busy": checks.boolean(rule.get("busy", False), f"{where}.busy")})
