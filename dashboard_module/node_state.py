"""What the head knows of one node's agent, and the node's status from it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Node status.
NODE_OK, NODE_STALE, NODE_UNREACHABLE, NODE_WAITING = "ok", "stale", "unreachable", "waiting"
NODE_STATUSES = (NODE_OK, NODE_STALE, NODE_UNREACHABLE, NODE_WAITING)


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
    silent: bool = False  # its last request got no answer in time (fetch_places.py)
    asked_round: int = -1  # the collector's round count when it was last asked
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
