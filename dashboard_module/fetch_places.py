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
import collections
import contextlib
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


class Places:
    """A count of places, taken in the order asked for; like `asyncio.Semaphore`, with a
    `take_now()` that never waits (for a callback to move a request over)."""

    def __init__(self, count: int) -> None:
        self.free = count
        self._waiting: collections.deque[asyncio.Future[None]] = collections.deque()

    def take_now(self) -> bool:
        """Take a place if one is free and nobody waits for one."""
        if self.free and not self._waiting:
            self.free -= 1
            return True
        return False

    async def take(self) -> None:
        """Take a place, waiting for one in turn."""
        if self.take_now():
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        try:
            await waiter  # resolved by give_back: the place passes to it
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.give_back()  # it was given the place as it was cancelled: pass it on
            else:
                with contextlib.suppress(ValueError):  # (give_back may have dropped it)
                    self._waiting.remove(waiter)
            raise

    def give_back(self) -> None:
        """Give a place back: to the first still waiting, or free."""
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self.free += 1


class FetchPlaces:
    """One round's places: `prompt` for its requests, `quiet` for those waiting on agents
    that do not answer."""

    def __init__(self, prompt: int, quiet: int, timeout_s: float, ends_at: float,
                 patience_s: float = PATIENCE_S) -> None:
        """`timeout_s` is a request's timeout; `ends_at` (time.monotonic()) the round's end,
        which silent agents' requests end by."""
        self._prompt = Places(prompt)
        self._quiet = Places(quiet)
        self.timeout_s = timeout_s
        self.ends_at = ends_at
        self.patience_s = patience_s
        self.quiet_requests = 0  # requests that waited in a quiet place

    async def run(self, request: Callable[[float], Awaitable[T]], silent: bool) -> T:
        """`request(timeout_s)` once a place is free. TimeoutError (saying how long it
        waited) when the agent does not answer in time; NotAsked (see the module)."""
        if silent:
            return await self._run_silent(request)
        await self._prompt.take()
        held = [self._prompt]  # where the request's place is; _move may change it
        moving = asyncio.get_running_loop().call_later(self.patience_s, self._move, held)
        try:
            return await _answered(request(self.timeout_s), self.timeout_s)
        finally:
            moving.cancel()
            held[0].give_back()

    def _move(self, held: list[Places]) -> None:
        """A request past its patience: into a quiet place, if one is free now."""
        if self._quiet.take_now():
            held[0].give_back()
            held[0] = self._quiet
            self.quiet_requests += 1

    async def _run_silent(self, request: Callable[[float], Awaitable[T]]) -> T:
        try:
            async with asyncio.timeout(max(self.ends_at - time.monotonic(), 0.0)):
                await self._quiet.take()
        except TimeoutError:
            raise NotAsked() from None
        self.quiet_requests += 1
        try:
            timeout_s = min(self.timeout_s,
                            max(self.ends_at - time.monotonic(), MIN_SILENT_TIMEOUT_S))
            return await _answered(request(timeout_s), timeout_s)
        finally:
            self._quiet.give_back()


async def _answered(answer: Awaitable[T], timeout_s: float) -> T:
    try:
        return await answer
    except TimeoutError:
        raise TimeoutError(f"no answer within {timeout_s:g} s") from None

