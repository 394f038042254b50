"""The node page's download: a node's recent history as a scenario file, from its agent.

`GET /accelerators/api/nodes/{node id}/record?last=10m[&identities=keep]` asks
that node's agent for `/api/v1/record` (with the head's token and TLS settings,
like the node page's snapshot) and hands its scenario on as an attachment;
`ray-accel agent --simulate FILE` replays it. Read-only, on demand: nothing of it
is fetched in the refresh rounds.
"""

from __future__ import annotations

import asyncio
import time
from urllib.parse import urlencode

import aiohttp
from aiohttp import web

from ..exporter.aiohttp_serving import json_error
from ..exporter.record.command import is_scenario_document, parse_duration
from .json_decode import decode
from .node_state import NodeState

DEFAULT_LAST = "10m"
# Building ten minutes of an eight-GPU node takes the agent about 3 s of CPU.
RECORD_TIMEOUT_S = 60.0
MAX_RECORD_BYTES = 256 * 2**20
# Recordings the head fetches at once (it holds each whole until handed on): so many
# downloads of many nodes at once cost the head no more than this many recordings.
MOST_FETCHES = 4
RETRY_AFTER_S = 5


class RecordRefused(Exception):
    """A bad `last` or `identities`: the message says which and why."""


def record_query(last: str | None, identities: str | None) -> dict[str, str]:
    """The agent's query for the head's parameters; RecordRefused on a bad one."""
    try:
        seconds = parse_duration(DEFAULT_LAST if last is None else last)
    except ValueError as error:
        raise RecordRefused(f"last: {error}") from None
    query = {"last": f"{seconds:g}s"}
    if identities not in (None, "keep", "replace"):
        raise RecordRefused(f"identities: {identities[:40]!r} is not keep or replace")
    if identities == "keep":
        query["identities"] = "keep"
    return query


def attachment_name(node_id: str, now: float | None = None) -> str:
    """The downloaded file's name: the node's id prefix and the UTC time."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    return f"ray-accel-{node_id[:12]}-{stamp}.json"


async def node_recording(session: aiohttp.ClientSession, node: NodeState,
                         query: dict[str, str]) -> web.Response:
    """The agent's scenario of its recent history, as a download (or why there is none)."""
    url = f"{node.url.rstrip('/')}/api/v1/record?{urlencode(query)}"
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=RECORD_TIMEOUT_S)
                               ) as reply:
            body = bytearray()
            async for chunk in reply.content.iter_chunked(2**16):
                body += chunk
                if len(body) > MAX_RECORD_BYTES:
                    return json_error(502, f"the agent's recording is larger than "
                                           f"{MAX_RECORD_BYTES // 2**20} MiB")
            status, kind = reply.status, reply.content_type
            retry_after = reply.headers.get("Retry-After")
    except TimeoutError:
        return json_error(504, f"the agent at {node.url} did not answer in "
                               f"{RECORD_TIMEOUT_S:g} s")
    except (aiohttp.ClientError, OSError) as failure:
        return json_error(502, f"the agent at {node.url} did not answer: "
                               f"{type(failure).__name__}: {failure}")
    if status == 200 and kind == "application/json":
        if not await asyncio.to_thread(_is_scenario, body):
            return json_error(502, f"the agent at {node.url} answered a recording that is "
                                   "not a scenario document (not a JSON object with devices)")
        return web.Response(body=bytes(body), content_type="application/json", headers={
            "Cache-Control": "no-store",
            "Content-Disposition": f'attachment; filename="{attachment_name(node.node_id)}"'})
    if status in (400, 404, 503) and kind == "application/json":  # the agent's own answer
        headers = {"Retry-After": retry_after} if status == 503 and retry_after else {}
        return web.Response(body=bytes(body), status=status, content_type="application/json",
                            headers=headers)
    return json_error(502, f"the agent at {node.url} answered HTTP {status} for its recording "
                           "(an agent without /api/v1/record, or a token it refuses)")


def _is_scenario(body: bytes | bytearray) -> bool:
    """Whether `body` is a scenario document: what the head hands on as a recording."""
    try:
        return is_scenario_document(decode(bytes(body)))
    except (ValueError, RecursionError):
        return False


class RecordFetches:
    """The head's fetches of recordings from agents, at most `most` at once; beyond them a
    download is refused with 503 and `Retry-After`, as an agent refuses builds beyond its
    own (exporter/record/endpoint.py)."""

    def __init__(self, most: int = MOST_FETCHES) -> None:
        self.most = most
        self.in_flight = 0

    async def fetch(self, session: aiohttp.ClientSession, node: NodeState,
                    query: dict[str, str]) -> web.Response:
        """`node_recording()`, or 503 where `most` fetches are under way."""
        if self.in_flight >= self.most:
            refused = json_error(503, f"{self.in_flight} recordings are being fetched from "
                                      "agents; ask again later")
            refused.headers["Retry-After"] = str(RETRY_AFTER_S)
            return refused
        self.in_flight += 1
        try:
            return await node_recording(session, node, query)
        finally:
            self.in_flight -= 1
