"""`GET /api/v1/record?last=10m[&identities=keep]`: the agent's recent history as a scenario.

Read-only; served behind the same authentication as /api/v1/snapshot (the
agent's exposure guard covers every endpoint but /healthz). The scenario is
built off the event loop: ten minutes of an eight-GPU node take a moment.
The scenario writer (and the simulator's scenario checks it uses) is imported
on the first request, so an agent nobody asks for a recording does not hold it.
"""

from __future__ import annotations

import asyncio

from ..backends.calls import CALL_CPU_S
from ..httpd import Handler, Request, Response, json_error, json_response
from .command import parse_duration
from .history import History

PATH = "/api/v1/record"
PARAMETERS = frozenset({"last", "identities"})
DESCRIPTION = ("the last minutes of this node as a scenario file (?last=10m; replay with "
               "ray-accel agent --simulate FILE)")


def record_handler(history: History) -> Handler:
    """The handler serving `history` as a scenario."""

    async def record(request: Request) -> Response:
        try:
            last_s = parse_duration(request.param("last", "10m"))
        except ValueError as error:
            return json_error(400, f"last: {error}")
        identities = request.param("identities", "replace")
        if identities not in ("keep", "replace"):
            return json_error(400, f"identities: {identities!r} is not keep or replace")
        recording = history.recording(last_s)
        from .scenario_file import NothingRecorded, build_scenario

        try:
            document = await asyncio.to_thread(
                build_scenario, recording, keep_identities=identities == "keep",
                call_costs={k: list(v) for k, v in CALL_CPU_S.items()})
        except NothingRecorded as error:
            return json_error(404, f"{error} in the last {last_s:g} s")
        return json_response(document, compact=True)

    return record
