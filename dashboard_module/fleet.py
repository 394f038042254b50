"""Synthetic fleets: many nodes' snapshot documents made from one real agent snapshot.

For tests and benchmarks of the aggregator at cluster scale (1000 nodes x 8
devices) without running 1000 agents: every copy gets its own Ray node id,
device UUIDs and (optionally) Ray job/actor ids, so nothing collides.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import re
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from aiohttp import web

from ..exporter.node_view import NOW_HEADER, TAKEN_AT_HEADER
from ..exporter.sinks.summary import content_version, encode, summary_document
from .collector import AgentTarget


def _hex(seed: str, length: int) -> str:
    digest = hashlib.sha256(seed.encode()).hexdigest()
    while len(digest) < length:
        digest += hashlib.sha256(digest.encode()).hexdigest()
    return digest[:length]


def node_id(number: int) -> str:
    """A Ray-shaped node id (56 hex digits) for fleet member `number`."""
    return _hex(f"node-{number}", 56)


class Fleet:
    """Renders fleet members of one template as JSON text (what an agent would answer)."""

    def __init__(self, template: dict[str, Any]) -> None:
        base = copy.deepcopy(template)
        base.setdefault("node", {})["ray_node_id"] = _NODE_MARK
        base.setdefault("attribution", {})["node_id"] = _NODE_MARK
        self._uuids = [d["uuid"] for d in base.get("devices", ()) if d.get("uuid")]
        self._text = json.dumps(base, separators=(",", ":"))
        self._summary_text = json.dumps(summary_document(base), separators=(",", ":"))
        names = [*sorted(self._uuids, key=len, reverse=True), _NODE_MARK]
        self._pattern = re.compile("|".join(re.escape(n) for n in names))

    def _posing(self, number: int, text: str) -> str:
        table = {uuid: f"GPU-{_hex(f'{number}-{uuid}', 8)}-{uuid[13:]}" for uuid in self._uuids}
        table[_NODE_MARK] = node_id(number)
        return self._pattern.sub(lambda match: table[match.group(0)], text)

    def text(self, number: int) -> str:
        """Node `number`'s full snapshot document."""
        return self._posing(number, self._text)

    def summary(self, number: int, generation: int = 0) -> tuple[bytes, str]:
        """Node `number`'s summary body and ETag; each `generation` draws 1 W more on its
        first device (a change of content, as a real node's power would make)."""
        doc = json.loads(self._posing(number, self._summary_text))
        if generation and doc["devices"]:
            first = doc["devices"][0]
            first["power_watts"] = (first.get("power_watts") or 0.0) + generation
        doc["version"] = content_version(doc)
        return encode(doc)


_NODE_MARK = "@@node-id@@"


def fleet_member(template: dict[str, Any], number: int) -> dict[str, Any]:
    """A copy of `template` posing as node `number` of a fleet, with its own ids."""
    return json.loads(Fleet(template).text(number))


def fleet(template: dict[str, Any], count: int) -> list[dict[str, Any]]:
    """`count` snapshot documents, one per synthetic node."""
    maker = Fleet(template)
    return [json.loads(maker.text(number)) for number in range(count)]


class FleetAnswers:
    """What a fleet's fake agents answer, whichever HTTP server serves them.

    `bodies(i)` is node i's snapshot body and `summaries(i)`, when given, its summary
    (body, ETag); None from either makes that request hang like a stuck agent until
    the server stops. `taken_at(i)`: when node i's snapshot was taken (an old one: a
    stuck agent). Counts the requests answered (snapshot, summary, not_modified).
    """

    def __init__(self, bodies: Callable[[int], bytes | None],
                 summaries: Callable[[int], tuple[bytes, str] | None] | None = None,
                 taken_at: Callable[[int], float] = lambda number: time.time()) -> None:
        self.bodies = bodies
        self.summaries = summaries
        self.taken_at = taken_at
        self.requests: Counter[str] = Counter()
        self.url = ""

    def summary_headers(self, number: int, etag: str) -> dict[str, str]:
        """The headers of node `number`'s summary answer, 200 or 304."""
        return {"ETag": etag, "Cache-Control": "no-cache",
                TAKEN_AT_HEADER: repr(self.taken_at(number)), NOW_HEADER: repr(time.time())}

    def unchanged(self, etag: str, if_none_match: str | None) -> bool:
        """Whether the summary is answered 304 (counted as such)."""
        if if_none_match != etag:
            return False
        self.requests["not_modified"] += 1
        return True

    def target(self, number: int) -> AgentTarget:
        """How the collector finds node `number`."""
        return AgentTarget(node_id(number), f"{self.url}/n/{number}", f"host-{number}")


class FleetServer(FleetAnswers):
    """One aiohttp server, as a real agent's, answering /n/<i>/api/v1/snapshot (and
    /summary) for many nodes (`FleetAnswers`); without `summaries` the summary path is
    404, as on an agent older than the summary. Use as an async context manager.
    """

    def __init__(self, bodies: Callable[[int], bytes | None],
                 summaries: Callable[[int], tuple[bytes, str] | None] | None = None,
                 taken_at: Callable[[int], float] = lambda number: time.time()) -> None:
        super().__init__(bodies, summaries, taken_at)
        self._runner: web.AppRunner | None = None
        self._release = asyncio.Event()

    async def __aenter__(self) -> FleetServer:
        @web.middleware
        async def count(request: web.Request, handler):
            self.requests[request.path.rsplit("/", 1)[-1]] += 1  # 404s too
            return await handler(request)

        async def snapshot(request: web.Request) -> web.Response:
            body = self.bodies(int(request.match_info["number"]))
            if body is None:
                await self._release.wait()
            return web.Response(body=body, content_type="application/json")

        async def summary(request: web.Request) -> web.Response:
            found = self.summaries(int(request.match_info["number"]))
            if found is None:
                await self._release.wait()
                raise web.HTTPServiceUnavailable()
            body, etag = found
            headers = self.summary_headers(int(request.match_info["number"]), etag)
            if self.unchanged(etag, request.headers.get("If-None-Match")):
                return web.Response(status=304, headers=headers)
            return web.Response(body=body, content_type="application/json", headers=headers)

        app = web.Application(middlewares=[count])
        app.router.add_get("/n/{number}/api/v1/snapshot", snapshot)
        if self.summaries is not None:
            app.router.add_get("/n/{number}/api/v1/summary", summary)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._release.set()
        if self._runner is not None:
            await self._runner.cleanup()
