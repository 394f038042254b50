"""The node page's full snapshot: fetched from that node's agent on demand, kept briefly.

Rounds fetch only summaries; a person opening one node costs one snapshot
request to that node, shared by everyone who opens it within `ttl_s`, and at
most `max_in_flight` such requests run at once across all nodes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from ..exporter.node_view import NotASnapshot
from .node_state import NodeState

DETAIL_TTL_S = 2.0
DETAIL_MAX_IN_FLIGHT = 8

FetchFull = Callable[[NodeState], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class Detail:
    """One node's full reduced snapshot, or why it could not be had."""

    data: dict[str, Any] | None
    error: str
    fetched_at: float  # time.monotonic()
    url: str


class NodeDetails:
    """A short cache of full snapshots with one request per node at a time."""

    def __init__(self, fetch_full: FetchFull, ttl_s: float = DETAIL_TTL_S,
                 max_in_flight: int = DETAIL_MAX_IN_FLIGHT) -> None:
        self._fetch_full = fetch_full
        self.ttl_s = ttl_s
        self._limit = asyncio.Semaphore(max_in_flight)
        self._cache: dict[str, Detail] = {}
        self._pending: dict[str, asyncio.Future[Detail]] = {}
        self.fetches = 0  # requests made to agents

    async def get(self, node: NodeState) -> Detail:
        """The node's full snapshot: its round data where that is one already, a cached
        copy younger than `ttl_s`, or a fresh fetch."""
        now = time.monotonic()
        if node.detailed and node.data is not None:
            return Detail(node.data, "", now, node.url)
        self._forget_expired(now)
        cached = self._cache.get(node.node_id)
        if cached is not None and cached.url == node.url:
            return cached
        pending = self._pending.get(node.node_id)
        if pending is None:
            pending = asyncio.ensure_future(self._fetch(node))
            self._pending[node.node_id] = pending
            pending.add_done_callback(lambda _: self._pending.pop(node.node_id, None))
        return await asyncio.shield(pending)

    def _forget_expired(self, now: float) -> None:
        for node_id in [n for n, d in self._cache.items() if now - d.fetched_at >= self.ttl_s]:
            del self._cache[node_id]

    async def _fetch(self, node: NodeState) -> Detail:
        async with self._limit:
            self.fetches += 1
            try:
                data, error = await self._fetch_full(node), ""
            except TimeoutError:
                data, error = None, "the agent did not answer in time"
            except (aiohttp.ClientError, OSError) as failure:
                data, error = None, f"{type(failure).__name__}: {failure}"
            except (NotASnapshot, ValueError) as failure:
                data, error = None, f"bad snapshot: {failure}"
        detail = self._cache[node.node_id] = Detail(data, error, time.monotonic(), node.url)
        return detail
