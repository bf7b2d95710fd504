"""ingress/routing/budget.py: the retry budget, a ratio of requests with a minimum trickle and a bounded reserve."""

from __future__ import annotations

from ingress.routing.budget import RetryBudget


def _retries_allowed(budget: RetryBudget, requests: int, seconds: float) -> int:
    """Every request is followed by an attempt to retry it; requests are spread over `seconds`."""
    allowed = 0
    for i in range(requests):
        now = seconds * i / requests
        budget.deposit(now)
        allowed += budget.withdraw(now)
    return allowed


def test_retries_stay_within_the_ratio_of_requests() -> None:
    budget = RetryBudget(ratio=0.2, min_per_s=0.0, now=0.0)

    allowed = _retries_allowed(budget, 1000, seconds=0.0)

    assert allowed == 200  # no minimum, no reserve: nothing beyond the ratio


def test_the_minimum_trickles_in_over_time() -> None:
    budget = RetryBudget(ratio=0.2, min_per_s=5.0, now=0.0)

    allowed = _retries_allowed(budget, 1000, seconds=20.0)

    # the reserve (5 a second over the 10 s window), the ratio, and the trickle over the 19.98 s spanned
    assert 50 + 200 + 5 * 20 - 1 <= allowed <= 50 + 200 + 5 * 20


def test_without_requests_the_reserve_then_the_trickle_allow_retries() -> None:
    budget = RetryBudget(ratio=0.2, min_per_s=2.0, now=0.0)
    assert sum(budget.withdraw(0.0) for _ in range(100)) == 20  # the reserve: 2 a second over 10 s
    assert not budget.withdraw(0.25)
    assert budget.withdraw(0.5)  # one retry after half a second at 2 a second
    assert not budget.withdraw(0.5)
    assert sum(budget.withdraw(0.5 + k / 4) for k in range(1, 41)) == 20  # 2 a second for 10 s


def test_a_quiet_period_banks_a_bounded_balance() -> None:
    budget = RetryBudget(ratio=0.2, min_per_s=1.0, now=0.0)

    budget.deposit(3600.0)  # an hour with no traffic

    assert sum(budget.withdraw(3600.0) for _ in range(100)) == 10


def test_a_zero_budget_allows_no_retries() -> None:
    budget = RetryBudget(ratio=0.0, min_per_s=0.0, now=0.0)
    initial = sum(budget.withdraw(0.0) for _ in range(100))

    assert _retries_allowed(budget, 1000, seconds=100.0) == 0
    assert initial == 0  # no minimum: no reserve


def test_a_cold_budget_can_retry_at_once_and_is_bounded_as_a_warm_one() -> None:
    # An edge just started: its first request may retry (a rolling deploy's new replica falls back as the
    # old one did); a burst of 100 failing requests retries the reserve and the ratio's share, no more,
    # exactly as an edge that served a while ago and has been idle since.
    assert RetryBudget(ratio=0.2, min_per_s=3.0, now=100.0).withdraw(100.0)
    cold = RetryBudget(ratio=0.2, min_per_s=3.0, now=100.0)
    warm = RetryBudget(ratio=0.2, min_per_s=3.0, now=0.0)
    warm.deposit(50.0)

    allowed = _retries_allowed_at(cold, 100, now=100.0)

    assert allowed == _retries_allowed_at(warm, 100, now=100.0)
    assert 3 * 10 + 20 - 1 <= allowed <= 3 * 10 + 20  # the reserve, and a fifth of the burst (to rounding)
    assert not cold.withdraw(100.0)
    assert sum(cold.withdraw(101.0) for _ in range(10)) == 3  # one second later: min_per_s of them


def _retries_allowed_at(budget: RetryBudget, requests: int, now: float) -> int:
    allowed = 0
    for _ in range(requests):
        budget.deposit(now)
        allowed += budget.withdraw(now)
    return allowed
