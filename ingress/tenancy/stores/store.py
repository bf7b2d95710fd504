"""Where limit state lives. A store applies a Plan's checks atomically, settles a ticket once, and renews
the leases of requests in progress; `LocalStore` is one process's memory (memory.py), `RedisStore`
(redis.py) a fleet's."""

from __future__ import annotations

from typing import Protocol

from ingress.tenancy.plan import Actual, Decision, Plan
from ingress.tenancy.stores.memory import LOCAL_TOMBSTONE_US, MemoryStore


class Store(Protocol):
    @property
    def share(self) -> float:
        """Of every limit, what this store admits: a worker's 1/N in memory, the whole of it in Redis."""

    async def admit(self, plan: Plan) -> Decision:
        """Every check passes and is applied, or none is. Never raises: a store that cannot answer decides
        by each check's degraded policy, and says so in `Decision.degraded`."""

    async def settle(self, ticket: str, actual: Actual | None) -> None:
        """Charge the real usage against the reservation and free its slots, once (idempotent by ticket);
        None cancels (refunds everything, and a late admission of the ticket reserves nothing)."""

    async def renew(self, tickets: list[str]) -> None:
        """Extend the leases of the requests still in progress."""

    async def close(self) -> None: ...


class LocalStore:
    """The memory backend: `share` of every limit (1/N for each of N workers)."""

    def __init__(self, share: float = 1.0) -> None:
        self.memory = MemoryStore(share, tombstone_us=LOCAL_TOMBSTONE_US)

    @property
    def share(self) -> float:
        return self.memory.share

    async def admit(self, plan: Plan) -> Decision:
        return self.memory.admit(plan)

    async def settle(self, ticket: str, actual: Actual | None) -> None:
        self.memory.settle(ticket, actual)

    async def renew(self, tickets: list[str]) -> None:
        self.memory.renew(tickets)
        self.memory.sweep()

    async def close(self) -> None:
        pass
