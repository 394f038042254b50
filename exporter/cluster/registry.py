"""Agents announce themselves in the Ray cluster's GCS key-value store.

Each agent that found its Ray node keeps one record under the key
`agent/<node id>` of the `ray_accel` namespace: where it serves, its pid,
host, start time, whether its hardware is simulated, and a heartbeat time it
refreshes every `heartbeat_s`. A record whose heartbeat is older than a few
intervals belongs to an agent that died without cleaning up; readers skip it.
A clean stop deletes the record. `ray-accel status`, the Prometheus discovery
file and the supervisor of deployed agents all read these records.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from ..attribution.ray_sources import RayNotFound, RaySourceError, RaySources
from ..web_auth import is_loopback
from .gcs import ClusterGcs

if TYPE_CHECKING:
    from ..config import AgentConfig
    from ..extensions import AgentHandle

log = logging.getLogger(__name__)

NAMESPACE = "ray_accel"
KEY_PREFIX = "agent/"
# A heartbeat this many intervals old (plus a margin for a busy GCS) marks a dead agent.
MISSED_HEARTBEATS = 3
STALE_MARGIN_S = 5.0
ALIVE_NODES_TTL_S = 30.0  # how long a listing of the cluster's alive nodes stands
_WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::", "[::]"})


@dataclass(frozen=True)
class AgentRecord:
    """What one agent registers about itself."""

    node_id: str
    node_ip: str
    url: str
    pid: int
    hostname: str
    started_at: float
    heartbeat_at: float
    heartbeat_s: float
    simulated: bool
    deployed: bool
    version: str = ""

    @property
    def key(self) -> str:
        return KEY_PREFIX + self.node_id

    @property
    def target(self) -> str:
        """host:port, as a Prometheus target."""
        return urlsplit(self.url).netloc

    def age_s(self, now: float | None = None) -> float:
        """Seconds since the last heartbeat."""
        return max((time.time() if now is None else now) - self.heartbeat_at, 0.0)

    def is_live(self, now: float | None = None) -> bool:
        """True while the heartbeat is recent enough for the agent to be running."""
        return self.age_s(now) <= MISSED_HEARTBEATS * self.heartbeat_s + STALE_MARGIN_S

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> AgentRecord:
        """Parse a stored record; `ValueError` when it is not one."""
        try:
            doc = json.loads(raw)
            # Fields a newer agent may add are ignored; missing ones are an error.
            return cls(**{k: v for k, v in doc.items() if k in cls.__dataclass_fields__})
        except (json.JSONDecodeError, AttributeError, TypeError) as error:
            raise ValueError(f"not an agent record: {error}") from error


class AgentRegistry:
    """The agent records of one cluster."""

    def __init__(self, gcs: ClusterGcs) -> None:
        self.gcs = gcs
        self._alive_nodes: tuple[float, frozenset[str]] | None = None  # (asked at, ids)

    def put(self, record: AgentRecord) -> None:
        self.gcs.kv_put(NAMESPACE, record.key, record.to_json())

    def get(self, node_id: str) -> AgentRecord | None:
        raw = self.gcs.kv_get(NAMESPACE, KEY_PREFIX + node_id)
        return _parse(KEY_PREFIX + node_id, raw) if raw is not None else None

    def records(self) -> list[AgentRecord]:
        """Every record, live or not, sorted by node id; unreadable entries are skipped."""
        found = (_parse(key, raw) for key, raw in self.gcs.kv_items(NAMESPACE, KEY_PREFIX).items())
        return sorted((r for r in found if r is not None), key=lambda r: r.node_id)

    def live(self, now: float | None = None) -> list[AgentRecord]:
        """The records whose agents are still heart-beating."""
        return [r for r in self.records() if r.is_live(now)]

    def watched(self, now: float | None = None) -> list[AgentRecord]:
        """The records the cluster view follows: agents still heart-beating, and agents that
        stopped on a node Ray still lists as alive (killed, crashed, hung), so that node
        stays in view, unreachable with its last data, instead of dropping out of it. The
        record of a node Ray no longer lists (scaled down, gone) is left out."""
        now = time.time() if now is None else now
        records = self.records()
        if all(r.is_live(now) for r in records):
            return records
        alive = self._alive_node_ids()
        return [r for r in records if r.is_live(now) or r.node_id in alive]

    def _alive_node_ids(self) -> frozenset[str]:
        """The ids of the nodes Ray lists as alive, asked at most every ALIVE_NODES_TTL_S
        (a large cluster's listing is megabytes); the last answer stands while the GCS
        does not answer."""
        asked = time.monotonic()
        if self._alive_nodes is not None and asked - self._alive_nodes[0] < ALIVE_NODES_TTL_S:
            return self._alive_nodes[1]
        try:
            ids = frozenset(n.node_id for n in self.gcs.nodes(alive_only=True))
        except RaySourceError as error:
            log.warning("cannot list the cluster's alive nodes: %s", error)
            return self._alive_nodes[1] if self._alive_nodes is not None else frozenset()
        self._alive_nodes = (asked, ids)
        return ids

    def remove(self, node_id: str, pid: int | None = None) -> bool:
        """Delete a node's record; with `pid`, only while it is still that process's."""
        if pid is not None:
            current = self.get(node_id)
            if current is None or current.pid != pid:
                return False
        return self.gcs.kv_delete(NAMESPACE, KEY_PREFIX + node_id)


def _parse(key: str, raw: bytes) -> AgentRecord | None:
    try:
        return AgentRecord.from_json(raw)
    except ValueError as error:
        log.warning("skipping registry entry %s: %s", key, error)
        return None


def _gone(record: AgentRecord) -> bool:
    """True when the record's process ran on this host and has exited (a predecessor)."""
    if record.hostname != socket.gethostname():
        return False
    try:
        os.kill(record.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


class NodeTaken(RaySourceError):
    """Another live agent holds the node's registration."""


def _other_live_agent(current: AgentRecord | None, mine: AgentRecord) -> AgentRecord | None:
    """`current` where it is another agent's live record of the node: the first agent of a
    node keeps its registration, so that the cluster view and discovery do not flip
    between two agents that would replace each other's record."""
    if current is None or (current.pid, current.hostname, current.started_at) == (
            mine.pid, mine.hostname, mine.started_at):
        return None
    return current if current.is_live() and not _gone(current) else None


def loopback_only(url: str, node_ip: str) -> bool:
    """Whether `url` reaches the agent from its own host only, on a node that the rest of
    the cluster reaches at `node_ip`."""
    return is_loopback(urlsplit(url).hostname or "") and not is_loopback(node_ip)


def advertised_url(host: str, port: int, node_ip: str, scheme: str = "http") -> str:
    """The URL others reach the agent at: the node's IP when it listens on every address."""
    if host in _WILDCARD_HOSTS:
        host = node_ip
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}:{port}"


class Registration:
    """Agent extension: registers the agent once it serves, heart-beats, deletes on stop.

    Finds its Ray node the way attribution does (the configured address and
    node id, else the node on this host) and retries every interval while Ray
    cannot be reached, so an agent started before its node still registers.
    """

    def __init__(self, config: AgentConfig) -> None:
        self.interval_s = config.register_interval_s
        self._config = config
        self._record: AgentRecord | None = None
        self._registry: AgentRegistry | None = None
        self._task: asyncio.Task | None = None
        self._stopping = asyncio.Event()
        self._last_error: str | None = None

    @property
    def record(self) -> AgentRecord | None:
        """The record as last written, None until the first registration succeeds."""
        return self._record

    async def start(self, agent: AgentHandle) -> None:
        self._task = asyncio.create_task(self._run(agent), name="ray-accel-registration")

    async def stop(self) -> None:
        # Let a heartbeat in flight finish rather than cancel it: its thread would
        # go on and could write the record again after it is deleted below.
        self._stopping.set()
        if self._task is not None:
            await self._task
            self._task = None
        if self._record is not None and self._registry is not None:
            try:
                await asyncio.to_thread(self._registry.remove, self._record.node_id,
                                        self._record.pid)
            except RaySourceError as error:
                log.warning("could not remove the registration: %s", error)
            await asyncio.to_thread(self._registry.gcs.close)

    async def _run(self, agent: AgentHandle) -> None:
        while not self._stopping.is_set():
            try:
                await asyncio.to_thread(self.beat, agent)
                self._report("")
            except (RayNotFound, RaySourceError) as error:
                self._report(str(error))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.interval_s)

    def beat(self, agent: AgentHandle) -> AgentRecord:
        """Write the record with a fresh heartbeat (finding the Ray node first if needed)."""
        if self._record is None or self._registry is None:
            self._record, self._registry = self._first_record(agent)
        record = replace(self._record, heartbeat_at=time.time())
        try:
            holder = _other_live_agent(self._registry.get(record.node_id), record)
            if holder is None:
                self._registry.put(record)
        except RaySourceError:
            # The node may have been replaced (a restarted raylet has a new id): look again.
            self._registry.gcs.close()
            self._record = self._registry = None
            raise
        if holder is not None:
            raise NodeTaken(
                f"node {record.node_id} already has a live agent (pid {holder.pid} on "
                f"{holder.hostname}, {holder.url}); this one stays unregistered while that "
                "one runs: run one agent per node")
        self._record = record
        return record

    def _first_record(self, agent: AgentHandle) -> tuple[AgentRecord, AgentRegistry]:
        with RaySources.discover(self._config.ray_address, self._config.ray_node_id) as sources:
            node = sources.node
        now = time.time()
        record = AgentRecord(
            node_id=node.node_id, node_ip=node.node_ip,
            url=advertised_url(self._config.host, agent.port or 0, node.node_ip,
                               agent.scheme),
            pid=os.getpid(), hostname=socket.gethostname(), started_at=now, heartbeat_at=now,
            heartbeat_s=self.interval_s,
            simulated=agent.node_labels.get("simulated") == "true",
            deployed=self._config.deployed, version=agent.facts.get("version", ""),
        )
        registry = AgentRegistry(ClusterGcs(node.gcs_address))
        if loopback_only(record.url, node.node_ip):
            log.warning("registering %s: it listens on loopback only, so only this host "
                        "reaches it (the head's Accelerators tab and a Prometheus elsewhere "
                        "do not); to be reached from the cluster, pass --host %s or "
                        "--host 0.0.0.0, with Ray's token on (docs/security.md)",
                        record.url, node.node_ip)
        return record, registry

    def _report(self, error: str) -> None:
        # Log changes only, so a cluster that stays away does not flood the log.
        if error == self._last_error:
            return
        if error:
            log.warning("not registered in the Ray cluster: %s", error)
        elif self._record is not None:
            log.info("registered in the Ray cluster as node %s at %s", self._record.node_id,
                     self._record.url)
        self._last_error = error
