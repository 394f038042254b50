"""PromQL building blocks: catalog metric names, label matchers, durations.

Queries name metrics only through `metric()`, which looks them up in the
catalog, so a metric that is renamed or removed fails here, at generation time.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from ray_accel.exporter.catalog import spec

#: Prometheus's own per-target series (not ours, so not in the catalog).
UP = "up"


def metric(name: str) -> str:
    """The Prometheus name of a catalog metric, given its OTel name (a catalog constant)."""
    return spec(name).prometheus_name


def matchers(*terms: str) -> str:
    """`{a="b",c=~"d"}` from matcher terms; empty terms are left out."""
    return "{" + ",".join(t for t in terms if t) + "}"


def eq(label: str, value: str) -> str:
    """An equality matcher, with the value quoted."""
    return f'{label}="{_escape(value)}"'


def regex(label: str, pattern: str) -> str:
    """A regular-expression matcher, with the pattern quoted."""
    return f'{label}=~"{_escape(pattern)}"'


def one_of(label: str, *values: str) -> str:
    """A matcher for any of `values` (a regex alternation)."""
    return regex(label, "|".join(values))


# Filters every board query applies: the template variables, on the labels our series
# carry. `ray_io_cluster` is set by the scrape (KubeRay's PodMonitor), as for Ray's own
# series. The dashboard's Prometheus history applies the same ones (`scoped`).
SESSION_FILTER = 'SessionName=~"$SessionName"'
CLUSTER_FILTER = 'ray_io_cluster=~"$Cluster"'
NODE_FILTER = 'ray_node_id=~"$node"'
BOARD_FILTERS: tuple[str, ...] = (SESSION_FILTER, CLUSTER_FILTER, NODE_FILTER)

#: Top-level devices only: not a part of another device (a MIG instance "0/1/0", an AMD
#: partition "4/1", a NeuronCore "0/1"), whose memory, power and energy are already in its
#: device's figures. Sums of those take this filter, or count the parts twice; device
#: counts do not.
TOP_LEVEL = 'index!~".+/.+"'

Selector = Callable[..., str]


def selector(*filters: str) -> Selector:
    """`sel(NAME, *matchers)`: a catalog metric with the `filters` and `matchers`."""

    def sel(name: str, *extra: str) -> str:
        return metric(name) + matchers(*filters, *extra)

    return sel


def literal_pattern(text: str) -> str:
    """A regular expression matching exactly `text`, escaped to sit inside a PromQL string."""
    return _escape(re.escape(text))


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def duration(seconds: float) -> str:
    """A Prometheus duration for a number of seconds: 900 -> "15m", 90 -> "90s".

    The largest unit (d, h, m, s, ms) that divides the value exactly is used.
    """
    if seconds <= 0 or not math.isfinite(seconds):
        raise ValueError(f"a duration must be a positive number of seconds, got {seconds}")
    millis = round(seconds * 1000)
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if millis % size == 0:
            return f"{millis // size}{unit}"
    return f"{millis}ms"


_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> float:
    """Seconds in a duration such as "15m", "90s", "1h30m" or a bare number of seconds."""
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        if value <= 0 or not math.isfinite(value):
            raise ValueError(f"a duration must be positive, got {text!r}")
        return value
    total, number, rest = 0.0, "", text
    while rest:
        digits = len(rest) - len(rest.lstrip("0123456789."))
        number, rest = rest[:digits], rest[digits:]
        unit = "ms" if rest.startswith("ms") else rest[:1]
        if not number or unit not in _UNITS:
            raise ValueError(f"not a duration: {text!r} (use e.g. 90s, 15m, 1h)")
        total += float(number) * _UNITS[unit]
        rest = rest[len(unit):]
    if total <= 0:
        raise ValueError(f"a duration must be positive, got {text!r}")
    return total


def number(value: float) -> str:
    """A threshold as PromQL writes it: 0.95, 100, 1e+09."""
    return f"{value:g}"
