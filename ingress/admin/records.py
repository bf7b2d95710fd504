"""What the admin API stores and answers, and what each change makes of a key or a tenant: pure functions on
structs.

A stored key holds its hash (keys.py's SHA-256 of the whole key), never the key; `shown()` is what the API
answers and the audit log keeps of it, without even the hash. A stored tenant is the limits and models of a
configured one ([tenancy.tenants.<name>]), over it where both have the name. Guardrails are as the
configuration's (ingress/guardrails), checked by guardrails_problem before anything is stored."""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

from ingress.guardrails import Guardrails, check_guardrails
from ingress.tenancy.keys import new_key
from ingress.tenancy.settings import Budget, Key, KeyHash, KeyId, Limits, Name, Tenant

Metadata = Annotated[dict[Annotated[str, Meta(min_length=1, max_length=64)],
                          Annotated[str, Meta(max_length=512)]], Meta(max_length=32)]
Models = Annotated[tuple[Annotated[str, Meta(min_length=1, max_length=256)], ...], Meta(min_length=1, max_length=256)]
Label = Annotated[str, Meta(min_length=1, max_length=200)]
When = Annotated[float, Meta(ge=0)]
Scope = Literal["own", "admin"]  # settings.Key.scope
MAX_GRACE = 30 * 86_400.0
Action = Literal["create", "update", "rotate", "revoke", "delete", "import"]


