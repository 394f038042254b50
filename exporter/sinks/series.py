"""Every series of one node snapshot, built once from the metric catalog, for every writer.

This is where a snapshot becomes series: each device's readings, links and
processes under the device's labels, the Ray identity of each process joined
in, the allocations of devices to Ray workers, suspected collective stalls,
the agent's own health and the Ray Direct Transport transfers. The writers
only format what is here: Prometheus text and OpenMetrics (sinks/prometheus.py)
and OTLP points (sinks/otlp.py), so the same series carries the same labels and
value whichever pipeline takes it.

Rows are (label values, value) tuples in the order of `SnapshotSeries.label_names`.
An info metric's row carries its facts after those labels (value 1), or, when
the facts are not the catalog's, a mapping of them as its value.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, TypeAlias

from .. import catalog as m
from ..attribution.join import allocations
from ..attribution.model import RayIdentity
from ..attribution.transfers import grouped
from ..catalog import CATALOG, Kind, MetricSpec
from ..model import DeviceSample, NodeSnapshot, Reading, actor_devices
from ..placement import snapshot_placement

Row: TypeAlias = tuple[tuple[str, ...], Any]
_SPECS = {spec.name: spec for spec in CATALOG}


class SnapshotSeries:
    """The series of one snapshot, grouped by catalog entry, as plain rows."""

    def __init__(self, node_labels: Mapping[str, str]) -> None:
        self._node_names = tuple(node_labels)
        self._node_values = tuple(node_labels.values())
        self._rows: defaultdict[str, list[Row]] = defaultdict(list)
        # (metric, a reading's labels) -> the values of the metric's own labels and the
        # metric's rows, or None for a metric outside the catalog or an info metric:
        # readings repeat the same few.
        self._own_values: dict[tuple[str, tuple], tuple[tuple[str, ...], list[Row]] | None] = {}
        #: False once a label value needs escaping in the text formats (a quote, backslash
        #: or newline); writers check each value only then.
        self.plain = _plain(self._node_values)

    def add(self, spec: MetricSpec, scope_values: Iterable[str], value: float | Mapping[str, str],
            own_labels: Mapping[str, str] | None = None) -> None:
        """One series of `spec`: the node's labels, then `scope_values`, then its own labels
        (an info metric's facts are `value`)."""
        if spec.kind is Kind.INFO:
            if tuple(value) == spec.labels:
                label_values = (*self._node_values, *scope_values, *(value[n] for n in spec.labels))
                value = 1.0
            else:
                label_values = (*self._node_values, *scope_values)
        else:
            own = own_labels or {}
            label_values = (*self._node_values, *scope_values,
                            *(own.get(n, "") for n in spec.labels))
        self.plain = self.plain and _plain(label_values)
        self._rows[spec.name].append((label_values, value))

    def add_readings(self, readings: Iterable[Reading], scope_values: tuple[str, ...]) -> None:
        """A series for each reading under `scope_values`; readings of metrics outside the
        catalog (refused and counted by the sampler's reading checks) are left out."""
        base = (*self._node_values, *scope_values)
        self.plain = self.plain and _plain(scope_values)
        own_values = self._own_values
        for reading in readings:
            key = (reading.metric, reading.labels)
            try:
                found = own_values[key]
            except KeyError:
                found = own_values[key] = self._own_label_values(reading)
            if found is not None:
                own, rows = found
                rows.append((base + own, reading.value))
            elif (spec := _SPECS.get(reading.metric)) is not None:
                # An info reading (e.g. the NVLink fabric's names) carries its facts as labels.
                self.add(spec, scope_values, dict(reading.labels))

    def add_info(self, spec: MetricSpec, scope_values: tuple[str, ...],
                 facts: Mapping[str, str]) -> None:
        """An info series whose facts are `spec.labels`, each taken from `facts` ("" where
        absent)."""
        label_values = (*self._node_values, *scope_values,
                        *(facts.get(name, "") for name in spec.labels))
        self.plain = self.plain and _plain(label_values)
        self._rows[spec.name].append((label_values, 1.0))

    def _own_label_values(self, reading: Reading) -> tuple[tuple[str, ...], list[Row]] | None:
        """The values of a reading's own labels in its metric's order ("" where absent) and
        the metric's rows; None for a metric outside the catalog or an info metric."""
        spec = _SPECS.get(reading.metric)
        if spec is None or spec.kind is Kind.INFO:
            return None
        labels = dict(reading.labels)
        own = tuple(labels.get(name, "") for name in spec.labels)
        self.plain = self.plain and _plain(own)
        return own, self._rows[spec.name]

    def label_names(self, spec: MetricSpec) -> list[str]:
        """The names of a row's label values; an info metric's facts (`spec.labels`) follow."""
        if spec.kind is Kind.INFO:
            return [*self._node_names, *m.SCOPE_LABELS[spec.scope]]
        return [*self._node_names, *spec.all_labels]

    def in_catalog_order(self) -> Iterator[tuple[MetricSpec, list[Row]]]:
        """Each catalog metric the snapshot has, with its rows."""
        for spec in CATALOG:
            rows = self._rows.get(spec.name)
            if rows:
                yield spec, rows

    def samples(self, spec: MetricSpec, rows: list[Row]) -> Iterator[tuple[dict[str, str], float]]:
        """Each row as (labels, value); where a fact is named like a label the fact wins."""
        names = self.label_names(spec)
        if spec.kind is not Kind.INFO:
            for label_values, value in rows:
                yield dict(zip(names, label_values, strict=True)), float(value)
            return
        with_facts = [*names, *spec.labels]
        for label_values, value in rows:
            if isinstance(value, Mapping):
                yield {**dict(zip(names, label_values, strict=True)), **value}, 1.0
            else:
                yield dict(zip(with_facts, label_values, strict=True)), 1.0


def _plain(values: Iterable[str]) -> bool:
    """True when no value needs escaping in the text formats."""
    try:
        joined = "".join(values)
    except TypeError:  # not a string: the writers' own checks decide
        return False
    return '"' not in joined and "\\" not in joined and "\n" not in joined


def snapshot_series(snapshot: NodeSnapshot) -> SnapshotSeries:
    """Every series of one snapshot."""
    series = SnapshotSeries(snapshot.node_labels)
    for sample in snapshot.devices:
        _add_device(series, sample, snapshot)
    _add_agent(series, snapshot)
    return series


def _add_device(series: SnapshotSeries, sample: DeviceSample, snapshot: NodeSnapshot) -> None:
    device = sample.device
    scope_values = tuple(device.labels().values())
    series.add(m.spec(m.DEVICE_UP), scope_values, 1 if sample.up else 0)
    series.add(m.spec(m.DEVICE_SAMPLE_AGE), scope_values,
               max(snapshot.taken_at - sample.taken_at, 0.0))
    facts = {"pci_bus_id": device.pci_bus_id, "parent_uuid": device.parent_uuid, **device.facts}
    series.add_info(m.spec(m.DEVICE_INFO), scope_values, facts)
    for peer in device.peers:
        series.add(m.spec(m.TOPOLOGY), scope_values,
                   {"peer_uuid": peer.uuid, "peer_index": peer.index,
                    "connection": peer.connection, "p2p": peer.p2p})
    series.add_readings(sample.readings, scope_values)
    link_info = m.spec(m.LINK_INFO)
    for link in sample.links:
        link_values = (*scope_values, *link.labels().values())
        series.add_info(link_info, link_values, link.facts)
        series.add_readings(link.readings, link_values)
    identity = snapshot.attribution.identity
    for process in sample.processes:
        series.add_readings(process.readings,
                            (*scope_values, *identity(process.pid).labels().values()))
    _add_allocations(series, sample, snapshot, scope_values)
    _add_collective_stall(series, sample, snapshot, scope_values)


_NO_IDENTITY = {name: "" for name in RayIdentity(0).labels()}


def _add_collective_stall(series: SnapshotSeries, sample: DeviceSample, snapshot: NodeSnapshot,
                          scope_values: tuple[str, ...]) -> None:
    suspected = snapshot.collective_stalls.get(sample.device.uuid)
    if suspected is None:
        return
    holders = snapshot.holders.get(sample.device.uuid, ())
    identities = [h.identity.labels() for h in holders] or [_NO_IDENTITY]
    for identity in identities:
        series.add(m.spec(m.COLLECTIVE_SUSPECTED_STALL), (*scope_values, *identity.values()),
                   1 if suspected else 0)


def _add_allocations(series: SnapshotSeries, sample: DeviceSample, snapshot: NodeSnapshot,
                     scope_values: tuple[str, ...]) -> None:
    if not sample.up or not snapshot.attribution.knows_allocations:
        return
    found = allocations(sample, snapshot.holders)
    series.add(m.spec(m.DEVICE_ALLOCATED), scope_values, sum(a.holder.fraction for a in found))
    for allocation in found:
        holder_values = (*scope_values, *allocation.holder.identity.labels().values())
        series.add(m.spec(m.ALLOCATION), holder_values, allocation.holder.fraction)
        series.add(m.spec(m.ALLOCATION_IDLE), holder_values, 1 if allocation.idle else 0)


def _add_agent(series: SnapshotSeries, snapshot: NodeSnapshot) -> None:
    for backend in snapshot.backends:
        series.add(m.spec(m.BACKEND_UP), (backend.name,), 1 if backend.up else 0)
        series.add(m.spec(m.BACKEND_DEVICES), (backend.name,), backend.device_count)
    for (backend, kind, function), count in sorted(snapshot.error_counts.items()):
        series.add(m.spec(m.AGENT_ERRORS), (), count,
                   {"backend": backend, "kind": kind, "function": function})
    series.add(m.spec(m.AGENT_CYCLES), (), snapshot.cycle)
    series.add(m.spec(m.AGENT_CYCLE_DURATION), (), snapshot.cycle_duration_s)
    agent_info = m.spec(m.AGENT_INFO)
    series.add(agent_info, (), {n: snapshot.agent_facts.get(n, "") for n in agent_info.labels})
    series.add(m.spec(m.NODE_PLACEMENT), (), snapshot_placement(snapshot))
    attribution = snapshot.attribution
    for source in attribution.sources:
        series.add(m.spec(m.ATTRIBUTION_UP), (), 1 if source.up else 0, {"source": source.name})
    if attribution.refreshed_at:
        series.add(m.spec(m.ATTRIBUTION_AGE), (),
                   max(snapshot.taken_at - attribution.refreshed_at, 0.0))
    for label, count in attribution.dropped_labels.items():
        series.add(m.spec(m.ATTRIBUTION_DROPPED_LABELS), (), count, {"label": label})
    _add_transfers(series, snapshot)


def _add_transfers(series: SnapshotSeries, snapshot: NodeSnapshot) -> None:
    attribution = snapshot.attribution
    devices = actor_devices(snapshot)
    for call in attribution.rdt_calls:
        task = call.task
        series.add(m.spec(m.RDT_CALL_AGE), (), call.age_s, {
            "ray_task_id": task.task_id, "ray_job_id": task.job_id, "ray_actor_id": task.actor_id,
            "actor_class": task.actor_class, "state": call.state,
            "devices": ",".join(devices.get(task.actor_id, ()))})
    for group in grouped(attribution.transfers, devices):
        series.add(m.spec(m.TRANSFERS_IN_FLIGHT), (), group.in_flight, group.labels)
        series.add(m.spec(m.TRANSFERS_STALLED), (), group.stalled, group.labels)
        series.add(m.spec(m.TRANSFER_OLDEST_AGE), (), group.oldest_age_s, group.labels)
    if attribution.pairs_transfers:
        if attribution.transfers_listed_at:
            series.add(m.spec(m.TRANSFER_LISTING_AGE), (),
                       max(snapshot.taken_at - attribution.transfers_listed_at, 0.0))
        for job_id, count in sorted(attribution.transfer_aborts.items()):
            series.add(m.spec(m.TRANSFER_ABORTS), (), count, {"ray_job_id": job_id})
