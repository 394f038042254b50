"""Metric families and their Prometheus text (0.0.4) and OpenMetrics (1.0) writers.

The agent writes /metrics itself rather than through prometheus_client (whose
exposition module alone imports an HTTP server, a WSGI server and urllib: 2.4 MiB
resident). The output is byte for byte what prometheus_client 0.26 writes for
the families this agent has (gauges, counters and infos, no timestamps, no
exemplars, names valid in the classic character set): `Family` names its
samples the way prometheus_client's metric families do, and the writers format
them the way its `generate_latest` functions do (tests/test_sinks_exposition.py
compares the two).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

TEXT = "text/plain; version=1.0.0; charset=utf-8"
OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"

GAUGE, COUNTER, INFO = "gauge", "counter", "info"
# What each type's samples add to the family's name, and its type in the 0.0.4 text.
SUFFIXES = {GAUGE: "", COUNTER: "_total", INFO: "_info"}
_TEXT_TYPES = {GAUGE: "gauge", COUNTER: "counter", INFO: "gauge"}
_INF = float("inf")
OPENMETRICS_END = "# EOF\n"


class Sample(NamedTuple):
    """One sample of a family (the fields of prometheus_client's `Sample`)."""

    name: str
    labels: dict[str, str]
    value: float
    timestamp: float | None = None
    exemplar: Any = None
    native_histogram: Any = None


class Family:
    """One metric family: its name (a counter's without `_total`, with `_<unit>` added where
    the name lacks it), help text, type, unit and samples."""

    __slots__ = ("_label_names", "documentation", "name", "samples", "type", "unit")

    def __init__(self, name: str, documentation: str, kind: str, unit: str = "",
                 label_names: Sequence[str] = ()) -> None:
        if kind not in SUFFIXES:
            raise ValueError(f"unknown metric type {kind!r}")
        if kind == COUNTER:
            name = name.removesuffix("_total")
        if unit and not name.endswith("_" + unit):
            name += "_" + unit
        self.name, self.documentation, self.type, self.unit = name, documentation, kind, unit
        self.samples: list[Sample] = []
        self._label_names = tuple(label_names)

    def add_metric(self, label_values: Sequence[str], value: float | Mapping[str, str]) -> None:
        """One sample; an info family's `value` is its facts (merged over the labels)."""
        labels = dict(zip(self._label_names, label_values, strict=True))
        if self.type == INFO:
            self.samples.append(Sample(self.name + "_info", {**labels, **value}, 1))
        else:
            self.samples.append(Sample(self.name + SUFFIXES[self.type], labels, value))


def go_float(value: float) -> str:
    """A value as Go's strconv writes it, as Prometheus expects (prometheus_client's
    `floatToGoString`)."""
    value = float(value)
    text = repr(value)
    if -_INF < value < 1e6:  # most values: Python writes them as Go does
        return text
    if text[-1] in "nf":  # inf, -inf, nan
        return {"inf": "+Inf", "-inf": "-Inf"}.get(text, "NaN")
    dot = text.find(".")
    if value > 0 and dot > 6:  # Go writes an exponent sooner than Python
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1:]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return text


def escape_label(value: str) -> str:
    """A label value as the text formats quote it."""
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return value


def text_header(family: Family) -> str:
    """The HELP and TYPE lines of a family in the 0.0.4 text format."""
    name = family.name + SUFFIXES[family.type]
    documentation = family.documentation.replace("\\", "\\\\").replace("\n", "\\n")
    return f"# HELP {name} {documentation}\n# TYPE {name} {_TEXT_TYPES[family.type]}\n"


def _labels_text(labels: Mapping[str, str]) -> str:
    pairs = ",".join(f'{k}="{escape_label(v)}"' for k, v in sorted(labels.items()))
    return "{" + pairs + "}"


def text_samples(family: Family) -> str:
    """The sample lines of one family (the same in both formats), labels sorted by name."""
    return "".join(f"{s.name}{_labels_text(s.labels) if s.labels else ''} {go_float(s.value)}\n"
                   for s in family.samples)


def text_exposition(families: Iterable[Family]) -> bytes:
    """The Prometheus text format (0.0.4) of `families`."""
    return "".join(text_header(f) + text_samples(f) for f in families).encode()


def openmetrics_header(family: Family) -> str:
    """The HELP, TYPE and (where the family has a unit) UNIT lines in OpenMetrics (1.0)."""
    documentation = escape_label(family.documentation)
    unit = f"# UNIT {family.name} {family.unit}\n" if family.unit else ""
    return f"# HELP {family.name} {documentation}\n# TYPE {family.name} {family.type}\n{unit}"


def openmetrics_exposition(families: Iterable[Family]) -> bytes:
    """The OpenMetrics text format (1.0) of `families`, ending with `# EOF`."""
    out = [openmetrics_header(family) + text_samples(family) for family in families]
    out.append(OPENMETRICS_END)
    return "".join(out).encode()
