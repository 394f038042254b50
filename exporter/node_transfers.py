"""A node's Ray Direct Transport transfers in the compact form of the node view.

The snapshot's `transfers` section (sinks/json.py) lists every transfer the
agent paired, both tasks in full. The node view (node_view.py), and so the
agent's summary and what the head keeps of every node, carries what the
Accelerators tab shows:

- `transfers`: each transfer's job, when it started (`since`, Unix seconds: it
  stays the same while the transfer lasts, so a summary does not change every
  cycle the way an age would), whether it is slow (in flight past the agent's
  `--transfer-report-after`) and stalled, the consuming task and both
  ends (task, actor, its class, node, state, devices). At most `MAX_LISTED`,
  oldest (so stalled) first; `dropped` counts the ones left out.
- `by_job`: per job, the transfers in flight and stalled and the oldest one's
  start, over all of them (the dropped ones included).
- `aborts`: per job, the stalled transfers Ray aborted since the agent started
  (jobs without one are left out), and `recent_aborts`: the latest of them with
  both ends, their age when last seen and when they were counted (`at`).
- `pairs`: this node's agent pairs the cluster's transfers (docs/transfers.md).

`from_snapshot()` reduces a snapshot's section, `from_summary()` reads a
summary's back: both give the same form, so the two agree.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

MAX_LISTED = 50
END_FIELDS = ("task_id", "actor_id", "actor_class", "node_id", "state")


# The compact form of a node that pairs nothing and saw no abort: one shared, read-only
# object (most nodes of a large cluster have nothing to carry).
EMPTY: Mapping[str, Any] = MappingProxyType({
    "pairs": False, "transfers": (), "dropped": 0, "by_job": MappingProxyType({}),
    "aborts": MappingProxyType({}), "recent_aborts": ()})


def is_empty(compact: Mapping[str, Any]) -> bool:
    """Nothing to carry (a summary then leaves the section out)."""
    return not any(compact[key] for key in EMPTY)


def _seconds(item: Any) -> float:
    """A time or an age as a float; ValueError unless it is a finite number."""
    seconds = float(item)
    if not math.isfinite(seconds):
        raise ValueError(f"a transfer's time is {item!r}")
    return seconds


def _end(doc: Mapping[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = {key: str(doc.get(key) or "") for key in END_FIELDS}
    found["devices"] = [str(uuid) for uuid in doc.get("devices") or () if uuid]
    return found


def _transfer(doc: Mapping[str, Any]) -> dict[str, Any]:
    return {"job_id": str(doc.get("job_id") or ""), "since": _seconds(doc["since"]),
            "stalled": bool(doc.get("stalled")), "slow": bool(doc.get("slow")),
            "consumer_task_id": str(doc.get("consumer_task_id") or ""),
            "source": _end(doc["source"]), "destination": _end(doc["destination"])}


def _abort(doc: Mapping[str, Any]) -> dict[str, Any]:
    return {"job_id": str(doc.get("job_id") or ""), "age_s": _seconds(doc["age_s"]),
            "at": _seconds(doc["at"]), "source": _end(doc["source"]),
            "destination": _end(doc["destination"])}


def _job(doc: Mapping[str, Any]) -> dict[str, Any]:
    return {"in_flight": int(doc["in_flight"]), "stalled": int(doc["stalled"]),
            "since": _seconds(doc["since"])}


def _aborts(section: Mapping[str, Any]) -> dict[str, Any]:
    """Both forms' aborts: counts per job (without the jobs that have none), the latest."""
    return {"aborts": {str(job): int(count) for job, count in
                       sorted((section.get("aborts") or {}).items()) if count},
            "recent_aborts": [_abort(a) for a in section.get("recent_aborts") or ()]}


def _started(transfer: Mapping[str, Any], taken_at: float) -> float:
    """When the transfer's first call was submitted (its age counts from there)."""
    created = [end.get("created_at") for end in (transfer["source"], transfer["destination"])]
    known = [float(c) for c in created if isinstance(c, int | float) and not isinstance(c, bool)]
    return min(known) if known else taken_at - float(transfer.get("age_s") or 0.0)


def from_snapshot(section: Any, taken_at: float) -> Mapping[str, Any]:
    """The compact form of a snapshot document's `transfers` section (absent: empty).

    Raises TypeError, AttributeError or ValueError on a malformed section.
    """
    if not section:
        return EMPTY
    try:
        return _reduced(section, taken_at)
    except KeyError as error:
        raise ValueError(f"a transfer lacks {error}") from error


def _reduced(section: Mapping[str, Any], taken_at: float) -> dict[str, Any]:
    transfers = sorted(({**t, "since": _started(t, taken_at)}
                        for t in section.get("transfers") or ()),
                       key=lambda t: (t["since"], str(t["source"].get("task_id", ""))))
    by_job: dict[str, dict[str, Any]] = {}
    for transfer in transfers:
        job = by_job.setdefault(str(transfer.get("job_id") or ""),
                                {"in_flight": 0, "stalled": 0, "since": transfer["since"]})
        job["in_flight"] += 1
        job["stalled"] += bool(transfer.get("stalled"))
        job["since"] = min(job["since"], transfer["since"])
    return {"pairs": bool(section.get("pairs_transfers")),
            "transfers": [_transfer(t) for t in transfers[:MAX_LISTED]],
            "dropped": max(len(transfers) - MAX_LISTED, 0),
            "by_job": {job: _job(counts) for job, counts in sorted(by_job.items())},
            **_aborts(section)}


def from_summary(section: Any) -> Mapping[str, Any]:
    """The compact form read back from a summary's `transfers` (absent: empty); more
    than MAX_LISTED transfers are cut there and counted as dropped.

    Raises TypeError, AttributeError or ValueError on a malformed section.
    """
    if not section:
        return EMPTY
    try:
        return _read(section)
    except KeyError as error:
        raise ValueError(f"a transfer lacks {error}") from error


def _read(section: Mapping[str, Any]) -> dict[str, Any]:
    listed = [_transfer(t) for t in section.get("transfers") or ()]
    return {"pairs": bool(section.get("pairs")),
            "transfers": listed[:MAX_LISTED],
            "dropped": int(section.get("dropped") or 0) + max(len(listed) - MAX_LISTED, 0),
            "by_job": {str(job): _job(counts)
                       for job, counts in sorted((section.get("by_job") or {}).items())},
            **_aborts(section)}
