"""Where the admin API's keys, tenants and audit log live: the tenancy's Redis/Valkey, or one process's memory.

In Redis, under the tenancy's hash tag (`{<prefix>}:admin:...`):

    keys      a hash: key id → the stored key (JSON, records.StoredKey: its hash, never the key)
    tenants   a hash: tenant name → the stored tenant (JSON, records.StoredTenant)
    version   a counter, incremented by every change: what each replica polls (sync.py), with
    epoch     a random value set by the first change a server sees: a server that restarted empty counts
              from 0 again, and its epoch tells a replica that the counter's value is not the one it saw
    audit     a list, appended to by every change and by nothing else (records.AuditEntry, JSON)

A change is one script, the same for a key and a tenant: it checks that the key (tenant) is still what the
change was made from (else Conflict: two admins changed it at once, and the second is told), that a tenant
deleted has no stored key (else Owned) and that a key's tenant, unless configured, is stored (else
NoTenant), so neither race leaves a key of no tenant; then it writes it,
increments the version and appends the audit entry, all or nothing. Calls go through the tenancy's RESP
client (stores/resp.py), on a connection of their own, each with a deadline; a store that cannot answer
raises Unavailable and nothing is retried.
"""

from __future__ import annotations

import asyncio
import os
from typing import Protocol

import msgspec

from ingress.admin.records import AuditEntry, StoredKey, StoredTenant
from ingress.tenancy.settings import Redis
from ingress.tenancy.stores.resp import Client
from ingress.tenancy.stores.resp_codec import ReplyError, Script, encode

WRITE = Script("""
local current = redis.call('HGET', KEYS[1], ARGV[1])
if (current or '') ~= ARGV[2] then return redis.error_reply('CONFLICT the key changed meanwhile') end
if ARGV[6] ~= '' then
  local owned = {}
  for _, raw in ipairs(redis.call('HVALS', KEYS[5])) do
    local key = cjson.decode(raw)
    if key['tenant'] == ARGV[6] then owned[#owned + 1] = key['id'] end
  end
  if #owned > 0 then return redis.error_reply('OWNED ' .. table.concat(owned, ',')) end
end
if ARGV[7] ~= '' and redis.call('HEXISTS', KEYS[6], ARGV[7]) == 0 then return redis.error_reply('NOTENANT') end
if ARGV[3] == '' then redis.call('HDEL', KEYS[1], ARGV[1]) else redis.call('HSET', KEYS[1], ARGV[1], ARGV[3]) end
local version = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[4], ARGV[5], 'NX')
redis.call('RPUSH', KEYS[3], ARGV[4])
return version
""")
_KEY = msgspec.json.Decoder(StoredKey)
_TENANT = msgspec.json.Decoder(StoredTenant)
_ENTRY = msgspec.json.Decoder(AuditEntry)


class Conflict(Exception):
    """The key changed between reading it and writing the change."""


class Owned(Exception):
    """The tenant to delete still has stored keys (their ids, sorted: `args[0]`)."""


class NoTenant(Exception):
    """The key names a tenant that is not stored (and, the caller found, not configured)."""


class Unavailable(Exception):
    """The store did not answer (down, slow, refused): the change may or may not have been made."""


class Found(msgspec.Struct, frozen=True):
    record: StoredKey
    raw: bytes  # as stored: what a change of it must still find (Conflict otherwise)


class FoundTenant(msgspec.Struct, frozen=True):
    record: StoredTenant
    raw: bytes


class KeyStore(Protocol):
    async def version(self) -> str:
        """What changes with every change (and when the store restarted empty)."""

    async def keys(self) -> list[StoredKey]: ...

    async def get(self, key_id: str) -> Found | None: ...

    async def write(self, key_id: str, before: Found | None, after: StoredKey | None, entry: AuditEntry, *,
                    tenant: str | None = None) -> int:
        """The change, its version and its audit entry, all or nothing; Conflict if the key is not `before`,
        NoTenant if `tenant` (the key's, when not configured) is not stored."""

    async def tenants(self) -> list[StoredTenant]: ...

    async def get_tenant(self, name: str) -> FoundTenant | None: ...

    async def write_tenant(self, name: str, before: FoundTenant | None, after: StoredTenant | None,
                           entry: AuditEntry) -> int:
        """As write, for a tenant; deleting it (`after` None) raises Owned while stored keys name it."""

    async def audit(self, start: int, count: int) -> tuple[list[AuditEntry], int]:
        """`count` entries from the `start`th (0 is the first), and how many there are."""

    async def close(self) -> None: ...


