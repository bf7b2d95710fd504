"""Tenancy: who may call what, how much, and with which prompt.

    policy.py    keys, tenants, model policies → a Principal, and a request's Plan of checks
    bearer.py    JWTs of the configured OIDC issuers, verified with their keys (PyJWT); claims.py: their
                 claims as a tenant, a subject, a team and a plan; jwks.py: the issuers' keys, fetched
    plan.py      the checks as data (GCRA rates, quota counters, leased slots), headers and messages
    limiter.py   admission and settling, as the pipeline calls them
    stores/      what a store does (store.py); one process's (memory.py); the fleet's (redis.py: one Lua
                 script a request, Redis's clock, through its own RESP client resp.py)
    keys.py      `sk-ig-<id>-<secret>`: made, hashed, found in constant time
    ledger.py    the spend ledger: each usage record added to its hour's rollup, flushed off the request path
                 to stores/ledger.py (Redis, or memory); the admin API's rows of it

Without a `[tenancy]` section none of this runs and the edge is open, as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ingress.errors import Unauthenticated
from ingress.tenancy.bearer import UnknownKey
from ingress.tenancy.claims import TokenRefused
from ingress.tenancy.jwks import KeySets
from ingress.tenancy.limiter import Limiter
from ingress.tenancy.policy import BAD_TOKEN, Policy, Principal
from ingress.tenancy.settings import Key, Tenant
from ingress.tenancy.settings import Tenancy as TenancySettings
from ingress.tenancy.stores.store import LocalStore, Store


@dataclass
class Tenancy:
    policy: Policy
    limiter: Limiter
    keysets: KeySets | None = None  # the issuers' keys, when [[tenancy.issuers]] names any

    def reload(self) -> None:
        """Read the keys file again (SIGHUP); a bad file keeps the keys in use and raises ValueError. The
        issuers' keys are kept."""
        self.policy = Policy.load(self.policy.settings, self.policy.verifier, self.policy.stored,
                                  self.policy.stored_tenants)

    def install(self, stored: tuple[Key, ...], tenants: Mapping[str, Tenant] | None = None) -> None:
        """The admin API's keys and tenants as they now are (ingress/admin/sync.py): the keys file as last read
        is kept."""
        self.policy = Policy(self.policy.settings, self.policy.keys_file, self.policy.verifier, stored, tenants)

    async def refreshed(self, headers: Mapping[str, str], unknown: UnknownKey,
                        presented: str | None = None) -> Principal:
        """The principal of a token whose key the set lacked, after its issuer's keys were fetched again (at
        most once per interval): IssuerUnavailable while the edge has none of them, else a 401 if the key is
        still not there."""
        assert self.keysets is not None  # a Verifier is made with them
        await self.keysets.refresh(unknown.issuer)
        try:
            return self.policy.authenticate(headers, presented)
        except UnknownKey:
            raise Unauthenticated(BAD_TOKEN) from TokenRefused("signing key not in the issuer's key set")


def store_of(settings: TenancySettings, workers: int) -> Store:
    if settings.backend == "redis":
        from ingress.tenancy.stores.redis import RedisStore

        assert settings.redis is not None  # config.py checks
        store: Store = RedisStore(settings.redis, workers)
        return store
    return LocalStore(1 / max(workers, 1))


def build(settings: TenancySettings, workers: int = 1) -> Tenancy:
    policy = Policy.load(settings)
    keysets = KeySets(policy.verifier) if policy.verifier is not None else None
    return Tenancy(policy, Limiter(store_of(settings, workers), settings.lease_ttl), keysets)
