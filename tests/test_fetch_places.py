"""The places a round's requests take (dashboard_module/fetch_places.py), on their own:
taken in turn, passed on when given back, never lost to a waiter that gave up."""

from __future__ import annotations

import asyncio

import pytest

from ray_accel.dashboard_module.fetch_places import Places


def test_places_are_taken_in_turn_and_passed_on():
    async def scenario() -> list[str]:
        places, order = Places(1), []
        places.take_now()

        async def wait(name: str) -> None:
            await places.take()
            order.append(name)

        waiting = [asyncio.ensure_future(wait(name)) for name in ("first", "second")]
        await asyncio.sleep(0)
        assert not places.take_now()  # none free, and two wait
        places.give_back()
        await asyncio.sleep(0)
        places.give_back()
        await asyncio.gather(*waiting)
        places.give_back()
        assert places.free == 1
        return order

    assert asyncio.run(scenario()) == ["first", "second"]


def test_a_waiter_that_gave_up_leaves_no_trace():
    async def scenario() -> None:
        places = Places(1)
        await places.take()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.01):
                await places.take()
        places.give_back()
        assert places.take_now() and places.free == 0

    asyncio.run(scenario())


def test_a_place_given_to_a_waiter_cancelled_at_once_passes_on():
    async def scenario() -> None:
        places = Places(1)
        places.take_now()
        waiter = asyncio.ensure_future(places.take())
        await asyncio.sleep(0)  # it waits
        places.give_back()  # the place is its now...
        waiter.cancel()  # ...and it is cancelled before it runs again
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert places.take_now()

    asyncio.run(scenario())