class RedisKeyStore:
    def __init__(self, settings: Redis, deadline_ms: int) -> None:
        self.deadline = deadline_ms / 1000
        self.client = Client(settings.url, connect_timeout=self.deadline)  # its own connection
        tag = "{" + settings.prefix + "}:admin:"
        self.names = (tag + "keys", tag + "version", tag + "audit", tag + "epoch")
        self.tenant_names = (tag + "tenants", *self.names[1:])
        self.both = (self.names[0], self.tenant_names[0])  # KEYS[5] and KEYS[6] of WRITE

    def _due(self) -> float:
        return asyncio.get_running_loop().time() + self.deadline

    async def call(self, *command: str | bytes | int) -> object:
        """One command on the store's connection, within its deadline; Unavailable when it did not answer."""
        try:
            return await self.client.call(encode(*command), self._due())
        except (OSError, TimeoutError, ReplyError) as exc:
            raise Unavailable(type(exc).__name__) from exc

    async def script(self, script: Script, keys: tuple[str, ...], args: tuple[str | int, ...] = ()) -> object:
        """A script, as call() sends a command (session.py's: the console's sessions share the connection)."""
        try:
            return await self.client.evalsha(script, keys, args, self._due())
        except (OSError, TimeoutError, ReplyError) as exc:
            raise Unavailable(type(exc).__name__) from exc

    async def version(self) -> str:
        reply = await self.call("MGET", self.names[3], self.names[1])
        epoch, version = reply if isinstance(reply, list) else (None, None)
        return f"{(epoch or b'').decode()}:{int(version or 0)}"

    async def keys(self) -> list[StoredKey]:
        reply = await self.call("HVALS", self.names[0])
        return [_KEY.decode(raw) for raw in reply] if isinstance(reply, list) else []

    async def get(self, key_id: str) -> Found | None:
        reply = await self.call("HGET", self.names[0], key_id)
        return Found(_KEY.decode(reply), reply) if isinstance(reply, bytes) else None

    async def write(self, key_id: str, before: Found | None, after: StoredKey | None, entry: AuditEntry, *,
                    tenant: str | None = None) -> int:
        return await self._write(self.names, key_id, before.raw if before else b"", after, entry, "", tenant or "")

    async def tenants(self) -> list[StoredTenant]:
        reply = await self.call("HVALS", self.tenant_names[0])
        return [_TENANT.decode(raw) for raw in reply] if isinstance(reply, list) else []

    async def get_tenant(self, name: str) -> FoundTenant | None:
        reply = await self.call("HGET", self.tenant_names[0], name)
        return FoundTenant(_TENANT.decode(reply), reply) if isinstance(reply, bytes) else None

    async def write_tenant(self, name: str, before: FoundTenant | None, after: StoredTenant | None,
                           entry: AuditEntry) -> int:
        return await self._write(self.tenant_names, name, before.raw if before else b"", after, entry,
                                 name if after is None else "", "")

    async def _write(self, names: tuple[str, ...], field: str, before: bytes, after: StoredKey | StoredTenant | None,
                     entry: AuditEntry, keyless: str, tenant: str) -> int:
        args = (field, before, msgspec.json.encode(after) if after else b"", msgspec.json.encode(entry),
                os.urandom(8).hex(), keyless, tenant)
        try:
            version = await self.client.evalsha(WRITE, (*names, *self.both), args, self._due())
        except ReplyError as exc:
            if str(exc).startswith("CONFLICT"):
                raise Conflict(field) from None
            if str(exc).startswith("OWNED "):
                raise Owned(sorted(str(exc).removeprefix("OWNED ").split(","))) from None
            if str(exc).startswith("NOTENANT"):
                raise NoTenant(tenant) from None
            raise Unavailable(type(exc).__name__) from exc
        except (OSError, TimeoutError) as exc:
            raise Unavailable(type(exc).__name__) from exc
        return int(version)

    async def audit(self, start: int, count: int) -> tuple[list[AuditEntry], int]:
        total = await self.call("LLEN", self.names[2])
        reply = await self.call("LRANGE", self.names[2], start, start + count - 1) if count else []
        entries = [_ENTRY.decode(raw) for raw in reply] if isinstance(reply, list) else []
        return entries, int(total) if isinstance(total, int) else 0

    async def close(self) -> None:
        await self.client.close()


class MemoryKeyStore:
    """One process's: for an edge of a single worker without Redis (config.py refuses it with more)."""

    def __init__(self) -> None:
        self._keys: dict[str, bytes] = {}
        self._tenants: dict[str, bytes] = {}
        self._version = 0
        self._audit: list[AuditEntry] = []

    async def version(self) -> str:
        return str(self._version)

    async def keys(self) -> list[StoredKey]:
        return [_KEY.decode(raw) for raw in self._keys.values()]

    async def get(self, key_id: str) -> Found | None:
        raw = self._keys.get(key_id)
        return Found(_KEY.decode(raw), raw) if raw is not None else None

    async def write(self, key_id: str, before: Found | None, after: StoredKey | None, entry: AuditEntry, *,
                    tenant: str | None = None) -> int:
        if self._keys.get(key_id) == (before.raw if before else None) and tenant and tenant not in self._tenants:
            raise NoTenant(tenant)
        return self._write(self._keys, key_id, before.raw if before else None, after, entry)

    async def tenants(self) -> list[StoredTenant]:
        return [_TENANT.decode(raw) for raw in self._tenants.values()]

    async def get_tenant(self, name: str) -> FoundTenant | None:
        raw = self._tenants.get(name)
        return FoundTenant(_TENANT.decode(raw), raw) if raw is not None else None

    async def write_tenant(self, name: str, before: FoundTenant | None, after: StoredTenant | None,
                           entry: AuditEntry) -> int:
        owned = sorted(record.id for record in await self.keys() if record.tenant == name)
        if self._tenants.get(name) == (before.raw if before else None) and after is None and owned:
            raise Owned(owned)
        return self._write(self._tenants, name, before.raw if before else None, after, entry)

    def _write(self, into: dict[str, bytes], field: str, before: bytes | None, after: StoredKey | StoredTenant | None,
               entry: AuditEntry) -> int:
        if into.get(field) != before:
            raise Conflict(field)
        if after is None:
            del into[field]
        else:
            into[field] = msgspec.json.encode(after)
        self._version += 1
        self._audit.append(entry)
        return self._version

    async def audit(self, start: int, count: int) -> tuple[list[AuditEntry], int]:
        return self._audit[start:start + count], len(self._audit)

    async def close(self) -> None:
        pass
