"""Expands the small subset of Prometheus's Go templates that rule annotations may use.

Rules write annotations with `{{ $labels.NAME }}`, `{{ or $labels.A $labels.B }}` (the
first label that is not empty), `{{ $value | humanizePercentage }}` and
`{{ $value | printf "FORMAT" }}` only, so the promtool tests can state exactly what
each annotation reads; anything else is refused here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_BLOCK = re.compile(r"\{\{\s*(.*?)\s*\}\}")
_LABEL = re.compile(r"\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)")
_FIRST_LABEL = re.compile(r"or((?:\s+\$labels\.[a-zA-Z_][a-zA-Z0-9_]*){2,})")
_PRINTF = re.compile(r'\$value\s*\|\s*printf\s+"([^"]*)"')
_PERCENT = re.compile(r"\$value\s*\|\s*humanizePercentage")


def expand(template: str, labels: Mapping[str, str], value: float | None) -> str:
    """The text Prometheus makes of `template` for an alert with these labels and value."""

    def block(match: re.Match[str]) -> str:
        inner = match.group(1)
        if label := _LABEL.fullmatch(inner):
            return labels.get(label.group(1), "")
        if first := _FIRST_LABEL.fullmatch(inner):
            return _first_label(first.group(1), labels)
        if value is None and "$value" in inner:
            raise ValueError(f"{template!r} prints $value; give the case a value")
        if printf := _PRINTF.fullmatch(inner):
            return printf.group(1) % value
        if _PERCENT.fullmatch(inner):
            return f"{value * 100:.4g}%"
        raise ValueError(f"unsupported template action {{{{ {inner} }}}} in {template!r}")

    return _BLOCK.sub(block, template)


def check(template: str) -> None:
    """Raises ValueError if `template` uses anything `expand` cannot predict."""
    expand(template, {}, 0.0)


def _first_label(names: str, labels: Mapping[str, str]) -> str:
    """Go's `or` over `$labels.A $labels.B ...`: the first non-empty value, else the last."""
    values = [labels.get(name, "") for name in _LABEL.findall(names)]
    return next((v for v in values if v), values[-1])
