"""Tenancy: who may call what, how much, and with which prompt.

    policy.py    keys, tenants, model policies → a Principal, and a request's Plan of checks
    plan.py      the checks as data (GCRA rates, quota counters, leased slots), headers and messages
    limiter.py   admission and settling, as the pipeline calls them
    stores/      what a store does (store.py); one process's (memory.py); the fleet's (redis.py: one Lua
                 script a request, Redis's clock, through its own RESP client resp.py)
    keys.py      `sk-ig-<id>-<secret>`: made, hashed, found in constant time

Without a `[tenancy]` section none of this runs and the edge is open, as before.
"""

from __future__ import annotations

from dataclasses import dataclass

from ingress.tenancy.limiter import Limiter
from ingress.tenancy.policy import Policy
from ingress.tenancy.settings import Tenancy as TenancySettings
from ingress.tenancy.stores.store import LocalStore, Store


@dataclass
class Tenancy:
    policy: Policy
    limiter: Limiter

    def reload(self) -> None:
        """Read the keys file again (SIGHUP); a bad file keeps the keys in use and raises ValueError."""
        self.policy = Policy.load(self.policy.settings)


def store_of(settings: TenancySettings, workers: int) -> Store:
    if settings.backend == "redis":
        from ingress.tenancy.stores.redis import RedisStore

        assert settings.redis is not None  # config.py checks
        store: Store = RedisStore(settings.redis, workers)
        return store
    return LocalStore(1 / max(workers, 1))


def build(settings: TenancySettings, workers: int = 1) -> Tenancy:
    return Tenancy(Policy.load(settings), Limiter(store_of(settings, workers), settings.lease_ttl))
