"""What one request must pass, as data: the checks of its key, its tenant and its model, each a limit
with its algorithm, its store key and its cost, and the decision a store returns for them.

    rate    GCRA (a token bucket read as a theoretical arrival time): `limit` per `period`, a burst of at
            most `limit`, and no window edge to burst twice across. rpm, tpm, input_tpm, output_tpm.
    quota   an integer counter per calendar period: budgets, in tokens or nano-USD (no float drift).
    slots   leases that expire unless renewed: concurrency.

A check's cost is `per_request + per_input * input + per_output * output`: what is reserved at admission
from the estimate, and what settling charges from the real usage (the difference is refunded or owed).
A request that sets no output bound reserves a default, lowered to what its limits can ever admit beside
its prompt (`fitted`): only a prompt and an output bound of the request's own can be too large for good.
Everything here is pure: the stores (stores/memory.py, stores/redis.py) apply checks, and only they keep state.
"""

from __future__ import annotations

import calendar
import math
import time
from dataclasses import dataclass, replace
from typing import Literal, NamedTuple

from ingress.tenancy.settings import Limits, Price

MINUTE_US = 60_000_000
NANO_USD_PER_USD = 10**9
# A budget whose spending leaves room for a request, but whose room the reservations of requests not yet
# settled hold, refuses it for this long (not for good): a finished request's settle lands within
# milliseconds, and Retry-After is in whole seconds. A request still running frees its room when it ends.
IN_FLIGHT_US = 1_000_000

Algorithm = Literal["rate", "quota", "slots"]
Kind = Literal["requests", "tokens", "input_tokens", "output_tokens", "concurrency", "budget"]
Scope = Literal["key", "subject", "tenant", "model"]  # subject: a JWT's (an issuer's name and its sub claim)


@dataclass(frozen=True, slots=True)
class Check:
    key: str  # the store key, below the deployment's prefix: "k:<key id>:rpm", "t:acme:budget:2026-12"...
    kind: Kind
    scope: Scope
    owner: str  # the key's id, the subject's (`<issuer>:<sub>`), the tenant's or the model's name
    algorithm: Algorithm
    limit: int
    period_us: int  # rate: the limit's period; quota: until the period ends; slots: a lease's life
    per_request: int = 0
    per_input: int = 0
    per_output: int = 0
    unit: str = ""  # what the limit counts, for messages: "requests", "tokens", "USD"...
    degraded: Literal["local", "allow", "refuse"] = "local"

    def cost(self, input_tokens: int, output_tokens: int) -> int:
        return self.per_request + self.per_input * input_tokens + self.per_output * output_tokens


@dataclass(frozen=True, slots=True)
class Plan:
    """A request's checks and the estimate they reserve; `ticket` names its reservation in the store.
    `default_output`: the request set no output bound, so `output_tokens` is a configured default."""

    ticket: str
    checks: tuple[Check, ...]
    input_tokens: int
    output_tokens: int
    default_output: bool = False

    def costs(self) -> list[int]:
        return [c.cost(self.input_tokens, self.output_tokens) for c in self.checks]


def room(check: Check, input_tokens: int, share: float = 1.0) -> int | None:
    """The most output a request with this prompt could ever be admitted with by `check` (at `share` of its
    limit, as the stores scale it): negative when the prompt alone is too large; None when output costs
    it nothing. A rate check's test is the stores' own, in floating point (`cost * interval > period`)."""
    if not check.per_output or check.algorithm == "slots":
        return None
    scaled = check.limit * share
    limit = max(scaled, 1.0) if check.algorithm == "rate" else max(math.floor(scaled), 1)
    base = check.per_request + check.per_input * input_tokens
    most = math.floor((limit - base) / check.per_output)
    if check.algorithm == "rate":
        interval = check.period_us / limit
        while most >= 0 and check.cost(input_tokens, most) * interval > check.period_us:
            most -= 1
    return most


def fitted(plan: Plan, share: float = 1.0) -> Plan:
    """A default output reservation lowered to the least room among the plan's checks, so that a request
    without max_tokens is never refused for good for a bound it did not ask for (its usage settles the
    difference); not below 0, so a prompt too large on its own still cannot fit. A request's own bound
    stands as it is."""
    if not plan.default_output:
        return plan
    output = plan.output_tokens
    for check in plan.checks:
        most = room(check, plan.input_tokens, share)
        if most is not None and most < output:
            output = max(most, 0)
    return plan if output == plan.output_tokens else replace(plan, output_tokens=output)


@dataclass(frozen=True, slots=True)
class State:
    """A check's state once decided: what is left and how long until it is whole again."""

    check: Check
    remaining: int
    reset_us: int


@dataclass(frozen=True, slots=True)
class Decision:
    admitted: bool
    states: tuple[State, ...]  # every rate check's state (for the x-ratelimit headers)
    refused: Check | None = None
    retry_after_us: int = 0  # when the refused check would admit this request
    never: bool = False  # the request can never fit (its cost is above the limit, or the budget is spent)
    degraded: str | None = None  # how the decision was made when the store could not answer


@dataclass(frozen=True, slots=True)
class Actual:
    """What the request used: the service's usage, else what the edge counted."""

    input_tokens: int
    output_tokens: int


def period_of(kind: Literal["day", "month"], now_s: float) -> tuple[str, int]:
    """The calendar period (UTC) `now_s` falls in, and the microseconds until it ends."""
    t = time.gmtime(now_s)
    if kind == "day":
        start = calendar.timegm((t.tm_year, t.tm_mon, t.tm_mday, 0, 0, 0))
        end, name = start + 86_400, f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}"
    else:
        year, month = (t.tm_year + 1, 1) if t.tm_mon == 12 else (t.tm_year, t.tm_mon + 1)
        end, name = calendar.timegm((year, month, 1, 0, 0, 0)), f"{t.tm_year:04d}-{t.tm_mon:02d}"
    return name, max(int((end - now_s) * 1_000_000), 1)


