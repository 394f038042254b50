"""Finds every node's agent, pulls their snapshots in the background, keeps the latest view.

Each refresh round lists the live agents (from the GCS registry, or any
`discover` callable), fetches all their snapshots concurrently with a timeout
each and a cap on requests in flight, reduces them, and builds the next
`ClusterView`. A node whose agent fails keeps its last data, marked
unreachable. API requests read `collector.view` only: a slow agent delays the
next round, never a request.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import aiohttp

from ..exporter.agent_client import client_ssl_context, client_token
from ..exporter.background import BackgroundTask
from ..exporter.web_auth import auth_headers
from .aggregate import ClusterView, NodeState, build_view, empty_view, history_values
from .history import History
from .reduce import NotASnapshot, reduce_snapshot

log = logging.getLogger(__name__)

DEFAULT_REFRESH_S = 5.0
DEFAULT_FETCH_TIMEOUT_S = 3.0
DEFAULT_HISTORY_S = 600.0
MAX_IN_FLIGHT = 64
MAX_SNAPSHOT_BYTES = 64 * 2**20


@dataclass(frozen=True)
class AgentTarget:
    """Where one node's agent serves."""

    node_id: str
    url: str
    hostname: str = ""
    node_ip: str = ""
    simulated: bool = False


Discover = Callable[[], Awaitable[Sequence[AgentTarget]]]


def registry_discovery(gcs_address: str) -> Discover:
    """Live agents from the cluster's GCS registry (exporter/cluster/registry.py)."""
    from ..exporter.cluster.gcs import ClusterGcs
    from ..exporter.cluster.registry import AgentRegistry

    registry = AgentRegistry(ClusterGcs(gcs_address))

    async def discover() -> list[AgentTarget]:
        records = await asyncio.to_thread(registry.live)
        return [AgentTarget(r.node_id, r.url, r.hostname, r.node_ip, r.simulated)
                for r in records]

    return discover


async def _read_at_most(reply: aiohttp.ClientResponse, limit: int) -> bytes:
    """The whole body (read() returns what has arrived so far), refused beyond `limit`."""
    body = bytearray()
    while chunk := await reply.content.read(limit + 1 - len(body)):
        body += chunk
        if len(body) > limit:
            raise NotASnapshot(f"snapshot larger than {limit // 2**20} MiB")
    return bytes(body)


def _reduced(body: bytes) -> dict[str, Any]:
    return reduce_snapshot(json.loads(body))


class Collector:
    """Background refresh of every agent's snapshot, and the aggregated view."""

    def __init__(self, discover: Discover, refresh_s: float = DEFAULT_REFRESH_S,
                 fetch_timeout_s: float = DEFAULT_FETCH_TIMEOUT_S,
                 history_s: float = DEFAULT_HISTORY_S, max_in_flight: int = MAX_IN_FLIGHT,
                 token: Callable[[], str | None] = client_token) -> None:
        """`token` gives the token presented to agents (default: Ray's cluster token)."""
        self.discover = discover
        self.token = token
        self.refresh_s = refresh_s
        self.fetch_timeout_s = fetch_timeout_s
        self.max_in_flight = max_in_flight
        self.history = History(max(int(history_s / refresh_s), 1))
        self.nodes: dict[str, NodeState] = {}
        self.view: ClusterView = empty_view(refresh_s)
        self.rounds = 0
        self.last_round_at: float | None = None
        self.last_round_duration_s: float | None = None
        self.discovery_error = ""
        self._session: aiohttp.ClientSession | None = None
        self._refreshing = BackgroundTask("ray-accel-dashboard-refresh", self._loop)
        self._parser = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ray-accel-parse")

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        """Start refreshing in the background (the first round starts at once)."""
        self._refreshing.start()

    async def stop(self) -> None:
        await self._refreshing.stop()
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _loop(self) -> None:
        while True:
            started = time.monotonic()
            try:
                await self.refresh()
            except Exception:  # keep refreshing whatever one round did
                log.exception("refresh round failed")
            await asyncio.sleep(max(self.refresh_s - (time.monotonic() - started), 0.2))

    # -- one round -------------------------------------------------------------------------
    async def refresh(self) -> ClusterView:
        """Discover, fetch every agent, rebuild the view; returns it."""
        started = time.monotonic()
        try:
            targets = list(await self.discover())
            self.discovery_error = ""
        except Exception as error:  # the GCS away: keep the nodes known so far
            message = f"cannot list the agents: {error}"
            if message != self.discovery_error:  # log changes only
                log.warning("%s", message)
            self.discovery_error = message
            targets = None
        if targets is not None:
            self._track(targets)
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.max_in_flight,
                                               ssl=client_ssl_context()),
                timeout=aiohttp.ClientTimeout(total=self.fetch_timeout_s),
                headers=auth_headers(self.token()))
        limit = asyncio.Semaphore(self.max_in_flight)
        await asyncio.gather(*(self._fetch(node, limit) for node in list(self.nodes.values())))
        nodes = list(self.nodes.values())
        view = await asyncio.to_thread(build_view, nodes, self.refresh_s)
        self.history.record(view.generated_at, history_values(view))
        self.view = view
        self.rounds += 1
        self.last_round_at = view.generated_at
        self.last_round_duration_s = time.monotonic() - started
        return view

    def _track(self, targets: Sequence[AgentTarget]) -> None:
        wanted = {t.node_id: t for t in targets if t.node_id}
        for node_id in list(self.nodes):
            if node_id not in wanted:
                del self.nodes[node_id]  # the agent deregistered or stopped heart-beating
        for node_id, target in wanted.items():
            node = self.nodes.get(node_id)
            if node is None or node.url != target.url:
                self.nodes[node_id] = NodeState(node_id, target.url, target.hostname,
                                                target.node_ip, target.simulated)
            else:
                node.hostname, node.node_ip = target.hostname, target.node_ip

    async def _fetch(self, node: NodeState, limit: asyncio.Semaphore) -> None:
        async with limit:
            started = time.monotonic()
            try:
                async with self._session.get(node.url.rstrip("/") + "/api/v1/snapshot") as reply:
                    if reply.status != 200:
                        raise NotASnapshot(f"HTTP {reply.status}")
                    body = await _read_at_most(reply, MAX_SNAPSHOT_BYTES)
                # Parsed off the event loop (a 1000-node round would block it for
                # seconds), one at a time: more parsing threads would only take the
                # GIL from the loop more often.
                data = await asyncio.get_running_loop().run_in_executor(
                    self._parser, _reduced, body)
            except TimeoutError:
                node.error = f"no answer within {self.fetch_timeout_s:g} s"
            except (aiohttp.ClientError, OSError) as error:
                node.error = f"{type(error).__name__}: {error}" if str(error) else \
                    type(error).__name__
            except (NotASnapshot, ValueError) as error:
                node.error = f"bad snapshot: {error}"
            else:
                data["node_id"] = data["node_id"] or node.node_id
                node.data, node.error, node.fetched_at = data, "", time.time()
            node.fetch_duration_s = time.monotonic() - started

    def inject(self, node: NodeState) -> None:
        """Add a node with data already fetched (tests and benchmarks)."""
        self.nodes[node.node_id] = node
