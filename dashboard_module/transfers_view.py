"""The cluster's Ray Direct Transport transfers, for the Transfers view and its findings.

The agent on the head node pairs the whole cluster's transfers (docs/transfers.md)
and its node view carries them compactly (exporter/node_transfers.py): each
transfer's job, start, slow and stall flags and both ends. Here, once per round, they are
joined with the rest of the cluster: each end gets the node it runs on (from its
task, else from where its actor holds devices), that node's hostname, and the
devices its actor holds (index and model, from the holders of every node: the
pairing agent knows only its own node's). Per job: in flight, stalled, the oldest
one's age, aborts. Findings: `transfer_stalled` (both actors, their devices and
nodes, the age), `transfer_slow` (in flight past the agent's report threshold,
not stalled yet), `transfer_aborted` (Ray killed both actors of a stalled
transfer within `ABORT_WINDOW_S`). Suspected hung collectives are device
findings (`collective_stall`, findings.py).

Ray kills both actors of the transfers it aborts, so an abort's actors hold no
devices any more: `LastKnownDevices`, kept by the caller from round to round,
remembers the joined devices of both ends of every transfer seen stalled, and
an abort's ends without devices get them from there.

Ages count from each transfer's start to the round's time; when several agents
pair (`--transfer-pairing always`) each sees the whole cluster, so a transfer is
listed once (by its send's task id) and a job's counts are the largest any of
them gives, not their sum.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..exporter.attribution.transfers import MAX_RECENT_ABORTS
from ..exporter.node_transfers import EMPTY, MAX_LISTED, is_empty
from .findings import Finding, finding

STALLED, SLOW, ABORTED = "transfer_stalled", "transfer_slow", "transfer_aborted"
FINDING_KINDS = (STALLED, SLOW, ABORTED)
# How long an abort stays a finding (the alert rule's transfer_abort_window).
ABORT_WINDOW_S = 15 * 60.0


class NodeLike(Protocol):
    """What is read of a node (node_state.NodeState)."""

    node_id: str
    hostname: str
    data: dict[str, Any] | None


@dataclass(frozen=True)
class TransfersView:
    """One round's transfers, cluster-wide; JSON-ready dicts, oldest first."""

    generated_at: float = 0.0
    transfers: list[dict[str, Any]] = field(default_factory=list)
    by_job: dict[str, dict[str, Any]] = field(default_factory=dict)
    aborts: list[dict[str, Any]] = field(default_factory=list)  # the latest, newest first
    dropped: int = 0  # transfers the pairing agents counted but did not list
    pairing_nodes: list[dict[str, str]] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    def answer(self, job_id: str | None = None, node_id: str | None = None,
               collective_stalls: Iterable[dict[str, Any]] = ()) -> dict[str, Any]:
        """The API's answer, limited to one job's or one node's transfers when asked."""
        def shown(item: dict[str, Any]) -> bool:
            return ((job_id is None or item["job_id"] == job_id)
                    and (node_id is None or node_id in (item["source"]["node_id"],
                                                        item["destination"]["node_id"])))

        transfers = [t for t in self.transfers if shown(t)]
        aborts = [a for a in self.aborts if shown(a)]
        if node_id is None:
            jobs = [job for job in self.by_job.values()
                    if job_id is None or job["job_id"] == job_id]
        else:  # a node's share of a job is what its listed transfers say
            jobs = _jobs_of(transfers, aborts)
        ages = [job["oldest_age_s"] for job in jobs if job["oldest_age_s"] is not None]
        return {
            "generated_at": self.generated_at,
            "pairing_nodes": self.pairing_nodes,
            "in_flight": sum(job["in_flight"] for job in jobs),
            "stalled": sum(job["stalled"] for job in jobs),
            "oldest_age_s": max(ages) if ages else None,
            "dropped": self.dropped if job_id is None and node_id is None else 0,
            "by_job": jobs,
            "transfers": transfers,
            "aborts": aborts,
            "collective_stalls": [f for f in collective_stalls
                                  if node_id is None or f["node_id"] == node_id],
        }


