"""The memory store's semantics, on a clock the test moves: the reference the Redis store matches."""

from __future__ import annotations

import random

import pytest

from ingress.tenancy.plan import IN_FLIGHT_US, Actual, Check, Plan, checks_of
from ingress.tenancy.settings import Budget, Limits, Price
from ingress.tenancy.stores.memory import TOMBSTONE_US, MemoryStore

LEASE = 30_000_000
SECOND = 1_000_000


class Clock:
    def __init__(self) -> None:
        self.now = 1_000 * SECOND

    def __call__(self) -> int:
        return self.now


def checks(**limits: object) -> tuple[Check, ...]:
    return tuple(checks_of(Limits(**limits), "key", "k1", Price(input=2.0, output=8.0), 0.0, LEASE,  # type: ignore[arg-type]
                           "local"))


def plan(cs: tuple[Check, ...], ticket: str, input_tokens: int = 10, output_tokens: int = 0) -> Plan:
    return Plan(ticket, cs, input_tokens, output_tokens)


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_rpm_admits_the_limit_at_once_then_one_per_interval_with_a_true_retry_after(clock: Clock) -> None:
    store, cs = MemoryStore(clock=clock), checks(rpm=60)
    assert all(store.admit(plan(cs, f"t{i}")).admitted for i in range(60))
    refused = store.admit(plan(cs, "late"))
    assert not refused.admitted and refused.refused is not None and refused.refused.kind == "requests"
    assert 0 < refused.retry_after_us <= SECOND
    clock.now += refused.retry_after_us - 1
    assert not store.admit(plan(cs, "early")).admitted
    clock.now += 1
    assert store.admit(plan(cs, "on-time")).admitted


def test_no_double_burst_across_a_window_edge(clock: Clock) -> None:
    """A fixed window would admit 2N around its edge; GCRA admits N, then only what time has refilled."""
    store, cs = MemoryStore(clock=clock), checks(rpm=100)
    clock.now += 59 * SECOND  # late in a would-be window
    admitted = sum(store.admit(plan(cs, f"a{i}")).admitted for i in range(150))
    clock.now += 2 * SECOND  # just past the would-be edge
    admitted += sum(store.admit(plan(cs, f"b{i}")).admitted for i in range(150))
    assert admitted == 100 + 3  # 2 s at 100/min refill 3 (3.33)


def test_a_refused_request_consumes_nothing_in_any_check(clock: Clock) -> None:
    store, cs = MemoryStore(clock=clock), checks(rpm=1000, tpm=100)
    assert store.admit(plan(cs, "big", input_tokens=90)).admitted
    before = store.admit(plan(cs, "probe", input_tokens=0))  # rpm state only
    refused = store.admit(plan(cs, "over", input_tokens=50))
    assert not refused.admitted and refused.refused is not None and refused.refused.kind == "tokens"
    after = store.admit(plan(cs, "probe2", input_tokens=0))
    rpm_before = next(s.remaining for s in before.states if s.check.kind == "requests")
    rpm_after = next(s.remaining for s in after.states if s.check.kind == "requests")
    assert rpm_after == rpm_before - 1  # only probe2 itself: the refused one took no request


def test_a_request_that_can_never_fit_says_so(clock: Clock) -> None:
    store, cs = MemoryStore(clock=clock), checks(tpm=100)
    decision = store.admit(plan(cs, "huge", input_tokens=60, output_tokens=41))
    assert not decision.admitted and decision.never


def test_settling_refunds_the_unused_estimate_and_charges_a_debt(clock: Clock) -> None:
    store, cs = MemoryStore(clock=clock), checks(tpm=1000)
    assert store.admit(plan(cs, "a", input_tokens=100, output_tokens=500)).admitted
    assert store.settle("a", Actual(100, 20))  # 480 refunded
    assert store.admit(plan(cs, "b", input_tokens=400, output_tokens=480)).admitted  # 120 + 880 = 1000
    assert not store.admit(plan(cs, "c", input_tokens=1)).admitted
    assert store.settle("b", Actual(400, 600))  # 120 over the estimate: owed
    tokens = next(s for s in store.admit(plan(cs, "d", input_tokens=1)).states if s.check.kind == "tokens")
    assert tokens.remaining == 0 and tokens.reset_us > 60 * SECOND  # the debt pushes the bucket past full


def test_settling_twice_refunds_once(clock: Clock) -> None:
    store, cs = MemoryStore(clock=clock), checks(tpm=1000)
    assert store.admit(plan(cs, "a", input_tokens=100, output_tokens=900)).admitted
    assert store.settle("a", Actual(10, 10))
    assert not store.settle("a", Actual(10, 10))
    assert store.admit(plan(cs, "b", input_tokens=980)).admitted  # 980 + 20 = 1000: refunded exactly once
    assert not store.admit(plan(cs, "c", input_tokens=1)).admitted


def test_a_cancel_before_a_late_admission_means_it_reserves_nothing(clock: Clock) -> None:
    store, cs = MemoryStore(clock=clock), checks(tpm=100, concurrency=1)
    assert not store.settle("lost", None)
    late = store.admit(plan(cs, "lost", input_tokens=100))
    assert not late.admitted and late.degraded == "cancelled"
    assert store.admit(plan(cs, "next", input_tokens=100)).admitted


