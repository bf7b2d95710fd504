"""ingress/routing/balance.py: choosing an endpoint by two random choices on load per unit of weight, or round robin."""

from __future__ import annotations

import random
from collections import Counter, deque

import pytest

from ingress.routing.balance import RoundRobin, choose
from ingress.routing.health import EndpointState


def _states(*weights: int, max_in_flight: int = 0) -> list[EndpointState]:
    return [EndpointState(url=f"http://10.0.0.{i}:9000", weight=w, max_in_flight=max_in_flight)
            for i, w in enumerate(weights, 1)]


def _tally(states: list[EndpointState], n: int = 20_000, now: float = 100.0, seed: int = 7) -> Counter[str]:
    rng = random.Random(seed)
    counts: Counter[str] = Counter()
    for _ in range(n):
        chosen = choose(states, now, rng)
        assert chosen is not None
        counts[chosen.url] += 1
    return counts


def _tally_under_load(states: list[EndpointState], concurrency: int, n: int = 40_000) -> list[float]:
    """Shares of `n` requests when `concurrency` of them are always outstanding, each as long as the others."""
    rng = random.Random(11)
    outstanding: deque[EndpointState] = deque()
    counts: Counter[str] = Counter()
    for _ in range(n):
        if len(outstanding) >= concurrency:
            outstanding.popleft().in_flight -= 1
        chosen = choose(states, 0.0, rng)
        assert chosen is not None
        chosen.in_flight += 1
        outstanding.append(chosen)
        counts[chosen.url] += 1
    return [counts[s.url] / n for s in states]


def test_weights_are_respected_under_load() -> None:
    shares = _tally_under_load(_states(6, 3, 1), concurrency=100)

    assert shares == pytest.approx([0.6, 0.3, 0.1], abs=0.02)


def test_weights_are_respected_at_low_concurrency() -> None:
    shares = _tally_under_load(_states(6, 3, 1), concurrency=1)

    assert shares == pytest.approx([0.6, 0.3, 0.1], abs=0.02)


def test_the_endpoint_with_fewer_outstanding_requests_is_preferred() -> None:
    busy, idle = _states(1, 1)
    busy.in_flight = 5

    counts = _tally([busy, idle])

    # Two picks by weight, the less loaded kept: the busy one wins only when both picks are it.
    assert counts[busy.url] / 20_000 == pytest.approx(0.25, abs=0.015)


def test_outstanding_requests_are_compared_per_unit_of_weight() -> None:
    heavy, light = _states(4, 1)
    heavy.in_flight = 3  # 0.75 per unit of weight
    light.in_flight = 1  # 1.0

    counts = _tally([heavy, light])

    assert counts[light.url] / 20_000 == pytest.approx(0.2 * 0.2, abs=0.01)  # only when both picks are light


def test_a_lone_healthy_endpoint_is_always_chosen() -> None:
    states = _states(1, 1, 1)
    states[0].ejected_until = 130.0
    states[2].active_healthy = False

    assert set(_tally(states, n=2_000)) == {states[1].url}


def test_ejected_endpoints_are_avoided_while_a_healthy_one_exists() -> None:
    states = _states(1, 1, 1, 1)
    states[0].ejected_until = 101.0
    states[3].active_healthy = False

    counts = _tally(states, now=100.0)

    assert set(counts) == {states[1].url, states[2].url}
    assert counts[states[1].url] / 20_000 == pytest.approx(0.5, abs=0.02)


def test_an_ejection_ends_by_itself() -> None:
    states = _states(1, 1)
    states[0].ejected_until = 101.0

    assert set(_tally(states, n=500, now=100.9)) == {states[1].url}
    assert set(_tally(states, n=500, now=101.0)) == {states[0].url, states[1].url}


def test_when_every_endpoint_is_ejected_the_soonest_to_recover_is_tried() -> None:
    states = _states(1, 1, 1)
    for state, until in zip(states, (130.0, 110.0, 120.0), strict=True):
        state.ejected_until = until

    assert set(_tally(states, n=200)) == {states[1].url}


def test_endpoints_at_their_limit_are_skipped_and_none_is_chosen_when_all_are() -> None:
    states = _states(1, 1, max_in_flight=2)
    states[0].in_flight = 2
    rng = random.Random(1)

    assert all(choose(states, 0.0, rng) is states[1] for _ in range(100))
    states[1].in_flight = 2
    assert choose(states, 0.0, rng) is None
    fresh = _states(1, 1)
    assert choose(fresh, 0.0, rng, exclude=frozenset(s.url for s in fresh)) is None


def test_excluded_endpoints_are_not_chosen() -> None:
    states = _states(1, 1, 1)
    rng = random.Random(3)

    exclude = frozenset({states[0].url, states[2].url})

    assert all(choose(states, 0.0, rng, exclude=exclude) is states[1] for _ in range(100))


def _turns(rr: RoundRobin, states: list[EndpointState], n: int, now: float = 100.0,
           exclude: frozenset[str] = frozenset()) -> list[int]:
    """The indexes of the next `n` endpoints round robin chooses."""
    chosen = [rr.choose(states, now, exclude) for _ in range(n)]
    return [states.index(c) for c in chosen if c is not None]


def test_round_robin_takes_each_endpoint_in_turn_whatever_its_load() -> None:
    states = _states(1, 1, 1)
    states[0].in_flight = 50  # blind to load, as a DNS or L4 balancer is

    assert _turns(RoundRobin(), states, 7) == [0, 1, 2, 0, 1, 2, 0]


def test_round_robin_follows_the_weights_spread_out() -> None:
    assert _turns(RoundRobin(), _states(5, 1, 1), 14) == [0, 0, 1, 0, 2, 0, 0] * 2  # nginx's smooth order
    shares = Counter(_turns(RoundRobin(), _states(6, 3, 1), 1000))
    assert [shares[i] for i in range(3)] == [600, 300, 100]


def test_round_robin_skips_ejected_full_and_excluded_endpoints() -> None:
    states = _states(1, 1, 1, 1, max_in_flight=1)
    states[0].ejected_until = 101.0
    states[1].in_flight = 1
    rr = RoundRobin()

    assert _turns(rr, states, 4, exclude=frozenset({states[2].url})) == [3] * 4
    assert _turns(rr, states, 4) == [2, 3, 2, 3]
    assert _turns(rr, states, 4, now=101.0) == [0, 2, 3, 0]  # back from its ejection, it takes its turn again
    for s in states[1:]:
        s.in_flight = 1
    assert rr.choose(states, 100.0) is None  # the healthy ones are full: wait, never pick the ejected one


def test_round_robin_panics_like_p2c_when_every_endpoint_is_ejected() -> None:
    states = _states(1, 1, 1)
    for state, until in zip(states, (130.0, 110.0, 120.0), strict=True):
        state.ejected_until = until

    assert _turns(RoundRobin(), states, 5) == [1] * 5
