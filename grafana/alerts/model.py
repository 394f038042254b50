"""What an alert rule is: its query, its words, its runbook, and the cases that test it.

A rule carries its own promtool cases: series on which it must fire, and near
misses (just under the threshold, or not for long enough) on which it must
stay quiet. `unit_tests.py` turns them into a promtool test file.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ..promql import matchers, metric


class Severity(enum.Enum):
    """How urgently someone should look: the `severity` label."""

    CRITICAL = "critical"  # a device or the monitoring itself is broken now
    WARNING = "warning"  # degraded, or waste worth acting on during work hours
    INFO = "info"  # worth knowing; no action needed right away


@dataclass(frozen=True)
class Runbook:
    """The runbook section of a rule in docs/alerts.md."""

    meaning: str
    causes: tuple[str, ...]
    checks: tuple[str, ...]
    tuning: str


@dataclass(frozen=True)
class Series:
    """One synthetic input series: a catalog metric (or `up`), its labels, its values.

    `values` uses promtool's expanding notation: "1x10" is eleven samples of 1,
    "0+2x5" counts 0, 2, ... 10, "_x3" is three missing samples.
    """

    name: str  # Prometheus name
    labels: Mapping[str, str]
    values: str

    @property
    def selector(self) -> str:
        return self.name + matchers(*(f'{k}="{v}"' for k, v in self.labels.items()))


def series(otel_name: str, labels: Mapping[str, str], values: str, **extra: str) -> Series:
    """A synthetic series of a catalog metric, by its OTel name (a catalog constant)."""
    return Series(metric(otel_name), MappingProxyType({**labels, **extra}), values)


@dataclass(frozen=True)
class Case:
    """Input series and the moment (seconds from the start) the rule is looked at.

    `alerts` are the label sets expected to fire then (without alertname and
    the rule's own labels): empty for a near miss. `value` is the alert's value
    at that moment, for the annotations that print it.
    """

    why: str
    series: tuple[Series, ...]
    at_s: float
    interval_s: float
    alerts: tuple[Mapping[str, str], ...] = ()
    value: float | None = None


@dataclass(frozen=True)
class Rule:
    """One Prometheus alerting rule and everything generated from it."""

    name: str
    severity: Severity
    expr: str
    for_s: float
    summary: str
    description: str
    runbook: Runbook
    thresholds: tuple[str, ...]
    fires: tuple[Case, ...]
    near_misses: tuple[Case, ...]
    labels: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.fires or not self.near_misses:
            raise ValueError(f"rule {self.name} needs at least one firing case and one near miss")
        if any(c.alerts for c in self.near_misses) or not all(c.alerts for c in self.fires):
            raise ValueError(f"rule {self.name}: firing cases expect alerts, near misses none")


@dataclass(frozen=True)
class Group:
    """A Prometheus rule group."""

    name: str
    rules: tuple[Rule, ...]


# --------------------------------------------------------------------- timelines


_TICKS = (1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0)


def tick_for(seconds: float) -> float:
    """The sample interval for cases about a duration: a round value near a quarter of it.

    Round values keep their greatest common divisor (promtool's evaluation
    interval) large, and so the tests fast.
    """
    return max((t for t in _TICKS if t <= seconds / 4), default=_TICKS[0])


def steps(seconds: float, tick: float) -> int:
    """How many ticks cover `seconds` (rounded up)."""
    return max(math.ceil(seconds / tick - 1e-9), 0)


def held(value: float, count: int) -> str:
    """`count` + 1 samples of `value`."""
    return f"{value:g}x{count}"


def last_index(values: str) -> int:
    """The index of the last sample of a timeline (its sample count less one)."""
    total = 0
    for part in values.split():
        head, x, times = part.rpartition("x")
        if not x:  # a single value: a number, "_" or "stale"
            total += 1
        else:
            total += int(times) + (0 if head == "_" else 1)
    return total - 1


def then(*parts: str) -> str:
    """Segments of a timeline, one after the other."""
    return " ".join(p for p in parts if p)


def counting(start: float, per_tick: float, count: int) -> str:
    """A counter from `start`, growing by `per_tick` each tick, `count` + 1 samples."""
    return f"{start:g}+{per_tick:g}x{count}"
