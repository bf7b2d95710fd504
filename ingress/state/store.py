"""The response store the edge asks: its backend (stores.py, conversation_stores.py) chosen by
`[responses]`, each response and conversation under its owner's namespace (record.py `owner`), sealed
at rest when `[responses]` names a key (seal.py), and the counters of what it kept.

Sealed, every value is sealed here before a backend keeps it and opened here when read, bound to its
owner and id: a value that does not open is read as none (an unknown id, a 404), counted and logged,
never an error the client sees as a 500."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from structlog import get_logger

from ingress import metrics
from ingress.state.conversation_stores import Appended
from ingress.state.event_stores import MemoryEvents, RedisEvents
from ingress.state.record import owner
from ingress.state.seal import AtRest, Kind, at_rest
from ingress.state.settings import ResponsesSettings

if TYPE_CHECKING:
    from ingress.tenancy import Tenancy
    from ingress.tenancy.policy import Principal
    from ingress.tenancy.settings import Redis

log = get_logger("ingress.state")
T = TypeVar("T")


class ResponseStore:
    """One per worker process: memory, or the tenancy's Redis (a connection of its own)."""

    def __init__(self, settings: ResponsesSettings, backend: MemoryEvents | RedisEvents,
                 sealer: AtRest | None = None) -> None:
        self.settings = settings
        self.backend = backend
        self.sealer = sealer

    @classmethod
    def build(cls, settings: ResponsesSettings, redis: Redis | None) -> ResponseStore | None:
        """The store `[responses]` names; None when it is off (the edge then keeps nothing)."""
        chosen = settings.chosen(redis is not None)
        if chosen == "off":
            return None
        sealer = at_rest(settings, os.environ)  # config.py checked the keys when it read the settings
        if chosen == "redis":
            assert redis is not None  # config.py checks
            return cls(settings, RedisEvents(redis.url, redis.prefix, settings.retention, settings.timeout_ms / 1000),
                       sealer)
        return cls(settings, MemoryEvents(settings.memory_bytes, settings.retention), sealer)

    def owner(self, principal: Principal | None) -> str:
        """The namespace of the caller's responses: its key's (or tenant's), or the open edge's one."""
        if principal is None:
            return owner(None, None, self.settings.scope)
        return owner(principal.tenant_name, principal.id, self.settings.scope)

    def readers(self, principal: Principal | None, tenancy: Tenancy | None) -> tuple[str, ...]:
        """The namespaces whose responses and conversations the caller may read, its own first: an
        admin-scope key's (`scope = "admin"`) also every other key's of its tenant (with `[responses] scope =
        "key"`; with "tenant", its tenant's keys already share one)."""
        own = self.owner(principal)
        key = principal.key if principal is not None else None
        if key is None or key.scope != "admin" or tenancy is None or self.settings.scope == "tenant":
            return (own,)
        return (own, *(owner(key.tenant, kid, "key") for kid in tenancy.policy.key_ids(key.tenant) if kid != key.id))

    async def first(self, owners: tuple[str, ...], read: Callable[[str], Awaitable[T | None]]) -> tuple[str, T] | None:
        """The first of `owners` (the caller's own, then the others at once) for which `read` finds something,
        and what it found; None when none has it."""
        found = await read(owners[0])
        if found is not None:
            return owners[0], found
        others = await asyncio.gather(*(read(o) for o in owners[1:]))
        return next(((o, got) for o, got in zip(owners[1:], others, strict=True) if got is not None), None)

    def available(self) -> bool:
        """Whether the store may be asked now (its breaker is not open): a call that would be kept is
        refused at once rather than answered and then not kept."""
        return self.backend.available()

    def _seal(self, kind: Kind, owner: str, ident: str, data: bytes) -> bytes:
        return data if self.sealer is None else self.sealer.seal(kind, owner, ident, data)

    def _open(self, kind: Kind, owner: str, ident: str, kept: bytes) -> bytes | None:
        """The value as it was given to be kept; None (counted, logged) for one that does not open here."""
        if self.sealer is None:
            return kept
        opened = self.sealer.open(kind, owner, ident, kept)
        if opened is None:
            metrics.child(metrics.RESPONSE_STORE_ERRORS, self.backend.backend, "open").inc()
            log.warning("state.unopened", kind=kind, owner=owner, id=ident)
        return opened

    def _open_all(self, kind: Kind, owner: str, ident: str, kept: list[bytes]) -> list[bytes] | None:
        opened = [self._open(kind, owner, ident, one) for one in kept]
        return None if any(one is None for one in opened) else opened  # type: ignore[return-value]  # no None

    async def get(self, owner: str, response_id: str) -> bytes | None:
        kept = await self.backend.get(owner, response_id)
        return None if kept is None else self._open("response", owner, response_id, kept)

    async def put(self, owner: str, response_id: str, record: bytes) -> None:
        await self.backend.put(owner, response_id, self._seal("response", owner, response_id, record))
        metrics.child(metrics.RESPONSES_STORED, self.backend.backend).inc()

    async def delete(self, owner: str, response_id: str) -> bool:
        """The response, and its stream's events: nothing of it is readable once this returns True."""
        if not await self.backend.delete(owner, response_id):
            return False
        await self.backend.delete_events(owner, response_id)
        return True

    async def create_conversation(self, owner: str, conversation_id: str, obj: bytes, items: list[bytes]) -> None:
        await self.backend.create_conversation(owner, conversation_id,
                                               self._seal("conversation", owner, conversation_id, obj),
                                               [self._seal("item", owner, conversation_id, i) for i in items])
        metrics.child(metrics.CONVERSATIONS_CREATED, self.backend.backend).inc()
        if items:
            metrics.child(metrics.CONVERSATION_ITEMS, self.backend.backend).inc(len(items))

    async def read_conversation(self, owner: str, conversation_id: str) -> tuple[bytes, list[bytes]] | None:
        """Its object and its items; None when there is none, or any of it does not open."""
        read = await self.backend.read_conversation(owner, conversation_id)
        if read is None or self.sealer is None:
            return read
        obj = self._open("conversation", owner, conversation_id, read[0])
        items = self._open_all("item", owner, conversation_id, read[1])
        return None if obj is None or items is None else (obj, items)

    async def update_conversation(self, owner: str, conversation_id: str, obj: bytes) -> bool:
        return await self.backend.update_conversation(owner, conversation_id,
                                                      self._seal("conversation", owner, conversation_id, obj))

    async def append_items(self, owner: str, conversation_id: str, items: list[bytes], limit: int) -> Appended:
        """The items at the conversation's end, all or none; `limit`: the most its items' bytes may be then (0:
        no bound, for a response's turn, whose input was bounded before it was sent)."""
        sealed = [self._seal("item", owner, conversation_id, i) for i in items]
        appended = await self.backend.append_items(owner, conversation_id, sealed, limit)
        if appended == "appended" and items:
            metrics.child(metrics.CONVERSATION_ITEMS, self.backend.backend).inc(len(items))
        return appended

    async def remove_item(self, owner: str, conversation_id: str, item: bytes) -> bool | None:
        """The item (its JSON as read) taken out; sealed, by the value it is kept as (each seals apart)."""
        if self.sealer is not None:
            read = await self.backend.read_conversation(owner, conversation_id)
            if read is None:
                return None
            kept = [one for one in read[1] if self._open("item", owner, conversation_id, one) == item]
            if not kept:
                return False
            item = kept[0]
        return await self.backend.remove_item(owner, conversation_id, item)

    async def delete_conversation(self, owner: str, conversation_id: str) -> bool:
        return await self.backend.delete_conversation(owner, conversation_id)

    async def append_events(self, owner: str, response_id: str, events: list[bytes]) -> None:
        """A streamed response's events of one read, at the end of its log (event_stores.py)."""
        await self.backend.append_events(owner, response_id,
                                         [self._seal("event", owner, response_id, e) for e in events])

    async def read_events(self, owner: str, response_id: str, start: int) -> list[bytes] | None:
        """Its events from `start` (a sequence_number) on; None when it kept none, or one does not open."""
        kept = await self.backend.read_events(owner, response_id, start)
        return None if kept is None else self._open_all("event", owner, response_id, kept)

    async def ask_cancel(self, owner: str, response_id: str) -> None:
        """Mark a background response to be cancelled: the replica that runs it reads the mark (`cancel_asked`)."""
        await self.backend.put(owner, f"{response_id}:cancel", b"1")  # ':' is in no id a client may name

    async def cancel_asked(self, owner: str, response_id: str) -> bool:
        return await self.backend.get(owner, f"{response_id}:cancel") is not None

    async def close(self) -> None:
        await self.backend.close()
