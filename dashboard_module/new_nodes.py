"""Pacing a round's first requests to nodes the head has never asked.

A node's first summary is all new: decoding, reducing and making its share of
the view cost about ten times a 304. A head started beside 10,000 agents that
asked them all in one round spent four times the refresh interval on it, while
the nodes it had already asked kept changing (so the round after it found a
quarter of them changed and was late too). `NewNodes` starts such a node's
fetch only while fewer than `backlog` of them are unfinished (what waits on
the parsing thread); the others queue and start as earlier ones finish, until
the round's deadline; those still queued then are left for a later round (they
stay `waiting` in the view). Nodes already asked are never held back.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import Callable

from .node_state import NodeState


class NewNodes:
    """One round's admission of nodes never asked before."""

    def __init__(self, start: Callable[[NodeState], asyncio.Task[None]], backlog: int,
                 at_least: int, deadline: float | None) -> None:
        """`start(node)` starts a fetch; at most `backlog` of the admitted fetches are
        unfinished at once, except for the first `at_least` of the round; `deadline`
        (time.monotonic()) is when queued nodes stop being started (None: never)."""
        self._start = start
        self.backlog = backlog
        self.at_least = at_least
        self.deadline = deadline
        self.started: list[asyncio.Task[None]] = []
        self.admitted = 0
        self.deferred = 0
        self._unfinished = 0
        self._queue: collections.deque[NodeState] = collections.deque()
        self._emptied = asyncio.Event()

    def offer(self, node: NodeState) -> None:
        """Start `node`'s fetch now if there is room, else queue it."""
        if self._queue or (self.admitted >= self.at_least and self._unfinished >= self.backlog):
            self._queue.append(node)
            self._emptied.clear()
        else:
            self._admit(node)

    async def settle(self) -> None:
        """Wait until every queued node started or the deadline passed (those still queued
        are deferred); `started` then holds every fetch this round admitted."""
        if self._queue:
            timeout = None if self.deadline is None else \
                max(self.deadline - time.monotonic(), 0.0)
            with contextlib.suppress(TimeoutError):  # the deadline: the rest wait
                await asyncio.wait_for(self._emptied.wait(), timeout)
        self.deferred += len(self._queue)
        self._queue.clear()
        self.deadline = time.monotonic()  # nothing starts after this

    def _admit(self, node: NodeState) -> None:
        self.admitted += 1
        self._unfinished += 1
        task = self._start(node)
        task.add_done_callback(self._finished)
        self.started.append(task)

    def _finished(self, _: asyncio.Task[None]) -> None:
        self._unfinished -= 1
        past = self.deadline is not None and time.monotonic() >= self.deadline
        while self._queue and not past and self._unfinished < self.backlog:
            self._admit(self._queue.popleft())
        if not self._queue:
            self._emptied.set()
