"""Places for a round's requests to agents: agents that do not answer never hold up the rest.

A round asks every agent with at most `prompt` requests going at once, so the
head's work stays bounded. An agent that does not answer (hung, its host gone,
its network cut) would keep its place for a whole timeout: with a rack of them
the healthy agents waited behind, the round ran past its interval, and the whole
cluster's view went stale (3,000 nodes and 500 silent agents: 25 s rounds, three
quarters of the healthy nodes shown stale). So:

- A request holds a prompt place for its first `patience_s` at most (a healthy
  agent answers a summary in milliseconds); past that it waits out its timeout in
  one of the `quiet` places, if one is free.
- An agent that did not answer its last request (`silent`) is asked in a quiet
  place from the start, and only until the round's end: its timeout is cut to
  end with the round (`MIN_SILENT_TIMEOUT_S` at least), and where no quiet place
  comes free before then it is not asked this round (`NotAsked`). The collector
  starts those requests in the order the agents were last asked, the longest ago
  first, so that they take the quiet places in turn.

Quiet places are bounded too, each holding a connection: a quarter of the
process's file descriptors, `MAX_QUIET` at most.
"""

from __future__ import annotations

import asyncio
import resource
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

# A healthy agent answers a summary in milliseconds: in rounds over 10,000 fake agents on
# two cores (bench/aggregation.py) no fetch took 0.2 s, most of it the head's own work.
PATIENCE_S = 0.5
MIN_SILENT_TIMEOUT_S = 1.0
MAX_QUIET = 4096


class NotAsked(Exception):
    """A silent agent found no quiet place before the round's end: it was not asked."""


def quiet_places(at_least: int) -> int:
    """How many requests may wait on agents that do not answer: a quarter of the process's
    file descriptors, `MAX_QUIET` at most, `at_least` at least."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    fair_share = MAX_QUIET if soft == resource.RLIM_INFINITY else soft // 4
    return max(min(fair_share, MAX_QUIET), at_least)


class FetchPlaces:
    """One round's places: `prompt` for its requests, `quiet` for those waiting on agents
    that do not answer."""

    def __init__(self, prompt: int, quiet: int, timeout_s: float, ends_at: float,
                 patience_s: float = PATIENCE_S) -> None:
        """`timeout_s` is a request's timeout; `ends_at` (time.monotonic()) the round's end,
        which silent agents' requests end by."""
        self._prompt = asyncio.Semaphore(prompt)
        self._quiet = asyncio.Semaphore(quiet)
        self.timeout_s = timeout_s
        self.ends_at = ends_at
        self.patience_s = patience_s
        self.quiet_requests = 0  # requests that waited in a quiet place

    async def run(self, request: Callable[[float], Awaitable[T]], silent: bool) -> T:
        """`request(timeout_s)` once a place is free. TimeoutError (saying how long it
        waited) when the agent does not answer in time; NotAsked (see the module)."""
        if silent:
            return await self._run_silent(request)
        timeout_s = self.timeout_s
        await self._prompt.acquire()
        place = self._prompt
        answer = asyncio.ensure_future(request(timeout_s))
        try:
            done, _ = await asyncio.wait((answer,), timeout=self.patience_s)
            if not done and not self._quiet.locked():
                await self._quiet.acquire()  # one is free: taken without a wait
                place.release()
                place = self._quiet
                self.quiet_requests += 1
            return await _answered(answer, timeout_s)
        except BaseException:
            answer.cancel()
            raise
        finally:
            place.release()

    async def _run_silent(self, request: Callable[[float], Awaitable[T]]) -> T:
        try:
            async with asyncio.timeout(max(self.ends_at - time.monotonic(), 0.0)):
                await self._quiet.acquire()
        except TimeoutError:
            raise NotAsked() from None
        self.quiet_requests += 1
        try:
            timeout_s = min(self.timeout_s,
                            max(self.ends_at - time.monotonic(), MIN_SILENT_TIMEOUT_S))
            return await _answered(request(timeout_s), timeout_s)
        finally:
            self._quiet.release()


async def _answered(answer: Awaitable[T], timeout_s: float) -> T:
    try:
        return await answer
    except TimeoutError:
        raise TimeoutError(f"no answer within {timeout_s:g} s") from None

