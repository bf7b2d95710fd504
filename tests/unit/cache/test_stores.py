"""The response cache's memory backend (ingress/cache/stores.py) with a fake clock: TTLs, the byte bound,
least recently used first; the Redis backend's failures are misses (tests/integration/test_response_cache.py
has it against real servers)."""

from __future__ import annotations

import asyncio

from metric_values import sample_value

from ingress.cache.stores import ENTRY_OVERHEAD, MemoryCache, RedisCache
from ingress.tenancy.stores.breaker import Breaker


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_entry_lives_its_ttl() -> None:
    clock = Clock()
    cache = MemoryCache(10_000, clock)
    assert cache.put_now("k", b"v", ttl=60)
    clock.now += 59.9
    assert cache.get_now("k") == b"v"
    clock.now += 0.1
    assert cache.get_now("k") is None
    assert len(cache) == 0 and cache.size == 0


def test_the_bound_evicts_the_least_recently_used() -> None:
    clock = Clock()
    cost = 1 + 100 + ENTRY_OVERHEAD
    cache = MemoryCache(3 * cost, clock)
    before = sample_value("ingress_response_cache_evictions_total", {"backend": "memory"}) or 0
    for key in "abc":
        assert cache.put_now(key, bytes(100), ttl=60)
    assert cache.get_now("a") is not None  # a is now the most recently used
    assert cache.put_now("d", bytes(100), ttl=60)
    assert cache.get_now("b") is None
    assert all(cache.get_now(k) is not None for k in "acd")
    assert cache.size == 3 * cost
    assert sample_value("ingress_response_cache_evictions_total", {"backend": "memory"}) == before + 1
    assert not cache.put_now("huge", bytes(4 * cost), ttl=60)  # larger than the whole bound: not kept
    assert cache.put_now("a", bytes(50), ttl=60)  # replacing an entry frees what it held
    assert cache.size == 2 * cost + cost - 50


def test_a_redis_that_cannot_be_reached_is_a_miss_and_opens_the_breaker() -> None:
    async def run() -> None:
        cache = RedisCache("redis://127.0.0.1:1/0", "t", timeout=0.5, breaker=Breaker(2, 60.0))
        try:
            assert await cache.get("k") is None
            assert not await cache.put("k", b"v", 10)
            assert not cache.breaker.closed
            assert await cache.get("k") is None  # not even tried: the breaker is open
        finally:
            await cache.close()

    asyncio.run(run())
