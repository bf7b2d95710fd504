"""Where cached answers are kept: this process's memory, bounded by bytes, or the Redis/Valkey server the
tenancy already uses. Both are asked the same two things, `get` and `put`; neither ever raises for its own
failure: a Redis that is down, slow or wrong is a miss (counted in metrics), never an error, and costs a
request at most the deadline (`[cache] timeout_ms`) and, while its breaker is open, nothing."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable

from ingress import metrics
from ingress.tenancy.stores.breaker import Breaker
from ingress.tenancy.stores.resp import Client
from ingress.tenancy.stores.resp_codec import ReplyError, encode

ENTRY_OVERHEAD = 128  # bytes an entry costs beside its key and value (its slot, its tuple): counted in the bound


class MemoryCache:
    """An LRU of entries with their expiry, at most `max_bytes` of keys, values and overhead together;
    the least recently used go first when a new one needs room. `clock`: seconds, monotonic."""

    backend = "memory"

    def __init__(self, max_bytes: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_bytes = max_bytes
        self.clock = clock
        self.size = 0
        self._entries: OrderedDict[str, tuple[float, bytes]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    async def get(self, key: str) -> bytes | None:
        return self.get_now(key)

    def get_now(self, key: str) -> bytes | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        expires, value = entry
        if expires <= self.clock():
            self._drop(key)
            return None
        self._entries.move_to_end(key)
        return value

    async def put(self, key: str, value: bytes, ttl: float) -> bool:
        return self.put_now(key, value, ttl)

    def put_now(self, key: str, value: bytes, ttl: float) -> bool:
        """Keep `value` for `ttl` seconds; False when it alone is larger than the bound."""
        cost = len(key) + len(value) + ENTRY_OVERHEAD
        if cost > self.max_bytes:
            return False
        if key in self._entries:
            self._drop(key)
        evicted = 0
        while self.size + cost > self.max_bytes:
            oldest = next(iter(self._entries))
            self._drop(oldest)
            evicted += 1
        if evicted:
            metrics.child(metrics.CACHE_EVICTIONS, self.backend).inc(evicted)
        self._entries[key] = (self.clock() + ttl, value)
        self.size += cost
        return True

    def _drop(self, key: str) -> None:
        _, value = self._entries.pop(key)
        self.size -= len(key) + len(value) + ENTRY_OVERHEAD

    async def close(self) -> None:
        self._entries.clear()
        self.size = 0


class RedisCache:
    """Entries as plain Redis keys (`<prefix>:rc:<hash>`), each set with its TTL (PX) so that the server
    drops it, over the tenancy's own RESP client (ingress/tenancy/stores/resp.py). Redis evicts by its own
    policy (maxmemory); each key's TTL bounds it meanwhile."""

    backend = "redis"

    def __init__(self, url: str, prefix: str, timeout: float, breaker: Breaker | None = None) -> None:
        self.timeout = timeout
        self.client = Client(url, connect_timeout=timeout)
        self.prefix = f"{prefix}:rc:"
        self.breaker = breaker or Breaker(3, 2.0)

    async def get(self, key: str) -> bytes | None:
        reply = await self._call("get", encode("GET", self.prefix + key))
        return reply if isinstance(reply, bytes) else None

    async def put(self, key: str, value: bytes, ttl: float) -> bool:
        reply = await self._call("set", encode("SET", self.prefix + key, value, "PX", max(int(ttl * 1000), 1)))
        return reply == b"OK"

    async def _call(self, call: str, command: bytes) -> object:
        """The reply, or None when the server could not give one within the deadline (counted)."""
        if not self.breaker.allows():
            metrics.child(metrics.CACHE_ERRORS, self.backend, call).inc()
            return None
        try:
            reply = await self.client.call(command, asyncio.get_running_loop().time() + self.timeout)
        except (ReplyError, OSError):  # TimeoutError (the deadline) and ConnectionError among them
            self.breaker.failed_once()
            metrics.child(metrics.CACHE_ERRORS, self.backend, call).inc()
            return None
        except BaseException:
            self.breaker.abandoned()
            raise
        self.breaker.succeeded()
        return reply

    async def close(self) -> None:
        await self.client.close()
