"""The PromQL inside generated boards: every panel and variable query, and how to run one.

Grafana fills in template variables before it sends a query; `expand` does the
same with given values, so that each query can be run against a Prometheus
directly (the integration tests do).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

# Grafana's built-in interval variables, with values that suit a short scrape interval.
BUILTINS: dict[str, str] = {"__rate_interval": "30s", "__range": "5m", "__interval": "15s"}
_VARIABLE = re.compile(r"\$(\w+)|\$\{(\w+)(?::\w+)?\}")
_LABEL_VALUES = re.compile(r"label_values\((.*),\s*(\w+)\)\s*$", re.S)


@dataclass(frozen=True)
class PanelQuery:
    """One query of one panel of a board."""

    board: str  # uid
    panel: str  # title
    ref_id: str
    expr: str
    instant: bool


@dataclass(frozen=True)
class VariableQuery:
    """A board variable filled from `label_values(SELECTOR, LABEL)`."""

    board: str
    name: str
    selector: str
    label: str


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels") or [])


def panel_queries(board: Mapping[str, Any]) -> list[PanelQuery]:
    """Every target of every panel (rows' collapsed panels included)."""
    return [PanelQuery(board["uid"], panel["title"], target["refId"], target["expr"],
                       bool(target.get("instant")))
            for panel in _panels(board.get("panels") or [])
            for target in panel.get("targets") or []]


def variable_queries(board: Mapping[str, Any]) -> list[VariableQuery]:
    """The board's `label_values` variables."""
    found = []
    for variable in board.get("templating", {}).get("list", []):
        query = variable.get("definition") or ""
        if match := _LABEL_VALUES.match(query):
            found.append(VariableQuery(board["uid"], variable["name"], match.group(1),
                                       match.group(2)))
    return found


def expand(expr: str, values: Mapping[str, str]) -> str:
    """`expr` with `$name` / `${name}` replaced from `values`, then Grafana's built-ins.

    Raises KeyError naming a variable that has no value.
    """

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name in values:
            return values[name]
        if name in BUILTINS:
            return BUILTINS[name]
        raise KeyError(f"no value for ${name} in {expr!r}")

    return _VARIABLE.sub(value, expr)
