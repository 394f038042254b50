"""The numbers the alert rules use, with their defaults, and how to override them.

Overrides come from a YAML (or JSON) mapping `name: value` (`--thresholds FILE`)
and from `NAME=VALUE` pairs (`--alert-threshold`). Durations take Prometheus
syntax ("15m", "90s") or a number of seconds; ratios are 0-1.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .promql import duration, parse_duration


class Kind(enum.Enum):
    """What a threshold measures; decides how it is parsed, checked and written."""

    DURATION = "duration"  # how long a condition must hold, or a window; seconds
    RATIO = "ratio"  # a fraction, 0-1
    SECONDS = "seconds"  # a gauge value in seconds (an age)
    COUNT = "count"  # a number of events


def _threshold(default: float, kind: Kind, help_text: str) -> Any:
    return field(default=default, metadata={"kind": kind, "help": help_text})


MINUTE = 60.0


@dataclass(frozen=True)
class Thresholds:
    """Every tunable number of the alert rules; the defaults suit a production fleet."""

    # Allocation
    idle_allocation_for: float = _threshold(
        15 * MINUTE, Kind.DURATION, "how long a worker holds a device without using it")
    unallocated_busy_utilization: float = _threshold(
        0.10, Kind.RATIO, "utilization above which a device Ray has not assigned counts as busy")
    unallocated_busy_for: float = _threshold(
        10 * MINUTE, Kind.DURATION, "how long an unassigned device must stay busy")
    # Activity
    device_spinning_for: float = _threshold(
        5 * MINUTE, Kind.DURATION, "how long the agent must report a device as spinning "
        "(busy by its utilization, SMs and tensor pipes nearly idle) before it alerts")
    # Device errors
    xid_window: float = _threshold(
        10 * MINUTE, Kind.DURATION, "window in which a new XID event keeps the alert firing")
    xid_seen_window: float = _threshold(
        6 * 60 * MINUTE, Kind.DURATION,
        "how far back before the XID window a device's XID count counts as already known: a "
        "count seen then at the same value is not new after a scrape gap (keep it longer than "
        "the Prometheus or network outages you expect)")
    ecc_window: float = _threshold(
        10 * MINUTE, Kind.DURATION, "window in which new uncorrectable ECC errors count")
    row_remap_pending_for: float = _threshold(
        10 * MINUTE, Kind.DURATION, "how long a row remap may wait for a device reset")
    # Throttling and capacity
    thermal_throttle_for: float = _threshold(
        5 * MINUTE, Kind.DURATION, "how long thermal slowdown must hold the clocks down")
    power_throttle_for: float = _threshold(
        15 * MINUTE, Kind.DURATION, "how long power capping or braking must hold the clocks down")
    memory_full_ratio: float = _threshold(
        0.95, Kind.RATIO, "fraction of device memory in use that counts as nearly full")
    memory_full_for: float = _threshold(
        10 * MINUTE, Kind.DURATION, "how long device memory must stay nearly full")
    # Interconnect
    pcie_busy_utilization: float = _threshold(
        0.10, Kind.RATIO, "utilization above which a lower PCIe generation counts as downtrained")
    pcie_downtrained_for: float = _threshold(
        5 * MINUTE, Kind.DURATION, "how long a PCIe link must run below its maximum")
    link_down_for: float = _threshold(
        2 * MINUTE, Kind.DURATION, "how long an interconnect link must stay down")
    link_error_window: float = _threshold(
        5 * MINUTE, Kind.DURATION, "window over which link errors are counted")
    link_error_burst: float = _threshold(
        100, Kind.COUNT, "link errors of one type on one link within the window that make a burst")
    fabric_unhealthy_for: float = _threshold(
        2 * MINUTE, Kind.DURATION, "how long a GPU's NVLink fabric must stay unregistered, "
        "failed or not healthy")
    # Availability and freshness
    device_lost_for: float = _threshold(
        1 * MINUTE, Kind.DURATION, "how long a device must stay down (lost or not answering)")
    agent_down_for: float = _threshold(
        2 * MINUTE, Kind.DURATION, "how long an agent target must fail its scrapes or be missing")
    backend_down_for: float = _threshold(
        5 * MINUTE, Kind.DURATION, "how long a vendor backend must stay down")
    backend_seen_window: float = _threshold(
        24 * 60 * MINUTE, Kind.DURATION,
        "how far back a backend must have found devices on the node for its being down to count")
    sample_age_seconds: float = _threshold(
        30, Kind.SECONDS, "age of a device's values above which they count as stale")
    sample_stale_for: float = _threshold(
        2 * MINUTE, Kind.DURATION, "how long a device's values must stay stale")
    attribution_age_seconds: float = _threshold(
        60, Kind.SECONDS, "age of the Ray attribution above which it counts as stale")
    attribution_stale_for: float = _threshold(
        5 * MINUTE, Kind.DURATION, "how long the Ray attribution must stay stale")

    # Transfers and collectives (Ray Direct Transport)
    transfer_stalled_for: float = _threshold(
        5, Kind.DURATION, "how long the agent must report a transfer as stalled (it calls one "
        "stalled once in flight past its --transfer-stall-after, 10 s by default)")
    transfer_abort_window: float = _threshold(
        15 * MINUTE, Kind.DURATION, "window in which an aborted transfer keeps its alert firing")
    collective_stall_for: float = _threshold(
        1 * MINUTE, Kind.DURATION, "how long a device must stay suspected of a hung collective")

    def __post_init__(self) -> None:
        for item in dataclasses.fields(self):
            _check(item.name, item.metadata["kind"], getattr(self, item.name))

    def with_overrides(self, overrides: Mapping[str, Any]) -> Thresholds:
        """A copy with some values replaced; raises ValueError naming a bad name or value."""
        known = {item.name: item.metadata["kind"] for item in dataclasses.fields(self)}
        changes = {}
        for name, raw in overrides.items():
            if name not in known:
                raise ValueError(f"unknown alert threshold {name!r}; known: {', '.join(known)}")
            changes[name] = parse_value(name, known[name], raw)
        return dataclasses.replace(self, **changes)

    def render(self, name: str) -> str:
        """A value as the rules write it: a Prometheus duration or a plain number."""
        value = getattr(self, name)
        return duration(value) if kind_of(name) is Kind.DURATION else f"{value:g}"


def kind_of(name: str) -> Kind:
    """The kind of a threshold, by name."""
    return next(f.metadata["kind"] for f in dataclasses.fields(Thresholds) if f.name == name)


def describe() -> list[tuple[str, Kind, str, str]]:
    """(name, kind, default as written, help) for every threshold, in definition order."""
    defaults = Thresholds()
    return [(f.name, f.metadata["kind"], defaults.render(f.name), f.metadata["help"])
            for f in dataclasses.fields(Thresholds)]


def parse_value(name: str, kind: Kind, raw: Any) -> float:
    """A threshold value from text or a number; raises ValueError saying what is wrong."""
    try:
        value = parse_duration(str(raw)) if kind is Kind.DURATION else float(raw)
    except ValueError as error:
        raise ValueError(f"alert threshold {name}: {error}") from None
    _check(name, kind, value)
    return value


def _check(name: str, kind: Kind, value: float) -> None:
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"alert threshold {name}: must be a finite number >= 0, got {value}")
    if kind is Kind.RATIO and value > 1:
        raise ValueError(f"alert threshold {name}: a ratio must be between 0 and 1, got {value}")
    if kind is Kind.DURATION and value < 0.001:
        raise ValueError(f"alert threshold {name}: a duration must be at least 1ms")


def parse_assignments(pairs: Iterable[str]) -> dict[str, str]:
    """`NAME=VALUE` strings to a mapping; raises ValueError on a malformed one."""
    found = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise ValueError(f"expected NAME=VALUE, got {pair!r}")
        found[name.strip()] = value.strip()
    return found


def load_file(path: Path) -> dict[str, Any]:
    """A thresholds file: a YAML or JSON mapping of threshold names to values."""
    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise ValueError(f"cannot read thresholds file {path}: {error}") from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise ValueError(f"thresholds file {path}: expected a mapping of name: value")
    return document


def render_file(thresholds: Thresholds) -> str:
    """A thresholds file (YAML) with every value and what it means, to copy and edit."""
    lines = ["# Alert thresholds of ray-accel's Prometheus rules.",
             "# Edit and pass with `ray-accel grafana --thresholds FILE`; leave out what you",
             "# keep at its default. Durations: Prometheus syntax (15m, 90s); ratios: 0-1.",
             ""]
    for name, kind, _, help_text in describe():
        lines.append(f"# {help_text} ({kind.value})")
        value = thresholds.render(name)
        lines.append(f"{name}: {value if kind is not Kind.DURATION else repr(value)}")
    return "\n".join(lines) + "\n"
