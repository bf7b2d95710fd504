"""The `[tenancy]` section: keys, tenants, per-model limits and prices, and the store they share.

    [tenancy]
    backend = "redis"                      # or "memory": one process's own state
    redis = { url = "redis://10.0.0.5:6379/0" }
    keys_file = "/etc/ingress/keys.toml"   # re-read on SIGHUP; or [[tenancy.keys]] here

    [tenancy.tenants.acme]
    limits = { rpm = 600, tpm = 200_000, budget = { usd = 50.0, period = "month" } }
    routes = ["public-*"]                  # the routes (by name) its requests may take; default all

    [[tenancy.keys]]                       # what `ingress keys new --tenant acme` prints
    id = "3f9c2a7d1b6e"
    tenant = "acme"
    hash = "sha256:..."
    models = ["gpt-4o*", "llama-3.1-8b"]
    limits = { rpm = 60, tpm = 40_000, concurrency = 4 }

    [tenancy.models."gpt-4o"]
    price = { input = 2.5, output = 10.0 }  # USD per million tokens
    default_max_tokens = 4096               # reserved when a request sets no max_tokens

    [[tenancy.issuers]]                    # callers with a JWT of this OIDC issuer (docs/keys-and-limits.md)
    issuer = "https://sso.example.com/realms/acme"
    audience = ["ingress"]
    claims = { tenant = "org_id", team = "groups", plan = "ingress_plan" }
    limits = { rpm = 60, tpm = 100_000 }   # each subject's own, as a key's are
    plans.heavy = { rpm = 600 }            # a subject whose `ingress_plan` claim is "heavy"
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
    expires_at: Annotated[float, Meta(ge=0)] | None = None  # Unix time: the key is refused from then on
    # A rotated key's former secret (its hash), accepted beside the new one until `previous_until` (Unix time)
    previous_hash: KeyHash | None = None
    previous_until: Annotated[float, Meta(ge=0)] | None = None
    # "admin": it may also read (never change) the stored responses and conversations of every key of its
    # tenant (ingress/state/store.py `readers`); "own": only those it made
    scope: Literal["own", "admin"] = "own"


class Tenant(_Config, frozen=True):
    limits: Limits = Limits()
    models: tuple[str, ...] = ("*",)  # a key may use what both it and its tenant allow
    routes: tuple[str, ...] = ("*",)  # names or globs of the routes (route_name) its requests may take
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


# Asymmetric signatures only: `none` and HMAC (HS*) cannot be configured, so a token signed with an issuer's
# public key as an HMAC secret (key confusion) is refused for its algorithm before any key is looked at.
Algorithm = Literal["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"]
ClaimPath = Annotated[str, Meta(pattern=r"^[A-Za-z0-9_:/$-]+(\.[A-Za-z0-9_:/$-]+)*\Z", max_length=200)]


class Claims(_Config, frozen=True):
    """Which claims of a token name its tenant, its subject (the person or agent limits and usage are kept
    for), its team and its plan; a dotted path reads inside an object (`realm_access.roles`). A team or plan
    claim holding a list gives its first string."""

    tenant: ClaimPath | None = None  # unset: the issuer's `tenant` for every token
    subject: ClaimPath = "sub"
    team: ClaimPath | None = None  # attribution only (the usage record's `team`)
    plan: ClaimPath | None = None  # names one of the issuer's `plans`: that subject's limits instead of `limits`


class Issuer(_Config, frozen=True):
    """An OIDC issuer whose JWTs are accepted as `Authorization: Bearer`: its keys from the JWKS its discovery
    document names (`{issuer}/.well-known/openid-configuration`), fetched at start, refreshed every
    `refresh_every` and when a token names a key not in the set (at most once per `min_refresh_interval`)."""

    issuer: Annotated[str, Meta(pattern=r"^https?://[^\s/?#]+(/[^\s?#]*)?\Z", max_length=500)]
    audience: Annotated[tuple[Annotated[str, Meta(min_length=1, max_length=500)], ...], Meta(min_length=1)]
    name: Name = "oidc"  # the subjects' prefix in limits and the usage record; unique among issuers
    algorithms: Annotated[tuple[Algorithm, ...], Meta(min_length=1)] = ("RS256",)
    claims: Claims = Claims()
    tenant: Name | None = None  # the tenant of every token when claims.tenant is unset
    models: tuple[str, ...] = ("*",)  # what its callers may use (and their tenant allows)
    limits: Limits = Limits()  # each subject's own
    plans: dict[Name, Limits] = {}
    leeway: Annotated[float, Meta(ge=0, le=300)] = 30.0  # seconds of clock skew allowed on exp, nbf and iat
    refresh_every: Seconds = 900.0
    min_refresh_interval: Annotated[float, Meta(ge=0.1, le=3600)] = 10.0
    fetch_timeout: Annotated[float, Meta(gt=0, le=60)] = 5.0  # discovery and JWKS, each
    jwks_uri: Annotated[str, Meta(pattern=r"^https?://\S+\Z")] | None = None  # instead of discovery's


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
    issuers: tuple[Issuer, ...] = ()  # OIDC issuers whose JWTs authenticate callers beside the keys


def issuers_problem(issuers: tuple[Issuer, ...], tenants: dict[str, Tenant]) -> str | None:
    """What is wrong with the issuers (config.py's message), if anything: each once, under its own name; each
    token of it finds a tenant (its claim, or a declared fixed one); its callers may use some model."""
    names: set[str] = set()
    urls: set[str] = set()
    for i, issuer in enumerate(issuers):
        where = f"tenancy.issuers[{i}]"
        if issuer.name in names:
            return f"{where}.name: {issuer.name!r} names two issuers; give each its own name"
        if issuer.issuer in urls:
            return f"{where}.issuer: {issuer.issuer!r} is configured twice"
        names.add(issuer.name)
        urls.add(issuer.issuer)
        if issuer.claims.tenant is None and issuer.tenant is None:
            return f"{where}: set claims.tenant (the claim naming a token's tenant) or tenant (every token's)"
        if issuer.tenant is not None and issuer.tenant not in tenants:
            return f"{where}.tenant: no tenant named {issuer.tenant!r}; declare it as [tenancy.tenants.{issuer.tenant}]"
        if not issuer.models:
            return f"{where}.models: its callers must be allowed at least one model (a name or a glob)"
    return None