class StoredKey(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    id: KeyId
    tenant: Name
    hash: KeyHash
    models: tuple[str, ...] = ("*",)
    limits: Limits = Limits()
    guardrails: Guardrails | None = None  # checked after its tenant's
    scope: Scope = "own"  # "admin": it reads its tenant's stored responses too (docs/keys-and-limits.md)
    metadata: dict[str, str] = {}
    name: str | None = None
    expires_at: float | None = None
    previous_hash: KeyHash | None = None  # a rotation's former secret, accepted until previous_until
    previous_until: float | None = None
    created_at: float
    updated_at: float
    created_by: str  # the admin key's id

    def key(self) -> Key:
        """The key as the data plane knows one (settings.Key)."""
        return Key(id=self.id, tenant=self.tenant, hash=self.hash, models=self.models, limits=self.limits,
                   guardrails=self.guardrails, scope=self.scope, name=self.name, expires_at=self.expires_at,
                   previous_hash=self.previous_hash, previous_until=self.previous_until)

    def shown(self) -> dict[str, Any]:
        """What the API answers and the audit log keeps: everything but the hashes."""
        shown: dict[str, Any] = msgspec.to_builtins(self)
        del shown["hash"]
        shown.pop("previous_hash", None)
        shown["rotating_until"] = shown.pop("previous_until", None)
        shown["limits"] = _set(shown["limits"])
        return shown


def _set(value: Any) -> Any:
    """The limits that are set: an unset one is not shown."""
    return {k: _set(v) for k, v in value.items() if v is not None} if isinstance(value, dict) else value


class _Body(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A request body: unknown fields are a 400, so that a misspelt one is not silently ignored."""


class NewKey(_Body, frozen=True):
    tenant: Name
    models: Models = ("*",)
    limits: Limits = Limits()
    guardrails: Guardrails | None = None
    scope: Scope = "own"
    metadata: Metadata = {}
    name: Label | None = None
    expires_at: When | None = None


class KeyUpdate(_Body, frozen=True):
    """What to change; what is absent stays. `expires_at: null` removes the expiry; `budget` sets the limits'."""

    models: Models | UnsetType = UNSET
    limits: Limits | UnsetType = UNSET
    budget: Budget | UnsetType | None = UNSET
    guardrails: Guardrails | UnsetType | None = UNSET  # null: none of its own
    scope: Scope | UnsetType = UNSET
    metadata: Metadata | UnsetType = UNSET
    name: Label | UnsetType | None = UNSET
    expires_at: When | UnsetType | None = UNSET


class Rotation(_Body, frozen=True):
    grace_seconds: Annotated[float, Meta(ge=0, le=MAX_GRACE)] = 3600.0  # the old secret works this long beside


class SignIn(_Body, frozen=True):
    """The console's sign-in (session.py): an admin key, exchanged for a session."""

    key: Annotated[str, Meta(min_length=1, max_length=512)]


class KeysImport(_Body, frozen=True):
    """`POST /admin/v1/keys:import`'s body: nothing to say yet, so an empty object (or none)."""


class StoredTenant(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    name: Name
    limits: Limits = Limits()
    models: tuple[str, ...] = ("*",)  # names or globs: a key may use what both it and its tenant allow
    routes: tuple[str, ...] = ("*",)  # names or globs of the routes its requests may take
    guardrails: Guardrails | None = None  # None: a configured tenant's of its name stay (policy.py)
    metadata: dict[str, str] = {}
    created_at: float
    updated_at: float
    created_by: str  # the admin key's id

    def tenant(self) -> Tenant:
        """The tenant as the data plane knows one (settings.Tenant); a configured one's guardrails stay (policy.py)."""
        return Tenant(limits=self.limits, models=self.models, routes=self.routes, guardrails=self.guardrails)

    def shown(self) -> dict[str, Any]:
        shown: dict[str, Any] = msgspec.to_builtins(self)
        shown["limits"] = _set(shown["limits"])
        return shown


class NewTenant(_Body, frozen=True):
    name: Name
    limits: Limits = Limits()
    models: Models = ("*",)
    routes: Models = ("*",)
    guardrails: Guardrails | None = None
    metadata: Metadata = {}


class TenantUpdate(_Body, frozen=True):
    """What to change; what is absent stays. `budget` sets the limits' budget alone (`null` removes it)."""

    limits: Limits | UnsetType = UNSET
    budget: Budget | UnsetType | None = UNSET
    models: Models | UnsetType = UNSET
    routes: Models | UnsetType = UNSET
    guardrails: Guardrails | UnsetType | None = UNSET  # null: none of its own (a configured tenant's stay)
    metadata: Metadata | UnsetType = UNSET


class AuditEntry(msgspec.Struct, frozen=True, kw_only=True):
    at: float  # Unix time
    actor: str  # the admin key's id
    action: Action
    key_id: str | None = None  # the key changed, or
    tenant: str | None = None  # the tenant changed
    client: str | None  # the address the request came from
    before: dict[str, Any] | None  # StoredKey.shown() (no secret, no hash), or StoredTenant.shown()
    after: dict[str, Any] | None


def guardrails_problem(guardrails: object) -> str | None:
    """What is wrong with guardrails a body sets (a rule RE2 cannot compile...), named from `guardrails.`, as
    check-config names a configured one's; None when there are none, or they compile."""
    if not isinstance(guardrails, Guardrails):
        return None
    try:
        check_guardrails(guardrails)
    except ValueError as exc:
        return f"guardrails.{exc}"
    return None


def created(body: NewKey, actor: str, now: float | None = None) -> tuple[str, StoredKey]:
    """A new key: (the key, shown once; its record)."""
    now = time.time() if now is None else now
    secret, key_id, digest = new_key()
    return secret, StoredKey(id=key_id, tenant=body.tenant, hash=digest, models=body.models, limits=body.limits,
                             guardrails=body.guardrails, scope=body.scope, metadata=body.metadata, name=body.name,
                             expires_at=body.expires_at, created_at=now, updated_at=now, created_by=actor)


def key_imported(key: Key, actor: str, now: float | None = None) -> StoredKey:
    """A key of the keys file as stored: its id, hash (and a rotation's former one) and settings as they are."""
    now = time.time() if now is None else now
    return StoredKey(id=key.id, tenant=key.tenant, hash=key.hash, models=key.models, limits=key.limits,
                     guardrails=key.guardrails, scope=key.scope, name=key.name, expires_at=key.expires_at,
                     previous_hash=key.previous_hash, previous_until=key.previous_until, created_at=now,
                     updated_at=now, created_by=actor)


def updated(record: StoredKey, change: KeyUpdate, now: float | None = None) -> StoredKey:
    fields = {name: value for name in ("models", "limits", "guardrails", "scope", "metadata", "name", "expires_at")
              if (value := getattr(change, name)) is not UNSET}
    record = msgspec.structs.replace(record, **fields, updated_at=time.time() if now is None else now)
    if not isinstance(change.budget, UnsetType):
        record = msgspec.structs.replace(record, limits=msgspec.structs.replace(record.limits, budget=change.budget))
    return record


def rotated(record: StoredKey, rotation: Rotation, now: float | None = None) -> tuple[str, StoredKey]:
    """A new secret for the same id (its limits, usage and id stay); the current one works `grace_seconds` more.
    A former secret still in its grace is dropped: two secrets at most."""
    now = time.time() if now is None else now
    secret, _, digest = new_key(record.id)
    grace = rotation.grace_seconds > 0
    return secret, msgspec.structs.replace(record, hash=digest, previous_hash=record.hash if grace else None,
                                           previous_until=now + rotation.grace_seconds if grace else None,
                                           updated_at=now)


def entry(action: Action, actor: str, client: str | None, key_id: str, before: StoredKey | None,
          after: StoredKey | None, now: float | None = None) -> AuditEntry:
    return AuditEntry(at=time.time() if now is None else now, actor=actor, action=action, key_id=key_id,
                      client=client, before=before.shown() if before else None,
                      after=after.shown() if after else None)


def tenant_created(body: NewTenant, actor: str, now: float | None = None) -> StoredTenant:
    now = time.time() if now is None else now
    return StoredTenant(name=body.name, limits=body.limits, models=body.models, routes=body.routes,
                        guardrails=body.guardrails, metadata=body.metadata, created_at=now, updated_at=now,
                        created_by=actor)


def tenant_imported(name: str, tenant: Tenant, actor: str, now: float | None = None) -> StoredTenant:
    """A tenant of the keys file as stored."""
    now = time.time() if now is None else now
    return StoredTenant(name=name, limits=tenant.limits, models=tenant.models, routes=tenant.routes,
                        guardrails=tenant.guardrails, created_at=now, updated_at=now, created_by=actor)


def tenant_updated(record: StoredTenant, change: TenantUpdate, now: float | None = None) -> StoredTenant:
    fields = {name: value for name in ("limits", "models", "routes", "guardrails", "metadata")
              if (value := getattr(change, name)) is not UNSET}
    record = msgspec.structs.replace(record, **fields, updated_at=time.time() if now is None else now)
    if not isinstance(change.budget, UnsetType):
        record = msgspec.structs.replace(record, limits=msgspec.structs.replace(record.limits, budget=change.budget))
    return record


def tenant_entry(action: Action, actor: str, client: str | None, name: str, before: StoredTenant | None,
                 after: StoredTenant | None, now: float | None = None) -> AuditEntry:
    return AuditEntry(at=time.time() if now is None else now, actor=actor, action=action, tenant=name,
                      client=client, before=before.shown() if before else None,
                      after=after.shown() if after else None)
