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
from collections.abc import Awaitable, Callable

from ingress import metrics
from ingress.errors import StoreUnavailable
from ingress.tenancy.stores.breaker import Breaker
from ingress.tenancy.stores.resp import Client
from ingress.tenancy.stores.resp_codec import ReplyError, encode

ENTRY_OVERHEAD = 160  # bytes a record costs beside its key and value (its slot, its tuple): counted in the bound
ITEM_OVERHEAD = 64  # bytes a conversation's item costs beside its JSON (its place in the list)


class Conversation:
    """A conversation in memory (conversation_stores.py), never changed once kept (a change keeps a new
    one): its object's JSON, its items' JSON in order; `data`, the items' bytes (what max_record_bytes
    bounds), and `size`, what it counts against the memory bound beside its key."""

    __slots__ = ("data", "items", "object", "size")

    def __init__(self, obj: bytes, items: list[bytes]) -> None:
        self.object = obj
        self.items = items
        self.data = sum(len(i) for i in items)
        self.size = len(obj) + self.data + ITEM_OVERHEAD * len(items)


def _cost(key: str, value: bytes | Conversation) -> int:
    return len(key) + (len(value) if isinstance(value, bytes) else value.size) + ENTRY_OVERHEAD


class MemoryResponses:
    """Records with their expiry, at most `max_bytes` of keys, records and overhead together; the least
    recently used go first when a new one needs room. `clock`: seconds, monotonic."""

    backend = "memory"

    def __init__(self, max_bytes: int, retention: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_bytes = max_bytes
        self.retention = retention
        self.clock = clock
        self.size = 0
        self._records: OrderedDict[str, tuple[float, bytes | Conversation]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._records)

    def available(self) -> bool:
        return True

    async def get(self, owner: str, response_id: str) -> bytes | None:
        record = self.entry(f"{owner}:{response_id}")
        return record if isinstance(record, bytes) else None

    def entry(self, key: str) -> bytes | Conversation | None:
        """What `key` holds, unless it has expired; now the most recently used."""
        entry = self._records.get(key)
        if entry is None:
            return None
        expires, value = entry
        if expires <= self.clock():
            self.drop(key)
            return None
        self._records.move_to_end(key)
        return value

    async def put(self, owner: str, response_id: str, record: bytes) -> None:
        self.admit(f"{owner}:{response_id}", record, "put")

    def fits(self, key: str, value: bytes | Conversation, call: str) -> None:
        """StoreUnavailable for a value larger than the whole bound (the bound is too small for it)."""
        if _cost(key, value) > self.max_bytes:
            metrics.child(metrics.RESPONSE_STORE_ERRORS, self.backend, call).inc()
            raise StoreUnavailable("The response or conversation is larger than this edge's response store can "
                                   "hold ([responses] memory_bytes).", retry_after=None)

    def admit(self, key: str, value: bytes | Conversation, call: str) -> None:
        """Keep the value for `retention` seconds (from now), making room by dropping the least recently
        used; StoreUnavailable for one larger than the whole bound."""
        self.fits(key, value, call)
        cost = _cost(key, value)
        if key in self._records:
            self.drop(key)
        evicted = 0
        while self.size + cost > self.max_bytes:
            self.drop(next(iter(self._records)))
            evicted += 1
        if evicted:
            metrics.child(metrics.RESPONSE_STORE_EVICTIONS, self.backend).inc(evicted)
        self._records[key] = (self.clock() + self.retention, value)
        self.size += cost

    async def delete(self, owner: str, response_id: str) -> bool:
        key = f"{owner}:{response_id}"
        if await self.get(owner, response_id) is None:
            return False
        self.drop(key)
        return True

    def drop(self, key: str) -> None:
        _, value = self._records.pop(key)
        self.size -= _cost(key, value)

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
        self.conversations = f"{prefix}:cv:"  # conversation_stores.py
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
        return await self._guarded(call, lambda deadline: self.client.call(command, deadline))

    async def _guarded(self, call: str, send: Callable[[float], Awaitable[object]]) -> object:
        """`send(deadline)`'s reply, through the breaker: StoreUnavailable when the breaker is open, or the
        server gave no reply by the deadline, or an error (each told to the breaker)."""
        if not self.breaker.allows():
            raise self._failed(call)
        try:
            reply = await send(asyncio.get_running_loop().time() + self.timeout)
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
