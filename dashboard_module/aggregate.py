"""Cluster views computed from every node's reduced snapshot, once per refresh round.

`build_view()` walks all nodes once and produces everything the API serves:
the cluster summary, the heatmap of every device, the findings (findings.py), and
the workload index (job -> actor/task/worker -> devices, workloads.py). Requests only
read the finished `ClusterView`; they never aggregate and never wait on an agent.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from . import findings as findings_of
from . import transfers_view
from .findings import (
    DOWN,
    OK,
    SEVERITIES,
    STALE,
    WARNING,
    Finding,
    device_findings,
    device_health,
    is_hot,
)
from .heatmap_columns import RowColumns, row_columns
from .json_encode import encode_compact
from .node_state import NODE_STATUSES, NodeState
from .workloads import Unit, Workloads, jobs_of, merge_units, shown_activity

FINDING_KINDS = (*findings_of.KINDS, *transfers_view.FINDING_KINDS)
# How many nodes a build walks between two calls of its `pause()` (about a millisecond's
# work when the nodes changed, less when their parts are reused).
PAUSE_EVERY = 32


@dataclass
class ClusterView:
    """One round's aggregation; immutable once built."""

    generated_at: float
    refresh_s: float
    nodes: dict[str, NodeState]
    statuses: dict[str, str]
    summary: dict[str, Any]
    findings: list[Finding]
    device_findings: dict[str, list[Finding]]
    health: dict[str, str]  # device uuid -> health
    jobs: dict[str, dict[str, Any]]
    units: dict[str, Unit]  # unit key -> actor/task/worker entry
    actors: dict[str, str] = field(default_factory=dict)  # actor id -> unit key
    tasks: dict[str, str] = field(default_factory=dict)  # task id -> unit key
    node_history: dict[str, float | None] = field(default_factory=dict)  # history keys
    encoded: dict[str, bytes] = field(default_factory=dict)  # answers encoded once
    heatmap_rows: list[bytes] = field(default_factory=list)  # each heatmap row as JSON
    parts: list[NodePart] = field(default_factory=list)  # each node's part, in row order
    transfers: transfers_view.TransfersView = field(default_factory=transfers_view.TransfersView)

    @property
    def heatmap(self) -> list[dict[str, Any]]:
        """Every node's heatmap row (node, status, NVLink domain, device cells), decoded from
        the rows each node's part keeps encoded (the view holds no second, decoded copy)."""
        return [json.loads(row) for row in self.heatmap_rows]


def _ratio(used: float | None, total: float | None) -> float | None:
    return used / total if used is not None and total else None


def is_part(device: dict[str, Any]) -> bool:
    """Whether the device is part of another one (a MIG instance "0/1/0", an AMD compute
    partition "4/1", a NeuronCore "0/1"): its memory and power are in its device's figures,
    and must not be counted again in a sum."""
    return "/" in device["index"]


