"""Prometheus and OpenMetrics text of a node snapshot's series (sinks/series.py).

Rendering reads only the snapshot (never a vendor library) and is cached per
snapshot and format, so any number of scrapes within one cycle cost one render.
Prometheus text is written straight from the series' rows; families
(sinks/exposition.py) are built from them where the output needs whole families
(OpenMetrics, a `name[]` filter, an info metric whose facts are not the catalog's).
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Iterator, Mapping

from ..catalog import Kind, MetricSpec
from ..model import NodeSnapshot
from .exposition import (
    COUNTER,
    GAUGE,
    INFO,
    OPENMETRICS,
    SUFFIXES,
    TEXT,
    Family,
    escape_label,
    go_float,
    openmetrics_exposition,
    openmetrics_header,
    text_exposition,
    text_header,
    text_samples,
)
from .line_prefixes import LinePrefixes, Prefixes
from .process_metrics import ProcessMetrics
from .series import Row, SnapshotSeries, snapshot_series

__all__ = ["OPENMETRICS", "TEXT", "PrometheusRenderer", "series_families", "series_text",
           "snapshot_families", "snapshot_text", "text_exposition", "wants_openmetrics"]

_FAMILY_TYPES = {Kind.GAUGE: GAUGE, Kind.COUNTER: COUNTER, Kind.INFO: INFO}
_INF = float("inf")


def _family(series: SnapshotSeries, spec: MetricSpec, rows: list[Row] = ()) -> Family:
    """The family of `spec`, holding `rows`."""
    names = series.label_names(spec)
    kind = _FAMILY_TYPES[spec.kind]
    family = Family(spec.prometheus_family, spec.description, kind,
                    "" if kind == INFO else spec.prometheus_unit, names)
    base = len(names)
    for label_values, value in rows:
        if spec.kind is Kind.INFO and not isinstance(value, Mapping):
            value = dict(zip(spec.labels, label_values[base:], strict=True))
        family.add_metric(label_values[:base], value)
    return family


def series_families(series: SnapshotSeries) -> Iterator[Family]:
    """The series as families, in catalog order."""
    for spec, rows in series.in_catalog_order():
        yield _family(series, spec, rows)


def series_text(series: SnapshotSeries, prefixes: LinePrefixes | None = None,
                openmetrics_format: bool = False) -> bytes:
    """The Prometheus text format (0.0.4), equal to `text_exposition(series_families(series))`;
    with `openmetrics_format` the families of OpenMetrics (1.0) without its closing `# EOF`
    (what `openmetrics_exposition` writes before it).

    `prefixes`, when given, keeps the start of each series' line for the next render (the
    sample lines are the same in both formats)."""
    if prefixes is None:
        prefixes = LinePrefixes(limit=0)
    prefixes.start_render()
    out: list[str] = []
    for spec, rows in series.in_catalog_order():
        names = series.label_names(spec)
        if spec.kind is Kind.INFO:
            names = [*names, *spec.labels]
            # Facts other than the spec's, or a fact named like a node label (the fact
            # wins): the family's merge of the labels decides.
            if len(set(names)) < len(names) or any(isinstance(v, Mapping) for _, v in rows):
                family = _family(series, spec, rows)
                header = openmetrics_header(family) if openmetrics_format else text_header(family)
                out.append(header + text_samples(family))
                continue
        sample_name, header = _header_of(spec, openmetrics_format)
        out.append(header)
        _rows_text(out, sample_name, names, rows, series.plain,
                   prefixes.family((sample_name, *names), len(rows)))
    return "".join(out).encode()


_HEADERS: dict[tuple[MetricSpec, bool], tuple[str, str]] = {}


def _header_of(spec: MetricSpec, openmetrics_format: bool) -> tuple[str, str]:
    """The sample name and the header lines of a catalog metric in one format (made once)."""
    made = _HEADERS.get((spec, openmetrics_format))
    if made is None:
        family = Family(spec.prometheus_family, spec.description, _FAMILY_TYPES[spec.kind],
                        "" if spec.kind is Kind.INFO else spec.prometheus_unit)
        header = openmetrics_header(family) if openmetrics_format else text_header(family)
        made = _HEADERS[(spec, openmetrics_format)] = (family.name + SUFFIXES[family.type],
                                                       header)
    return made


def _rows_text(out: list[str], sample_name: str, names: list[str], rows: list[Row],
               plain: bool, kept: Prefixes) -> None:
    """Appends one line per row; labels sorted by name, as prometheus_client writes them.
    `plain`: no label value needs escaping; `kept`: the lines' starts by label values (those
    it lacks are added)."""
    if not names:
        out.extend(f"{sample_name} {go_float(value)}\n" for _, value in rows)
        return
    order = sorted(range(len(names)), key=names.__getitem__)
    pick = operator.itemgetter(*order) if len(order) > 1 else (lambda v: (v[order[0]],))
    template = sample_name + "{" + ",".join(f'{names[i]}="%s"' for i in order) + "} "
    known = kept.get
    for label_values, value in rows:
        prefix = known(label_values)
        if prefix is None:
            picked = pick(label_values)
            if not plain:
                picked = tuple(escape_label(v) for v in picked)
            prefix = kept[label_values] = template % picked
        value = float(value)
        # go_float's first case inlined: most values are written by Python as Go writes them
        out.append(f"{prefix}{repr(value) if -_INF < value < 1e6 else go_float(value)}\n")


def snapshot_families(snapshot: NodeSnapshot) -> list[Family]:
    """Every metric family of one snapshot, in catalog order."""
    return list(series_families(snapshot_series(snapshot)))


def snapshot_text(snapshot: NodeSnapshot, prefixes: LinePrefixes | None = None,
                  openmetrics_format: bool = False) -> bytes:
    """The Prometheus text of one snapshot: `text_exposition(snapshot_families(snapshot))`
    (OpenMetrics: `openmetrics_exposition`'s, without the closing `# EOF`)."""
    return series_text(snapshot_series(snapshot), prefixes, openmetrics_format)


def wants_openmetrics(accept: str | None) -> bool:
    """True when the Accept header asks for OpenMetrics text."""
    return "application/openmetrics-text" in (accept or "")


class PrometheusRenderer:
    """Renders snapshots to Prometheus or OpenMetrics text, caching the last one of each."""

    def __init__(self, include_process_metrics: bool = True) -> None:
        self._lock = threading.Lock()
        self._cache: dict[bool, tuple[int, float, bytes]] = {}
        self._process = ProcessMetrics() if include_process_metrics else None
        self._prefixes = LinePrefixes()
        self._text_lock = threading.Lock()  # one text render at a time uses the prefixes

    def _process_families(self) -> list[Family]:
        return self._process.families() if self._process is not None else []

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
        if names:
            families = [f for f in snapshot_families(snapshot)
                        if f.name in names or any(s.name in names for s in f.samples)]
            body = (openmetrics_exposition(families) if openmetrics_format
                    else text_exposition(families))
        else:
            with self._text_lock:
                body = snapshot_text(snapshot, self._prefixes, openmetrics_format)
            body += (openmetrics_exposition if openmetrics_format
                     else text_exposition)(self._process_families())
        if not names:
            with self._lock:
                self._cache[openmetrics_format] = (*key, body)
        return body, content_type
