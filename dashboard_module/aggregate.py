"""Cluster views computed from every node's reduced snapshot, once per refresh round.

`build_view()` walks all nodes once and produces everything the API serves:
the cluster summary, the heatmap of every device, the findings, and the
workload index (job -> actor/task/worker -> devices). Requests only read the
finished `ClusterView`; they never aggregate and never wait on an agent.
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..exporter import catalog as m
from ..exporter.node_view import HARMFUL_THROTTLE_REASONS
from . import transfers_view

# Device health, worst first.
DOWN, STALE, WARNING, OK = "down", "stale", "warning", "ok"
# Node status.
NODE_OK, NODE_STALE, NODE_UNREACHABLE, NODE_WAITING = "ok", "stale", "unreachable", "waiting"
SEVERITIES = ("critical", "warning", "info")
FINDING_KINDS = ("device_down", "node_unreachable", "node_stale", "device_stale",
                 "idle_allocation", "throttling", "ecc_uncorrected", "row_remap", "xid",
                 "pcie_downtrained", "link_down", "fabric_unhealthy", "spinning",
                 "collective_stall", *transfers_view.FINDING_KINDS)
# A lower PCIe generation than the maximum only counts as downtrained on a busy device:
# an idle device drops its link speed to save power (grafana/thresholds.py uses the same).
PCIE_BUSY_UTILIZATION = 0.10
# How many nodes a build walks between two calls of its `pause()` (about a millisecond's
# work when the nodes changed, less when their parts are reused).
PAUSE_EVERY = 32


@dataclass
class NodeState:
    """What the aggregator knows about one node's agent."""

    node_id: str
    url: str
    hostname: str = ""
    node_ip: str = ""
    simulated: bool = False
    data: dict[str, Any] | None = None  # the reduced snapshot (reduce.reduce_snapshot)
    fetched_at: float | None = None  # when the last good snapshot arrived
    error: str = ""  # why the last fetch failed; empty when it succeeded
    fetch_duration_s: float | None = None
    data_version: int = 0  # grows whenever `data` is replaced
    etag: str = ""  # the version of the summary `data` came from ("" for a full snapshot)
    has_summary: bool | None = None  # False once the agent answered 404 (an older agent)
    summary_missing_round: int = 0  # the round that 404 came in
    detailed: bool = True  # `data` is a full reduced snapshot (not a summary)

    def status(self, now: float, refresh_s: float) -> str:
        if self.data is None:
            return NODE_UNREACHABLE if self.error else NODE_WAITING
        if self.error:
            return NODE_UNREACHABLE
        interval = self.data.get("interval_s") or 1.0
        if now - self.data["taken_at"] > max(3 * interval, 2.0) + refresh_s:
            return NODE_STALE
        return NODE_OK


@dataclass
class ClusterView:
    """One round's aggregation; immutable once built."""

    generated_at: float
    refresh_s: float
    nodes: dict[str, NodeState]
    statuses: dict[str, str]
    summary: dict[str, Any]
    heatmap: list[dict[str, Any]]
    findings: list[dict[str, Any]]
    device_findings: dict[str, list[dict[str, Any]]]
    health: dict[str, str]  # device uuid -> health
    jobs: dict[str, dict[str, Any]]
    units: dict[str, dict[str, Any]]  # unit key -> actor/task/worker entry
    actors: dict[str, str] = field(default_factory=dict)  # actor id -> unit key
    tasks: dict[str, str] = field(default_factory=dict)  # task id -> unit key
    node_history: dict[str, float | None] = field(default_factory=dict)  # history keys
    encoded: dict[str, bytes] = field(default_factory=dict)  # answers encoded once
    heatmap_rows: list[bytes] = field(default_factory=list)  # each heatmap row as JSON
    transfers: transfers_view.TransfersView = field(default_factory=transfers_view.TransfersView)


def _finding(kind: str, severity: str, node: NodeState, message: str,
             device: dict[str, Any] | None = None, **details: Any) -> dict[str, Any]:
    found = {"kind": kind, "severity": severity, "node_id": node.node_id,
             "hostname": node.hostname, "message": message,
             "device_uuid": device["uuid"] if device else "",
             "device_index": device["index"] if device else ""}
    if details:
        found["details"] = details
    return found


