"""A miss in flight (ingress/cache/flight.py): its followers get the leader's entry, or its stream's reads as
they come, or nothing when it had none to share; and wait no longer than the route's deadlines while it does
not move."""

from __future__ import annotations

import asyncio

from ingress import wire
from ingress.cache import ResponseCache
from ingress.cache.entries import STREAM, WHOLE, entry
from ingress.cache.flight import Flight
from ingress.cache.settings import CacheSettings
from ingress.pipeline.cache import _follow, _StoredClient, _TailClient
from ingress.settings import Timeouts


async def test_every_follower_gets_the_leaders_entry() -> None:
    flight = Flight(WHOLE)
    followers = [asyncio.create_task(flight.joined(1.0, 1.0)) for _ in range(3)]
    await asyncio.sleep(0)
    assert flight.joining == 3 and flight.waited
    flight.end(b"entry")
    flight.end(b"another")  # a flight ends once

    assert await asyncio.gather(*followers) == [True] * 3
    assert flight.value == b"entry" and flight.joining == 0 and not flight.waited


async def test_a_leader_with_nothing_to_share_frees_its_followers() -> None:
    flight = Flight(WHOLE)
    follower = asyncio.create_task(flight.joined(1.0, 1.0))
    await asyncio.sleep(0)
    flight.end(None)

    assert await follower and flight.ended and flight.value is None


async def test_a_leader_that_moves_is_waited_for_past_the_first_deadline() -> None:
    flight = Flight(WHOLE)
    follower = asyncio.create_task(flight.joined(0.05, 0.2))
    for _ in range(6):  # 0.18 s in all, each move within the idle deadline, past the first one
        await asyncio.sleep(0.03)
        flight.moved()
    flight.end(b"entry")

    assert await follower and flight.value == b"entry"


async def test_a_stream_is_tailed_once_its_answer_began_and_to_its_end() -> None:
    flight = Flight(STREAM)
    flight.read(b"an attempt a chain moved on from")
    flight.frames = []  # the next attempt records afresh
    joined = asyncio.create_task(flight.joined(1.0, 1.0, tail=True))
    await asyncio.sleep(0.01)
    flight.open(("claude", "claude-sonnet-4-5"))
    await asyncio.sleep(0.01)
    assert not joined.done()  # begun, but nothing read of it yet
    flight.read(b"frame 0")
    assert await joined and not flight.ended and flight.producer == ("claude", "claude-sonnet-4-5")

    reads = [asyncio.create_task(flight.frame(i, 1.0)) for i in range(3)]
    await asyncio.sleep(0)
    flight.read(b"frame 1")
    flight.end(b"entry")
    assert await asyncio.gather(*reads) == [b"frame 0", b"frame 1", b""]


async def test_a_tailed_stream_that_fails_or_stalls_breaks_its_tail() -> None:
    failed, stalled = Flight(STREAM), Flight(STREAM)
    failed.read(b"frame 0")
    failed.end(None)
    stalled.read(b"frame 0")

    assert await failed.frame(0, 1.0) == b"frame 0" and await failed.frame(1, 1.0) is None
    assert await stalled.frame(1, 0.02) is None


async def test_a_follower_gets_what_its_shape_can_read() -> None:
    cache = ResponseCache(CacheSettings())
    timeouts = Timeouts(connect=1.0, first_byte=1.0, idle=1.0)
    try:
        streaming = cache.flights["s"] = Flight(STREAM)
        streaming.open(("claude", "claude-sonnet-4-5"))  # the leader's chain fell back to claude
        streaming.read(b"frame 0")
        tailed = await _follow(cache, "s", streaming, STREAM, timeouts)
        assert tailed is not None and isinstance(tailed.client, _TailClient)
        assert tailed.producer == ("claude", "claude-sonnet-4-5")

        whole = asyncio.create_task(_follow(cache, "s", streaming, WHOLE, timeouts))  # a whole answer waits
        await asyncio.sleep(0.01)
        assert not whole.done()
        streaming.end(None)
        assert await whole is None  # nothing to share: its own call

        answered = cache.flights["w"] = Flight(WHOLE)
        answer = bytes(wire.write_response(wire.Response(id="r", model="m", created=1, choices=[])))
        answered.end(entry(WHOLE, answer, ("backup", "m")))
        stored = await _follow(cache, "w", answered, STREAM, timeouts)
        assert stored is not None and isinstance(stored.client, _StoredClient)  # streamed from it
        assert stored.producer == ("backup", "m")  # what made the entry, as a hit of it would say
        broken = cache.flights["b"] = Flight(WHOLE)
        broken.end(b"W" + b"0" * 16 + b"not an answer")
        assert await _follow(cache, "b", broken, WHOLE, timeouts) is None  # an entry that does not read back
    finally:
        await cache.close()


async def test_a_stalled_leader_is_let_go_and_no_longer_followed() -> None:
    cache = ResponseCache(CacheSettings())
    stalled = cache.flights["k"] = Flight(WHOLE)
    timeouts = Timeouts(connect=0.01, first_byte=0.02, idle=0.05)
    try:
        assert await _follow(cache, "k", stalled, WHOLE, timeouts) is None  # no move within connect + first_byte

        assert "k" not in cache.flights and not stalled.ended
        moving = cache.flights["k"] = Flight(WHOLE)
        moving.moved()
        started = asyncio.get_running_loop().time()
        assert await _follow(cache, "k", moving, WHOLE, timeouts) is None  # then no move within idle
        assert asyncio.get_running_loop().time() - started >= 0.05 and "k" not in cache.flights
    finally:
        await cache.close()
