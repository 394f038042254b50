"""A node whose clock is off the head's is judged by its own clock (NOW_HEADER).

Agents send the time they answered beside the time their sample was taken; the head
tells a sample's age on its own clock from the two. Without it, a node whose clock ran
a minute behind was shown stale every round, and one a minute ahead that had stopped
sampling was shown fresh for a minute. Agents here are small aiohttp servers
(tests/test_dashboard_collector_rounds.py) answering with the clocks each test gives.
"""

from __future__ import annotations

import asyncio
import time

from test_dashboard_collector_rounds import Agents, summary

from ray_accel.dashboard_module.collector import AgentTarget, Collector
from ray_accel.dashboard_module.fleet import node_id

BEHIND, AHEAD, AHEAD_AND_STUCK, WITHOUT_ITS_TIME = range(4)
SKEW_S = 60.0
STALE_AFTER_S = 4.0  # the summaries' 1 s interval: max(3 x 1 s, 2 s) + the 1 s refresh
WAIT_S = 60.0  # a limit for a round that never comes, not a speed target


def _collector(targets: list[AgentTarget]) -> Collector:
    async def discover() -> list[AgentTarget]:
        return targets

    return Collector(discover, refresh_s=1.0, fetch_timeout_s=5.0, spread=0.0,
                     token=lambda: None)


def test_sample_ages_are_told_on_the_heads_clock():
    stuck_at = time.time() + SKEW_S

    def clock(number: int) -> tuple[float, float | None]:
        now = time.time()
        return {BEHIND: (now - SKEW_S, now - SKEW_S), AHEAD: (now + SKEW_S, now + SKEW_S),
                AHEAD_AND_STUCK: (stuck_at, now + SKEW_S),
                WITHOUT_ITS_TIME: (now, None)}[number]

    async def scenario() -> None:
        async with Agents(summary) as agents:
            agents.clock = clock
            collector = _collector(agents.targets(4))
            try:
                await collector.refresh()
                statuses = collector.view.statuses
                assert {n: statuses[node_id(n)] for n in range(4)} == dict.fromkeys(
                    range(4), "ok")
                for number in range(4):
                    age = time.time() - collector.nodes[node_id(number)].data["taken_at"]
                    assert 0.0 <= age < STALE_AFTER_S, (number, age)
                # The agent a minute ahead stopped sampling: stale once its sample is
                # older than the limit by the head's clock, not a minute later.
                deadline = time.monotonic() + WAIT_S
                while collector.view.statuses[node_id(AHEAD_AND_STUCK)] == "ok" \
                        and time.monotonic() < deadline:
                    await asyncio.sleep(0.5)
                    await collector.refresh()
                statuses = collector.view.statuses
                assert statuses[node_id(AHEAD_AND_STUCK)] == "stale"
                assert {statuses[node_id(n)] for n in (BEHIND, AHEAD, WITHOUT_ITS_TIME)} \
                    == {"ok"}
            finally:
                await collector.stop()

    asyncio.run(scenario())


FUTURE, BROKEN_CLOCK, FUTURE_WITHOUT_ITS_TIME = range(3)


def test_a_sample_time_after_its_answer_is_refused_and_a_broken_clock_ignored():
    """A sample time after the agent's own answer time is a broken agent's (its node is
    unreachable, with why); without the agent's time, it counts as taken when the answer
    came, never later; an agent time years off is a broken header, not a clock to correct
    by."""
    def clock(number: int) -> tuple[float, float | None]:
        now = time.time()
        return {FUTURE: (now + 1e6, now), BROKEN_CLOCK: (now, now + 1e300),
                FUTURE_WITHOUT_ITS_TIME: (now + 1e6, None)}[number]

    async def scenario() -> None:
        async with Agents(summary) as agents:
            agents.clock = clock
            collector = _collector(agents.targets(3))
            try:
                await collector.refresh()
                statuses = collector.view.statuses
                assert statuses[node_id(FUTURE)] == "unreachable"
                assert "is after its" in collector.nodes[node_id(FUTURE)].error
                for number in (BROKEN_CLOCK, FUTURE_WITHOUT_ITS_TIME):
                    assert statuses[node_id(number)] == "ok"
                    age = time.time() - collector.nodes[node_id(number)].data["taken_at"]
                    assert 0.0 <= age < STALE_AFTER_S, (number, age)
            finally:
                await collector.stop()

    asyncio.run(scenario())
