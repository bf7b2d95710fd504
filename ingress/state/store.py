"""The response store the edge asks: its backend (stores.py, conversation_stores.py) chosen by
`[responses]`, each response and conversation under its owner's namespace (record.py `owner`), and the
counters of what it kept."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ingress import metrics
from ingress.state.conversation_stores import Appended
from ingress.state.event_stores import MemoryEvents, RedisEvents
from ingress.state.record import owner
from ingress.state.settings import ResponsesSettings

if TYPE_CHECKING:
    from ingress.tenancy.policy import Principal
    from ingress.tenancy.settings import Redis


class ResponseStore:
    """One per worker process: memory, or the tenancy's Redis (a connection of its own)."""

    def __init__(self, settings: ResponsesSettings, backend: MemoryEvents | RedisEvents) -> None:
        self.settings = settings
        self.backend = backend

    @classmethod
    def build(cls, settings: ResponsesSettings, redis: Redis | None) -> ResponseStore | None:
        """The store `[responses]` names; None when it is off (the edge then keeps nothing)."""
        chosen = settings.chosen(redis is not None)
        if chosen == "off":
            return None
        if chosen == "redis":
            assert redis is not None  # config.py checks
            return cls(settings, RedisEvents(redis.url, redis.prefix, settings.retention, settings.timeout_ms / 1000))
        return cls(settings, MemoryEvents(settings.memory_bytes, settings.retention))

    def owner(self, principal: Principal | None) -> str:
        """The namespace of the caller's responses: its key's (or tenant's), or the open edge's one."""
        if principal is None:
            return owner(None, None, self.settings.scope)
        return owner(principal.tenant_name, principal.id, self.settings.scope)

    def available(self) -> bool:
        """Whether the store may be asked now (its breaker is not open): a call that would be kept is
        refused at once rather than answered and then not kept."""
        return self.backend.available()

    async def get(self, owner: str, response_id: str) -> bytes | None:
        return await self.backend.get(owner, response_id)

    async def put(self, owner: str, response_id: str, record: bytes) -> None:
        await self.backend.put(owner, response_id, record)
        metrics.child(metrics.RESPONSES_STORED, self.backend.backend).inc()

    async def delete(self, owner: str, response_id: str) -> bool:
        """The response, and its stream's events: nothing of it is readable once this returns True."""
        if not await self.backend.delete(owner, response_id):
            return False
        await self.backend.delete_events(owner, response_id)
        return True

    async def create_conversation(self, owner: str, conversation_id: str, obj: bytes, items: list[bytes]) -> None:
        await self.backend.create_conversation(owner, conversation_id, obj, items)
        metrics.child(metrics.CONVERSATIONS_CREATED, self.backend.backend).inc()
        if items:
            metrics.child(metrics.CONVERSATION_ITEMS, self.backend.backend).inc(len(items))

    async def read_conversation(self, owner: str, conversation_id: str) -> tuple[bytes, list[bytes]] | None:
        return await self.backend.read_conversation(owner, conversation_id)

    async def update_conversation(self, owner: str, conversation_id: str, obj: bytes) -> bool:
        return await self.backend.update_conversation(owner, conversation_id, obj)

    async def append_items(self, owner: str, conversation_id: str, items: list[bytes], limit: int) -> Appended:
        """The items at the conversation's end, all or none; `limit`: the most its items' bytes may be then (0:
        no bound, for a response's turn, whose input was bounded before it was sent)."""
        appended = await self.backend.append_items(owner, conversation_id, items, limit)
        if appended == "appended" and items:
            metrics.child(metrics.CONVERSATION_ITEMS, self.backend.backend).inc(len(items))
        return appended

    async def remove_item(self, owner: str, conversation_id: str, item: bytes) -> bool | None:
        return await self.backend.remove_item(owner, conversation_id, item)

    async def delete_conversation(self, owner: str, conversation_id: str) -> bool:
        return await self.backend.delete_conversation(owner, conversation_id)

    async def append_events(self, owner: str, response_id: str, events: list[bytes]) -> None:
        """A streamed response's events of one read, at the end of its log (event_stores.py)."""
        await self.backend.append_events(owner, response_id, events)

    async def read_events(self, owner: str, response_id: str, start: int) -> list[bytes] | None:
        """Its events from `start` (a sequence_number) on; None when it kept none."""
        return await self.backend.read_events(owner, response_id, start)

    async def ask_cancel(self, owner: str, response_id: str) -> None:
        """Mark a background response to be cancelled: the replica that runs it reads the mark (`cancel_asked`)."""
        await self.backend.put(owner, f"{response_id}:cancel", b"1")  # ':' is in no id a client may name

    async def cancel_asked(self, owner: str, response_id: str) -> bool:
        return await self.backend.get(owner, f"{response_id}:cancel") is not None

    async def close(self) -> None:
        await self.backend.close()
