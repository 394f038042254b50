"""The node snapshot as JSON, for `/api/v1/snapshot` and the dashboard module.

Values keep their catalog (OpenTelemetry) names and base units; a value the
device cannot report is absent, never zero or null.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable
from typing import Any

from .. import catalog as m
from ..attribution.join import allocations
from ..attribution.model import Attribution, RayIdentity
from ..attribution.transfers import ActorTask, Transfer
from ..model import (
    DeviceSample,
    Link,
    NodeSnapshot,
    Reading,
    actor_devices,
    stale_after_s,
)
from ..placement import snapshot_placement

SCHEMA_VERSION = 1


def _values(readings: Iterable[Reading],
            metrics: Container[str] | None = None) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for reading in readings:
        if metrics is None or reading.metric in metrics:
            grouped.setdefault(reading.metric, []).append(
                {"labels": dict(reading.labels), "value": reading.value}
            )
    return grouped


def _identity(identity: RayIdentity) -> dict[str, Any]:
    return {**identity.labels(), "pid": identity.pid}


def _holders(sample: DeviceSample, snapshot: NodeSnapshot) -> dict[str, Any]:
    if not snapshot.attribution.knows_allocations:
        return {}
    found = allocations(sample, snapshot.holders)
    return {
        "allocated": sum(a.holder.fraction for a in found) if sample.up else None,
        "holders": [
            {**_identity(a.holder.identity), "fraction": a.holder.fraction, "idle": a.idle,
             "idle_rule": a.rule, "shared": a.shared, "spinning": a.spinning,
             **({"activity": {"graphics": a.activity.graphics, "sm": a.activity.sm,
                              "tensor": a.activity.tensor}} if a.activity else {})}
            for a in found
        ],
    }


def _device(sample: DeviceSample, snapshot: NodeSnapshot, stale_after: float,
            metrics: Container[str] | None, links: Callable[[Link], bool] | None
            ) -> dict[str, Any]:
    device = sample.device
    age_s = max(snapshot.taken_at - sample.taken_at, 0.0)
    identity = snapshot.attribution.identity
    return {
        **device.labels(),
        "pci_bus_id": device.pci_bus_id,
        "parent_uuid": device.parent_uuid,
        "facts": dict(device.facts),
        "peers": [{"uuid": p.uuid, "index": p.index, "connection": p.connection, "p2p": p.p2p}
                  for p in device.peers],
        "up": sample.up,
        # not answering (hung), or values too old; a device that answers "lost" is down,
        # not stale, though the counters it keeps age
        "stale": sample.stale or (sample.up and age_s > stale_after),
        "sampled_at": sample.taken_at,
        "age_s": age_s,
        "read_duration_s": sample.duration_s,
        "values": _values(sample.readings, metrics),
        "processes": [{**_identity(identity(p.pid)), "values": _values(p.readings, metrics)}
                      for p in sample.processes],
        "links": [
            {"link_type": link.link_type, "index": link.index, "facts": dict(link.facts),
             "rates_bytes_per_s": dict(link.rates), "values": _values(link.readings, metrics)}
            for link in sample.links if links is None or links(link)
        ],
        "errors": dict(sample.errors),
        **_holders(sample, snapshot),
        **({"collective_suspected_stall": snapshot.collective_stalls[device.uuid]}
           if device.uuid in snapshot.collective_stalls else {}),
    }


def _attribution(attribution: Attribution, taken_at: float) -> dict[str, Any]:
    return {
        "node_id": attribution.node_id,
        "age_s": taken_at - attribution.refreshed_at if attribution.refreshed_at else None,
        "sources": [{"name": s.name, "up": s.up, "message": s.message}
                    for s in attribution.sources],
        "dropped_labels": dict(attribution.dropped_labels),
    }


def _task(task: ActorTask) -> dict[str, Any]:
    return {"task_id": task.task_id, "name": task.name, "state": task.state,
            "job_id": task.job_id, "actor_id": task.actor_id, "actor_class": task.actor_class,
            "node_id": task.node_id, "pid": task.pid, "parent_task_id": task.parent_task_id,
            "created_at": task.created_at, "started_at": task.started_at}


def _transfer(transfer: Transfer, devices: dict[str, tuple[str, ...]]) -> dict[str, Any]:
    labels = transfer.labels(devices)
    return {
        "job_id": transfer.job_id, "age_s": transfer.age_s, "stalled": transfer.stalled,
        "slow": transfer.slow, "consumer_task_id": transfer.consumer_task_id,
        "source": {**_task(transfer.source.task),
                   "devices": [d for d in labels["src_devices"].split(",") if d]},
        "destination": {**_task(transfer.destination.task),
                        "devices": [d for d in labels["dst_devices"].split(",") if d]},
    }


def transfers_document(snapshot: NodeSnapshot) -> dict[str, Any]:
    """This node's long-running `__ray_call__`s and, on the pairing agent, the transfers."""
    attribution = snapshot.attribution
    devices = actor_devices(snapshot)
    return {
        "rdt_calls": [{**_task(c.task), "age_s": c.age_s, "pending": c.state != "RUNNING",
                       "devices": list(devices.get(c.task.actor_id, ()))}
                      for c in attribution.rdt_calls],
        "pairs_transfers": attribution.pairs_transfers,
        # when the pairing agent listed the transfers below (None: not yet, or it failed)
        "listed_at": attribution.transfers_listed_at or None,
        "transfers": [_transfer(t, devices) for t in attribution.transfers],
        "aborts": dict(attribution.transfer_aborts),
        "recent_aborts": [{"job_id": a.job_id, "age_s": a.age_s, "at": a.at,
                           "source": _task(a.source), "destination": _task(a.destination)}
                          for a in attribution.recent_aborts],
    }


def snapshot_document(snapshot: NodeSnapshot, metrics: Container[str] | None = None,
                      links: Callable[[Link], bool] | None = None) -> dict[str, Any]:
    """The whole node snapshot as a JSON-ready dict; with `metrics`, the readings of those
    metrics only, and with `links`, the links it keeps only (the summary's cut:
    sinks/summary.py)."""
    stale_after = stale_after_s(snapshot.interval_s)
    return {
        "schema_version": SCHEMA_VERSION,
        "cycle": snapshot.cycle,
        "taken_at": snapshot.taken_at,
        "interval_s": snapshot.interval_s,
        "cycle_duration_s": snapshot.cycle_duration_s,
        "node": dict(snapshot.node_labels),
        "placement": snapshot_placement(snapshot),
        "agent": dict(snapshot.agent_facts),
        "backends": [
            {"name": b.name, "vendor": b.vendor, "up": b.up, "device_count": b.device_count,
             "message": b.message, "facts": dict(b.facts)}
            for b in snapshot.backends
        ],
        "devices": [_device(s, snapshot, stale_after, metrics, links)
                    for s in snapshot.devices],
        "attribution": _attribution(snapshot.attribution, snapshot.taken_at),
        "transfers": transfers_document(snapshot),
        "errors": [
            {"backend": backend, "kind": kind, "function": function, "count": count}
            for (backend, kind, function), count in sorted(snapshot.error_counts.items())
        ],
        "units": {spec.name: spec.unit for spec in m.CATALOG},
    }
