"""Parsing agents' answers in a worker thread, many per hand-over.

A round's changed summaries arrive one by one on the event loop. Handing each to
the parsing thread on its own costs a wake-up of that thread and, for its
answer, a write to the loop's self-pipe and a callback (at 10,000 nodes a
thousand of each per round, about a fifth of the parsing thread's time). A
`BatchParser` gathers what arrives within `delay_s` and parses the batch in one
job; each caller still awaits its own result (or its own exception).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, TypeVar

T = TypeVar("T")
# How long the first answer of a batch waits for others (a round spreads its fetches
# over seconds, so this adds at most this much to each node's fetch).
DEFAULT_DELAY_S = 0.02

Outcome = tuple[bool, Any]  # (ok, result or exception)


def _run_batch(jobs: list[tuple[Callable[[bytes], Any], bytes]],
               pause: Callable[[], None]) -> list[Outcome]:
    outcomes: list[Outcome] = []
    for number, (parse, body) in enumerate(jobs):
        if number:
            pause()
        try:
            outcomes.append((True, parse(body)))
        except Exception as error:  # handed to the one caller it belongs to
            outcomes.append((False, error))
    return outcomes


class BatchParser:
    """`await parse(fn, body)` runs `fn(body)` in `executor`, batched with others."""

    def __init__(self, executor: Executor, delay_s: float = DEFAULT_DELAY_S,
                 pause: Callable[[], None] = lambda: None) -> None:
        """`pause()` is called between two answers of a batch (the collector's pause hands the
        GIL to the event loop's thread if it waits: a batch of a hundred answers would
        otherwise hold it for up to the switch interval at each of the loop's turns)."""
        self._executor = executor
        self.delay_s = delay_s
        self._pause = pause
        self._jobs: list[tuple[Callable[[bytes], Any], bytes]] = []
        self._waiting: list[asyncio.Future[Any]] = []
        self._scheduled = False
        self.batches = 0  # hand-overs to the executor

    async def parse(self, parse: Callable[[bytes], T], body: bytes) -> T:
        """`parse(body)`'s result, computed in the executor (its exception re-raised)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._jobs.append((parse, body))
        self._waiting.append(future)
        if not self._scheduled:
            self._scheduled = True
            loop.call_later(self.delay_s, self._hand_over, loop)
        return await future

    def _hand_over(self, loop: asyncio.AbstractEventLoop) -> None:
        jobs, waiting = self._jobs, self._waiting
        self._jobs, self._waiting, self._scheduled = [], [], False
        self.batches += 1
        try:
            done = loop.run_in_executor(self._executor, _run_batch, jobs, self._pause)
        except RuntimeError as error:  # the executor is shut down (the collector stops)
            _fail(waiting, error)
            return
        done.add_done_callback(lambda finished: _settle(finished, waiting))


def _fail(waiting: list[asyncio.Future[Any]], error: BaseException | None) -> None:
    for future in waiting:
        if not future.done():
            future.cancel() if error is None else future.set_exception(error)


def _settle(finished: asyncio.Future[list[Outcome]], waiting: list[asyncio.Future[Any]]) -> None:
    if finished.cancelled() or finished.exception() is not None:
        _fail(waiting, None if finished.cancelled() else finished.exception())
        return
    for future, (ok, result) in zip(waiting, finished.result(), strict=True):
        if future.done():  # its caller was cancelled (a timeout)
            continue
        if ok:
            future.set_result(result)
        else:
            future.set_exception(result)
