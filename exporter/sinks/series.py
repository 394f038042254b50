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
        self._rows: dict[str, list[Row]] = {}

    def add(self, spec: MetricSpec, scope_values: Iterable[str], value: float | Mapping[str, str],
            own_labels: Mapping[str, str] | None = None) -> None:
        """One series of `spec`: the node's labels, then `scope_values`, then its own labels
        (an info metric's facts are `value`)."""
        rows = self._rows.get(spec.name)
        if rows is None:
            rows = self._rows[spec.name] = []
        if spec.kind is Kind.INFO:
            if tuple(value) == spec.labels:
                rows.append(((*self._node_values, *scope_values, *(value[n] for n in spec.labels)),
                             1.0))
            else:
                rows.append(((*self._node_values, *scope_values), value))
            return
        own = own_labels or {}
        rows.append(((*self._node_values, *scope_values, *(own.get(n, "") for n in spec.labels)),
                     value))

    def label_names(self, spec: MetricSpec) -> list[str]:
        """The names of a row's label values; an info metric's facts (`spec.labels`) follow."""
        if spec.kind is Kind.INFO:
            return [*self._node_names, *m.SCOPE_LABELS[spec.scope]]
        return [*self._node_names, *spec.all_labels]

    def in_catalog_order(self) -> Iterator[tuple[MetricSpec, list[Row]]]:
        """Each catalog metric the snapshot has, with its rows."""
        for spec in CATALOG:
            rows = self._rows.get(spec.name)
            if rows is not None:
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


def snapshot_series(snapshot: NodeSnapshot) -> SnapshotSeries:
    """Every series of one snapshot."""
    series = SnapshotSeries(snapshot.node_labels)
    for sample in snapshot.devices:
        _add_device(series, sample, snapshot)
    _add_agent(series, snapshot)
    return series


def _add_readings(series: SnapshotSeries, readings: Iterable[Reading],
                  scope_values: tuple[str, ...]) -> None:
    for reading in readings:
        spec = _SPECS.get(reading.metric)
        if spec is None:  # refused (and counted) by the sampler's reading checks
            continue
        labels = dict(reading.labels)
        # An info reading (e.g. the NVLink fabric's names) carries its facts as labels.
        series.add(spec, scope_values, labels if spec.kind is Kind.INFO else reading.value, labels)


def _add_device(series: SnapshotSeries, sample: DeviceSample, snapshot: NodeSnapshot) -> None:
    device = sample.device
    scope_values = tuple(device.labels().values())
    series.add(m.spec(m.DEVICE_UP), scope_values, 1 if sample.up else 0)
    series.add(m.spec(m.DEVICE_SAMPLE_AGE), scope_values,
               max(snapshot.taken_at - sample.taken_at, 0.0))
    info_spec = m.spec(m.DEVICE_INFO)
    facts = {"pci_bus_id": device.pci_bus_id, "parent_uuid": device.parent_uuid, **device.facts}
    series.add(info_spec, scope_values, {n: facts.get(n, "") for n in info_spec.labels})
    for peer in device.peers:
        series.add(m.spec(m.TOPOLOGY), scope_values,
                   {"peer_uuid": peer.uuid, "peer_index": peer.index,
                    "connection": peer.connection, "p2p": peer.p2p})
    _add_readings(series, sample.readings, scope_values)
    link_info = m.spec(m.LINK_INFO)
    for link in sample.links:
        link_values = (*scope_values, *link.labels().values())
        series.add(link_info, link_values, {n: link.facts.get(n, "") for n in link_info.labels})
        _add_readings(series, link.readings, link_values)
    identity = snapshot.attribution.identity
    for process in sample.processes:
        _add_readings(series, process.readings,
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
        for job_id, count in sorted(attribution.transfer_aborts.items()):
            series.add(m.spec(m.TRANSFER_ABORTS), (), count, {"ray_job_id": job_id})
