"""A miss in flight (ingress/cache/flight.py): its followers get the leader's entry, or nothing when it had
none to share, and wait no longer than the route's deadlines while it does not move."""

from __future__ import annotations

import asyncio

from ingress.cache import ResponseCache
from ingress.cache.flight import Flight
from ingress.cache.settings import CacheSettings
from ingress.pipeline.cache import _follow
from ingress.settings import Timeouts


async def test_every_follower_gets_the_leaders_entry() -> None:
    flight = Flight()
    followers = [asyncio.create_task(flight.joined(1.0, 1.0)) for _ in range(3)]
    await asyncio.sleep(0)
    assert flight.waiting == 3
    flight.end(b"entry")
    flight.end(b"another")  # a flight ends once

    assert await asyncio.gather(*followers) == [b"entry"] * 3
    assert flight.waiting == 0 and await flight.joined(0.01, 0.01) == b"entry"


async def test_a_leader_with_nothing_to_share_frees_its_followers() -> None:
    flight = Flight()
    follower = asyncio.create_task(flight.joined(1.0, 1.0))
    await asyncio.sleep(0)
    flight.end(None)

    assert await follower is None and flight.ended


async def test_a_leader_that_moves_is_waited_for_past_the_first_deadline() -> None:
    flight = Flight()
    follower = asyncio.create_task(flight.joined(0.05, 0.2))
    for _ in range(6):  # 0.18 s in all, each move within the idle deadline, past the first one
        await asyncio.sleep(0.03)
        flight.moved()
    flight.end(b"entry")

    assert await follower == b"entry"


async def test_a_stalled_leader_is_let_go_and_no_longer_followed() -> None:
    cache = ResponseCache(CacheSettings())
    stalled = cache.flights["k"] = Flight()
    timeouts = Timeouts(connect=0.01, first_byte=0.02, idle=0.05)
    try:
        assert await _follow(cache, "k", stalled, timeouts) is None  # no move within connect + first_byte

        assert "k" not in cache.flights and not stalled.ended
        moving = cache.flights["k"] = Flight()
        moving.moved()
        started = asyncio.get_running_loop().time()
        assert await _follow(cache, "k", moving, timeouts) is None  # then no move within idle
        assert asyncio.get_running_loop().time() - started >= 0.05 and "k" not in cache.flights
    finally:
        await cache.close()
