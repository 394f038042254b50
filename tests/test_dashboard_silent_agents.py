"""Agents that take the head's requests and never answer (hung, their host gone, their
network cut) cost the round nothing but their own places (dashboard_module/fetch_places.py).

Before, each kept one of the round's few places for its whole timeout: with more of them
than places, the healthy agents waited behind them and the round ran past its interval.
Agents here are small aiohttp servers (tests/test_dashboard_collector_rounds.py) whose
silent numbers never answer.
"""

from __future__ import annotations

import asyncio

from test_dashboard_collector_rounds import Agents, summary

from ray_accel.dashboard_module.collector import ROUND_END_SHARE, AgentTarget, Collector
from ray_accel.dashboard_module.fetch_places import MIN_SILENT_TIMEOUT_S
from ray_accel.dashboard_module.fleet import node_id

SILENT = range(0, 12)  # first in the round's order: they would take the places first
HEALTHY = range(12, 24)
REFRESH_S = 2.0
FETCH_TIMEOUT_S = 5.0


def _collector(targets: list[AgentTarget], quiet_in_flight: int | None = None) -> Collector:
    async def discover() -> list[AgentTarget]:
        return targets

    return Collector(discover, refresh_s=REFRESH_S, fetch_timeout_s=FETCH_TIMEOUT_S,
                     spread=0.0, max_in_flight=4, quiet_in_flight=quiet_in_flight,
                     token=lambda: None)


def _waited_s(error: str) -> float:
    """The timeout an error of the form 'no answer within X s' names."""
    words = error.split()
    assert words[:3] == ["no", "answer", "within"] and words[4] == "s", error
    return float(words[3])


def test_silent_agents_do_not_hold_up_the_healthy_ones():
    async def scenario() -> None:
        async with Agents(summary) as agents:
            agents.silent.update(SILENT)
            collector = _collector(agents.targets(len(SILENT) + len(HEALTHY)))
            try:
                # Their first silence: each left its place after the patience, so no
                # healthy agent waited anywhere near a timeout.
                await collector.refresh()
                first = collector.last_round
                assert first.failures == len(SILENT) and first.quiet >= len(SILENT)
                healthy = [collector.nodes[node_id(n)] for n in HEALTHY]
                assert all(n.error == "" for n in healthy)
                assert max(n.fetch_duration_s for n in healthy) < FETCH_TIMEOUT_S
                silent = [collector.nodes[node_id(n)] for n in SILENT]
                assert all(n.silent and _waited_s(n.error) == FETCH_TIMEOUT_S for n in silent)

                # Known silent: asked outside the places, until the round's end only.
                await collector.refresh()
                second = collector.last_round
                assert second.failures == len(SILENT) and second.quiet >= len(SILENT)
                assert second.not_asked == 0
                for node in silent:
                    assert MIN_SILENT_TIMEOUT_S <= _waited_s(node.error) \
                        <= ROUND_END_SHARE * REFRESH_S
                statuses = collector.view.statuses
                assert {statuses[node_id(n)] for n in HEALTHY} == {"ok"}
                assert {statuses[node_id(n)] for n in SILENT} == {"unreachable"}

                # One answers again: asked the next round, it is back.
                agents.silent.discard(SILENT[0])
                await collector.refresh()
                back = collector.nodes[node_id(SILENT[0])]
                assert back.error == "" and not back.silent
                assert collector.view.statuses[node_id(SILENT[0])] == "ok"
                assert collector.last_round.failures == len(SILENT) - 1
            finally:
                await collector.stop()

    asyncio.run(scenario())


def test_silent_agents_beyond_the_quiet_places_wait_their_turn():
    silent = range(0, 6)

    async def scenario() -> None:
        async with Agents(summary) as agents:
            agents.silent.update(silent)
            collector = _collector(agents.targets(8), quiet_in_flight=2)
            try:
                await collector.refresh()
                before = {n: collector.nodes[node_id(n)].error for n in silent}
                assert all(before.values())
                await collector.refresh()
                stats = collector.last_round
                # Two quiet places, each held until the round's end: the rest were not asked.
                assert stats.not_asked >= len(silent) - 4
                assert stats.quiet + stats.not_asked == len(silent)
                assert stats.failures == stats.quiet
                assert stats.requests == 8
                not_asked = [n for n in silent
                             if collector.nodes[node_id(n)].error == before[n]]
                assert len(not_asked) == stats.not_asked  # asked ones waited less this time
                statuses = collector.view.statuses
                assert {statuses[node_id(n)] for n in silent} == {"unreachable"}
                assert {statuses[node_id(n)] for n in (6, 7)} == {"ok"}

                # Those asked longest ago go first: in two more rounds every one was asked.
                await collector.refresh()
                await collector.refresh()
                assert min(collector.nodes[node_id(n)].asked_round for n in silent) >= 1
            finally:
                await collector.stop()

    asyncio.run(scenario())
