"""Prometheus exposition of a node snapshot, built from the metric catalog.

Rendering reads only the snapshot (never a vendor library) and is cached per
snapshot and format, so any number of scrapes within one cycle cost one render.
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

from .. import catalog as m
from ..attribution.join import allocations
from ..attribution.model import RayIdentity
from ..attribution.transfers import grouped
from ..catalog import CATALOG, Kind, MetricSpec
from ..model import DeviceSample, NodeSnapshot, Reading, actor_devices
from ..placement import snapshot_placement

_FAMILY_TYPES = {
    Kind.GAUGE: GaugeMetricFamily,
    Kind.COUNTER: CounterMetricFamily,
    Kind.INFO: InfoMetricFamily,
}


class _Families:
    """The series of one snapshot, grouped by catalog entry, as plain rows.

    Rows are (label values, value) tuples: Prometheus text is written straight
    from them (`text`), and prometheus_client families are built from them only
    where a library writes the output (`in_catalog_order`: OpenMetrics, OTLP).
    """

    def __init__(self, node_labels: Mapping[str, str]) -> None:
        self._node_names = tuple(node_labels)
        self._node_values = tuple(node_labels.values())
        self._rows: dict[str, list[tuple[tuple[str, ...], Any]]] = {}

    def add(self, spec: MetricSpec, scope_values: Iterable[str], value: float | Mapping[str, str],
            own_labels: Mapping[str, str] | None = None) -> None:
        rows = self._rows.get(spec.name)
        if rows is None:
            rows = self._rows[spec.name] = []
        if spec.kind is Kind.INFO:  # the value holds the facts, as labels
            if tuple(value) == spec.labels:
                rows.append(((*self._node_values, *scope_values, *(value[n] for n in spec.labels)),
                             1.0))
            else:
                rows.append(((*self._node_values, *scope_values), value))
            return
        own = own_labels or {}
        rows.append(((*self._node_values, *scope_values, *(own.get(n, "") for n in spec.labels)),
                     value))

    def _label_names(self, spec: MetricSpec) -> list[str]:
        if spec.kind is Kind.INFO:
            # Info series carry their facts as labels; the metric's own labels are those facts.
            return [*self._node_names, *m.SCOPE_LABELS[spec.scope]]
        return [*self._node_names, *spec.all_labels]

    def _family(self, spec: MetricSpec, rows: list[tuple[tuple[str, ...], Any]] = ()) -> Metric:
        """A prometheus_client family of `spec`, holding `rows`."""
        names = self._label_names(spec)
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

    def in_catalog_order(self) -> Iterator[Metric]:
        for spec in CATALOG:
            rows = self._rows.get(spec.name)
            if rows is not None:
                yield self._family(spec, rows)

    def text(self) -> bytes:
        """The Prometheus text format (0.0.4), equal to `text_exposition` of the families."""
        out: list[str] = []
        for spec in CATALOG:
            rows = self._rows.get(spec.name)
            if rows is None:
                continue
            names = self._label_names(spec)
            if spec.kind is Kind.INFO:
                names = [*names, *spec.labels]
                # Facts other than the spec's, or a fact named like a node label (the fact
                # wins): prometheus_client's merge of the labels decides.
                if len(set(names)) < len(names) or any(isinstance(v, Mapping) for _, v in rows):
                    family = self._family(spec, rows)
                    out.append(_family_header(family) + text_exposition_samples(family))
                    continue
            family = self._family(spec)
            out.append(_family_header(family))
            _rows_text(out, family.name + _SUFFIXES.get(family.type, ""), names, rows)
        return "".join(out).encode()


def _go_float(value: float) -> str:
    """`floatToGoString(value)`, without its call for the common case."""
    text = repr(float(value))
    if text.find(".") > 6 or text[-1] in "nf":  # large (Go writes an exponent), inf, nan
        return floatToGoString(value)
    return text


def _rows_text(out: list[str], sample_name: str, names: list[str],
               rows: list[tuple[tuple[str, ...], Any]]) -> None:
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


def _add_readings(families: _Families, readings: Iterable[Reading],
                  scope_values: tuple[str, ...]) -> None:
    for reading in readings:
        spec, labels = m.spec(reading.metric), dict(reading.labels)
        # An info reading (e.g. the NVLink fabric's names) carries its facts as labels.
        value = labels if spec.kind is Kind.INFO else reading.value
        families.add(spec, scope_values, value, labels)


def _add_device(families: _Families, sample: DeviceSample, snapshot: NodeSnapshot) -> None:
    device = sample.device
    scope_values = tuple(device.labels().values())
    families.add(m.spec(m.DEVICE_UP), scope_values, 1 if sample.up else 0)
    families.add(m.spec(m.DEVICE_SAMPLE_AGE), scope_values,
                 max(snapshot.taken_at - sample.taken_at, 0.0))
    info_spec = m.spec(m.DEVICE_INFO)
    facts = {"pci_bus_id": device.pci_bus_id, "parent_uuid": device.parent_uuid, **device.facts}
    families.add(info_spec, scope_values, {n: facts.get(n, "") for n in info_spec.labels})
    for peer in device.peers:
        families.add(m.spec(m.TOPOLOGY), scope_values,
                     {"peer_uuid": peer.uuid, "peer_index": peer.index,
                      "connection": peer.connection, "p2p": peer.p2p})
    _add_readings(families, sample.readings, scope_values)
    link_info = m.spec(m.LINK_INFO)
    for link in sample.links:
        link_values = (*scope_values, *link.labels().values())
        families.add(link_info, link_values, {n: link.facts.get(n, "") for n in link_info.labels})
        _add_readings(families, link.readings, link_values)
    identity = snapshot.attribution.identity
    for process in sample.processes:
        _add_readings(families, process.readings,
                      (*scope_values, *identity(process.pid).labels().values()))
    _add_allocations(families, sample, snapshot, scope_values)
    _add_collective_stall(families, sample, snapshot, scope_values)


_NO_IDENTITY = {name: "" for name in RayIdentity(0).labels()}


def _add_collective_stall(families: _Families, sample: DeviceSample, snapshot: NodeSnapshot,
                          scope_values: tuple[str, ...]) -> None:
    suspected = snapshot.collective_stalls.get(sample.device.uuid)
    if suspected is None:
        return
    holders = snapshot.holders.get(sample.device.uuid, ())
    identities = [h.identity.labels() for h in holders] or [_NO_IDENTITY]
    for identity in identities:
        families.add(m.spec(m.COLLECTIVE_SUSPECTED_STALL), (*scope_values, *identity.values()),
                     1 if suspected else 0)


def _add_allocations(families: _Families, sample: DeviceSample, snapshot: NodeSnapshot,
                     scope_values: tuple[str, ...]) -> None:
    if not sample.up or not snapshot.attribution.knows_allocations:
        return
    found = allocations(sample, snapshot.holders)
    families.add(m.spec(m.DEVICE_ALLOCATED), scope_values,
                 sum(a.holder.fraction for a in found))
    for allocation in found:
        holder_values = (*scope_values, *allocation.holder.identity.labels().values())
        families.add(m.spec(m.ALLOCATION), holder_values, allocation.holder.fraction)
        families.add(m.spec(m.ALLOCATION_IDLE), holder_values, 1 if allocation.idle else 0)


def _add_agent(families: _Families, snapshot: NodeSnapshot) -> None:
    for backend in snapshot.backends:
        families.add(m.spec(m.BACKEND_UP), (backend.name,), 1 if backend.up else 0)
        families.add(m.spec(m.BACKEND_DEVICES), (backend.name,), backend.device_count)
    for (backend, kind, function), count in sorted(snapshot.error_counts.items()):
        families.add(m.spec(m.AGENT_ERRORS), (), count,
                     {"backend": backend, "kind": kind, "function": function})
    families.add(m.spec(m.AGENT_CYCLES), (), snapshot.cycle)
    families.add(m.spec(m.AGENT_CYCLE_DURATION), (), snapshot.cycle_duration_s)
    agent_info = m.spec(m.AGENT_INFO)
    families.add(agent_info, (), {n: snapshot.agent_facts.get(n, "") for n in agent_info.labels})
    families.add(m.spec(m.NODE_PLACEMENT), (), snapshot_placement(snapshot))
    attribution = snapshot.attribution
    for source in attribution.sources:
        families.add(m.spec(m.ATTRIBUTION_UP), (), 1 if source.up else 0,
                     {"source": source.name})
    if attribution.refreshed_at:
        families.add(m.spec(m.ATTRIBUTION_AGE), (),
                     max(snapshot.taken_at - attribution.refreshed_at, 0.0))
    for label, count in attribution.dropped_labels.items():
        families.add(m.spec(m.ATTRIBUTION_DROPPED_LABELS), (), count, {"label": label})
    _add_transfers(families, snapshot)


def _add_transfers(families: _Families, snapshot: NodeSnapshot) -> None:
    attribution = snapshot.attribution
    devices = actor_devices(snapshot)
    for call in attribution.rdt_calls:
        task = call.task
        families.add(m.spec(m.RDT_CALL_AGE), (), call.age_s, {
            "ray_task_id": task.task_id, "ray_job_id": task.job_id, "ray_actor_id": task.actor_id,
            "actor_class": task.actor_class, "state": call.state,
            "devices": ",".join(devices.get(task.actor_id, ()))})
    for group in grouped(attribution.transfers, devices):
        families.add(m.spec(m.TRANSFERS_IN_FLIGHT), (), group.in_flight, group.labels)
        families.add(m.spec(m.TRANSFERS_STALLED), (), group.stalled, group.labels)
        families.add(m.spec(m.TRANSFER_OLDEST_AGE), (), group.oldest_age_s, group.labels)
    if attribution.pairs_transfers:
        for job_id, count in sorted(attribution.transfer_aborts.items()):
            families.add(m.spec(m.TRANSFER_ABORTS), (), count, {"ray_job_id": job_id})


def _snapshot_rows(snapshot: NodeSnapshot) -> _Families:
    families = _Families(snapshot.node_labels)
    for sample in snapshot.devices:
        _add_device(families, sample, snapshot)
    _add_agent(families, snapshot)
    return families


def snapshot_families(snapshot: NodeSnapshot) -> list[Metric]:
    """Every metric family of one snapshot, in catalog order."""
    return list(_snapshot_rows(snapshot).in_catalog_order())


def snapshot_text(snapshot: NodeSnapshot) -> bytes:
    """The Prometheus text of one snapshot: `text_exposition(snapshot_families(snapshot))`."""
    return _snapshot_rows(snapshot).text()


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
