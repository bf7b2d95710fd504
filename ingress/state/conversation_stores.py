"""Where conversations live: beside stored responses, in the same store (stores.py) and under the same
owners, retention and bounds. Each backend is asked, by owner and conversation id:

    create_conversation   its object and its first items
    read_conversation     its object and its items, in order (None: no such conversation)
    update_conversation   its object replaced (its metadata changed)
    append_items          items added at its end, all or none: "appended", "missing" or "full" (past `limit`)
    remove_item           one item (its exact JSON) taken out
    delete_conversation   the whole of it

Concurrency: two responses made on one conversation at once each append their turn (input items, then
output items) in one call, so neither's items are lost and each turn's stay together. In memory that
is one synchronous step of the event loop; on Redis, one Lua script (below) over two keys under one hash
tag (one slot of a Redis Cluster): a hash, the conversation's object and its items' byte count, and a
list its items are RPUSHed onto. The script checks that the conversation still exists (an append never
makes one again after a delete) and that the items stay within the bound, then pushes them, and sets
both keys' TTL again: a conversation lives `retention` seconds from its last change.
"""

from __future__ import annotations

from typing import Literal

from ingress.state.stores import Conversation, MemoryResponses, RedisResponses
from ingress.tenancy.stores.resp_codec import Script

Appended = Literal["appended", "missing", "full"]


class MemoryConversations(MemoryResponses):
    """Conversations in the memory backend's LRU, beside its responses, each a `Conversation` counted in
    the same bound; a change keeps a new one in its place (its retention counted again from then)."""

    def _conversation(self, owner: str, conversation_id: str) -> Conversation | None:
        value = self.entry(f"{owner}:{conversation_id}")
        return value if isinstance(value, Conversation) else None

    async def create_conversation(self, owner: str, conversation_id: str, obj: bytes, items: list[bytes]) -> None:
        self.admit(f"{owner}:{conversation_id}", Conversation(obj, items), "create")

    async def read_conversation(self, owner: str, conversation_id: str) -> tuple[bytes, list[bytes]] | None:
        conversation = self._conversation(owner, conversation_id)
        return None if conversation is None else (conversation.object, list(conversation.items))

    async def update_conversation(self, owner: str, conversation_id: str, obj: bytes) -> bool:
        conversation = self._conversation(owner, conversation_id)
        if conversation is None:
            return False
        self.admit(f"{owner}:{conversation_id}", Conversation(obj, conversation.items), "update")
        return True

    async def append_items(self, owner: str, conversation_id: str, items: list[bytes], limit: int) -> Appended:
        conversation = self._conversation(owner, conversation_id)
        if conversation is None:
            return "missing"
        grown = Conversation(conversation.object, [*conversation.items, *items])
        if limit and grown.data > limit:
            return "full"
        self.admit(f"{owner}:{conversation_id}", grown, "append")
        return "appended"

    async def remove_item(self, owner: str, conversation_id: str, item: bytes) -> bool | None:
        conversation = self._conversation(owner, conversation_id)
        if conversation is None:
            return None
        if item not in conversation.items:
            return False
        rest = list(conversation.items)
        rest.remove(item)
        self.admit(f"{owner}:{conversation_id}", Conversation(conversation.object, rest), "remove")
        return True

    async def delete_conversation(self, owner: str, conversation_id: str) -> bool:
        if self._conversation(owner, conversation_id) is None:
            return False
        self.drop(f"{owner}:{conversation_id}")
        return True


# KEYS[1]: the conversation's hash (`object`, `bytes`: its items' bytes); KEYS[2]: its items' list.
# ARGV[1]: the call; ARGV[2]: the TTL in ms; then the call's own arguments. -1: no such conversation.
CONVERSATIONS = Script("""
local call, ttl = ARGV[1], ARGV[2]
if call == 'create' then
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[1], 'object', ARGV[3], 'bytes', ARGV[4])
  if #ARGV > 4 then redis.call('RPUSH', KEYS[2], unpack(ARGV, 5)) end
elseif redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
elseif call == 'read' then
  return {redis.call('HGET', KEYS[1], 'object'), redis.call('LRANGE', KEYS[2], 0, -1)}
elseif call == 'delete' then
  redis.call('DEL', KEYS[1], KEYS[2])
  return 1
elseif call == 'update' then
  redis.call('HSET', KEYS[1], 'object', ARGV[3])
elseif call == 'append' then
  local size = tonumber(redis.call('HGET', KEYS[1], 'bytes')) + tonumber(ARGV[4])
  local limit = tonumber(ARGV[3])
  if limit > 0 and size > limit then return -2 end
  redis.call('HSET', KEYS[1], 'bytes', size)
  redis.call('RPUSH', KEYS[2], unpack(ARGV, 5))
elseif call == 'remove' then
  if redis.call('LREM', KEYS[2], 1, ARGV[3]) == 0 then return 0 end
  redis.call('HINCRBY', KEYS[1], 'bytes', -string.len(ARGV[3]))
end
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('PEXPIRE', KEYS[2], ttl)
return 1
""")


class RedisConversations(RedisResponses):
    """Conversations on the responses' Redis connection, each call one EVALSHA of CONVERSATIONS."""

    async def _script(self, call: str, owner: str, conversation_id: str, *args: bytes | str | int) -> object:
        """The script's reply; StoreUnavailable when the server gave none within the deadline, or an error."""
        tag = f"{self.conversations}{{{owner}:{conversation_id}}}"  # <prefix>:cv:{<owner>:<id>}: one slot
        keys, argv = (tag, f"{tag}:items"), (call, self.retention_ms, *args)
        return await self._guarded(call, lambda deadline: self.client.evalsha(CONVERSATIONS, keys, argv, deadline))

    async def create_conversation(self, owner: str, conversation_id: str, obj: bytes, items: list[bytes]) -> None:
        if await self._script("create", owner, conversation_id, obj, sum(len(i) for i in items), *items) != 1:
            raise self._failed("create")

    async def read_conversation(self, owner: str, conversation_id: str) -> tuple[bytes, list[bytes]] | None:
        reply = await self._script("read", owner, conversation_id)
        if reply == -1:
            return None
        if not (isinstance(reply, list) and len(reply) == 2 and isinstance(reply[0], bytes)
                and isinstance(reply[1], list) and all(isinstance(i, bytes) for i in reply[1])):
            raise self._failed("read")
        return reply[0], reply[1]

    async def update_conversation(self, owner: str, conversation_id: str, obj: bytes) -> bool:
        return self._found(await self._script("update", owner, conversation_id, obj), "update")

    async def append_items(self, owner: str, conversation_id: str, items: list[bytes], limit: int) -> Appended:
        if not items:
            return "appended" if await self.read_conversation(owner, conversation_id) is not None else "missing"
        reply = await self._script("append", owner, conversation_id, limit, sum(len(i) for i in items), *items)
        if reply == -2:
            return "full"
        return "appended" if self._found(reply, "append") else "missing"

    async def remove_item(self, owner: str, conversation_id: str, item: bytes) -> bool | None:
        reply = await self._script("remove", owner, conversation_id, item)
        return None if reply == -1 else self._found(reply, "remove")

    async def delete_conversation(self, owner: str, conversation_id: str) -> bool:
        return self._found(await self._script("delete", owner, conversation_id), "delete")

    def _found(self, reply: object, call: str) -> bool:
        """1: done; 0 or -1: nothing there to change; anything else, a server that is not answering right."""
        if reply not in (1, 0, -1):
            raise self._failed(call)
        return reply == 1
