"""The exact response cache: a route's answers kept and served again to the identical request.

    settings.py  a route's `cache = {ttl, scope, backend}` and the `[cache]` section
    entries.py   an answer as stored (the service's own, in the contract) and as served, in either shape
    lookup.py    a request's key (its canonical bytes, route, model and scope) and its Cache-Control
    flight.py    a miss in flight: the identical requests that arrive meanwhile wait for its answer
    stores.py    memory (an LRU bounded by bytes) and Redis/Valkey (the tenancy's server, a TTL on every key)

The key is the SHA-256 of the request's canonical bytes (ingress/wire/canonical.py: the encoded request
without its passport, request id and stream flags), the route that serves (a split's variant, not the route
the client named), the upstream model and the scope's value.
Only deterministic requests are cached unless the route says otherwise; `Cache-Control: no-store` skips the
cache, `no-cache` skips the lookup and stores the new answer. The pipeline's stage is
ingress/pipeline/cache.py; a hit is charged to rpm only (ingress/pipeline/admit.py `used`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ingress import metrics
from ingress.cache.flight import Flight
from ingress.cache.lookup import NO_CACHE, NO_STORE, directive, entry_key, scope_value
from ingress.cache.settings import CacheSettings, RouteCache
from ingress.cache.stores import MemoryCache, RedisCache
from ingress.tasks import BackgroundTasks
from ingress.tenancy.settings import Redis

__all__ = ["NO_CACHE", "NO_STORE", "Flight", "ResponseCache", "directive", "entry_key", "scope_value"]

class ResponseCache:
    """The stores the routes' caches use, made once per worker: memory always, Redis when the tenancy
    names a server. Stores to Redis go in the background: an answer never waits for its own caching."""

    def __init__(self, settings: CacheSettings, redis: Redis | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.flights: dict[str, Flight] = {}  # the misses in flight in this worker, by key
        self.memory = MemoryCache(settings.memory_bytes, clock)
        self.redis = RedisCache(redis.url, redis.prefix, settings.timeout_ms / 1000) if redis is not None else None
        self.tasks = BackgroundTasks()

    def _store(self, route: RouteCache) -> MemoryCache | RedisCache:
        return self.redis if route.backend == "redis" and self.redis is not None else self.memory

    async def get(self, route: RouteCache, key: str) -> bytes | None:
        return await self._store(route).get(key)

    def put(self, route: RouteCache, key: str, value: bytes) -> None:
        """Keep `value` under `key` for the route's TTL, if it is within max_entry_bytes."""
        if len(value) > self.settings.max_entry_bytes:
            return
        store = self._store(route)
        if isinstance(store, MemoryCache):
            if store.put_now(key, value, route.ttl):
                metrics.child(metrics.CACHE_STORES, store.backend).inc()
            return
        self.tasks.spawn(self._put(store, key, value, route.ttl), "cache-store")

    async def _put(self, store: RedisCache, key: str, value: bytes, ttl: float) -> None:
        if await store.put(key, value, ttl):
            metrics.child(metrics.CACHE_STORES, store.backend).inc()

    async def close(self) -> None:
        await self.tasks.wait(self.settings.timeout_ms / 1000 * 2)
        await self.tasks.close()
        await self.memory.close()
        if self.redis is not None:
            await self.redis.close()
