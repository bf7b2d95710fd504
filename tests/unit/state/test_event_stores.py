"""Event logs (ingress/state/event_stores.py): a streamed response's events in memory, each read's appended
in place, counted in the same byte bound as the records and the least recently used dropped past it; the
Redis backend's failures are 503s (its script runs against real Redis and Valkey servers in
tests/integration/test_resumable_streams.py)."""

from __future__ import annotations

import asyncio

import pytest

from ingress.errors import StoreUnavailable
from ingress.state import ResponsesSettings, ResponseStore
from ingress.state.event_stores import MemoryEvents, RedisEvents
from ingress.tenancy.stores.breaker import Breaker


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_events_are_appended_read_from_an_index_and_kept_under_their_owner() -> None:
    async def run() -> None:
        clock = Clock()
        store = MemoryEvents(100_000, retention=60, clock=clock)
        assert await store.read_events("o", "resp_1", 0) is None  # no log
        await store.append_events("o", "resp_1", [b"e0", b"e1"])
        await store.append_events("o", "resp_1", [b"e2"])
        assert await store.read_events("o", "resp_1", 0) == [b"e0", b"e1", b"e2"]
        assert await store.read_events("o", "resp_1", 2) == [b"e2"]
        assert await store.read_events("o", "resp_1", 3) == []  # a log with nothing after its end yet
        assert await store.read_events("p", "resp_1", 0) is None  # another owner's: none
        assert await store.get("o", "resp_1") is None  # not the record
        size = store.size
        await store.append_events("o", "resp_1", [b"e3"])
        assert store.size > size
        clock.now += 61
        assert await store.read_events("o", "resp_1", 0) is None  # expired with its retention
        assert store.size == 0

    asyncio.run(run())


def test_a_growing_log_drops_the_least_recently_used_and_refuses_past_the_whole_bound() -> None:
    async def run() -> None:
        store = MemoryEvents(2_000, retention=60, clock=Clock())
        await store.put("o", "resp_old", b"x" * 500)
        await store.append_events("o", "resp_1", [b"y" * 400])
        await store.append_events("o", "resp_1", [b"y" * 400, b"y" * 400])
        assert await store.get("o", "resp_old") is None  # dropped to make room
        assert len(await store.read_events("o", "resp_1", 0) or []) == 3
        assert store.size <= store.max_bytes
        with pytest.raises(StoreUnavailable):
            await store.append_events("o", "resp_1", [b"z" * 1_000])
        assert len(await store.read_events("o", "resp_1", 0) or []) == 3  # all or none

    asyncio.run(run())


def test_a_redis_that_cannot_be_reached_is_a_503() -> None:
    async def run() -> None:
        store = RedisEvents("redis://127.0.0.1:1/0", "t", retention=60, timeout=0.5, breaker=Breaker(9, 60.0))
        with pytest.raises(StoreUnavailable):
            await store.append_events("o", "resp_1", [b"e0"])
        with pytest.raises(StoreUnavailable):
            await store.read_events("o", "resp_1", 0)
        await store.append_events("o", "resp_1", [])  # nothing to append: nothing asked
        await store.close()

    asyncio.run(run())


def test_a_deleted_response_takes_its_log_with_it() -> None:
    async def run() -> None:
        memory = MemoryEvents(100_000, retention=60, clock=Clock())
        store = ResponseStore(ResponsesSettings(), memory)
        await store.put("o", "resp_1", b'{"v":1}')
        await store.append_events("o", "resp_1", [b"e0"])
        assert not await store.delete("p", "resp_1")  # another owner's: nothing deleted
        assert await store.read_events("o", "resp_1", 0) == [b"e0"]
        assert await store.delete("o", "resp_1")
        assert await store.read_events("o", "resp_1", 0) is None
        assert memory.size == 0

    asyncio.run(run())