def nano_usd_per_token(usd_per_million: float) -> int:
    """A price per million tokens in nano-USD per token ($1/M is 1,000): integers from here on."""
    return round(usd_per_million * 1000)


class TokenPrice(NamedTuple):
    """A model's Price as a `usd` budget charges it: nano-USD per input token and per output token."""

    input: int
    output: int

    @classmethod
    def of(cls, price: Price) -> TokenPrice:
        return cls(nano_usd_per_token(price.input), nano_usd_per_token(price.output))


def checks_of(limits: Limits, scope: Scope, name: str, price: Price, now_s: float, lease_us: int,
              default: Literal["local", "allow", "refuse"]) -> list[Check]:
    """The checks one set of limits makes, for the key, tenant or model `name`."""
    prefix = {"key": "k", "subject": "s", "tenant": "t", "model": "m"}[scope] + f":{name}"
    degraded = limits.degraded or default
    checks: list[Check] = []

    def rate(suffix: str, kind: Kind, limit: int | None, per: tuple[int, int, int], unit: str) -> None:
        if limit is not None:
            checks.append(Check(f"{prefix}:{suffix}", kind, scope, name, "rate", limit, MINUTE_US, *per, unit=unit,
                                degraded=degraded))

    rate("rpm", "requests", limits.rpm, (1, 0, 0), "requests")
    rate("tpm", "tokens", limits.tpm, (0, 1, 1), "tokens")
    rate("itpm", "input_tokens", limits.input_tpm, (0, 1, 0), "input tokens")
    rate("otpm", "output_tokens", limits.output_tpm, (0, 0, 1), "output tokens")
    if limits.concurrency is not None:
        checks.append(Check(f"{prefix}:conc", "concurrency", scope, name, "slots", limits.concurrency, lease_us, 1,
                            unit="requests in progress", degraded=degraded))
    budget = limits.budget
    if budget is not None:
        period, left_us = period_of(budget.period, now_s)
        if budget.tokens is not None:
            checks.append(Check(f"{prefix}:btok:{period}", "budget", scope, name, "quota", budget.tokens, left_us,
                                0, 1, 1, unit=f"tokens per {budget.period}", degraded=degraded))
        if budget.usd is not None:
            checks.append(Check(f"{prefix}:busd:{period}", "budget", scope, name, "quota",
                                round(budget.usd * NANO_USD_PER_USD), left_us, 0,
                                nano_usd_per_token(price.input), nano_usd_per_token(price.output),
                                unit=f"USD per {budget.period}", degraded=degraded))
    return checks


# --- what the client is told ---------------------------------------------------------------------


def duration(us: int) -> str:
    """OpenAI's reset format: 1s, 6m0s, 1h2m3s, 250ms."""
    if us < 1_000_000:
        return f"{math.ceil(us / 1000)}ms"
    s = math.ceil(us / 1_000_000)
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return (f"{h}h" if h else "") + (f"{m}m" if h or m else "") + f"{s}s"


def headers_of(decision: Decision) -> dict[str, str]:
    """x-ratelimit-limit/remaining/reset for requests and tokens: of the tightest rate check of each (the
    least left of its limit; of those, the longest to reset; of those, the first)."""
    tight: dict[str, State] = {}
    for state in decision.states:
        kind = state.check.kind
        if kind != "requests" and kind != "tokens":
            continue
        best = tight.get(kind)
        if best is None or (state.remaining / state.check.limit, -state.reset_us) < (
                best.remaining / best.check.limit, -best.reset_us):
            tight[kind] = state
    headers: dict[str, str] = {}
    for kind in ("requests", "tokens"):
        chosen = tight.get(kind)
        if chosen is not None:
            headers[f"x-ratelimit-limit-{kind}"] = str(chosen.check.limit)
            headers[f"x-ratelimit-remaining-{kind}"] = str(max(chosen.remaining, 0))
            headers[f"x-ratelimit-reset-{kind}"] = duration(chosen.reset_us)
    return headers


def refusal_message(check: Check, plan: Plan, decision: Decision) -> str:
    """Names the limit and the time to retry; never a key's secret (a key's public id is fine)."""
    scope, owner = check.scope, check.owner
    cost = check.cost(plan.input_tokens, plan.output_tokens)
    limit = f"{check.limit / NANO_USD_PER_USD:g} USD" if check.unit.startswith("USD") else f"{check.limit}"
    if check.algorithm == "rate":
        what = f"Rate limit reached for {scope} '{owner}' on {check.unit} per minute: limit {limit}"
        if decision.never:
            return (f"{what}; this request needs {cost} {check.unit}, more than the limit allows at once. "
                    "Reduce the prompt or max_tokens.")
        return f"{what}, requested {cost}. Please try again in {duration(decision.retry_after_us)}."
    if check.algorithm == "slots":
        return (f"Too many requests in progress for {scope} '{owner}': limit {limit}. Please try again when one "
                "has finished.")
    per = check.unit.replace('USD ', '')
    if not decision.never:
        return (f"Budget for {scope} '{owner}' ({limit} {per}) is held by requests in flight: what is spent "
                "leaves room for this request, but the reservations of requests not yet settled hold the rest. "
                f"Please try again in {duration(decision.retry_after_us)}.")
    return f"Budget exhausted for {scope} '{owner}': {limit} {per}. It renews in {duration(check.period_us)}."
