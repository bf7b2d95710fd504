"""The admission stage's I/O: a Plan to the store and back as a decision, headers and errors; settling
off the response path; leases renewed while their requests run."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field

from ingress import metrics
from ingress.errors import IngressError, LimitsUnavailable, QuotaExceeded, RateLimited
from ingress.log import get_logger
from ingress.tasks import BackgroundTasks
from ingress.tenancy.plan import Actual, Decision, Plan, fitted, headers_of, refusal_message
from ingress.tenancy.stores.store import LocalStore, Store

log = get_logger("ingress.tenancy")


@dataclass
class Admission:
    """An admitted request's reservation, held on its Exchange until it settles (once)."""

    limiter: Limiter
    plan: Plan
    tenant: str
    settled: bool = field(default=False)

    def settle(self, actual: Actual | None) -> None:
        if not self.settled:
            self.settled = True
            self.limiter.settle(self, actual)


def refusal(plan: Plan, decision: Decision) -> tuple[IngressError, dict[str, str]]:
    """The error a refused decision is answered with, and the headers that say when (or whether) to retry."""
    check = decision.refused
    if check is None:  # the store could not answer, and the limit's policy is to refuse
        return LimitsUnavailable("The limits service is unavailable; retry the request."), {}
    wait_s = max(math.ceil(decision.retry_after_us / 1_000_000), 1)
    headers = {"retry-after-ms": str(max(math.ceil(decision.retry_after_us / 1000), 1))}
    message = refusal_message(check, plan, decision)
    error: IngressError
    if check.algorithm == "quota" and decision.never:  # spent: retrying before it renews cannot succeed
        error = QuotaExceeded(message, retry_after=wait_s)
    else:  # a budget not spent, but held by reservations in flight, is a rate limit: soon, it admits
        error = RateLimited(message, type_="requests" if check.kind in ("requests", "concurrency") else "tokens",
                            retry_after=wait_s)
    if decision.never:
        headers["x-should-retry"] = "false"
    elif check.algorithm == "quota":  # said outright, beside a message about a budget
        headers["x-should-retry"] = "true"
    return error, headers


class Limiter:
    def __init__(self, store: Store, lease_ttl: float) -> None:
        self.store = store
        self.lease_ttl = lease_ttl
        self.live: dict[str, Admission] = {}
        self.tasks = BackgroundTasks()

    async def admit(self, plan: Plan, tenant: str) -> Verdict:
        """The store's decision, as what the edge does with it: a reservation to settle, or an error. A
        default output bound is first lowered to what the limits, at the store's share, can ever admit."""
        plan = fitted(plan, self.store.share)
        decision = await self.store.admit(plan)
        headers = headers_of(decision)
        outcome = "admitted" if decision.degraded is None else f"degraded_{decision.degraded}"
        if not decision.admitted:
            error, more = refusal(plan, decision)
            headers.update(more)
            if decision.refused is not None:
                outcome = "limited"
                metrics.child(metrics.LIMITED, tenant, decision.refused.scope, decision.refused.kind).inc()
            metrics.child(metrics.ADMISSIONS, tenant, outcome).inc()
            return Verdict(None, headers, error, outcome)
        metrics.child(metrics.ADMISSIONS, tenant, outcome).inc()
        metrics.child(metrics.TOKENS_RESERVED, tenant).inc(plan.input_tokens + plan.output_tokens)
        admission = Admission(self, plan, tenant)
        self.live[plan.ticket] = admission
        return Verdict(admission, headers, None, outcome)

    def settle(self, admission: Admission, actual: Actual | None) -> None:
        """Off the response path: the store is told in the background."""
        self.live.pop(admission.plan.ticket, None)
        plan, tenant = admission.plan, admission.tenant
        used = 0 if actual is None else actual.input_tokens + actual.output_tokens
        metrics.child(metrics.TOKENS_SETTLED, tenant).inc(used)
        metrics.child(metrics.TOKENS_REFUNDED, tenant).inc(max(plan.input_tokens + plan.output_tokens - used, 0))
        if isinstance(self.store, LocalStore):  # nothing to wait for: no task a request
            self.store.memory.settle(plan.ticket, actual)
        else:
            self.tasks.spawn(self.store.settle(plan.ticket, actual), "settle")

    async def renew_forever(self) -> None:
        """Renew the leases of the requests in progress, three times per lease life."""
        while True:
            await asyncio.sleep(self.lease_ttl / 3)
            try:
                await self.store.renew(list(self.live))
            except Exception as exc:  # a store that cannot answer now may answer next time
                log.warning("lease renewal failed", error=repr(exc))

    async def close(self, grace: float = 1.0) -> None:
        """Let settles in flight finish (for up to `grace` seconds), then close the store."""
        await self.tasks.wait(grace)
        await self.tasks.close()
        await self.store.close()


@dataclass(frozen=True, slots=True)
class Verdict:
    admission: Admission | None  # admitted: the reservation to settle
    headers: dict[str, str]  # x-ratelimit-*, and on a refusal when (or whether) to retry
    error: IngressError | None  # refused
    outcome: str  # for the access line and metrics: admitted, limited, degraded_...