class _Totals:
    """Device counts and sums, per node and (merged) for the cluster."""

    def __init__(self) -> None:
        self.devices = Counter()
        self.models: dict[tuple[str, str], dict[str, Any]] = {}
        self.util_sum = 0.0
        self.util_count = 0
        self.util_max: float | None = None
        self.memory_used = 0.0
        self.memory_total = 0.0
        self.power = 0.0
        self.power_limit = 0.0

    def add(self, device: dict[str, Any], health: str) -> None:
        self.devices["total"] += 1
        self.devices[health] += 1
        self.devices["up"] += device["up"]
        model = self.models.setdefault((device["vendor"], device["model"]), {
            "vendor": device["vendor"], "model": device["model"], "devices": 0, "down": 0,
            "nodes": 1})
        model["devices"] += 1
        model["down"] += not device["up"]
        if device["holders"]:
            self.devices["allocated"] += 1
        self.devices["idle_allocations"] += sum(1 for h in device["holders"] if h["idle"])
        if not device["up"]:
            return
        if device["utilization"] is not None:
            self.util_sum += device["utilization"]
            self.util_count += 1
            self.util_max = max(self.util_max or 0.0, device["utilization"])
        if is_part(device):
            return
        self.memory_used += device["memory_used_bytes"] or 0.0
        self.memory_total += device["memory_total_bytes"] or 0.0
        self.power += device["power_watts"] or 0.0
        self.power_limit += device["power_limit_watts"] or 0.0

    def merge(self, other: _Totals) -> None:
        """Add another node's totals (each node counts once per model it has)."""
        self.devices.update(other.devices)
        for key, model in other.models.items():
            have = self.models.setdefault(key, {**model, "devices": 0, "down": 0, "nodes": 0})
            for field_name in ("devices", "down", "nodes"):
                have[field_name] += model[field_name]
        self.util_sum += other.util_sum
        self.util_count += other.util_count
        if other.util_max is not None:
            self.util_max = max(self.util_max or 0.0, other.util_max)
        self.memory_used += other.memory_used
        self.memory_total += other.memory_total
        self.power += other.power
        self.power_limit += other.power_limit


def _round(number: float | None, digits: int) -> float | None:
    return None if number is None else round(number, digits)


def _heat_cell(device: dict[str, Any], health: str) -> dict[str, Any]:
    return {"uuid": device["uuid"], "index": device["index"], "model": device["model"],
            "health": health, "util": _round(device["utilization"], 3),
            "mem": _round(_ratio(device["memory_used_bytes"], device["memory_total_bytes"]), 3),
            "power": _round(device["power_watts"], 1),
            "temp": _round(device["temperature_celsius"], 1),
            "hot": health != DOWN and is_hot(device),
            "allocated": bool(device["holders"]),
            "idle": any(h["idle"] for h in device["holders"]),
            "spinning": any(h["spinning"] for h in device["holders"]) or bool(device["spinning"]),
            **({"act": shown_activity(device["activity"])} if device["activity"] else {})}


def node_brief(node: NodeState, status: str, now: float) -> dict[str, Any]:
    """A node's identity and state, without its devices."""
    data = node.data or {}
    return {"node_id": node.node_id, "hostname": node.hostname, "node_ip": node.node_ip,
            "url": node.url, "simulated": node.simulated, "status": status,
            "error": node.error,
            "snapshot_age_s": now - data["taken_at"] if data else None,
            "placement": data.get("placement", {}),
            "device_count": len(data.get("devices", ()))}


@dataclass
class NodePart:
    """One node's share of the view: kept between rounds while the node's data and
    status stay the same, so a round recomputes only the nodes that changed."""

    key: tuple[Any, ...]
    findings: list[Finding]  # the devices' findings (not the node's own)
    device_findings: dict[str, list[Finding]]
    health: dict[str, str]
    nvlink_domain: str
    totals: _Totals
    units: dict[str, Unit]
    history: dict[str, float | None]
    # The node's heatmap row, kept only encoded (so a round encodes only the rows that
    # changed), and its share of the columns form.
    row_json: bytes
    columns: RowColumns


def _node_part(node: NodeState, status: str, key: tuple[Any, ...]) -> NodePart:
    totals = _Totals()
    workloads = Workloads()
    findings: list[Finding] = []
    per_device: dict[str, list[Finding]] = {}
    health_of: dict[str, str] = {}
    cells = []
    devices = (node.data or {}).get("devices", ())
    for device in devices:
        found = device_findings(node, device)
        health = device_health(device, found, status)
        per_device[device["uuid"]] = found
        health_of[device["uuid"]] = health
        findings.extend(found)
        totals.add(device, health)
        workloads.add_device(node, device)
        cells.append(_heat_cell(device, health))
    placement = (node.data or {}).get("placement") or {}
    domain = placement.get("nvlink_domain", "")
    row = {"node_id": node.node_id, "hostname": node.hostname, "status": status,
           "nvlink_domain": domain, "devices": cells}
    return NodePart(key, findings, per_device, health_of, domain, totals, workloads.units,
                    _node_history(node.node_id, devices),
                    encode_compact(row), row_columns(row, placement))


