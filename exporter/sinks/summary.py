"""The compact per-node summary, for `/api/v1/summary` and the head's refresh rounds.

The summary is the dashboard's reduced form of this cycle's snapshot document
(dashboard_module/reduce.py), cut down to what the cluster views read (summary,
heatmap, findings, workloads) and rounded to the resolution they show, so it
changes only when something a cluster view shows changes. It is a pure function
of the snapshot document: a summary and a full snapshot of the same cycle agree.
The agent that pairs the cluster's RDT transfers carries them too, compactly
and bounded in count (exporter/node_transfers.py).
The cycle number and the time it was taken are not part of it (they change every
cycle); the agent sends them as response headers, with the content's version as
the ETag.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from typing import Any

from .. import catalog as m
from ..httpd import Response
from ..model import Link, NodeSnapshot
from ..node_transfers import is_empty
from ..node_view import (
    CYCLE_HEADER,
    NOW_HEADER,
    SUMMARY_KIND,
    TAKEN_AT_HEADER,
    link_up,
    reduce_snapshot,
)
from .json import snapshot_document

SUMMARY_SCHEMA_VERSION = 1

# Device fields of the reduced snapshot the cluster views read, and the step each
# number is rounded to (None: kept as it is).
DEVICE_FIELDS: dict[str, float | None] = {
    "uuid": None, "index": None, "vendor": None, "model": None, "up": None, "stale": None,
    "utilization": 0.001, "memory_used_bytes": float(2**20), "memory_total_bytes": None,
    "power_watts": 1.0, "power_limit_watts": None, "temperature_celsius": 1.0,
    "temperature_sensor": None, "throttle_reasons": None, "pcie": None, "ecc_uncorrected": None,
    "row_remap_pending": None, "row_remap_failure": None, "xid_errors": None,
    "fabric": None, "holders": None, "processes": None, "allocated": None, "spinning": None,
    "collective_suspected_stall": None,
}
# The metrics those fields (and `activity`, `pipe_activity` and the links' state) are reduced
# from (node_view.py): the agent makes its summary of the snapshot document cut to these
# and to the links that are down (`summary_cut`).
SUMMARY_METRICS = frozenset({
    m.GPU_UTILIZATION, m.MEMORY_USAGE, m.MEMORY_LIMIT, m.POWER, m.POWER_LIMIT, m.TEMPERATURE,
    m.THROTTLE_ACTIVE, m.PCIE_GENERATION, m.PCIE_WIDTH, m.HW_ERRORS, m.ROW_REMAP_PENDING,
    m.ROW_REMAP_FAILURE, m.XID_ERRORS, m.FABRIC_STATE, m.FABRIC_STATUS, m.FABRIC_HEALTH_SUMMARY,
    m.FABRIC_INFO, m.FABRIC_HEALTH_ISSUE, m.DEVICE_SPINNING, m.ACTIVITY, m.PIPE_ACTIVITY,
    m.PROCESS_MEMORY_USAGE, m.PROCESS_UTILIZATION, m.LINK_UP,
})
ACTIVITY_STEP = 0.01
AGE_STEP_S = 1.0


def _rounded(number: Any, step: float | None) -> Any:
    if step is None or not isinstance(number, float):
        return number
    steps = round(number / step)
    return round(steps * step, 6) if step < 1 else int(steps * step)


def _present(item: Any) -> bool:
    return item is not None and item != "" and item != [] and item != {}


def _device(device: dict[str, Any]) -> dict[str, Any]:
    found = {key: _rounded(device[key], step) for key, step in DEVICE_FIELDS.items()
             if _present(device[key])}
    found["holders"] = [{k: v for k, v in h.items() if _present(v)}
                        for h in device["holders"]]
    found["processes"] = [{k: v for k, v in p.items() if _present(v)}
                          for p in device["processes"]]
    for field in ("activity", "pipe_activity"):  # GPM engine and pipe ratios
        if device.get(field):
            found[field] = {name: _rounded(ratio, ACTIVITY_STEP)
                            for name, ratio in sorted(device[field].items())}
    down = [{"link_type": link["link_type"], "index": link["index"], "up": False}
            for link in device["links"] if link["up"] is False]
    if down:
        found["links"] = down
    if not device["up"] and device["errors"]:  # what a down device's finding names
        found["errors"] = device["errors"]
    if device["stale"]:  # a fresh device's age changes every cycle and is not shown
        found["age_s"] = _rounded(device["age_s"] or 0.0, AGE_STEP_S)
    return found


def summary_document(snapshot_doc: dict[str, Any]) -> dict[str, Any]:
    """The summary of one snapshot document (`snapshot_document()`'s output)."""
    reduced = reduce_snapshot(snapshot_doc)
    body = {
        "kind": SUMMARY_KIND,
        "schema_version": SUMMARY_SCHEMA_VERSION,
        "node_id": reduced["node_id"],
        "interval_s": reduced["interval_s"],
        "placement": reduced["placement"],
        "knows_allocations": reduced["attribution"]["knows_allocations"],
        "devices": [_device(d) for d in reduced["devices"]],
    }
    if not is_empty(reduced["transfers"]):  # the cluster's transfers, on the pairing agent
        body["transfers"] = reduced["transfers"]
    body["version"] = content_version(body)
    return body


def _down(link: Link) -> bool:
    """Whether the link's document says it is down (`link_up()` of it is False)."""
    for reading in link.readings:
        if reading.metric == m.LINK_UP:  # the first, which `link_up()` reads
            return link_up({"values": {m.LINK_UP: [{"value": reading.value}]}}) is False
    return False


def summary_cut(snapshot: NodeSnapshot) -> dict[str, Any]:
    """`snapshot`'s document cut to what its summary is made of: the readings of
    `SUMMARY_METRICS`, and the links that are down (the only ones a summary lists).
    `summary_document()` gives the same summary of it as of the whole document, for about
    40 % less work (the links that are up are never made into documents)."""
    return snapshot_document(snapshot, SUMMARY_METRICS, links=_down)


def content_version(body: dict[str, Any]) -> str:
    """A digest of the summary's content (without its own version field)."""
    text = json.dumps({k: v for k, v in body.items() if k != "version"},
                      separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def encode(summary: dict[str, Any]) -> tuple[bytes, str]:
    """The summary's JSON body and its (strong) ETag."""
    return (json.dumps(summary, separators=(",", ":")).encode(),
            f'"{summary["version"]}"')


class SummaryCache:
    """The encoded summary of the latest snapshot, made once per cycle."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._for: NodeSnapshot | None = None
        self._encoded: tuple[bytes, str] = (b"", "")

    def get(self, snapshot: NodeSnapshot) -> tuple[bytes, str]:
        """(body, ETag) of `snapshot`'s summary."""
        with self._lock:
            if self._for is not snapshot:
                self._encoded = encode(summary_document(summary_cut(snapshot)))
                self._for = snapshot
            return self._encoded


def _matches(if_none_match: str | None, etag: str) -> bool:
    if not if_none_match:
        return False
    tags = {tag.strip().removeprefix("W/") for tag in if_none_match.split(",")}
    return "*" in tags or etag in tags


def summary_response(encoded: tuple[bytes, str], snapshot: NodeSnapshot,
                     if_none_match: str | None) -> Response:
    """200 with the body, or 304 without one when the client holds this version already."""
    body, etag = encoded
    headers = {"ETag": etag, "Cache-Control": "no-cache",
               TAKEN_AT_HEADER: repr(snapshot.taken_at), CYCLE_HEADER: str(snapshot.cycle),
               NOW_HEADER: repr(time.time())}
    if _matches(if_none_match, etag):
        return Response(status=304, headers=headers)
    return Response(body=body, content_type="application/json", headers=headers)