def _jobs_of(transfers: list[dict[str, Any]],
             aborts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    jobs: dict[str, dict[str, Any]] = {}
    for transfer in transfers:
        job = jobs.setdefault(transfer["job_id"], _job_entry(transfer["job_id"]))
        job["in_flight"] += 1
        job["stalled"] += transfer["stalled"]
        job["oldest_age_s"] = max(job["oldest_age_s"] or 0.0, transfer["age_s"])
    for abort in aborts:
        jobs.setdefault(abort["job_id"], _job_entry(abort["job_id"]))["aborts"] += 1
    return _sorted_jobs(jobs)


def _job_entry(job_id: str) -> dict[str, Any]:
    return {"job_id": job_id, "in_flight": 0, "stalled": 0, "oldest_age_s": None, "aborts": 0}


def _sorted_jobs(jobs: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(jobs.values(), key=lambda j: (-j["stalled"], -j["in_flight"], j["job_id"]))


# A transfer between two actors of a job, as an abort names it too.
PairKey = tuple[str, str, str]


def _pair_key(item: Mapping[str, Any]) -> PairKey:
    return (item["job_id"], item["source"]["actor_id"], item["destination"]["actor_id"])


class LastKnownDevices:
    """The devices both ends of each transfer seen stalled held when last seen, by (job,
    source actor, destination actor); the latest `capacity` pairs (an agent lists at
    most MAX_LISTED transfers and keeps MAX_RECENT_ABORTS aborts)."""

    def __init__(self, capacity: int = MAX_LISTED + MAX_RECENT_ABORTS) -> None:
        self.capacity = capacity
        self._pairs: OrderedDict[PairKey, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = (
            OrderedDict())

    def __len__(self) -> int:
        return len(self._pairs)

    def remember(self, transfer: Mapping[str, Any]) -> None:
        """Keeps a joined stalled transfer's devices; an end now without any keeps its last."""
        key = _pair_key(transfer)
        source, destination = self._pairs.pop(key, ([], []))
        self._pairs[key] = (transfer["source"]["devices"] or source,
                            transfer["destination"]["devices"] or destination)
        while len(self._pairs) > self.capacity:
            self._pairs.popitem(last=False)

    def fill(self, abort: dict[str, Any]) -> None:
        """Gives an abort's ends that hold nothing now the devices they last held (and
        their node, where the end's task named none)."""
        key = _pair_key(abort)
        known = self._pairs.get(key)
        if known is None:
            return
        self._pairs.move_to_end(key)  # kept while the abort is still reported
        for end, devices in zip((abort["source"], abort["destination"]), known, strict=True):
            if not end["devices"] and devices:
                end["devices"] = devices
                if not end["node_id"]:  # a receive that never started names no node
                    end["node_id"], end["hostname"] = devices[0]["node_id"], devices[0]["hostname"]


class _Ends:
    """Joins a transfer end with its node, hostname and the devices its actor holds."""

    def __init__(self, nodes: Mapping[str, NodeLike], units: Mapping[str, dict[str, Any]],
                 actor_ids: set[str]) -> None:
        self.nodes = nodes
        self.units = {u["actor_id"]: u for u in units.values() if u["actor_id"] in actor_ids}

    def end(self, end: Mapping[str, Any]) -> dict[str, Any]:
        unit = self.units.get(end["actor_id"])
        node_id = end["node_id"] or (unit["node_id"] if unit else "")
        node = self.nodes.get(node_id)
        hostname = node.hostname if node is not None else unit["hostname"] if unit else ""
        uses = {use["uuid"]: use for use in unit["devices"]} if unit else {}
        named = end["devices"] or [uuid for uuid, use in uses.items() if use["allocated"]]
        devices = []
        for uuid in named:
            use = uses.get(uuid, {})
            devices.append({"uuid": uuid, "index": use.get("index", ""),
                            "model": use.get("model", ""),
                            "node_id": use.get("node_id", node_id),
                            "hostname": use.get("hostname", hostname)})
        return {"task_id": end["task_id"], "actor_id": end["actor_id"],
                "actor_class": end["actor_class"] or (unit["actor_class"] if unit else ""),
                "state": end["state"], "node_id": node_id, "hostname": hostname,
                "devices": devices}


def _who(end: Mapping[str, Any]) -> str:
    name = f"{end['actor_class'] or 'actor'} {end['actor_id'][:8]}"
    where = end["hostname"] or end["node_id"][:12] or "an unknown node"
    devices = ", ".join(f"#{d['index']}" if d["index"] else d["uuid"][:12]
                        for d in end["devices"])
    return f"{name} ({f'device {devices} on ' if devices else ''}{where})"


def _at(end: Mapping[str, Any], reporter: NodeLike) -> tuple[str, str]:
    """Where a finding about this end is filed: its node, else the reporting agent's."""
    if end["node_id"]:
        return end["node_id"], end["hostname"]
    return reporter.node_id, reporter.hostname


# A transfer in flight's findings: (kind, severity, how its message starts).
_IN_FLIGHT = {True: (STALLED, "critical", "transfer stalled for"),
              False: (SLOW, "info", "transfer in flight for")}


def _in_flight_finding(transfer: dict[str, Any], reporter: NodeLike) -> Finding:
    """`transfer_stalled` for a stalled transfer, `transfer_slow` for a slow one."""
    kind, severity, says = _IN_FLIGHT[transfer["stalled"]]
    source, destination = transfer["source"], transfer["destination"]
    node_id, hostname = _at(source, reporter)
    message = (f"{says} {transfer['age_s']:.0f} s: {_who(source)} → "
               f"{_who(destination)}, job {transfer['job_id']}")
    return finding(kind, severity, node_id, hostname, message,
                    (source["devices"] or [None])[0], job_id=transfer["job_id"],
                    age_s=transfer["age_s"], source=source, destination=destination,
                    consumer_task_id=transfer["consumer_task_id"])


def _aborted_finding(abort: dict[str, Any], reporter: NodeLike) -> Finding:
    source, destination = abort["source"], abort["destination"]
    node_id, hostname = _at(source, reporter)
    message = (f"Ray aborted a transfer stalled for {abort['age_s']:.0f} s "
               f"({abort['ago_s']:.0f} s ago) by killing both actors: {_who(source)} → "
               f"{_who(destination)}, job {abort['job_id']}")
    return finding(ABORTED, "warning", node_id, hostname, message,
                    (source["devices"] or [None])[0],
                    job_id=abort["job_id"], age_s=abort["age_s"], at=abort["at"],
                    source=source, destination=destination)


class _Merge:
    """Merges the pairing agents' compact transfers into the cluster's."""

    def __init__(self, ends: _Ends, now: float, last_known: LastKnownDevices) -> None:
        self.ends, self.now, self.last_known = ends, now, last_known
        self.transfers: dict[str, dict[str, Any]] = {}  # by the send's task id
        self.aborts: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.jobs: dict[str, dict[str, Any]] = {}
        self.findings: list[Finding] = []
        self.dropped = 0

    def add(self, node: NodeLike, compact: Mapping[str, Any]) -> None:
        self.dropped = max(self.dropped, compact["dropped"])
        listed_stalled: dict[str, int] = {}
        for item in compact["transfers"]:
            listed_stalled[item["job_id"]] = listed_stalled.get(item["job_id"], 0) + item["stalled"]
            self._transfer(node, item)
        for job_id, counts in compact["by_job"].items():
            job = self._job(job_id)
            job["in_flight"] = max(job["in_flight"], counts["in_flight"])
            job["stalled"] = max(job["stalled"], counts["stalled"])
            job["oldest_age_s"] = max(job["oldest_age_s"] or 0.0, self._age(counts["since"]))
            unlisted = counts["stalled"] - listed_stalled.get(job_id, 0)
            if unlisted > 0:
                self.findings.append(finding(
                    STALLED, "critical", node.node_id, node.hostname,
                    f"{unlisted} more stalled transfer(s) of job {job_id}, not listed (an agent "
                    "lists its oldest transfers only)", None, job_id=job_id, count=unlisted))
        for job_id, count in compact["aborts"].items():
            job = self._job(job_id)
            job["aborts"] = max(job["aborts"], count)
        for item in compact["recent_aborts"]:
            self._abort(node, item)

    def _age(self, since: float) -> float:
        return max(self.now - since, 0.0)

    def _job(self, job_id: str) -> dict[str, Any]:
        return self.jobs.setdefault(job_id, _job_entry(job_id))

    def _transfer(self, node: NodeLike, item: Mapping[str, Any]) -> None:
        key = item["source"]["task_id"]
        if key in self.transfers:
            return
        transfer = self.transfers[key] = {
            "job_id": item["job_id"], "since": item["since"], "age_s": self._age(item["since"]),
            "stalled": item["stalled"], "slow": item["slow"] or item["stalled"],
            "consumer_task_id": item["consumer_task_id"],
            "source": self.ends.end(item["source"]),
            "destination": self.ends.end(item["destination"]), "reported_by": node.node_id}
        if transfer["stalled"]:
            self.last_known.remember(transfer)
        if transfer["slow"]:  # stalled ones are slow too
            self.findings.append(_in_flight_finding(transfer, node))

    def _abort(self, node: NodeLike, item: Mapping[str, Any]) -> None:
        key = (item["source"]["actor_id"], item["destination"]["actor_id"], item["job_id"])
        if key in self.aborts:
            return
        abort = self.aborts[key] = {
            "job_id": item["job_id"], "age_s": item["age_s"], "at": item["at"],
            "ago_s": self._age(item["at"]), "source": self.ends.end(item["source"]),
            "destination": self.ends.end(item["destination"]), "reported_by": node.node_id}
        self.last_known.fill(abort)
        if abort["ago_s"] <= ABORT_WINDOW_S:
            self.findings.append(_aborted_finding(abort, node))


def build_transfers(nodes: Mapping[str, NodeLike], units: Mapping[str, dict[str, Any]],
                    now: float, last_known: LastKnownDevices | None = None) -> TransfersView:
    """The cluster's transfers from every node's compact transfers (node.data["transfers"]);
    `units` are the round's workload units (workloads.py), for the ends' devices;
    `last_known`, kept from round to round, gives aborts the devices their actors held."""
    reporting = sorted(((node, compact) for node in nodes.values()
                        if node.data and (compact := node.data.get("transfers", EMPTY))
                        is not EMPTY and not is_empty(compact)), key=lambda r: r[0].node_id)
    if not reporting:
        return TransfersView(generated_at=now)
    actor_ids = {end["actor_id"] for _, compact in reporting
                 for item in (*compact["transfers"], *compact["recent_aborts"])
                 for end in (item["source"], item["destination"])}
    merge = _Merge(_Ends(nodes, units, actor_ids), now,
                   LastKnownDevices() if last_known is None else last_known)
    for node, compact in reporting:
        merge.add(node, compact)
    return TransfersView(
        generated_at=now,
        transfers=sorted(merge.transfers.values(),
                         key=lambda t: (t["since"], t["source"]["task_id"])),
        by_job={job["job_id"]: job for job in _sorted_jobs(merge.jobs)},
        aborts=sorted(merge.aborts.values(), key=lambda a: -a["at"]),
        dropped=merge.dropped,
        pairing_nodes=[{"node_id": node.node_id, "hostname": node.hostname}
                       for node, compact in reporting if compact["pairs"]],
        findings=merge.findings)
