"""Where a streamed response's events live while it is answered and after: beside its record, under the
same owner, retention and bounds, so that `GET /v1/responses/{id}?stream=true&starting_after=N` can
replay them on any replica and follow the rest of one still running. Each backend is asked, by owner and
response id:

    append_events  the events of one read of the stream (each its JSON), at the log's end
    read_events    the events from index `start` on (None: no log for this response)
    delete_events  the log, with its response

An event's index in its log is its `sequence_number`: the stream numbers them from 0, one after the
other, and every one it sends is appended, in order, before it is sent. On Redis a log is one list,
`<prefix>:ev:{<owner>:<id>}`, RPUSHed and its TTL set again in one script call per read of the stream
(not per event); in memory, a list in the LRU, counted in its bound as the records are.
"""

from __future__ import annotations

from ingress import metrics
from ingress.errors import StoreUnavailable
from ingress.state.conversation_stores import MemoryConversations, RedisConversations
from ingress.state.stores import ENTRY_OVERHEAD, ITEM_OVERHEAD, Conversation
from ingress.tenancy.stores.resp_codec import Script, encode


class EventLog(Conversation):
    """A stream's events in memory: a Conversation without an object, which grows in place."""

    __slots__ = ()


class MemoryEvents(MemoryConversations):
    """Event logs in the memory backend's LRU, beside its responses and conversations."""

    async def append_events(self, owner: str, response_id: str, events: list[bytes]) -> None:
        key = f"{owner}:{response_id}:events"
        log = self.entry(key)
        if not isinstance(log, EventLog):
            self.admit(key, EventLog(b"", list(events)), "append_events")
            return
        grown = sum(len(e) for e in events)
        cost = grown + ITEM_OVERHEAD * len(events)
        if len(key) + log.size + cost + ENTRY_OVERHEAD > self.max_bytes:
            metrics.child(metrics.RESPONSE_STORE_ERRORS, self.backend, "append_events").inc()
            raise StoreUnavailable("The stream is larger than this edge's response store can hold "
                                   "([responses] memory_bytes).", retry_after=None)
        log.items.extend(events)  # in place: a long stream's reads each cost their own events, not the log's
        log.data += grown
        log.size += cost
        self.size += cost
        evicted = 0
        while self.size > self.max_bytes and next(iter(self._records)) != key:
            self.drop(next(iter(self._records)))
            evicted += 1
        if evicted:
            metrics.child(metrics.RESPONSE_STORE_EVICTIONS, self.backend).inc(evicted)

    async def delete_events(self, owner: str, response_id: str) -> None:
        if self.entry(key := f"{owner}:{response_id}:events") is not None:
            self.drop(key)

    async def read_events(self, owner: str, response_id: str, start: int) -> list[bytes] | None:
        log = self.entry(f"{owner}:{response_id}:events")
        return log.items[start:] if isinstance(log, EventLog) else None


# KEYS[1]: the log. append: ARGV[1] the TTL in ms, then the events; read: ARGV[1] 'read', ARGV[2] the start.
EVENTS = Script("""
if ARGV[1] == 'read' then
  if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
  return redis.call('LRANGE', KEYS[1], ARGV[2], -1)
end
local n = redis.call('RPUSH', KEYS[1], unpack(ARGV, 2))
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return n
""")


class RedisEvents(RedisConversations):
    """Event logs on the responses' Redis connection, each call one EVALSHA of EVENTS."""

    async def _events(self, call: str, owner: str, response_id: str, *args: bytes | str | int) -> object:
        key = f"{self.events}{{{owner}:{response_id}}}"
        return await self._guarded(call, lambda deadline: self.client.evalsha(EVENTS, (key,), args, deadline))

    @property
    def events(self) -> str:
        return self.prefix[:-3] + "ev:"  # <prefix>:ev:

    async def append_events(self, owner: str, response_id: str, events: list[bytes]) -> None:
        if events and not isinstance(await self._events("append_events", owner, response_id, self.retention_ms,
                                                        *events), int):
            raise self._failed("append_events")

    async def delete_events(self, owner: str, response_id: str) -> None:
        if not isinstance(await self._call("delete_events", encode("DEL", f"{self.events}{{{owner}:{response_id}}}")),
                          int):
            raise self._failed("delete_events")

    async def read_events(self, owner: str, response_id: str, start: int) -> list[bytes] | None:
        reply = await self._events("read_events", owner, response_id, "read", start)
        if reply == -1:
            return None
        if not (isinstance(reply, list) and all(isinstance(e, bytes) for e in reply)):
            raise self._failed("read_events")
        return reply
