"""Checks as data: what each limit makes, calendar periods, OpenAI's reset format, headers, messages."""

from __future__ import annotations

import calendar

import pytest

from ingress.tenancy.plan import (
    IN_FLIGHT_US,
    Check,
    Decision,
    Plan,
    State,
    checks_of,
    duration,
    fitted,
    headers_of,
    nano_usd_per_token,
    period_of,
    refusal_message,
    room,
)
from ingress.tenancy.settings import Budget, Limits, Price

NOW = calendar.timegm((2026, 12, 31, 23, 0, 0))


def test_each_limit_makes_its_check_with_its_cost_weights() -> None:
    limits = Limits(rpm=10, tpm=100, input_tpm=50, output_tpm=60, concurrency=3,
                    budget=Budget(tokens=1000, usd=5.0, period="day"))
    cs = {c.key: c for c in checks_of(limits, "tenant", "acme", Price(input=0.15, output=0.6), NOW, 30_000_000,
                                      "allow")}
    assert set(cs) == {"t:acme:rpm", "t:acme:tpm", "t:acme:itpm", "t:acme:otpm", "t:acme:conc",
                       "t:acme:btok:2026-12-31", "t:acme:busd:2026-12-31"}
    assert cs["t:acme:rpm"].cost(7, 9) == 1
    assert cs["t:acme:tpm"].cost(7, 9) == 16
    assert cs["t:acme:itpm"].cost(7, 9) == 7 and cs["t:acme:otpm"].cost(7, 9) == 9
    assert cs["t:acme:busd:2026-12-31"].cost(1000, 1000) == 150_000 + 600_000  # nano-USD
    assert cs["t:acme:busd:2026-12-31"].limit == 5 * 10**9
    assert cs["t:acme:btok:2026-12-31"].period_us == 3600 * 10**6  # until midnight UTC
    assert {c.degraded for c in cs.values()} == {"allow"}
    assert not checks_of(Limits(), "key", "k", Price(), NOW, 1, "local")


def test_periods_are_utc_calendar_days_and_months() -> None:
    assert period_of("month", NOW) == ("2026-12", 3600 * 10**6)
    assert period_of("day", NOW - 86_400 * 30)[0] == "2026-12-01"
    assert period_of("month", calendar.timegm((2027, 2, 1, 0, 0, 0)))[1] == 28 * 86_400 * 10**6


@pytest.mark.parametrize(("us", "text"), [(1, "1ms"), (250_000, "250ms"), (1_000_000, "1s"), (1_000_001, "2s"),
                                          (360_000_000, "6m0s"), (3_723_000_000, "1h2m3s")])
def test_durations_are_written_as_openai_writes_resets(us: int, text: str) -> None:
    assert duration(us) == text


def test_nano_usd_prices_are_integers() -> None:
    assert nano_usd_per_token(2.5) == 2500 and nano_usd_per_token(0.075) == 75


def test_headers_report_the_tightest_rate_check_of_each_kind() -> None:
    key, tenant = (checks_of(Limits(rpm=100, tpm=1000), scope, name, Price(), NOW, 1, "local")  # type: ignore[arg-type]
                   for scope, name in (("key", "k1"), ("tenant", "t1")))
    states = (State(key[0], 90, 6_000_000), State(tenant[0], 20, 48_000_000), State(key[1], 999, 60_000),
              State(tenant[1], 1000, 0))
    headers = headers_of(Decision(True, states))
    assert headers == {"x-ratelimit-limit-requests": "100", "x-ratelimit-remaining-requests": "20",
                       "x-ratelimit-reset-requests": "48s", "x-ratelimit-limit-tokens": "1000",
                       "x-ratelimit-remaining-tokens": "999", "x-ratelimit-reset-tokens": "60ms"}
    assert headers_of(Decision(True, ())) == {}


