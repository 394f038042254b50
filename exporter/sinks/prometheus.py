"""Prometheus and OpenMetrics text of a node snapshot's series (sinks/series.py).

Rendering reads only the snapshot (never a vendor library) and is cached per
snapshot and format, so any number of scrapes within one cycle cost one render.
Prometheus text is written straight from the series' rows; prometheus_client
families are built from them only where that library writes the output
(OpenMetrics, a `name[]` filter).
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import exposition
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import CollectorRegistry
from prometheus_client.utils import floatToGoString

from ..catalog import Kind, MetricSpec
from ..model import NodeSnapshot
from .series import Row, SnapshotSeries, snapshot_series

_FAMILY_TYPES = {
    Kind.GAUGE: GaugeMetricFamily,
    Kind.COUNTER: CounterMetricFamily,
    Kind.INFO: InfoMetricFamily,
}


def _family(series: SnapshotSeries, spec: MetricSpec, rows: list[Row] = ()) -> Metric:
    """A prometheus_client family of `spec`, holding `rows`."""
    names = series.label_names(spec)
    if spec.kind is Kind.INFO:
        family = InfoMetricFamily(spec.prometheus_family, spec.description, labels=names)
    else:
        family = _FAMILY_TYPES[spec.kind](
            spec.prometheus_family, spec.description, labels=names, unit=spec.prometheus_unit
        )
    base = len(names)
    for label_values, value in rows:
        if spec.kind is Kind.INFO and not isinstance(value, Mapping):
            value = dict(zip(spec.labels, label_values[base:], strict=True))
        family.add_metric(label_values[:base], value)
    return family


def series_families(series: SnapshotSeries) -> Iterator[Metric]:
    """The series as prometheus_client families, in catalog order."""
    for spec, rows in series.in_catalog_order():
        yield _family(series, spec, rows)


def series_text(series: SnapshotSeries) -> bytes:
    """The Prometheus text format (0.0.4), equal to `text_exposition(series_families(series))`."""
    out: list[str] = []
    for spec, rows in series.in_catalog_order():
        names = series.label_names(spec)
        if spec.kind is Kind.INFO:
            names = [*names, *spec.labels]
            # Facts other than the spec's, or a fact named like a node label (the fact
            # wins): prometheus_client's merge of the labels decides.
            if len(set(names)) < len(names) or any(isinstance(v, Mapping) for _, v in rows):
                family = _family(series, spec, rows)
                out.append(_family_header(family) + text_exposition_samples(family))
                continue
        family = _family(series, spec)
        out.append(_family_header(family))
        _rows_text(out, family.name + _SUFFIXES.get(family.type, ""), names, rows)
    return "".join(out).encode()


def _go_float(value: float) -> str:
    """`floatToGoString(value)`, without its call for the common case."""
    text = repr(float(value))
    if text.find(".") > 6 or text[-1] in "nf":  # large (Go writes an exponent), inf, nan
        return floatToGoString(value)
    return text


def _rows_text(out: list[str], sample_name: str, names: list[str], rows: list[Row]) -> None:
    """Appends one line per row; labels sorted by name, as prometheus_client writes them."""
    if not names:
        out.extend(f"{sample_name} {_go_float(value)}\n" for _, value in rows)
        return
    order = sorted(range(len(names)), key=names.__getitem__)
    pick = operator.itemgetter(*order) if len(order) > 1 else (lambda v: (v[order[0]],))
    template = (sample_name + "{" + ",".join(f'{names[i]}="%s"' for i in order)
                + "} %s\n")
    for label_values, value in rows:
        picked = pick(label_values)
        joined = "".join(picked)
        if '"' in joined or "\\" in joined or "\n" in joined:
            picked = tuple(_escape_label(v) for v in picked)
        out.append(template % (*picked, _go_float(value)))


def snapshot_families(snapshot: NodeSnapshot) -> list[Metric]:
    """Every metric family of one snapshot, in catalog order."""
    return list(series_families(snapshot_series(snapshot)))


def snapshot_text(snapshot: NodeSnapshot) -> bytes:
    """The Prometheus text of one snapshot: `text_exposition(snapshot_families(snapshot))`."""
    return series_text(snapshot_series(snapshot))


_PROMETHEUS_TYPES = {"counter": "counter", "gauge": "gauge", "info": "gauge"}
_SUFFIXES = {"counter": "_total", "info": "_info"}


def _escape_label(value: str) -> str:
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return value


def _family_header(family: Metric) -> str:
    name = family.name + _SUFFIXES.get(family.type, "")
    documentation = family.documentation.replace("\\", "\\\\").replace("\n", "\\n")
    return (f"# HELP {name} {documentation}\n# TYPE {name} "
            f"{_PROMETHEUS_TYPES.get(family.type, 'untyped')}\n")


def text_exposition_samples(family: Metric) -> str:
    """The sample lines of one family, labels sorted by name."""
    out = []
    for sample in family.samples:
        labels = sample.labels
        if labels:
            pairs = ",".join(f'{k}="{_escape_label(v)}"' for k, v in sorted(labels.items()))
            out.append(f"{sample.name}{{{pairs}}} {floatToGoString(sample.value)}\n")
        else:
            out.append(f"{sample.name} {floatToGoString(sample.value)}\n")
    return "".join(out)


def text_exposition(families: Iterable[Metric]) -> bytes:
    """The Prometheus text format (0.0.4) of our families.

    Equivalent to prometheus_client's `generate_latest` for the families this
    sink builds (gauges, counters and infos, no timestamps), and faster: label
    names are known to be valid, so only values need escaping.
    """
    return "".join(_family_header(family) + text_exposition_samples(family)
                   for family in families).encode()


class _FixedCollector:
    """Adapts a list of families to the `collect()` interface exposition expects."""

    def __init__(self, metrics: list[Metric], extra: Iterable[Any] = ()) -> None:
        self._metrics = metrics
        self._extra = extra

    def collect(self) -> Iterator[Metric]:
        yield from self._metrics
        for collector in self._extra:
            yield from collector.collect()


OPENMETRICS = openmetrics.CONTENT_TYPE_LATEST
TEXT = exposition.CONTENT_TYPE_LATEST


def wants_openmetrics(accept: str | None) -> bool:
    """True when the Accept header asks for OpenMetrics text."""
    return "application/openmetrics-text" in (accept or "")


class PrometheusRenderer:
    """Renders snapshots to Prometheus or OpenMetrics text, caching the last one of each."""

    def __init__(self, include_process_metrics: bool = True) -> None:
        self._lock = threading.Lock()
        self._cache: dict[bool, tuple[int, float, bytes]] = {}
        self._process = (
            [ProcessCollector(registry=CollectorRegistry(auto_describe=False))]
            if include_process_metrics else []
        )

    def render(self, snapshot: NodeSnapshot, openmetrics_format: bool,
               names: frozenset[str] = frozenset()) -> tuple[bytes, str]:
        """The body and content type of `/metrics` for this snapshot.

        `names`, when given, keeps only the families with those family or sample
        names (like prometheus_client's `name[]` filter); such answers are not cached.
        """
        content_type = OPENMETRICS if openmetrics_format else TEXT
        key = (snapshot.cycle, snapshot.taken_at)
        if not names:
            with self._lock:
                cached = self._cache.get(openmetrics_format)
                if cached is not None and cached[:2] == key:
                    return cached[2], content_type
        if openmetrics_format or names:
            families = snapshot_families(snapshot)
            extra = self._process
            if names:
                families = [f for f in families
                            if f.name in names or any(s.name in names for s in f.samples)]
                extra = []
            collector = _FixedCollector(families, extra)
            body = (openmetrics.generate_latest(collector) if openmetrics_format
                    else text_exposition(collector.collect()))
        else:
            body = snapshot_text(snapshot) + text_exposition(
                _FixedCollector([], self._process).collect())
        if not names:
            with self._lock:
                self._cache[openmetrics_format] = (*key, body)
        return body, content_type
