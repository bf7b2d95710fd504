"""The response stores (ingress/state/stores.py): the memory backend's retention, byte bound and LRU with
a fake clock; the Redis backend's failures are 503s, never misses (tests/integration/test_responses_store.py
has it against real Redis and Valkey servers)."""

from __future__ import annotations

import asyncio

import pytest
from metric_values import sample_value

from ingress.errors import StoreUnavailable
from ingress.state.stores import ENTRY_OVERHEAD, MemoryResponses, RedisResponses
from ingress.tenancy.stores.breaker import Breaker


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_record_lives_its_retention_under_its_owner_only() -> None:
    async def run() -> None:
        clock = Clock()
        store = MemoryResponses(10_000, retention=60, clock=clock)
        await store.put("a/k", "resp_1", b"r")
        assert await store.get("a/k", "resp_1") == b"r"
        assert await store.get("b/k", "resp_1") is None  # another owner's id: unknown
        clock.now += 59.9
        assert await store.get("a/k", "resp_1") == b"r"
        clock.now += 0.1
        assert await store.get("a/k", "resp_1") is None
        assert len(store) == 0 and store.size == 0

    asyncio.run(run())


def test_the_bound_evicts_the_least_recently_used() -> None:
    async def run() -> None:
        cost = len("o:resp_a") + 100 + ENTRY_OVERHEAD
        store = MemoryResponses(3 * cost, retention=60, clock=Clock())
        before = sample_value("ingress_response_store_evictions_total", {"backend": "memory"}) or 0
        for n in "abc":
            await store.put("o", f"resp_{n}", bytes(100))
        assert await store.get("o", "resp_a") is not None  # now the most recently used
        await store.put("o", "resp_d", bytes(100))
        assert await store.get("o", "resp_b") is None
        assert store.size == 3 * cost
        assert sample_value("ingress_response_store_evictions_total", {"backend": "memory"}) == before + 1
        with pytest.raises(StoreUnavailable):
            await store.put("o", "resp_huge", bytes(4 * cost))  # larger than the whole bound

    asyncio.run(run())


def test_delete_says_whether_there_was_one() -> None:
    async def run() -> None:
        store = MemoryResponses(10_000, retention=60, clock=Clock())
        await store.put("o", "resp_1", b"r")
        assert not await store.delete("p", "resp_1")
        assert await store.delete("o", "resp_1")
        assert not await store.delete("o", "resp_1")
        assert store.size == 0

    asyncio.run(run())


def test_a_redis_that_cannot_be_reached_is_a_503_and_opens_the_breaker() -> None:
    async def run() -> None:
        store = RedisResponses("redis://127.0.0.1:1/0", "t", retention=60, timeout=0.5, breaker=Breaker(2, 60.0))
        before = sample_value("ingress_response_store_errors_total", {"backend": "redis", "call": "get"}) or 0
        try:
            assert store.available()
            for call in (store.get("o", "resp_1"), store.put("o", "resp_1", b"r")):
                with pytest.raises(StoreUnavailable) as raised:
                    await call
                assert raised.value.status == 503 and raised.value.retry_after == 1
            assert not store.available()
            with pytest.raises(StoreUnavailable):
                await store.delete("o", "resp_1")  # not even tried: the breaker is open
            labels = {"backend": "redis", "call": "get"}
            assert sample_value("ingress_response_store_errors_total", labels) == before + 1
        finally:
            await store.close()

    asyncio.run(run())
