"""The cache-affine choice under any loads, weights, health, history, load allowance and prefix spread: the
load bound is never exceeded, rendezvous order survives endpoints leaving and returning (the choice's
per-bucket orders too, a shared prefix's subset of them too), each endpoint heads a share of the buckets
proportional to its weight, and the map finds the longest chain served."""

from __future__ import annotations

import math
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingress.routing.affinity import (
    BUCKETS,
    LONG_PREFIX_BLOCKS,
    CacheAffinity,
    Prefix,
    PrefixMap,
    Way,
    bucket,
    rendezvous,
    score,
)
from ingress.routing.health import EndpointState

SETTINGS = settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
SLACK = 0.25


def _within(endpoint: EndpointState, healthy: list[EndpointState], allowance: float) -> bool:
    """Whether the endpoint, with this request, is within the load bound of ingress/routing/affinity.py: at
    most ceil((1 + slack) x its share of the mean), or at most the allowance above the others' mean (per
    unit of weight, times its weight)."""
    total = sum(e.in_flight for e in healthy) + 1
    weight = sum(e.weight for e in healthy)
    n = endpoint.in_flight + 1
    if n <= math.ceil((1 + SLACK) * total / weight * endpoint.weight):
        return True
    if weight == endpoint.weight:  # no others: the relative bound alone (which always fits it)
        return False
    others = (total - n) / (weight - endpoint.weight) * endpoint.weight
    return n <= others + allowance + 1e-9


allowances = st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0])
spreads = st.integers(0, 4)


@st.composite
def endpoints(draw: st.DrawFn) -> list[EndpointState]:
    count = draw(st.integers(1, 8))
    out = []
    for i in range(count):
        e = EndpointState(url=f"http://10.0.0.{i}:9000", weight=draw(st.integers(1, 5)))
        e.in_flight = draw(st.integers(0, 40))
        e.ejected_until = draw(st.sampled_from([0.0, 0.0, 0.0, 500.0]))
        out.append(e)
    return out


# Chains from a small tree, so that requests share prefixes as conversations and system prompts do.
chains = st.lists(st.integers(0, 3), min_size=1, max_size=12).map(
    lambda path: [hash(tuple(path[:i + 1])) & (2**64 - 1) for i in range(len(path))])
prefixes = st.builds(Prefix, chains, st.integers(0, 11), st.one_of(st.none(), st.integers(0, 2**64 - 1)))
LONG = list(range(1, LONG_PREFIX_BLOCKS))  # the blocks of a long shared prefix after its first


@SETTINGS
@given(endpoints(), st.lists(st.tuples(prefixes, st.integers(0, 7)), max_size=20), prefixes, st.randoms(),
       allowances, spreads)
def test_no_choice_exceeds_the_load_bound(states: list[EndpointState], history: list[tuple[Prefix, int]],
                                          prefix: Prefix, rng: random.Random, allowance: float,
                                          spread: int) -> None:
    affinity = CacheAffinity(SLACK, 1024, 600.0, allowance, spread)
    for when, (served, index) in enumerate(history):
        affinity.served(served, states[index % len(states)].url, float(when))

    decision = affinity.choose(states, prefix, 100.0, rng)

    assert decision is not None  # no endpoint has a max_in_flight
    healthy = [e for e in states if e.healthy(100.0)]
    if decision.way is Way.BALANCED:
        assert not healthy  # panic routing: every endpoint ejected
    else:
        assert decision.endpoint in healthy
        assert _within(decision.endpoint, healthy, allowance)


@SETTINGS
@given(st.integers(2, 8), st.lists(st.tuples(st.integers(0, 3), st.booleans()), min_size=1, max_size=300),
       st.integers(0, 2**32), allowances, spreads)
