"""The response cache's settings: a route's `cache = {...}`, and the `[cache]` section its stores share.

    [cache]                                  # optional; these are the defaults
    memory_bytes = 67_108_864                # the memory backend's bound, per worker process
    max_entry_bytes = 1_048_576              # a larger answer is not stored
    timeout_ms = 50                          # one call to Redis; past it, a lookup is a miss

    [[routes]]
    model = "gpt-4o"
    group = "openai"
    cache = { ttl = 600, scope = "tenant", backend = "redis" }   # redis: the [tenancy] store's server
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

Scope = Literal["tenant", "key", "global"]


class _Config(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Unknown keys are errors, as everywhere in the configuration."""


class RouteCache(_Config, frozen=True):
    """A route's exact response cache (docs/routing.md): its answers kept `ttl` seconds, seen only within
    `scope` (the key's tenant, the key itself, or every caller), in `backend`. Only deterministic requests
    (temperature 0, or a seed) unless `nondeterministic`."""

    ttl: Annotated[float, Meta(gt=0, le=30 * 86_400)] = 300.0
    scope: Scope = "tenant"
    backend: Literal["memory", "redis"] = "memory"
    nondeterministic: bool = False  # also requests that sample: a hit then repeats one sample


class CacheSettings(_Config, frozen=True):
    """What the routes' caches share: the memory backend's bound and the Redis backend's deadline."""

    memory_bytes: Annotated[int, Meta(ge=0, le=2**40)] = 64 * 1024 * 1024  # per worker process
    max_entry_bytes: Annotated[int, Meta(ge=1024, le=512 * 1024 * 1024)] = 1024 * 1024
    timeout_ms: Annotated[int, Meta(ge=1, le=10_000)] = 50
