"""Scenario parameters: one scenario file that describes several machines, picked by name.

A scenario may declare integer parameters and use them in its strings; the
source names the values after a `?`, as in a URL query (`gb200-nvl72?tray=3`):

    "parameters": {"tray": {"default": 1, "min": 1, "max": 18,
                            "description": "the compute tray this machine is"}},
    "devices": [{"uuid": "GPU-6b2c91f0-1d4e-4a7b-9c3e-${tray:012x}"}],
    "variants": [{"when": {"tray": [7]}, "device_defaults": {"fabric": {...}}}]

`${name}` and `${name:FORMAT}` (a Python format spec for an integer) in any
string are replaced by the value; a variant whose `when` matches every one of
its parameters is merged into the scenario: the keys of an object replace the
scenario's one by one (`device_defaults: {fabric: ...}` replaces the fabric
only), anything else is replaced. The resolved scenario has neither key left, so it loads like any
other; its name carries the values given (`gb200-nvl72?tray=3`).
"""

from __future__ import annotations

import copy
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

from . import checks

PARAMETERS, VARIANTS = "parameters", "variants"
_PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([^}]*))?\}")
_SPEC_KEYS = ("default", "min", "max", "description")
_MAX_VALUE = 2**31 - 1


def split_source(source: str) -> tuple[str, dict[str, str]]:
    """("name or path", {parameter: text}) of a source such as `gb200-nvl72?tray=3`."""
    name, mark, query = source.partition("?")
    if not mark:
        return source, {}
    try:
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        raise checks.ScenarioError(
            f"{source!r}: parameters are written name=value&name=value after '?'") from None
    given: dict[str, str] = {}
    for key, value in pairs:
        if key in given:
            raise checks.ScenarioError(f"{source!r}: parameter {key!r} is given twice")
        given[key] = value
    return name, given


def _specs(raw: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    specs = checks.mapping(raw.get(PARAMETERS) or {}, PARAMETERS)
    out = {}
    for name, spec in specs.items():
        path = f"{PARAMETERS}.{name}"
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise checks.fail(path, "a parameter name is letters, digits and _")
        checks.mapping(spec, path)
        checks.keys(spec, path, _SPEC_KEYS, required=("default",))
        low = checks.integer(spec.get("min", 0), f"{path}.min", lo=None, hi=_MAX_VALUE)
        high = checks.integer(spec.get("max", _MAX_VALUE), f"{path}.max", lo=low, hi=_MAX_VALUE)
        default = checks.integer(spec["default"], f"{path}.default", lo=low, hi=high)
        checks.string(spec.get("description", ""), f"{path}.description", 1000)
        out[name] = {"default": default, "min": low, "max": high}
    return out


def _values(specs: Mapping[str, dict[str, Any]], given: Mapping[str, str],
            source: str) -> dict[str, int]:
    unknown = sorted(set(given) - set(specs))
    if unknown:
        known = ", ".join(specs) or "none"
        raise checks.ScenarioError(
            f"{source}: unknown parameter(s) {', '.join(unknown)} (this scenario's: {known})")
    values = {}
    for name, spec in specs.items():
        text = given.get(name)
        if text is None:
            values[name] = spec["default"]
            continue
        if not re.fullmatch(r"-?\d{1,10}", text) or not spec["min"] <= int(text) <= spec["max"]:
            raise checks.ScenarioError(f"{source}: parameter {name} must be a whole number from "
                                       f"{spec['min']} to {spec['max']}, got {text!r}")
        values[name] = int(text)
    return values


def _merge(scenario: Mapping[str, Any], variant: Mapping[str, Any]) -> dict[str, Any]:
    """A variant's keys over the scenario's: an object's keys replace the scenario's one by one
    (`device_defaults: {fabric: ...}` replaces the fabric only), anything else replaces all."""
    merged = dict(scenario)
    for key, value in variant.items():
        base = scenario.get(key)
        if isinstance(base, Mapping) and isinstance(value, Mapping):
            merged[key] = {**base, **copy.deepcopy(dict(value))}
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _matches(when: Mapping[str, Any], values: Mapping[str, int], path: str) -> bool:
    for name, wanted in when.items():
        if name not in values:
            raise checks.fail(f"{path}.{name}", "not a parameter of this scenario")
        options = wanted if isinstance(wanted, list) else [wanted]
        for i, option in enumerate(options):
            checks.integer(option, f"{path}.{name}[{i}]", lo=None)
        if values[name] not in options:
            return False
    return True


def _substitute(value: Any, values: Mapping[str, int], path: str) -> Any:
    if isinstance(value, str):
        def replace(match: re.Match[str]) -> str:
            name, spec = match.group(1), match.group(2) or ""
            if name not in values:
                raise checks.fail(path, f"${{{name}}} is not a parameter of this scenario")
            try:
                return format(values[name], spec)
            except ValueError as error:
                raise checks.fail(path, f"bad format {spec!r} for {name}: {error}") from None
        return _PLACEHOLDER.sub(replace, value)
    if isinstance(value, Mapping):
        return {k: _substitute(v, values, f"{path}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, values, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


def resolve(raw: Any, given: Mapping[str, str], name: str) -> tuple[Any, str]:
    """The scenario with its parameters applied, and its name with the values given.

    A scenario without `parameters` is returned as it is (given values are refused).
    """
    if not isinstance(raw, Mapping) or (PARAMETERS not in raw and VARIANTS not in raw):
        if given:
            raise checks.ScenarioError(f"{name}: this scenario takes no parameters")
        return raw, name
    values = _values(_specs(raw), given, name)
    resolved = {k: v for k, v in raw.items() if k not in (PARAMETERS, VARIANTS)}
    for i, variant in enumerate(checks.sequence(raw.get(VARIANTS) or [], VARIANTS)):
        path = f"{VARIANTS}[{i}]"
        variant = checks.mapping(variant, path)
        when = checks.mapping(variant.get("when"), f"{path}.when")
        if _matches(when, values, f"{path}.when"):
            resolved = _merge(resolved, {k: v for k, v in variant.items() if k != "when"})
    if given:
        query = urllib.parse.urlencode(sorted(given.items()))
        resolved["name"] = f"{resolved.get('name', name)}?{query}"
        name = f"{name}?{query}"
    return _substitute(resolved, values, "scenario"), name