def _node_history(node_id: str, devices: Iterable[dict[str, Any]]) -> dict[str, float | None]:
    devices = list(devices)
    utils = [d["utilization"] for d in devices if d["up"] and d["utilization"] is not None]
    values: dict[str, float | None] = {
        f"node.{node_id}.utilization": sum(utils) / len(utils) if utils else None,
        f"node.{node_id}.power_watts": (
            sum(d["power_watts"] or 0.0 for d in devices if d["up"] and not is_part(d))
            if devices else None)}
    for device in devices:
        values[f"device.{device['uuid']}.utilization"] = (
            device["utilization"] if device["up"] else None)
        values[f"device.{device['uuid']}.memory_used_bytes"] = (
            device["memory_used_bytes"] if device["up"] else None)
    return values


def _summary(node_total: int, statuses: dict[str, str], totals: _Totals,
             findings: list[Finding]) -> dict[str, Any]:
    """The cluster summary: nodes by status, devices by health, totals, findings by kind."""
    node_counts = Counter(statuses.values())
    models = [dict(model) for _, model in sorted(totals.models.items())]
    return {
        "nodes": {"total": node_total, **{s: node_counts.get(s, 0) for s in NODE_STATUSES}},
        "devices": {"total": totals.devices["total"], "up": totals.devices["up"],
                    "down": totals.devices[DOWN], "stale": totals.devices[STALE],
                    "warning": totals.devices[WARNING], "ok": totals.devices[OK],
                    "allocated": totals.devices["allocated"],
                    "idle_allocations": totals.devices["idle_allocations"]},
        "by_model": models,
        "utilization": {"mean": totals.util_sum / totals.util_count if totals.util_count
                        else None, "max": totals.util_max},
        "memory": {"used_bytes": totals.memory_used, "total_bytes": totals.memory_total},
        "power": {"watts": totals.power, "limit_watts": totals.power_limit},
        "findings": {"total": len(findings),
                     "by_severity": {s: sum(1 for f in findings if f["severity"] == s)
                                     for s in SEVERITIES},
                     "by_kind": dict(Counter(f["kind"] for f in findings))},
    }


def _reused_part(node: NodeState, status: str, parts: dict[str, NodePart]) -> NodePart:
    """Node `node`'s part, kept in `parts` while its data version, status and hostname are
    the same, made anew (and kept there) otherwise."""
    key = (id(node.data), node.data_version, status, node.hostname)
    part = parts.get(node.node_id)
    if part is None or part.key != key:
        part = parts[node.node_id] = _node_part(node, status, key)
    return part


def prepare_parts(nodes: Iterable[NodeState], refresh_s: float, parts: dict[str, NodePart],
                  now: float | None = None, pause: Callable[[], None] | None = None) -> None:
    """Make the parts of `nodes` (just fetched) ahead of the round's `build_view`, which
    reuses them: a round makes its changed nodes' parts while its fetches still run,
    rather than all of them after the last one. `pause()` as in `build_view`."""
    now = time.time() if now is None else now
    for number, node in enumerate(nodes):
        if pause is not None and number % PAUSE_EVERY == PAUSE_EVERY - 1:
            pause()
        _reused_part(node, node.status(now, refresh_s), parts)


