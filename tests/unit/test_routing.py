"""Pure routing decisions: the route table, endpoint choice, passive health and the retry budget."""

from __future__ import annotations

import random
from collections import Counter, deque

import pytest

from ingress.routing.balance import RoundRobin, choose
from ingress.routing.budget import RetryBudget
from ingress.routing.health import EndpointState
from ingress.routing.table import RouteTable
from ingress.settings import Ejection, Route, Share

# --- the route table ----------------------------------------------------------------------------

ROUTES = (
    Route(glob="gpt-*", group="globbed"),
    Route(prefix="gpt-4", group="short-prefix"),
    Route(model="gpt-4o", aliases=["gpt-4o-latest", "four-oh"], group="exact", upstream_model="gpt-4o-2024-08-06"),
    Route(prefix="gpt-4o-", group="long-prefix"),
    Route(glob="*-mini", group="mini", upstream_model="small"),
    Route(model="llama-3", group="exact-llama"),
    Route(glob="*", group="anything"),
)


@pytest.mark.parametrize(("model", "group", "upstream_model"), [
    pytest.param("gpt-4o", "exact", "gpt-4o-2024-08-06", id="exact-beats-everything"),
    pytest.param("gpt-4o-latest", "exact", "gpt-4o-2024-08-06", id="alias-beats-prefix"),
    pytest.param("four-oh", "exact", "gpt-4o-2024-08-06", id="alias"),
    pytest.param("gpt-4o-mini", "long-prefix", "gpt-4o-mini", id="longest-prefix-beats-glob"),
    pytest.param("gpt-4-turbo", "short-prefix", "gpt-4-turbo", id="prefix-beats-glob"),
    pytest.param("gpt-3.5", "globbed", "gpt-3.5", id="globs-in-file-order"),
    pytest.param("o1-mini", "mini", "small", id="glob-rewrites-the-name"),
    pytest.param("llama-3", "exact-llama", "llama-3", id="exact-without-rewrite"),
    pytest.param("mistral", "anything", "mistral", id="catch-all-glob"),
])
def test_routes_match_exact_then_alias_then_longest_prefix_then_glob(
    model: str, group: str, upstream_model: str,
) -> None:
    match = RouteTable(ROUTES).match(model)

    assert match is not None
    assert (match.route.group, match.upstream_model) == (group, upstream_model)


def test_an_unmatched_model_has_no_route() -> None:
    table = RouteTable((Route(model="a", group="g"), Route(prefix="b-", group="g"), Route(glob="c?", group="g")))

    assert [table.match(m) for m in ("b", "cc2", "A", "", "a ")] == [None] * 5
    assert table.match("cx") is not None


def test_a_glob_matches_the_whole_name() -> None:
    table = RouteTable((Route(glob="*-mini", group="g"),))

    assert table.match("o1-mini") is not None
    assert table.match("o1-mini-2024") is None
    assert table.match("o1-MINI") is None  # case matters, as in model names


def test_the_prefix_rewrite_sends_the_configured_name() -> None:
    table = RouteTable((Route(prefix="local-", group="g", upstream_model="llama-3-8b"),))

    match = table.match("local-anything")

    assert match is not None and match.upstream_model == "llama-3-8b"


def test_listed_models_are_the_exact_names_and_aliases() -> None:
    assert RouteTable(ROUTES).listed_models() == ["four-oh", "gpt-4o", "gpt-4o-latest", "llama-3"]
    assert RouteTable((Route(glob="*", group="g"),)).listed_models() == []


def test_a_route_carries_its_chain_and_a_named_route_is_reached_only_from_others() -> None:
    gpt = Route(model="gpt", group="openai", fallbacks=["claude"], fallback_on=("rate_limited", "5xx"))
    claude = Route(name="claude", group="anthropic", upstream_model="claude-sonnet-4-5")
    table = RouteTable((gpt, claude))
    match = table.match("gpt")

    assert match is not None
    assert [(link.name, link.group, link.model("gpt")) for link in match.chain] == [
        ("gpt", "openai", "gpt"), ("claude", "anthropic", "claude-sonnet-4-5")]
    assert match.fallback_on == {"rate_limited", "5xx"} and match.variant is None
    assert table.match("claude") is None and table.listed_models() == ["gpt"]


def test_a_splits_variant_is_a_match_of_its_own_route() -> None:
    gpt = Route(model="gpt", group="openai", split=[Share(route="gpt", weight=9), Share(route="canary", weight=1)])
    canary = Route(name="canary", group="openai", upstream_model="gpt-5", fallbacks=["gpt"])
    table = RouteTable((gpt, canary))
    match = table.match("gpt")
    assert match is not None

    assert table.shares(match) == (("gpt", 9), ("canary", 1))
    variant = table.variant(match, "canary", "gpt")
    assert (variant.route, variant.upstream_model, variant.variant) == (canary, "gpt-5", "canary")
    assert [link.name for link in variant.chain] == ["canary", "gpt"]  # the variant's own chain
    assert table.shares(variant) == ()  # a variant is not split again
    itself = table.variant(match, "gpt", "gpt")
    assert (itself.route, itself.variant) == (gpt, "gpt")


# --- choosing an endpoint -----------------------------------------------------------------------


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


# --- passive health -----------------------------------------------------------------------------


def test_an_endpoint_is_ejected_after_n_failures_in_a_row_for_a_doubling_time() -> None:
    state = EndpointState(url="u", ejection=Ejection(failures=3, base=5.0, max=300.0))

    assert [state.record_failure(0.0) for _ in range(3)] == [False, False, True]
    assert state.ejected_until == 5.0
    assert not state.healthy(4.99) and state.healthy(5.0)

    ejections = []
    now = 5.0
    for _ in range(8):
        assert [state.record_failure(now) for _ in range(3)] == [False, False, True]
        ejections.append(state.ejected_until - now)
        now = state.ejected_until
    assert ejections == [10.0, 20.0, 40.0, 80.0, 160.0, 300.0, 300.0, 300.0]  # capped at max


def test_a_success_resets_the_failure_count_and_the_backoff() -> None:
    state = EndpointState(url="u", ejection=Ejection(failures=2, base=1.0, max=60.0))
    for _ in range(6):
        state.record_failure(0.0)  # three ejections: 1 s, 2 s, 4 s
    assert state.ejected_until == 4.0

    state.record_failure(10.0)
    state.record_success()
    assert not state.record_failure(10.0)  # the count started again
    assert state.record_failure(10.0)
    assert state.ejected_until == 11.0  # and the backoff is back to its base


def test_failures_must_be_consecutive() -> None:
    state = EndpointState(url="u", ejection=Ejection(failures=2, base=1.0))

    for _ in range(10):
        assert not state.record_failure(0.0)
        state.record_success()

    assert state.healthy(0.0)


def test_load_is_outstanding_requests_per_unit_of_weight() -> None:
    state = EndpointState(url="u", weight=2, max_in_flight=3)

    assert state.load() == 0.0 and state.has_room()
    state.in_flight = 3
    assert state.load() == 1.5 and not state.has_room()


# --- the retry budget ---------------------------------------------------------------------------


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