def unhealthy_fabric(fabric: dict[str, Any] | None) -> str:
    """What is wrong with a GPU's NVLink fabric ("" when nothing, or when it has none).

    The tab's side of RayAcceleratorFabricUnhealthy: registration not completed, failed,
    or a health summary other than healthy.
    """
    if not fabric:
        return ""
    if fabric["state"] != m.FABRIC_STATE_COMPLETED:
        return f"registration {fabric['state_name'] or 'not completed'}"
    if fabric["status"]:
        return f"registration failed ({fabric['status_name'] or fabric['status']})"
    summary = fabric["health_summary"]
    if summary is None or summary == m.FABRIC_SUMMARY_HEALTHY:
        return ""
    issues = ", ".join(fabric["issues"])
    if fabric["incorrect_configuration"] not in ("", "none", "not_supported"):
        issues = issues.replace("incorrect_configuration",
                                f"incorrect_configuration ({fabric['incorrect_configuration']})")
    return f"{fabric['health_summary_name'] or 'not healthy'}" + (f": {issues}" if issues else "")


def _counted_errors(node: NodeState, device: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """Findings from the device's error counters: uncorrected ECC errors, XID events."""
    found = []
    if device["ecc_uncorrected"]:
        found.append(_finding("ecc_uncorrected", "critical", node,
                              f"{name}: {device['ecc_uncorrected']:.0f} uncorrected ECC errors",
                              device, count=device["ecc_uncorrected"]))
    if device["xid_errors"]:
        codes = ", ".join(f"XID {code} x{count:.0f}"
                          for code, count in sorted(device["xid_errors"].items()))
        found.append(_finding("xid", "critical", node, f"{name}: {codes}", device,
                              xid=device["xid_errors"]))
    return found


def device_findings(node: NodeState, device: dict[str, Any]) -> list[dict[str, Any]]:
    """Everything wrong with one device, most severe first."""
    name = f"{device['model']} #{device['index']}"
    if not device["up"]:
        # A device that does not answer keeps its counters (the XID that announced the
        # loss among them): what they say is still true.
        return [_finding("device_down", "critical", node, f"{name} is not answering", device,
                         errors=device["errors"]), *_counted_errors(node, device, name)]
    found = []
    if device["stale"]:
        found.append(_finding("device_stale", "warning", node,
                              f"{name}: values are {device['age_s'] or 0:.0f} s old", device))
    found += _counted_errors(node, device, name)
    if device["row_remap_failure"] or device["row_remap_pending"]:
        what = "failed" if device["row_remap_failure"] else "pending (needs a reset)"
        found.append(_finding("row_remap", "critical" if device["row_remap_failure"] else
                              "warning", node, f"{name}: row remap {what}", device))
    harmful = [r for r in device["throttle_reasons"] if r in HARMFUL_THROTTLE_REASONS]
    if harmful:
        found.append(_finding("throttling", "warning", node,
                              f"{name} throttled: {', '.join(harmful)}", device,
                              reasons=harmful))
    pcie = device["pcie"]
    width_low = (pcie["width"] is not None and pcie["width_max"] is not None
                 and pcie["width"] < pcie["width_max"])
    busy = (device["utilization"] or 0.0) > PCIE_BUSY_UTILIZATION
    gen_low = (busy and pcie["generation"] is not None and pcie["generation_max"] is not None
               and pcie["generation"] < pcie["generation_max"])
    if width_low or gen_low:
        found.append(_finding(
            "pcie_downtrained", "warning", node,
            f"{name}: PCIe Gen{pcie['generation'] or 0:.0f} x{pcie['width'] or 0:.0f} "
            f"(capable of Gen{pcie['generation_max'] or 0:.0f} x{pcie['width_max'] or 0:.0f})",
            device, **pcie))
    fabric_problem = unhealthy_fabric(device.get("fabric"))
    if fabric_problem:
        found.append(_finding("fabric_unhealthy", "critical", node,
                              f"{name}: NVLink fabric {fabric_problem}", device,
                              **device["fabric"]))
    down_links = [f"{link['link_type']} {link['index']}" for link in device["links"]
                  if link["up"] is False]
    if down_links:
        found.append(_finding("link_down", "warning", node,
                              f"{name}: {len(down_links)} link(s) down: {', '.join(down_links)}",
                              device, links=down_links))
    if device["collective_suspected_stall"]:
        found.append(_finding("collective_stall", "critical", node,
                              f"{name}: suspected hung collective (busy, its interconnect "
                              "counters flat, no real compute, for the detection window)", device,
                              holders=[h["ray_actor_id"] or h["pid"] for h in device["holders"]]))
    for holder in device["holders"]:
        who = holder["actor_class"] or holder["task_name"] or f"pid {holder['pid']}"
        details = {"pid": holder["pid"], "ray_job_id": holder["ray_job_id"],
                   "ray_actor_id": holder["ray_actor_id"], "ray_task_id": holder["ray_task_id"],
                   "fraction": holder["fraction"]}
        if holder["idle"]:
            found.append(_finding(
                "idle_allocation", "warning", node,
                f"{who} holds {holder['fraction']:g} of {name} and does not use it", device,
                **details))
        elif holder["spinning"]:
            found.append(_finding(
                "spinning", "warning", node,
                f"{who} holds {name} and spins on it: busy by NVML, its SMs nearly idle",
                device, **details))
    return found


def _health(device: dict[str, Any], findings: list[dict[str, Any]], node_status: str) -> str:
    if not device["up"]:
        return DOWN
    if device["stale"] or node_status != NODE_OK:
        return STALE
    if any(f["kind"] != "idle_allocation" for f in findings):
        return WARNING
    return OK


def _unit_key(identity: dict[str, Any], node_id: str) -> tuple[str, str]:
    if identity["ray_actor_id"]:
        return "actor", identity["ray_actor_id"]
    if identity["ray_task_id"]:
        return "task", identity["ray_task_id"]
    return "worker", f"{node_id}:{identity['pid']}"


def _ratio(used: float | None, total: float | None) -> float | None:
    return used / total if used is not None and total else None


class _Workloads:
    """Collects one node's actor/task/worker entries while its devices are walked."""

    def __init__(self) -> None:
        self.units: dict[str, dict[str, Any]] = {}

    def _unit(self, identity: dict[str, Any], node: NodeState) -> dict[str, Any]:
        kind, ident = _unit_key(identity, node.node_id)
        key = f"{kind}:{ident}"
        unit = self.units.get(key)
        if unit is None:
            unit = self.units[key] = {
                "key": key, "kind": kind, "job_id": identity["ray_job_id"],
                "actor_id": identity["ray_actor_id"], "actor_class": identity["actor_class"],
                "actor_name": identity["actor_name"], "task_id": identity["ray_task_id"],
                "task_name": identity["task_name"], "worker_id": identity["ray_worker_id"],
                "pid": identity["pid"], "node_id": node.node_id, "hostname": node.hostname,
                "devices": [], "gpus": 0.0, "idle": False,
            }
        return unit

    def add_device(self, node: NodeState, device: dict[str, Any]) -> None:
        processes = {p["pid"]: p for p in device["processes"]}
        seen = set()
        for holder in device["holders"]:
            unit = self._unit(holder, node)
            process = processes.get(holder["pid"], {})
            seen.add(holder["pid"])
            use = self._use(node, device, holder["fraction"], holder["idle"], process)
            use.update(spinning=holder["spinning"], shared=holder["shared"])
            if not holder["shared"] and device["activity"]:
                # a whole-device holder's activity is the device's (GPM measures per device)
                use["activity"] = _shown_activity({**device["activity"], **_tensor(device)})
            unit["devices"].append(use)
            unit["gpus"] += holder["fraction"]
            unit["idle"] = unit["idle"] or holder["idle"]
            if holder["ray_task_id"] and not unit["task_id"]:
                unit["task_id"], unit["task_name"] = holder["ray_task_id"], holder["task_name"]
        # Ray workers using a device they were not assigned (busy but unallocated).
        for pid, process in processes.items():
            if pid in seen or not process["ray_job_id"]:
                continue
            unit = self._unit(process, node)
            unit["devices"].append({**self._use(node, device, None, False, process),
                                    "spinning": False})

    @staticmethod
    def _use(node: NodeState, device: dict[str, Any], fraction: float | None, idle: bool,
             process: dict[str, Any]) -> dict[str, Any]:
        return {"node_id": node.node_id, "hostname": node.hostname, "uuid": device["uuid"],
                "index": device["index"], "model": device["model"], "fraction": fraction,
                "allocated": fraction is not None, "idle": idle,
                "utilization": device["utilization"],
                "memory_used_bytes": device["memory_used_bytes"],
                "memory_total_bytes": device["memory_total_bytes"],
                "process_memory_bytes": process.get("memory_bytes"),
                "process_sm_utilization": process.get("sm_utilization")}


def _shown_activity(activity: dict[str, float]) -> dict[str, float]:
    """Engine activity as the views show it: to the percent, as agents' summaries carry it."""
    return {engine: round(ratio, 2) for engine, ratio in activity.items()}


def _tensor(device: dict[str, Any]) -> dict[str, float]:
    """The device's any-tensor pipe activity as an engine of its activity, where measured."""
    tensor = (device.get("pipe_activity") or {}).get("tensor")
    return {} if tensor is None else {"tensor": tensor}


def _merge_units(into: dict[str, dict[str, Any]], units: dict[str, dict[str, Any]]) -> None:
    """Add one node's units to the cluster's; a unit seen on two nodes is merged in a copy
    (the node's own entries are cached between rounds and never changed)."""
    for key, unit in units.items():
        have = into.get(key)
        if have is None:
            into[key] = unit
        else:
            into[key] = {**have, "devices": have["devices"] + unit["devices"],
                         "gpus": have["gpus"] + unit["gpus"],
                         "idle": have["idle"] or unit["idle"]}


def _jobs(units: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    jobs: dict[str, dict[str, Any]] = {}
    for unit in units.values():
        job = jobs.setdefault(unit["job_id"], {
            "job_id": unit["job_id"], "actors": 0, "tasks": 0, "workers": 0,
            "gpus": 0.0, "devices": 0, "idle_allocations": 0, "nodes": 0,
            "units": [], "_devices": set(), "_nodes": set()})
        job[{"actor": "actors", "task": "tasks", "worker": "workers"}[unit["kind"]]] += 1
        job["gpus"] += unit["gpus"]
        job["idle_allocations"] += sum(1 for d in unit["devices"] if d["idle"])
        job["units"].append(unit["key"])
        job["_devices"].update(d["uuid"] for d in unit["devices"])
        job["_nodes"].update(d["node_id"] for d in unit["devices"])
    for job in jobs.values():
        job["devices"] = len(job.pop("_devices"))
        job["nodes"] = len(job.pop("_nodes"))
    return dict(sorted(jobs.items()))


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
            "allocated": bool(device["holders"]),
            "idle": any(h["idle"] for h in device["holders"]),
            "spinning": any(h["spinning"] for h in device["holders"]) or bool(device["spinning"]),
            **({"act": _shown_activity(device["activity"])} if device["activity"] else {})}


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
    findings: list[dict[str, Any]]  # the devices' findings (not the node's own)
    device_findings: dict[str, list[dict[str, Any]]]
    health: dict[str, str]
    cells: list[dict[str, Any]]
    nvlink_domain: str
    totals: _Totals
    units: dict[str, dict[str, Any]]
    history: dict[str, float | None]
    row: dict[str, Any]  # the node's heatmap row
    row_json: bytes  # the row encoded, so a round encodes only the rows that changed


def _node_part(node: NodeState, status: str, key: tuple[Any, ...]) -> NodePart:
    totals = _Totals()
    workloads = _Workloads()
    findings: list[dict[str, Any]] = []
    per_device: dict[str, list[dict[str, Any]]] = {}
    health_of: dict[str, str] = {}
    cells = []
    devices = (node.data or {}).get("devices", ())
    for device in devices:
        found = device_findings(node, device)
        health = _health(device, found, status)
        per_device[device["uuid"]] = found
        health_of[device["uuid"]] = health
        findings.extend(found)
        totals.add(device, health)
        workloads.add_device(node, device)
        cells.append(_heat_cell(device, health))
    domain = (node.data or {}).get("placement", {}).get("nvlink_domain", "")
    row = {"node_id": node.node_id, "hostname": node.hostname, "status": status,
           "nvlink_domain": domain, "devices": cells}
    return NodePart(key, findings, per_device, health_of, cells, domain, totals,
                    workloads.units, _node_history(node.node_id, devices), row,
                    json.dumps(row, separators=(",", ":")).encode())


def _node_history(node_id: str, devices: Iterable[dict[str, Any]]) -> dict[str, float | None]:
    devices = list(devices)
    utils = [d["utilization"] for d in devices if d["up"] and d["utilization"] is not None]
    values: dict[str, float | None] = {
        f"node.{node_id}.utilization": sum(utils) / len(utils) if utils else None,
        f"node.{node_id}.power_watts": (
            sum(d["power_watts"] or 0.0 for d in devices if d["up"]) if devices else None)}
    for device in devices:
        values[f"device.{device['uuid']}.utilization"] = (
            device["utilization"] if device["up"] else None)
        values[f"device.{device['uuid']}.memory_used_bytes"] = (
            device["memory_used_bytes"] if device["up"] else None)
    return values


def _node_finding(node: NodeState, status: str, now: float) -> dict[str, Any] | None:
    if status == NODE_UNREACHABLE:
        return _finding("node_unreachable", "critical", node,
                        f"agent at {node.url} does not answer: {node.error}")
    if status == NODE_STALE:
        age = now - node.data["taken_at"]
        return _finding("node_stale", "warning", node,
                        f"the agent's last snapshot is {age:.0f} s old")
    return None


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
    units: dict[str, dict[str, Any]] = {}
    findings: list[dict[str, Any]] = []
    per_device: dict[str, list[dict[str, Any]]] = {}
    health_of: dict[str, str] = {}
    node_history: dict[str, float | None] = {}
    heatmap = []
    heatmap_rows = []
    for number, node_id in enumerate(sorted(by_id)):
        if pause is not None and number % PAUSE_EVERY == PAUSE_EVERY - 1:
            pause()
        node = by_id[node_id]
        status = statuses[node_id] = node.status(now, refresh_s)
        key = (id(node.data), node.data_version, status, node.hostname)
        part = parts.get(node_id)
        if part is None or part.key != key:
            part = parts[node_id] = _node_part(node, status, key)
        node_finding = _node_finding(node, status, now)
        if node_finding is not None:
            findings.append(node_finding)
        findings.extend(part.findings)
        per_device.update(part.device_findings)
        health_of.update(part.health)
        totals.merge(part.totals)
        _merge_units(units, part.units)
        node_history.update(part.history)
        heatmap.append(part.row)
        heatmap_rows.append(part.row_json)
    transfers = transfers_view.build_transfers(by_id, units, now, transfer_devices)
    findings.extend(transfers.findings)
    rank = {s: i for i, s in enumerate(SEVERITIES)}
    findings.sort(key=lambda f: (rank[f["severity"]], f["kind"], f["node_id"],
                                 f["device_index"]))
    node_counts = Counter(statuses.values())
    models = [dict(model) for _, model in sorted(totals.models.items())]
    summary = {
        "nodes": {"total": len(by_id), **{s: node_counts.get(s, 0) for s in (
            NODE_OK, NODE_STALE, NODE_UNREACHABLE, NODE_WAITING)}},
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
    return ClusterView(
        generated_at=now, refresh_s=refresh_s, nodes=by_id, statuses=statuses, summary=summary,
        heatmap=heatmap, findings=findings, device_findings=per_device, health=health_of,
        jobs=_jobs(units), units=units,
        actors={u["actor_id"]: k for k, u in units.items() if u["actor_id"]},
        tasks={u["task_id"]: k for k, u in units.items() if u["task_id"]},
        node_history=node_history, transfers=transfers, heatmap_rows=heatmap_rows,
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


def heatmap_body(view: ClusterView) -> bytes:
    """The heatmap endpoint's JSON, made once per view from the rows encoded with each
    node's part (the collector makes it off the event loop as soon as the view is built)."""
    body = view.encoded.get("heatmap")
    if body is None:
        body = view.encoded["heatmap"] = b"".join((
            b'{"generated_at":', json.dumps(view.generated_at).encode(), b',"nodes":[',
            b",".join(view.heatmap_rows), b"]}"))
    return body


def empty_view(refresh_s: float) -> ClusterView:
    return build_view([], refresh_s)


def group_findings(findings: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for finding in findings:
        grouped[finding["node_id"]].append(finding)
    return grouped
