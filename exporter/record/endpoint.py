"""`GET /api/v1/record?last=10m[&identities=keep]`: the agent's recent history as a scenario.

Read-only; served behind the same authentication as /api/v1/snapshot (the
agent's exposure guard covers every endpoint but /healthz). Ten minutes of an
eight-GPU node take about 3 s of CPU and 50 MB to build, so the agent builds one
scenario at a time, off the event loop (unpacking the history and writing the
JSON included, so /healthz and /metrics keep answering meanwhile): a request
for a window already being built, or waiting to be, shares that build; at most
`MOST_BUILDS_WAITING` other windows wait for their turn, and beyond them a
request is refused with 503 and `Retry-After`. Each build runs in a process of
its own (apart.py), so what it takes goes back to the system when it ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable

from ..backends.calls import CALL_CPU_S
from ..httpd import Handler, Request, Response, json_error
from ..httpd.messages import JSON
from .apart import BuildFailed, build_apart
from .command import parse_duration
from .history import History

PATH = "/api/v1/record"
PARAMETERS = frozenset({"last", "identities"})
DESCRIPTION = ("the last minutes of this node as a scenario file (?last=10m; replay with "
               "ray-accel agent --simulate FILE)")
# Builds queued behind the one running, each for a window of its own: what a person
# asking for a few windows in turn needs, and at 3 s of CPU each, a bound on a flood.
MOST_BUILDS_WAITING = 3
RETRY_AFTER_S = 5


class Busy(Exception):
    """Too many builds are running or waiting to take another."""


class OneBuildAtATime:
    """Runs builds on a thread, one at a time; a build asked for under the key of one
    running or waiting is not started again: its askers share the one result."""

    def __init__(self, most_waiting: int = MOST_BUILDS_WAITING) -> None:
        self._most_waiting = most_waiting
        self._turn = asyncio.Lock()
        self._builds: dict[Hashable, asyncio.Future] = {}

    async def run(self, key: Hashable, build: Callable[[], Response]) -> Response:
        """`build()`'s result (shared with the other askers of `key`); `Busy` when full."""
        shared = self._builds.get(key)
        if shared is None:
            if len(self._builds) > self._most_waiting:  # the running one and those waiting
                raise Busy(f"{len(self._builds)} recordings are being built or waiting")
            shared = self._builds[key] = asyncio.ensure_future(self._build(key, build))
        # an asker that goes away leaves the build to the others
        return await asyncio.shield(shared)

    async def _build(self, key: Hashable, build: Callable[[], Response]) -> Response:
        try:
            async with self._turn:
                return await asyncio.to_thread(build)
        finally:
            del self._builds[key]


def _scenario_response(history: History, last_s: float, keep_identities: bool) -> Response:
    """The scenario of `history`'s last `last_s` seconds as a response (on a worker thread)."""
    costs = {k: list(v) for k, v in CALL_CPU_S.items()}
    try:
        status, body = build_apart(history.packed(), last_s, keep_identities, costs)
    except BuildFailed as failure:
        return json_error(500, f"the recording could not be built: {failure}")
    if status != 200:
        return json_error(status, body.decode())
    return Response(200, body, f"{JSON}; charset=utf-8")


def record_handler(history: History) -> Handler:
    """The handler serving `history` as a scenario."""
    builds = OneBuildAtATime()

    async def record(request: Request) -> Response:
        try:
            last_s = parse_duration(request.param("last", "10m"))
        except ValueError as error:
            return json_error(400, f"last: {error}")
        identities = request.param("identities", "replace")
        if identities not in ("keep", "replace"):
            return json_error(400, f"identities: {identities!r} is not keep or replace")
        keep = identities == "keep"
        try:
            return await builds.run((last_s, keep),
                                    lambda: _scenario_response(history, last_s, keep))
        except Busy as busy:
            refused = json_error(503, f"{busy}; ask again later")
            refused.headers["Retry-After"] = str(RETRY_AFTER_S)
            return refused

    return record
