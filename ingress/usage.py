"""A request's usage record, from its Exchange: the fields of its access line, what a cost report is built from.

One function makes it, so that whatever else reports a request (a span's event) carries the same fields
under the same names. The keys, in the line's order (each only when known, but for the first five):

    method, path, status, outcome, duration_ms          the HTTP exchange and how it ended
    model, stream, upstream                             as asked; the endpoint that served it (null if none)
    route, served_model                                 the route that took it; the model the answer named
    variant, served_route, fell_back                    a split's variant that took it; the route of its chain
                                                        that answered; the routes that failed it ("route:class")
    affinity, matched_blocks                            a cache-affine group's choice: which way it went (hit,
                                                        hashed, affinity_key, overridden_by_load, balanced) and
                                                        the prefix blocks it matched (0: none)
    tenant, key_id | subject, team, api, dropped, limit who asked (a key, or a JWT's `<issuer>:<sub>` and
                                                        team); the API family; hints not sent; admission
    ttfb_ms, paced_ms                                   time to the first byte of the answer; the start's wait
    cached                                              true: served from the route's response cache
    prompt_tokens, completion_tokens, cached_tokens,    the service's usage (cached, cache write: of the prompt;
    cache_write_tokens, reasoning_tokens, cost_usd      reasoning: of the completion); its cost at the price
    error_code, error_type, error_detail                what went wrong
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ingress.tenancy.plan import NANO_USD_PER_USD

if TYPE_CHECKING:
    from ingress.exchange import Exchange
    from ingress.tenancy.plan import TokenPrice
    from ingress.tenancy.policy import Policy
    from ingress.wire.types import Usage


def cost_usd(usage: Usage, price: TokenPrice) -> float:
    """What `usage` costs at a model's price, computed as a `usd` budget charges it (in whole nano-USD a
    token), so that a tenant's spending and the sum of its records agree. A Price has no price of its own
    for cached input (nor for a cache write): those tokens are part of `prompt_tokens` and are priced as
    input; reasoning tokens are part of `completion_tokens`, priced as output."""
    return (price.input * usage.prompt_tokens + price.output * usage.completion_tokens) / NANO_USD_PER_USD


def usage_record(exchange: Exchange, method: str, path: str, status: int, outcome: str, now: float,
                 policy: Policy | None = None) -> dict[str, object]:
    """The record of a request that has ended (`now`, a perf_counter mark), with its cost when `policy`
    prices the model asked for (as budgets charge it: by the name the request gave, not the service's)."""
    record: dict[str, object] = {
        "method": method, "path": path, "status": status, "outcome": outcome,
        "duration_ms": round((now - exchange.started) * 1000, 3),
    }
    routed, attempts, answer = exchange.routed, exchange.attempts, exchange.answer
    if routed.model is not None:
        record.update(model=routed.model, stream=routed.stream, upstream=attempts.upstream)
        if routed.route is not None:
            record["route"] = routed.route
        if answer.served_model is not None:
            record["served_model"] = answer.served_model
        if routed.variant is not None:
            record["variant"] = routed.variant
        if attempts.fell_back is not None:
            record.update(served_route=attempts.served_by[0] if attempts.served_by is not None else None,
                          fell_back=attempts.fell_back)
        if attempts.choice is not None:
            record.update(affinity=attempts.choice.way.value, matched_blocks=attempts.choice.matched)
    if (principal := exchange.principal) is not None:
        record["tenant"] = principal.tenant_name
        if principal.key is not None:
            record["key_id"] = principal.key.id
        else:  # a JWT's caller: `<issuer name>:<sub>`, and its team when its issuer maps one
            record["subject"] = principal.id
            if principal.team is not None:
                record["team"] = principal.team
    if exchange.api is not None:
        record["api"] = exchange.api
    if routed.hints:
        record["dropped"] = routed.hints
    if exchange.admitted.outcome is not None:
        record["limit"] = exchange.admitted.outcome
    if answer.first_byte is not None:
        record["ttfb_ms"] = round((answer.first_byte - exchange.started) * 1000, 3)
    if exchange.paced is not None:
        record["paced_ms"] = round((exchange.paced - exchange.started) * 1000, 3)
    if exchange.cache == "hit":
        record["cached"] = True  # the usage below is the cached answer's; no limit or budget was charged it
    usage = answer.usage
    if usage is not None:
        record.update(prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens,
                      cached_tokens=usage.cached_tokens, cache_write_tokens=usage.cache_write_tokens,
                      reasoning_tokens=usage.reasoning_tokens)
        price = policy.price_of(routed.model) if policy is not None and routed.model is not None else None
        if price is not None:  # a hit cost nothing: budgets were not charged it, and the lines sum to spending
            record["cost_usd"] = 0.0 if exchange.cache == "hit" else cost_usd(usage, price)
    error = exchange.failure
    if error is not None:
        record.update(error_code=error.code, error_type=error.type)
        if error.__cause__ is not None:  # what went wrong inside, for operators only
            record["error_detail"] = f"{type(error.__cause__).__name__}: {error.__cause__}"[:300]
    return record
