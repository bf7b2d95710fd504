"""The memory store's inline admission against the general form it replaced: the same decisions
and the same state, step by step, over random sequences of admissions, settles, cancels, renewals, sweeps
and the clock moving, with every algorithm, shares below one and limits that scale below one; and budgets
under small requests, whose reservations in flight the store sums as they come and go."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingress.tenancy.plan import IN_FLIGHT_US, Actual, Check, Decision, Plan, State
from ingress.tenancy.stores.memory import TOMBSTONE_US, MemoryStore, _Reservation

SETTINGS = settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
SECOND = 1_000_000


class Reference(MemoryStore):
    """The general form: each stage a call a check (the store's admission before it was made inline; settling
    and applying a check are the store's own, shared)."""

    def admit(self, plan: Plan) -> Decision:
        now = self.clock()
        if plan.ticket in self._settled or plan.ticket in self._reserved:
            return Decision(False, (), None, 0, never=False, degraded="cancelled")
        costs = plan.costs()
        limits = [self.limit(check) for check in plan.checks]
        refused: list[tuple[bool, int, Check]] = []
        for check, cost, limit in zip(plan.checks, costs, limits, strict=True):
            if check.algorithm == "rate":
                interval = check.period_us / limit
                tat = max(self._tat.get(check.key, 0.0), now) + cost * interval
                if cost * interval > check.period_us:
                    refused.append((True, 0, check))
                elif tat - now > check.period_us:
                    refused.append((False, math.ceil(tat - now - check.period_us), check))
            elif check.algorithm == "quota":
                used = self._used(check.key, now)
                spent = used - self._inflight.get(check.key, 0)
                if cost > limit or spent + cost > limit:
                    refused.append((True, check.period_us, check))
                elif used + cost > limit:
                    refused.append((False, IN_FLIGHT_US, check))
            else:
                held = self._held(check.key, now)
                if len(held) + 1 > limit:
                    refused.append((False, 1_000_000, check))
        if refused:
            never = [r for r in refused if r[0]]
            _, wait, check = never[0] if never else max(refused, key=lambda r: r[1])
            return Decision(False, self._reference_states(plan.checks, limits, now), check, wait, never=bool(never))
        for check, cost, limit in zip(plan.checks, costs, limits, strict=True):
            self._apply(check, cost, now, plan.ticket, limit)
        lease = max((c.period_us for c in plan.checks if c.algorithm == "slots"), default=TOMBSTONE_US)
        self._reserved[plan.ticket] = _Reservation(plan.checks, costs, now + lease)
        return Decision(True, self._reference_states(plan.checks, limits, now))

    def _reference_states(self, checks: tuple[Check, ...], limits: list[float], now: int) -> tuple[State, ...]:
        states = []
        for check, limit in zip(checks, limits, strict=True):
            if check.algorithm != "rate":
                continue
            interval = check.period_us / limit
            ahead = max(self._tat.get(check.key, 0.0) - now, 0.0)
            remaining = min(math.floor((check.period_us - ahead) / interval), math.floor(limit))
            states.append(State(check, max(remaining, 0), math.ceil(ahead)))
        return tuple(states)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000 * SECOND

    def __call__(self) -> int:
        return self.now


def _check(i: int, algorithm: str, limit: int, period_s: int, per: tuple[int, int, int]) -> Check:
    kind = {"rate": "requests" if per == (1, 0, 0) else "tokens", "quota": "budget", "slots": "concurrency"}[algorithm]
    return Check(f"k:{i % 3}:{algorithm}", kind, "key", "k", algorithm, limit, period_s * SECOND, *per,  # type: ignore[arg-type]
                 unit=kind)


checks = st.builds(_check, st.integers(0, 5), st.sampled_from(["rate", "rate", "rate", "quota", "slots"]),
                   st.sampled_from([1, 2, 3, 7, 10, 13, 97, 1000, 10**6]), st.sampled_from([1, 60, 3600]),
                   st.sampled_from([(1, 0, 0), (0, 1, 1), (0, 1, 0), (0, 0, 1), (0, 3, 7)]))


def _steps(admit: st.SearchStrategy[tuple[Any, ...]], used: int) -> st.SearchStrategy[list[tuple[Any, ...]]]:
    return st.lists(st.one_of(
        admit,
        st.tuples(st.just("settle"), st.integers(0, 30), st.one_of(st.none(), st.tuples(st.integers(0, 3 * used),
                                                                                         st.integers(0, used)))),
        st.tuples(st.just("wait"), st.sampled_from([0, 1, 999, SECOND, 7 * SECOND, 61 * SECOND, 700 * SECOND])),
        st.tuples(st.just("renew"), st.lists(st.integers(0, 30), max_size=4)),
        st.tuples(st.just("sweep"),),
    ), max_size=60)


steps = _steps(st.tuples(st.just("admit"), st.lists(checks, min_size=1, max_size=4).map(tuple),
                         st.integers(0, 2000), st.integers(0, 500)), 900)
# A budget or two, small requests, many unsettled: refusals while reservations are in flight, and spent ones.
budgets = st.builds(_check, st.integers(0, 1), st.just("quota"), st.sampled_from([5, 24, 100]), st.just(3600),
                    st.sampled_from([(1, 0, 0), (0, 1, 1)]))
budget_steps = _steps(st.tuples(st.just("admit"), st.lists(budgets, min_size=1, max_size=2).map(tuple),
                                st.integers(0, 12), st.integers(0, 12)), 12)


@SETTINGS
@given(share=st.sampled_from([1.0, 0.5, 1 / 3, 1 / 7, 0.01]), steps=steps)
def test_the_inline_store_decides_and_keeps_what_the_general_form_does(share: float,
                                                                      steps: list[tuple[Any, ...]]) -> None:
    _run(share, steps)


@SETTINGS
@given(share=st.sampled_from([1.0, 0.5]), steps=budget_steps)
def test_budgets_held_in_flight_are_told_from_budgets_spent(share: float, steps: list[tuple[Any, ...]]) -> None:
    fast = _run(share, steps)
    held: dict[str, int] = {}
    for reservation in fast._reserved.values():
        for check, cost in zip(reservation.checks, reservation.costs, strict=True):  # every check a budget
            held[check.key] = held.get(check.key, 0) + cost
    assert fast._inflight == {key: amount for key, amount in held.items() if amount}


def _run(share: float, steps: list[tuple[Any, ...]]) -> MemoryStore:
    clock = Clock()
    fast, reference = MemoryStore(share, clock), Reference(share, clock)
    tickets: list[str] = []
    for step in steps:
        if step[0] == "admit":
            _, cs, inputs, outputs = step
            ticket = f"t{len(tickets)}"
            tickets.append(ticket)
            plan = Plan(ticket, cs, inputs, outputs)
            assert fast.admit(plan) == reference.admit(plan)
        elif step[0] == "settle":
            ticket = tickets[step[1] % len(tickets)] if tickets else "none"
            actual = None if step[2] is None else Actual(*step[2])
            assert fast.settle(ticket, actual) == reference.settle(ticket, actual)
        elif step[0] == "wait":
            clock.now += step[1]
        elif step[0] == "renew":
            chosen = [tickets[i % len(tickets)] for i in step[1]] if tickets else []
            fast.renew(chosen)
            reference.renew(chosen)
        else:
            fast.sweep()
            reference.sweep()
        assert fast._tat == reference._tat
        assert fast._quota == reference._quota
        assert fast._inflight == reference._inflight
        assert fast._slots == reference._slots
        assert fast._settled == reference._settled
        assert fast._reserved == reference._reserved
        assert fast.leases_expired == reference.leases_expired
    return fast


def test_the_reference_is_the_general_form_and_not_the_store_itself() -> None:
    """The comparison above means something only if the two are different code."""
    assert Reference.admit is not MemoryStore.admit
    assert Reference._reference_states is not MemoryStore._states
