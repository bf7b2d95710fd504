"""Every replica's view of the stored keys and tenants: the version counter polled, both read again when it
moved.

Polling, not pub/sub: one GET of a small integer every `poll_interval` (0.25 s by default) a worker is cheap,
needs no connection held in subscribe mode, and cannot miss a message while a connection is down: a
change is seen within poll_interval plus two round trips, and after an outage at the first answer. A
server that restarted empty is seen too (keystore.py's epoch), and its (lack of) keys installed. While the
store cannot answer, the keys last installed stay (the data plane keeps serving on them)."""

from __future__ import annotations

import asyncio

import msgspec

from ingress.admin.keystore import KeyStore, Unavailable
from ingress.log import get_logger
from ingress.tenancy import Tenancy

log = get_logger("ingress.admin")


class Follower:
    def __init__(self, store: KeyStore, tenancy: Tenancy) -> None:
        self.store = store
        self.tenancy = tenancy
        self.seen: str | None = None  # the version installed
        self.failing = False

    async def once(self) -> bool:
        """Install the stored keys if their version moved; whether it did. Unavailable when the store did not
        answer (the keys in use stay)."""
        version = await self.store.version()
        if version == self.seen:
            return False
        keys = await self.store.keys()
        tenants = await self.store.tenants()
        self.tenancy.install(tuple(record.key() for record in keys), {t.name: t.tenant() for t in tenants})
        self.seen = version
        return True

    async def forever(self, interval: float) -> None:
        while True:
            try:
                if await self.once():
                    log.info("stored keys installed", version=self.seen, keys=len(self.tenancy.policy.stored),
                             tenants=len(self.tenancy.policy.stored_tenants))
                if self.failing:
                    log.info("key store answers again")
                self.failing = False
            # ValueError: stored guardrails this replica cannot compile (the API checks them, on its replica)
            except (Unavailable, msgspec.DecodeError, ValueError) as exc:
                if not self.failing:  # told once an outage, not every poll
                    log.error("key store not read; the keys in use stay", error=str(exc) or type(exc).__name__)
                self.failing = True
            await asyncio.sleep(interval)
