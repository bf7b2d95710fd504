"""What the response cache reads of a request (sans-I/O): its `Cache-Control`, who may share its entry
(the scope's value), and the entry's key."""

from __future__ import annotations

import hashlib

from ingress.cache.settings import Scope

KEY_VERSION = b"ingress-response-cache/1"  # in every key: a change of what is stored makes new keys
NO_STORE, NO_CACHE = "no-store", "no-cache"


def directive(cache_control: str | None) -> str | None:
    """A request's `Cache-Control` as the cache reads it: "no-store", "no-cache" or None (others ignored)."""
    if not cache_control:
        return None
    words = {part.split("=", 1)[0].strip().lower() for part in cache_control.split(",")}
    return NO_STORE if NO_STORE in words else NO_CACHE if NO_CACHE in words else None


def scope_value(scope: Scope, tenant: str | None, key_id: str | None, credential: str | None) -> str:
    """Who may share an entry: a tenant's keys (`tenant`), one key (`key`), or everyone (`global`). On an
    edge without tenancy the caller's forwarded credential, if any, stands for both (hashed)."""
    if scope == "global":
        return "global"
    who = tenant if scope == "tenant" else key_id
    if who is not None:
        return f"{scope}:{who}"
    if credential:
        return "credential:" + hashlib.sha256(credential.encode()).hexdigest()
    return "open"


def entry_key(canonical: bytes, route: str, upstream_model: str, scope: str) -> str:
    """The entry's key: SHA-256 over the route, the upstream model, the scope and the canonical request,
    each length-prefixed (no two different tuples hash the same bytes)."""
    h = hashlib.sha256(KEY_VERSION)
    for part in (route.encode(), upstream_model.encode(), scope.encode(), canonical):
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()