def build_view(nodes: Iterable[NodeState], refresh_s: float, now: float | None = None,
               parts: dict[str, NodePart] | None = None,
               pause: Callable[[], None] | None = None,
               transfer_devices: transfers_view.LastKnownDevices | None = None) -> ClusterView:
    """Aggregate every node's latest data into one view.

    `parts` (node id -> NodePart), when given, is the previous round's per-node work: a
    node whose data version, status and hostname are unchanged reuses its part, and the
    dict is updated to this round's parts. `pause()`, when given, is called every
    PAUSE_EVERY nodes (a build in a thread lets the event loop's thread run there).
    `transfer_devices`, kept from round to round, names the devices of aborted transfers.
    """
    now = time.time() if now is None else now
    by_id = {node.node_id: node for node in nodes}
    parts = {} if parts is None else parts
    for gone in set(parts) - set(by_id):
        del parts[gone]
    statuses: dict[str, str] = {}
    totals = _Totals()
    units: dict[str, Unit] = {}
    findings: list[Finding] = []
    per_device: dict[str, list[Finding]] = {}
    health_of: dict[str, str] = {}
    node_history: dict[str, float | None] = {}
    heatmap_rows = []
    row_parts = []
    for number, node_id in enumerate(sorted(by_id)):
        if pause is not None and number % PAUSE_EVERY == PAUSE_EVERY - 1:
            pause()
        node = by_id[node_id]
        status = statuses[node_id] = node.status(now, refresh_s)
        part = _reused_part(node, status, parts)
        own = findings_of.node_finding(node, status, now)
        if own is not None:
            findings.append(own)
        findings.extend(part.findings)
        per_device.update(part.device_findings)
        health_of.update(part.health)
        totals.merge(part.totals)
        merge_units(units, part.units)
        node_history.update(part.history)
        heatmap_rows.append(part.row_json)
        row_parts.append(part)
    transfers = transfers_view.build_transfers(by_id, units, now, transfer_devices)
    findings.extend(transfers.findings)
    findings_of.ordered(findings)
    summary = _summary(len(by_id), statuses, totals, findings)
    return ClusterView(
        generated_at=now, refresh_s=refresh_s, nodes=by_id, statuses=statuses, summary=summary,
        findings=findings, device_findings=per_device, health=health_of,
        jobs=jobs_of(units), units=units,
        actors={u["actor_id"]: k for k, u in units.items() if u["actor_id"]},
        tasks={u["task_id"]: k for k, u in units.items() if u["task_id"]},
        node_history=node_history, transfers=transfers, heatmap_rows=heatmap_rows,
        parts=row_parts,
    )


def history_values(view: ClusterView) -> dict[str, float | None]:
    """The values one round adds to the history: cluster, per node and per device."""
    summary = view.summary
    return {
        "cluster.utilization": summary["utilization"]["mean"],
        "cluster.memory_used_bytes": summary["memory"]["used_bytes"],
        "cluster.power_watts": summary["power"]["watts"],
        "cluster.idle_allocations": summary["devices"]["idle_allocations"],
        "cluster.devices_down": summary["devices"]["down"],
        **view.node_history,
    }


# Rows per piece of the heatmap's answer (about half a megabyte of an 8-device fleet).
HEATMAP_ROWS_PER_PIECE = 256


def heatmap_pieces(view: ClusterView) -> Iterator[bytes]:
    """The heatmap endpoint's JSON in pieces, joined from the rows encoded with each node's
    part: the answer is written from them, so no second copy of the whole is kept."""
    rows = view.heatmap_rows
    yield b'{"generated_at":' + json.dumps(view.generated_at).encode() + b',"nodes":['
    for start in range(0, len(rows), HEATMAP_ROWS_PER_PIECE):
        piece = b",".join(rows[start:start + HEATMAP_ROWS_PER_PIECE])
        yield b"," + piece if start else piece
    yield b"]}"


def heatmap_length(view: ClusterView) -> int:
    """The byte length of what heatmap_pieces(view) yields."""
    rows = view.heatmap_rows
    return (len(json.dumps(view.generated_at)) + len(b'{"generated_at":,"nodes":[]}')
            + sum(map(len, rows)) + max(len(rows) - 1, 0))


def heatmap_body(view: ClusterView) -> bytes:
    """The heatmap endpoint's JSON as one body."""
    return b"".join(heatmap_pieces(view))


def empty_view(refresh_s: float) -> ClusterView:
    return build_view([], refresh_s)