def test_a_stream_of_requests_never_loads_an_endpoint_past_the_bound(count: int, steps: list[tuple[int, bool]],
                                                                     seed: int, allowance: float,
                                                                     spread: int) -> None:
    """Conversations (a few, behind one shared block, so they collide) arrive and finish; whatever the map
    prefers, each request lands within the bound, so the most loaded endpoint stays near
    max((1 + slack) x the mean, the others' mean + the allowance)."""
    rng = random.Random(seed)
    states = [EndpointState(url=f"http://10.0.0.{i}:9000") for i in range(count)]
    affinity = CacheAffinity(SLACK, 1024, 600.0, allowance, spread)
    held: list[EndpointState] = []
    for now, (conversation, finish) in enumerate(steps):
        if finish and held:
            held.pop(rng.randrange(len(held))).in_flight -= 1
            continue
        prefix = Prefix([7, *LONG, 100 + conversation], LONG_PREFIX_BLOCKS)
        decision = affinity.choose(states, prefix, float(now), rng)
        assert decision is not None
        assert _within(decision.endpoint, states, allowance)
        affinity.served(prefix, decision.endpoint.url, float(now))
        decision.endpoint.in_flight += 1
        held.append(decision.endpoint)


@SETTINGS
@given(st.integers(0, 2**64 - 1), st.integers(2, 12), st.data())
def test_rendezvous_order_is_stable_when_an_endpoint_leaves_and_returns(key: int, count: int,
                                                                        data: st.DataObject) -> None:
    states = [EndpointState(url=f"http://replica-{i}.internal:9000", weight=data.draw(st.integers(1, 3)))
              for i in range(count)]
    order = rendezvous(key, states)
    leaving = data.draw(st.sampled_from(states), label="leaving")

    without = rendezvous(key, [e for e in states if e is not leaving])

    assert without == [e for e in order if e is not leaving]
    assert rendezvous(key, [*without, leaving]) == order


@SETTINGS
@given(endpoints(), st.integers(0, 2**64 - 1))
def test_an_idle_groups_choice_is_the_first_healthy_in_its_buckets_order(states: list[EndpointState],
                                                                         key: int) -> None:
    for e in states:
        e.in_flight = 0
    healthy = [e for e in states if e.healthy(100.0)]

    decision = CacheAffinity(SLACK, 1024, 600.0).choose(states, Prefix((), 0, key), 100.0, random.Random(1))

    assert decision is not None
    if healthy:
        assert decision.endpoint is rendezvous(bucket(key), healthy)[0]


@SETTINGS
@given(st.integers(2, 12), st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=50), st.data())
def test_the_choices_orders_move_only_the_leaving_endpoints_conversations(count: int, keys: list[int],
                                                                          data: st.DataObject) -> None:
    """One CacheAffinity, its per-bucket orders kept: an endpoint leaving the group moves only the new
    conversations it would have taken, and when it returns (last in the list) every one goes back."""
    states = [EndpointState(url=f"http://replica-{i}.internal:9000", weight=data.draw(st.integers(1, 3)))
              for i in range(count)]
    affinity = CacheAffinity(SLACK, 1024, 600.0)

    def places(group: list[EndpointState]) -> list[str]:
        return _places(affinity, group, [Prefix((), 0, key) for key in keys])

    before = places(states)
    leaving = data.draw(st.sampled_from(states), label="leaving")
    without = places([e for e in states if e is not leaving])

    assert [w for b, w in zip(before, without, strict=True) if b != leaving.url] == [
        b for b in before if b != leaving.url]
    assert places([*(e for e in states if e is not leaving), leaving]) == before


@SETTINGS
@given(endpoints(), st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), st.integers(1, 4))
def test_an_idle_group_puts_a_shared_prefixs_conversations_on_the_first_of_its_order(
        states: list[EndpointState], shared: int, own: int, spread: int) -> None:
    """With nothing loaded, a conversation behind a long shared prefix goes to the first `spread` endpoints of
    its first block's order (the healthy ones among them): to the first of those in its own order."""
    for e in states:
        e.in_flight = 0
    healthy = [e for e in states if e.healthy(100.0)]
    head = [e for e in rendezvous(bucket(shared), states)[:spread] if e in healthy]

    prefix = Prefix([shared, *LONG, own], LONG_PREFIX_BLOCKS)
    decision = CacheAffinity(SLACK, 1024, 600.0, 0.0, spread).choose(states, prefix, 100.0, random.Random(1))

    assert decision is not None
    if head:
        assert decision.endpoint is next(e for e in rendezvous(bucket(own), states) if e in head)


