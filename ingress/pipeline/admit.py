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


async def admit(gateway: Gateway, prepared: Prepared[R], exchange: Exchange) -> None:
    """The key's, its tenant's and the model's limits, for this request's estimate (its prompt's tokens
    and the most it may generate): one round trip to the store. Refused, it raises, having consumed
    nothing; admitted, the reservation is held on the exchange until it settles. Either way the answer
    carries the x-ratelimit headers."""
    await admit_estimate(gateway, exchange, prepared.prompt_tokens, prepared.max_output_tokens)


async def admit_estimate(gateway: Gateway, exchange: Exchange, prompt_tokens: int,
                         max_output_tokens: int | None) -> None:
    """`admit`, for an estimate already known (a relayed buffer's passport and max_tokens)."""
    principal = exchange.principal
    if principal is None or gateway.tenancy is None:
        return
    tenancy, admitted = gateway.tenancy, exchange.admitted
    plan = tenancy.policy.plan(principal, exchange.routed.model or "", prompt_tokens, max_output_tokens)
    asked = time.perf_counter()
    verdict = await tenancy.limiter.admit(plan, principal.tenant_name)
    admitted.at = time.perf_counter()
    if exchange.trace is not None:
        exchange.trace.child("admission", asked, admitted.at, {"ingress.limit.outcome": verdict.outcome,
                                                                   "ingress.tenant": principal.tenant_name})
    admitted.headers, admitted.outcome = verdict.headers, verdict.outcome
    if verdict.error is not None:
        raise verdict.error
    admitted.admission = verdict.admission


def settle(exchange: Exchange) -> None:
    """The exchange has ended, however it ended (the edge calls this once, last): whatever it still
    holds is let go, and its reservation is charged what it used."""
    lease = exchange.attempts.take()
    if lease is not None:
        lease.release(exchange.answer.upstream_ok)
    admission = exchange.admitted.take()
    if admission is not None:
        admission.settle(used(exchange, admission.plan))


def used(exchange: Exchange, plan: Plan) -> Actual | None:
    """What the request used, for its reservation: the service's usage; without it, what the edge knows.
    None (refund all) when nothing ran: never sent, or refused by the service before any output."""
    answer = exchange.answer
    if exchange.cache == "hit":  # served from the response cache: the request counts, its tokens do not
        return Actual(0, 0)
    if answer.usage is not None:
        return Actual(answer.usage.prompt_tokens, answer.usage.completion_tokens)
    if exchange.binary:  # a relayed answer is not read: the reservation stands
        return Actual(plan.input_tokens, plan.output_tokens)
    if exchange.attempts.sent is None or (isinstance(exchange.failure, UpstreamAnswered) and not answer.output_tokens):
        return None
    return Actual(plan.input_tokens, answer.output_tokens or 0)  # the prompt as counted, and what was streamed
