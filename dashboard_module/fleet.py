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
from collections.abc import Callable
from typing import Any

from aiohttp import web

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
        names = [*sorted(self._uuids, key=len, reverse=True), _NODE_MARK]
        self._pattern = re.compile("|".join(re.escape(n) for n in names))

    def text(self, number: int) -> str:
        ident = node_id(number)
        table = {uuid: f"GPU-{_hex(f'{number}-{uuid}', 8)}-{uuid[13:]}" for uuid in self._uuids}
        table[_NODE_MARK] = ident
        return self._pattern.sub(lambda match: table[match.group(0)], self._text)


_NODE_MARK = "@@node-id@@"


def fleet_member(template: dict[str, Any], number: int) -> dict[str, Any]:
    """A copy of `template` posing as node `number` of a fleet, with its own ids."""
    return json.loads(Fleet(template).text(number))


def fleet(template: dict[str, Any], count: int) -> list[dict[str, Any]]:
    """`count` snapshot documents, one per synthetic node."""
    maker = Fleet(template)
    return [json.loads(maker.text(number)) for number in range(count)]


class FleetServer:
    """One HTTP server answering /n/<i>/api/v1/snapshot for many synthetic nodes.

    `bodies(i)` is node i's snapshot body; None makes node i hang like a stuck
    agent until the server stops. Use as an async context manager.
    """

    def __init__(self, bodies: Callable[[int], bytes | None]) -> None:
        self.bodies = bodies
        self.url = ""
        self._runner: web.AppRunner | None = None
        self._release = asyncio.Event()

    async def __aenter__(self) -> FleetServer:
        async def snapshot(request: web.Request) -> web.Response:
            body = self.bodies(int(request.match_info["number"]))
            if body is None:
                await self._release.wait()
            return web.Response(body=body, content_type="application/json")

        app = web.Application()
        app.router.add_get("/n/{number}/api/v1/snapshot", snapshot)
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

    def target(self, number: int) -> AgentTarget:
        """How the collector finds node `number`."""
        return AgentTarget(node_id(number), f"{self.url}/n/{number}", f"host-{number}")