def test_concurrency_slots_free_on_settle_and_expire_unrenewed(clock: Clock) -> None:
    store, cs = MemoryStore(clock=clock), checks(concurrency=2)
    assert store.admit(plan(cs, "a")).admitted and store.admit(plan(cs, "b")).admitted
    refused = store.admit(plan(cs, "c"))
    assert not refused.admitted and refused.refused is not None and refused.refused.kind == "concurrency"
    store.settle("a", Actual(1, 1))
    assert store.admit(plan(cs, "c")).admitted
    clock.now += LEASE // 2
    store.renew(["c"])  # c is renewed, b is not (its worker died)
    clock.now += LEASE // 2 + 1
    assert store.admit(plan(cs, "d")).admitted  # b's lease expired
    assert store.leases_expired == 1
    assert not store.admit(plan(cs, "e")).admitted  # c (renewed) and d hold both slots


def test_budgets_are_integer_counters_in_nano_usd(clock: Clock) -> None:
    store = MemoryStore(clock=clock)
    cs = checks(budget=Budget(usd=0.001))  # 1,000,000 nano-USD; input 2,000 and output 8,000 nano-USD a token
    budget = cs[0]
    assert budget.limit == 1_000_000 and (budget.per_input, budget.per_output) == (2000, 8000)
    assert store.admit(plan(cs, "a", input_tokens=100, output_tokens=100)).admitted  # 1,000,000
    held = store.admit(plan(cs, "b", input_tokens=1))
    assert not held.admitted and not held.never  # a's reservation holds the budget; nothing is spent yet
    store.settle("a", Actual(100, 0))  # 800,000 refunded
    assert store.admit(plan(cs, "b", input_tokens=100, output_tokens=75)).admitted
    store.settle("b", Actual(100, 75))  # 800,000 spent
    spent = store.admit(plan(cs, "c", input_tokens=101))
    assert not spent.admitted and spent.never


def test_a_share_scales_every_limit(clock: Clock) -> None:
    store, cs = MemoryStore(share=0.25, clock=clock), checks(rpm=40, concurrency=8)
    assert sum(store.admit(plan(cs, f"t{i}")).admitted for i in range(20)) == 2  # concurrency 8/4
    store2 = MemoryStore(share=0.25, clock=clock)
    cs2 = checks(rpm=40)
    assert sum(store2.admit(plan(cs2, f"t{i}")).admitted for i in range(20)) == 10


def test_random_cancellations_leave_nothing_behind_once_expired(clock: Clock) -> None:
    store, cs = MemoryStore(clock=clock), checks(rpm=10**6, tpm=10**9, concurrency=50, budget=Budget(tokens=10**9))
    rng = random.Random(7)
    live: list[str] = []
    for i in range(3000):
        ticket = f"t{i}"
        if store.admit(plan(cs, ticket, rng.randrange(100), rng.randrange(100))).admitted:
            live.append(ticket)
        if live and rng.random() < 0.6:
            store.settle(live.pop(rng.randrange(len(live))), None if rng.random() < 0.5 else Actual(5, 5))
        clock.now += 1000
    clock.now += 10**13  # past every lease, tombstone, bucket and budget period
    store.sweep()
    assert (store._tat, store._quota, store._slots, store._reserved, store._settled) == ({}, {}, {}, {}, {})
    assert store._inflight == {}



def test_a_budget_held_by_reservations_in_flight_is_refused_for_a_second_and_a_spent_one_for_good(
        clock: Clock) -> None:
    """Issue 29, 5: a budget of 24 tokens, requests that reserve 12 and use 2. While two reservations are
    unsettled, a third is refused, but 0 of 24 is spent: that refusal is not final, and says to retry in
    IN_FLIGHT_US. Only what is spent refuses until the period renews."""
    store, cs = MemoryStore(clock=clock), checks(budget=Budget(tokens=24, period="day"))
    assert store.admit(plan(cs, "a", input_tokens=10, output_tokens=2)).admitted
    assert store.admit(plan(cs, "b", input_tokens=10, output_tokens=2)).admitted
    held = store.admit(plan(cs, "c", input_tokens=10, output_tokens=2))
    assert not held.admitted and not held.never and held.retry_after_us == IN_FLIGHT_US
    assert store._inflight == {cs[0].key: 24}
    store.settle("a", Actual(1, 1))
    store.settle("b", Actual(1, 1))
    assert store._inflight == {}
    for ticket in ("c", "d", "e", "f", "g"):  # 2 spent each, 4 after a and b: the last finds 12 spent
        assert store.admit(plan(cs, ticket, input_tokens=10, output_tokens=2)).admitted, ticket
        store.settle(ticket, Actual(1, 1))
    spent = store.admit(plan(cs, "h", input_tokens=10, output_tokens=2))  # 14 spent: 12 more cannot fit
    assert not spent.admitted and spent.never and spent.retry_after_us == cs[0].period_us
    assert store._inflight == {}


def test_what_is_spent_alone_decides_whether_a_refused_budget_is_final(clock: Clock) -> None:
    store, cs = MemoryStore(clock=clock), checks(budget=Budget(tokens=100, period="day"))
    assert store.admit(plan(cs, "a", input_tokens=60)).admitted
    store.settle("a", Actual(60, 0))  # 60 spent
    assert store.admit(plan(cs, "b", input_tokens=30)).admitted  # 30 in flight
    soon = store.admit(plan(cs, "c", input_tokens=20))  # 60 + 20 would fit, 60 + 30 + 20 does not
    assert not soon.admitted and not soon.never and soon.retry_after_us == IN_FLIGHT_US
    never = store.admit(plan(cs, "d", input_tokens=41))  # 60 + 41 cannot fit whatever b uses
    assert not never.admitted and never.never
    too_big = store.admit(plan(cs, "e", input_tokens=101))
    assert not too_big.admitted and too_big.never
    clock.now += TOMBSTONE_US + 1  # b's worker died: its reservation expires and stays charged, as spent
    store.sweep()
    assert store._inflight == {} and store.admit(plan(cs, "c", input_tokens=20)).never