@SETTINGS
@given(st.integers(2, 12), st.lists(st.tuples(st.integers(0, 7), st.integers(0, 2**64 - 1)), min_size=1,
                                    max_size=50), st.integers(1, 4), st.data())
def test_a_spread_prefixs_conversations_move_only_when_its_subset_loses_an_endpoint(
        count: int, conversations: list[tuple[int, int]], spread: int, data: st.DataObject) -> None:
    """Conversations behind 8 long shared prefixes: when an endpoint leaves, those of prefixes whose first `spread`
    it was not among stay where they were (those of the others may move within their new subset), and when
    it returns (last in the list) every one goes back."""
    states = [EndpointState(url=f"http://replica-{i}.internal:9000", weight=data.draw(st.integers(1, 3)))
              for i in range(count)]
    affinity = CacheAffinity(SLACK, 1024, 600.0, 0.0, spread)
    prefixes = [Prefix([shared * 977 + 5, *LONG, own], LONG_PREFIX_BLOCKS) for shared, own in conversations]

    def places(group: list[EndpointState]) -> list[str]:
        return _places(affinity, group, prefixes)

    before = places(states)
    leaving = data.draw(st.sampled_from(states), label="leaving")
    without = places([e for e in states if e is not leaving])

    for prefix, b, w in zip(prefixes, before, without, strict=True):
        if leaving not in rendezvous(bucket(prefix.blocks[0]), states)[:spread]:
            assert w == b
    assert places([*(e for e in states if e is not leaving), leaving]) == before


@settings(max_examples=50, deadline=None, database=None)
@given(st.lists(st.integers(1, 5), min_size=2, max_size=16), st.text(min_size=1, max_size=8))
def test_each_endpoint_heads_a_share_of_the_buckets_proportional_to_its_weight(weights: list[int],
                                                                               name: str) -> None:
    """Over the BUCKETS orders, the number an endpoint heads is binomial with p = its share of the weight:
    within 6 standard deviations (a false alarm about once in 10^8 endpoints)."""
    states = [EndpointState(url=f"http://{name}-{i}:9000", weight=w) for i, w in enumerate(weights)]
    heads = {e.url: 0 for e in states}
    for b in range(BUCKETS):
        heads[rendezvous(b, states)[0].url] += 1

    for e in states:
        p = e.weight / sum(weights)
        assert abs(heads[e.url] - BUCKETS * p) <= 6 * math.sqrt(BUCKETS * p * (1 - p)) + 1


@SETTINGS
@given(st.integers(0, 2**64 - 1), st.integers(1, 20), st.integers(1, 5))
def test_rendezvous_with_one_weight_is_the_order_of_the_scores(key: int, count: int, weight: int) -> None:
    """Its shortcut for equal weights (no logarithm) orders the endpoints exactly as their scores do."""
    states = [EndpointState(url=f"http://replica-{i}.internal:9000", weight=weight) for i in range(count)]

    assert rendezvous(key, states) == sorted(states, key=lambda e: score(key, e), reverse=True)


@SETTINGS
@given(st.lists(st.tuples(chains, st.integers(0, 3)), max_size=30), chains)
def test_the_map_finds_the_longest_chain_served_and_who_served_it_last(history: list[tuple[list[int], int]],
                                                                       query: list[int]) -> None:
    seen = PrefixMap(max_entries=10_000, max_age=600.0)
    last: dict[int, str] = {}  # what a map that forgets nothing would say
    for when, (blocks, index) in enumerate(history):
        seen.remember(blocks, 0, f"e{index}", float(when))
        last.update(dict.fromkeys(blocks, f"e{index}"))

    known = [i for i, block in enumerate(query) if block in last]
    expected = (last[query[known[-1]]], known[-1] + 1) if known else None
    assert seen.longest(query, 0, float(len(history))) == expected


def _places(affinity: CacheAffinity, group: list[EndpointState], prefixes: list[Prefix]) -> list[str]:
    """Where each prefix goes, one after another, on an idle group."""
    out = []
    for prefix in prefixes:
        decision = affinity.choose(group, prefix, 0.0, random.Random(1))
        assert decision is not None
        out.append(decision.endpoint.url)
    return out