def test_messages_name_the_limit_and_the_wait_and_never_more() -> None:
    rpm, tpm = checks_of(Limits(rpm=60, tpm=100), "key", "3f9c2a7d1b6e", Price(), NOW, 1, "local")
    plan = Plan("t", (rpm, tpm), 30, 20)
    wait = refusal_message(rpm, plan, Decision(False, (), rpm, 1_500_000))
    assert wait == ("Rate limit reached for key '3f9c2a7d1b6e' on requests per minute: limit 60, requested 1. "
                    "Please try again in 2s.")
    never = refusal_message(tpm, Plan("t", (tpm,), 90, 20), Decision(False, (), tpm, 0, never=True))
    assert "needs 110 tokens, more than the limit allows at once" in never
    (budget,) = checks_of(Limits(budget=Budget(usd=2.5)), "tenant", "acme", Price(), NOW, 1, "local")
    spent = refusal_message(budget, plan, Decision(False, (), budget, 0, never=True))
    assert spent.startswith("Budget exhausted for tenant 'acme': 2.5 USD per month.")

    held = refusal_message(budget, plan, Decision(False, (), budget, IN_FLIGHT_US))
    assert held == ("Budget for tenant 'acme' (2.5 USD per month) is held by requests in flight: what is spent "
                    "leaves room for this request, but the reservations of requests not yet settled hold the rest. "
                    "Please try again in 1s.")


PRICE = Price(input=0.15, output=0.6)  # 150 and 600 nano-USD a token


def _checks(**limits: object) -> tuple[Check, ...]:
    return tuple(checks_of(Limits(**limits), "key", "k1", PRICE, NOW, 1, "local"))  # type: ignore[arg-type]


@pytest.mark.parametrize(("limits", "prompt", "share", "expected"), [
    ({"tpm": 100}, 11, 1.0, 89),  # issue 29, 4: not 4,096 against a limit of 100
    ({"tpm": 100}, 100, 1.0, 0),  # the prompt fills the limit: nothing left for output
    ({"tpm": 100}, 150, 1.0, -50),  # the prompt alone is too large
    ({"tpm": 100}, 11, 0.5, 39),  # one of two workers: 50 tokens a minute
    ({"tpm": 7}, 1, 1.0, 6),  # 60 s / 7 is not exact in floating point: the stores' own test passes at 7
    ({"output_tpm": 300}, 10_000, 1.0, 300),  # counts no input
    ({"input_tpm": 300}, 10, 1.0, None),  # counts no output
    ({"rpm": 5}, 10, 1.0, None),
    ({"concurrency": 2}, 10, 1.0, None),
    ({"budget": Budget(tokens=24)}, 11, 1.0, 13),
    ({"budget": Budget(tokens=24)}, 11, 1 / 3, -3),  # floor(24 / 3) = 8
    ({"budget": Budget(usd=0.001)}, 1000, 1.0, (1_000_000 - 150_000) // 600),
])
def test_the_room_a_check_leaves_for_output_beside_a_prompt(limits: dict[str, object], prompt: int, share: float,
                                                           expected: int | None) -> None:
    (check,) = _checks(**limits)
    assert room(check, prompt, share) == expected
    if expected is not None and expected >= 0 and check.algorithm == "rate":  # the most the store admits at once
        limit = max(check.limit * share, 1.0)
        assert check.cost(prompt, expected) * (check.period_us / limit) <= check.period_us
        assert check.cost(prompt, expected + 1) * (check.period_us / limit) > check.period_us


def test_a_default_output_bound_is_fitted_to_the_least_room_and_a_requests_own_bound_is_not() -> None:
    checks = _checks(rpm=60, tpm=1000, output_tpm=500, budget=Budget(tokens=300))
    default = Plan("t", checks, 11, 4096, default_output=True)
    assert fitted(default).output_tokens == 300 - 11  # the budget's room, the least of tpm, output_tpm, budget
    assert fitted(default, share=0.5).output_tokens == 150 - 11
    own = Plan("t", checks, 11, 4096)
    assert fitted(own) is own  # the request asked for 4,096: it can never fit, and is told so
    small = Plan("t", checks, 11, 50, default_output=True)
    assert fitted(small) is small  # a default that fits stands
    assert fitted(Plan("t", _checks(rpm=60), 11, 4096, default_output=True)).output_tokens == 4096  # no token limit
    too_big = fitted(Plan("t", checks, 400, 4096, default_output=True))
    assert too_big.output_tokens == 0 and too_big.costs()[1:] == [400, 0, 400]  # the prompt alone: still never
