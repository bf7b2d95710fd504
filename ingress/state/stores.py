"""Where stored responses live: this process's memory (an LRU bounded by bytes), or the Redis/Valkey
server the tenancy already uses (a TTL on every key: the server drops each record after `retention`).

Both are asked the same three things, by owner and response id: `get`, `put`, `delete`. Unlike the
response cache's stores (ingress/cache/stores.py), a failure is not a miss: a stored response is state a
client relies on, so a Redis that is down, slow or wrong raises StoreUnavailable (a 503 with Retry-After),
and its breaker stops asking for a while. A record is one Redis string, `<prefix>:rs:<owner>:<id>`, set
with PX (its TTL) in the same command: it is readable from every replica once `put` returns.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable

from ingress import metrics
from ingress.errors import StoreUnavailable
from ingress.tenancy.stores.breaker import Breaker
from ingress.tenancy.stores.resp import Client
from ingress.tenancy.stores.resp_codec import ReplyError, encode

ENTRY_OVERHEAD = 160  # bytes a record costs beside its key and value (its slot, its tuple): counted in the bound


class MemoryResponses:
    """Records with their expiry, at most `max_bytes` of keys, records and overhead together; the least
    recently used go first when a new one needs room. `clock`: seconds, monotonic."""

    backend = "memory"

    def __init__(self, max_bytes: int, retention: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_bytes = max_bytes
        self.retention = retention
        self.clock = clock
        self.size = 0
        self._records: OrderedDict[str, tuple[float, bytes]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._records)

    def available(self) -> bool:
        return True

    async def get(self, owner: str, response_id: str) -> bytes | None:
        key = f"{owner}:{response_id}"
        entry = self._records.get(key)
        if entry is None:
            return None
        expires, record = entry
        if expires <= self.clock():
            self._drop(key)
            return None
        self._records.move_to_end(key)
        return record

    async def put(self, owner: str, response_id: str, record: bytes) -> None:
        """Keep the record for `retention` seconds, making room by dropping the least recently used. One
        larger than the whole bound cannot be kept: StoreUnavailable (the bound is too small for it)."""
        key = f"{owner}:{response_id}"
        cost = len(key) + len(record) + ENTRY_OVERHEAD
        if cost > self.max_bytes:
            metrics.child(metrics.RESPONSE_STORE_ERRORS, self.backend, "put").inc()
            raise StoreUnavailable("The response is larger than this edge's response store can hold "
                                   "([responses] memory_bytes).", retry_after=None)
        if key in self._records:
            self._drop(key)
        evicted = 0
        while self.size + cost > self.max_bytes:
            self._drop(next(iter(self._records)))
            evicted += 1
        if evicted:
            metrics.child(metrics.RESPONSE_STORE_EVICTIONS, self.backend).inc(evicted)
        self._records[key] = (self.clock() + self.retention, record)
        self.size += cost

    async def delete(self, owner: str, response_id: str) -> bool:
        key = f"{owner}:{response_id}"
        if await self.get(owner, response_id) is None:
            return False
        self._drop(key)
        return True

    def _drop(self, key: str) -> None:
        _, record = self._records.pop(key)
        self.size -= len(key) + len(record) + ENTRY_OVERHEAD

    async def close(self) -> None:
        self._records.clear()
        self.size = 0


class RedisResponses:
    """Records as Redis strings with their TTL, over the tenancy's own RESP client (its own connection to
    the tenancy's server: a record of megabytes never waits in line with the limits' 50 ms calls)."""

    backend = "redis"

    def __init__(self, url: str, prefix: str, retention: float, timeout: float,
                 breaker: Breaker | None = None) -> None:
        self.retention_ms = max(int(retention * 1000), 1)
        self.timeout = timeout
        self.client = Client(url, connect_timeout=timeout)
        self.prefix = f"{prefix}:rs:"
        self.breaker = breaker or Breaker(3, 2.0)

    def available(self) -> bool:
        """False while the breaker is open and not yet due to probe."""
        b = self.breaker
        return b.opened_at is None or (not b.probing and b.clock() - b.opened_at >= b.open_for)

    async def get(self, owner: str, response_id: str) -> bytes | None:
        reply = await self._call("get", encode("GET", f"{self.prefix}{owner}:{response_id}"))
        if reply is not None and not isinstance(reply, bytes):
            raise self._failed("get")
        return reply

    async def put(self, owner: str, response_id: str, record: bytes) -> None:
        reply = await self._call("put", encode("SET", f"{self.prefix}{owner}:{response_id}", record, "PX",
                                               self.retention_ms))
        if reply != b"OK":
            raise self._failed("put")

    async def delete(self, owner: str, response_id: str) -> bool:
        reply = await self._call("delete", encode("DEL", f"{self.prefix}{owner}:{response_id}"))
        if not isinstance(reply, int):
            raise self._failed("delete")
        return reply > 0

    async def _call(self, call: str, command: bytes) -> object:
        """The server's reply; StoreUnavailable when it gave none within the deadline, or an error."""
        if not self.breaker.allows():
            raise self._failed(call)
        try:
            reply = await self.client.call(command, asyncio.get_running_loop().time() + self.timeout)
        except (ReplyError, OSError):  # TimeoutError (the deadline) and ConnectionError among them
            self.breaker.failed_once()
            raise self._failed(call) from None
        except BaseException:
            self.breaker.abandoned()
            raise
        self.breaker.succeeded()
        return reply

    def _failed(self, call: str) -> StoreUnavailable:
        metrics.child(metrics.RESPONSE_STORE_ERRORS, self.backend, call).inc()
        return StoreUnavailable("The response store did not answer in time; try again shortly.")

    async def close(self) -> None:
        await self.client.close()
