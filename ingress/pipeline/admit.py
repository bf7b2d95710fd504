"""admit and settle: the request's limits before the send, its reservation charged what it used after the end."""

from __future__ import annotations

import time
from typing import TypeVar

from ingress.errors import UpstreamAnswered
from ingress.exchange import Exchange
from ingress.pipeline.gateway import Gateway
from ingress.pipeline.prepare import Prepared
from ingress.tenancy.plan import Actual, Plan

R = TypeVar("R")


async def admit(gw: Gateway, prepared: Prepared[R], ex: Exchange) -> None:
    """The key's, its tenant's and the model's limits, for this request's estimate (its prompt's tokens
    and the most it may generate): one round trip to the store. Refused, it raises, having consumed
    nothing; admitted, the reservation is held on the exchange until it settles. Either way the answer
    carries the x-ratelimit headers."""
    await admit_estimate(gw, ex, ex.model or "", prepared.prompt_tokens, prepared.max_output_tokens)


async def admit_estimate(gw: Gateway, ex: Exchange, model: str, prompt_tokens: int,
                         max_output_tokens: int | None) -> None:
    """`admit`, for an estimate already known (a relayed buffer's passport and max_tokens)."""
    principal = ex.principal
    if principal is None or gw.tenancy is None:
        return
    tenancy = gw.tenancy
    plan = tenancy.policy.plan(principal, model, prompt_tokens, max_output_tokens)
    asked = time.perf_counter()
    verdict = await tenancy.limiter.admit(plan, principal.tenant_name)
    ex.admitted = time.perf_counter()
    if ex.trace is not None:
        ex.trace.child("admission", asked, ex.admitted, {"ingress.limit.outcome": verdict.outcome,
                                                          "ingress.tenant": principal.tenant_name})
    ex.limit_headers, ex.limit_outcome = verdict.headers, verdict.outcome
    if verdict.error is not None:
        raise verdict.error
    ex.admission = verdict.admission


def settle(ex: Exchange) -> None:
    """The exchange has ended, however it ended (the edge calls this once, last): whatever it still
    holds is let go, and its reservation is charged what it used."""
    lease, ex.lease = ex.lease, None
    if lease is not None:
        lease.release(ex.upstream_ok)
    admission, ex.admission = ex.admission, None
    if admission is not None:
        admission.settle(used(ex, admission.plan))


def used(ex: Exchange, plan: Plan) -> Actual | None:
    """What the request used, for its reservation: the service's usage; without it, what the edge knows.
    None (refund all) when nothing ran: never sent, or refused by the service before any output."""
    if ex.cache == "hit":  # served from the response cache: the request counts, its tokens do not
        return Actual(0, 0)
    if ex.usage is not None:
        return Actual(ex.usage.prompt_tokens, ex.usage.completion_tokens)
    if ex.binary:  # a relayed answer is not read: the reservation stands
        return Actual(plan.input_tokens, plan.output_tokens)
    if ex.upstream_sent is None or (isinstance(ex.error, UpstreamAnswered) and not ex.output_tokens):
        return None
    return Actual(plan.input_tokens, ex.output_tokens or 0)  # the prompt as counted, and what was streamed

