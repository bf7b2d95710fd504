"""The `[tenancy]` section: keys, tenants, per-model limits and prices, and the store they share.

    [tenancy]
    backend = "redis"                      # or "memory": one process's own state
    redis = { url = "redis://10.0.0.5:6379/0" }
    keys_file = "/etc/ingress/keys.toml"   # re-read on SIGHUP; or [[tenancy.keys]] here

    [tenancy.tenants.acme]
    limits = { rpm = 600, tpm = 200_000, budget = { usd = 50.0, period = "month" } }

    [[tenancy.keys]]                       # what `ingress keys new --tenant acme` prints
    id = "3f9c2a7d1b6e"
    tenant = "acme"
    hash = "sha256:..."
    models = ["gpt-4o*", "llama-3.1-8b"]
    limits = { rpm = 60, tpm = 40_000, concurrency = 4 }

    [tenancy.models."gpt-4o"]
    price = { input = 2.5, output = 10.0 }  # USD per million tokens
    default_max_tokens = 4096               # reserved when a request sets no max_tokens
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from ingress.guardrails import Guardrails

Rate = Annotated[int, Meta(ge=1, le=10**12)]
KeyId = Annotated[str, Meta(pattern=r"^[0-9a-z]{8,32}\Z")]
Name = Annotated[str, Meta(pattern=r"^[A-Za-z0-9._:-]{1,64}\Z")]  # a tenant: a metric label, a store key
KeyHash = Annotated[str, Meta(pattern=r"^sha256:[0-9a-f]{64}\Z")]
Seconds = Annotated[float, Meta(gt=0, le=86_400)]
Degraded = Literal["local", "allow", "refuse"]


class _Config(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Unknown keys are errors, as everywhere in the configuration."""


class Budget(_Config, frozen=True):
    """At most `tokens` (input + output), or `usd` of cost at the models' prices, per calendar period (UTC)."""

    tokens: Rate | None = None
    usd: Annotated[float, Meta(gt=0, le=10**9)] | None = None
    period: Literal["day", "month"] = "month"


class Limits(_Config, frozen=True):
    """Limits of a key, a tenant or a model; each unset one does not apply. Rates are per minute."""

    rpm: Rate | None = None  # requests
    tpm: Rate | None = None  # tokens, input + output
    input_tpm: Rate | None = None
    output_tpm: Rate | None = None
    concurrency: Annotated[int, Meta(ge=1, le=10**6)] | None = None  # requests in progress at once
    budget: Budget | None = None
    degraded: Degraded | None = None  # when the store cannot answer; unset: [tenancy].degraded


class Price(_Config, frozen=True):
    """USD per million tokens."""

    input: Annotated[float, Meta(ge=0, le=10**6)] = 0.0
    output: Annotated[float, Meta(ge=0, le=10**6)] = 0.0


class Key(_Config, frozen=True):
    """A virtual key: its public id, its tenant, what it may call, its own limits. `hash` is the SHA-256 of
    the whole key; the key itself is shown once, by `ingress keys new`, and kept nowhere."""

    id: KeyId
    tenant: Name
    hash: KeyHash
    models: tuple[str, ...] = ("*",)  # names or globs
    limits: Limits = Limits()
    guardrails: Guardrails | None = None  # checked after its tenant's
    name: str | None = None  # for people; never used to decide


class Tenant(_Config, frozen=True):
    limits: Limits = Limits()
    models: tuple[str, ...] = ("*",)  # a key may use what both it and its tenant allow
    guardrails: Guardrails | None = None  # for every key of the tenant


class ModelPolicy(_Config, frozen=True):
    """A model's own limits (shared by every tenant), its price, and what a request without max_tokens reserves."""

    limits: Limits = Limits()
    price: Price = Price()
    default_max_tokens: Annotated[int, Meta(ge=1, le=10**7)] | None = None


class KeysFile(_Config, frozen=True):
    """A keys file (`keys_file`): keys and tenants, re-read on SIGHUP without a restart."""

    keys: tuple[Key, ...] = ()
    tenants: dict[Name, Tenant] = {}


class Breaker(_Config, frozen=True):
    """After `failures` calls in a row fail or miss their deadline, the store is not asked for `open_for`
    seconds (the degraded policy decides meanwhile); then one call probes it."""

    failures: Annotated[int, Meta(ge=1, le=1000)] = 3
    open_for: Seconds = 2.0


class Redis(_Config, frozen=True):
    url: Annotated[str, Meta(pattern=r"^(rediss?|unix)://\S+\Z")]
    deadline_ms: Annotated[int, Meta(ge=1, le=10_000)] = 50  # per call; no retries (the next request is one)
    prefix: Name = "ingress"  # of every key; all of them share one Redis Cluster slot (hash tag)
    breaker: Breaker = Breaker()


class Tenancy(_Config, frozen=True):
    backend: Literal["memory", "redis"] = "memory"
    redis: Redis | None = None
    keys_file: str | None = None
    keys: tuple[Key, ...] = ()
    tenants: dict[Name, Tenant] = {}
    models: dict[str, ModelPolicy] = {}  # exact names or globs; the first glob that matches, in order
    default_max_tokens: Annotated[int, Meta(ge=1, le=10**7)] = 4096  # reserved when neither request nor model says
    lease_ttl: Seconds = 30.0  # a concurrency slot held by a worker that died frees after this; renewed meanwhile
    degraded: Degraded = "local"  # local: this process's share of each limit; allow; refuse (503)
