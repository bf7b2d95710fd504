"""A refused decision as the client is told it: the error, Retry-After, and whether to retry at all."""

from __future__ import annotations

import calendar

import pytest

from ingress.errors import LimitsUnavailable, QuotaExceeded, RateLimited
from ingress.tenancy.limiter import refusal
from ingress.tenancy.plan import IN_FLIGHT_US, Check, Decision, Plan, checks_of
from ingress.tenancy.settings import Budget, Limits, Price

NOW = calendar.timegm((2026, 12, 31, 18, 0, 0))
RPM, TPM, CONC, BUDGET = checks_of(Limits(rpm=60, tpm=100, concurrency=1, budget=Budget(tokens=24, period="day")),
                                   "key", "k1", Price(), NOW, 1, "local")
PLAN = Plan("t", (RPM, TPM, CONC, BUDGET), 10, 2)


@pytest.mark.parametrize(("check", "wait_us", "never", "error", "code", "type_", "retry_after", "should_retry"), [
    (RPM, 250_000, False, RateLimited, "rate_limit_exceeded", "requests", "1", None),
    (TPM, 2_500_000, False, RateLimited, "rate_limit_exceeded", "tokens", "3", None),
    (TPM, 0, True, RateLimited, "rate_limit_exceeded", "tokens", "1", "false"),  # more than the limit at once
    (CONC, 1_000_000, False, RateLimited, "rate_limit_exceeded", "requests", "1", None),
    # issue 29, 5: a budget whose room reservations in flight hold is retried, and soon
    (BUDGET, IN_FLIGHT_US, False, RateLimited, "rate_limit_exceeded", "tokens", "1", "true"),
    (BUDGET, BUDGET.period_us, True, QuotaExceeded, "insufficient_quota", "insufficient_quota", "21600", "false"),
])
def test_each_refusal_says_when_and_whether_to_retry(check: Check, wait_us: int, never: bool, error: type,
                                                     code: str, type_: str, retry_after: str,
                                                     should_retry: str | None) -> None:
    told, headers = refusal(PLAN, Decision(False, (), check, wait_us, never=never))
    assert type(told) is error and told.status == 429 and (told.code, told.type) == (code, type_)
    assert str(told.retry_after) == retry_after
    assert headers["retry-after-ms"] == str(max(-(-wait_us // 1000), 1))
    assert headers.get("x-should-retry") == should_retry


def test_a_budget_in_flight_and_a_spent_one_are_worded_apart() -> None:
    held, _ = refusal(PLAN, Decision(False, (), BUDGET, IN_FLIGHT_US))
    spent, _ = refusal(PLAN, Decision(False, (), BUDGET, BUDGET.period_us, never=True))
    assert "held by requests in flight" in held.message and "try again in 1s" in held.message
    assert "exhausted" not in held.message
    assert spent.message == "Budget exhausted for key 'k1': 24 tokens per day. It renews in 6h0m0s."


def test_a_store_that_cannot_answer_is_a_503() -> None:
    told, headers = refusal(PLAN, Decision(False, (), None, 0, degraded="refuse"))
    assert isinstance(told, LimitsUnavailable) and told.status == 503 and headers == {}
