"""The cache-affine choice as a decision table: the request's hashes, the endpoints' loads and states, and
`now` in; the endpoint and which way the choice went out."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from ingress.routing.affinity import (
    BUCKETS,
    LONG_PREFIX_BLOCKS,
    CacheAffinity,
    Prefix,
    PrefixMap,
    Way,
    bucket,
    key_hash,
    rendezvous,
)
from ingress.routing.health import EndpointState

MAX_AGE = 600.0
SESSION = key_hash("session-27")  # its bucket's order is not that of block 22
TURN_ONE = Prefix([11, 22], conversation_block=1)  # a system prompt's block, then the first user message's
TURN_TWO = Prefix([11, 22, 33, 44], conversation_block=1)
OTHER_CONVERSATION = Prefix([11, 99], conversation_block=1)  # the same system prompt, another first message
# Rendezvous orders over abcd (test_rendezvous_orders_are_pinned): block 11 (the shared system prompt) dcab,
# block 22 (TURN_ONE's conversation) dacb, block 99 (OTHER_CONVERSATION's) acdb.
LONG = [11, *range(1001, 1000 + LONG_PREFIX_BLOCKS)]  # a long system prompt's blocks, 11 first
LONG_ONE = Prefix([*LONG, 22], conversation_block=LONG_PREFIX_BLOCKS)
LONG_TWO = Prefix([*LONG, 22, 33], conversation_block=LONG_PREFIX_BLOCKS)
LONG_OTHER = Prefix([*LONG, 99], conversation_block=LONG_PREFIX_BLOCKS)


def url(name: str) -> str:
    return f"http://{name}:9000"


def states(**config: Mapping[str, float]) -> list[EndpointState]:
    out = []
    for name in "abcd":
        e = EndpointState(url=url(name))
        for key, value in config.get(name, {}).items():
            setattr(e, key, type(getattr(e, key))(value))
        out.append(e)
    return out


def test_rendezvous_orders_are_pinned() -> None:
    """Every worker of every replica, of any release, must put a conversation in the same place: the order of
    its key's bucket (the key's low 12 bits), rendezvous over (bucket, endpoint identity)."""
    endpoints = states()

    assert [bucket(key) for key in (22, 99, SESSION, 2**64 - BUCKETS + 22)] == [22, 99, 1150, 22]
    assert ["".join(e.url[7] for e in rendezvous(bucket(key), endpoints)) for key in (22, 99, SESSION, 11)] == [
        "dacb", "acdb", "bdac", "dcab"]
    assert SESSION == 0x7385803E2FEC847E


def test_the_choice_follows_its_buckets_order() -> None:
    """Keys of one bucket go to one endpoint; the order is computed once per bucket, not per key."""
    affinity = CacheAffinity(0.25, 1024, MAX_AGE)
    endpoints = states()
    chosen = {key: affinity.choose(endpoints, Prefix((), 0, key), 0.0, random.Random(1)) for key in
              (22, 2**40 + 22, 2**64 - BUCKETS + 22, 99, SESSION)}

    assert [d.endpoint.url[7] if d else None for d in chosen.values()] == ["d", "d", "d", "a", "b"]


def test_the_orders_are_made_again_when_a_weight_changes() -> None:
    affinity = CacheAffinity(0.25, 1024, MAX_AGE)
    endpoints = states()
    assert affinity.choose(endpoints, TURN_ONE, 0.0, random.Random(1)) is not None
    endpoints[1].weight = 50  # b, in place

    decision = affinity.choose(endpoints, TURN_ONE, 0.0, random.Random(1))

    assert decision is not None and decision.endpoint is rendezvous(bucket(22), endpoints)[0] is endpoints[1]


@dataclass
class Row:
    prefix: Prefix | None
    way: Way
    endpoint: str | None  # its name; None: any (P2C's pick)
    matched: int = 0
    served: list[tuple[Prefix, str, float]] = field(default_factory=list)  # (prefix, endpoint, when)
    config: dict[str, dict[str, float]] = field(default_factory=dict)  # endpoint -> EndpointState fields
    exclude: str = ""
    now: float = 100.0
    allowance: float = 0.0  # load_allowance
    spread: int = 0  # prefix_spread


TABLE = {
    "nothing to go by: as P2C": Row(None, Way.BALANCED, None),
    "a new conversation goes where rendezvous puts it": Row(TURN_ONE, Way.HASHED, "d"),
    "a later turn goes where its prefix was served": Row(TURN_TWO, Way.HIT, "c", 2, [(TURN_ONE, "c", 0.0)]),
    "the longest match wins over a more recent shorter one": Row(
        TURN_TWO, Way.HIT, "b", 3,
        [(TURN_ONE, "c", 0.0), (Prefix([11, 22, 33], 1), "b", 1.0), (TURN_ONE, "a", 2.0)]),
    "a prefix served longer ago than max_age is taken to be evicted": Row(
        TURN_TWO, Way.HASHED, "d", 0, [(TURN_ONE, "c", 0.0)], now=MAX_AGE + 1),
    "the served endpoint above the load bound: the conversation's first within it": Row(
        TURN_TWO, Way.OVERRIDDEN_BY_LOAD, "d", 2, [(TURN_ONE, "c", 0.0)], {"c": {"in_flight": 5}}),
    "the served endpoint at the bound still takes it": Row(
        TURN_TWO, Way.HIT, "c", 2, [(TURN_ONE, "c", 0.0)], {n: {"in_flight": 1} for n in "abcd"}),
    "at low load the bound is strict: one more than the others is too many": Row(
        TURN_TWO, Way.OVERRIDDEN_BY_LOAD, "d", 2, [(TURN_ONE, "c", 0.0)], {"c": {"in_flight": 1}}),
    "rendezvous's first above the bound: the next": Row(TURN_ONE, Way.OVERRIDDEN_BY_LOAD, "a", 0,
                                                        config={"d": {"in_flight": 3}}),
    "rendezvous's first at its max_in_flight: the next": Row(
        TURN_ONE, Way.OVERRIDDEN_BY_LOAD, "a", 0, config={"d": {"in_flight": 1, "max_in_flight": 1}}),
    "the served endpoint ejected: rendezvous over the healthy ones": Row(
        TURN_TWO, Way.HASHED, "d", 2, [(TURN_ONE, "c", 0.0)], {"c": {"ejected_until": 200}}),
    "rendezvous's first ejected: the next is first": Row(TURN_ONE, Way.HASHED, "a", 0,
                                                         config={"d": {"ejected_until": 200}}),
    "rendezvous's first failing its health check: the next is first": Row(
        TURN_ONE, Way.HASHED, "a", 0, config={"d": {"active_healthy": False}}),
    "a retry excludes the endpoint tried": Row(TURN_ONE, Way.HASHED, "a", exclude="d"),
    "an affinity key overrides the hash": Row(Prefix([11, 22], 1, SESSION), Way.AFFINITY_KEY, "b"),
    "an affinity key without a chain (a binary client's)": Row(Prefix((), 0, SESSION), Way.AFFINITY_KEY, "b"),
    "an affinity key's first above the bound: the next": Row(
        Prefix([11, 22], 1, SESSION), Way.OVERRIDDEN_BY_LOAD, "d", config={"b": {"in_flight": 3}}),
    "where the prefix was served beats the key": Row(Prefix([11, 22, 33, 44], 1, SESSION), Way.HIT, "c", 2,
                                                     [(TURN_ONE, "c", 0.0)]),
    "another conversation behind the same system prompt is not a hit": Row(
        OTHER_CONVERSATION, Way.HASHED, "a", 0, [(TURN_ONE, "c", 0.0)]),
    # load_allowance: within the others' mean + the allowance, or within the relative bound, whichever is looser
    "at low load the allowance lets the served endpoint take its conversation back": Row(
        TURN_TWO, Way.HIT, "c", 2, [(TURN_ONE, "c", 0.0)], {"c": {"in_flight": 1}}, allowance=2),
    "more than the allowance above the mean: pushed off": Row(
        TURN_TWO, Way.OVERRIDDEN_BY_LOAD, "d", 2, [(TURN_ONE, "c", 0.0)], {"c": {"in_flight": 3}}, allowance=2),
    "at high load the relative bound is the looser one": Row(  # mean 87/4: ceil(1.25 x 21.75) = 28 > 23.75
        TURN_TWO, Way.HIT, "c", 2, [(TURN_ONE, "c", 0.0)],
        {"a": {"in_flight": 20}, "b": {"in_flight": 20}, "c": {"in_flight": 26}, "d": {"in_flight": 20}},
        allowance=2),
    "at high load, past the relative bound: pushed off": Row(
        TURN_TWO, Way.OVERRIDDEN_BY_LOAD, "d", 2, [(TURN_ONE, "c", 0.0)],
        {"a": {"in_flight": 20}, "b": {"in_flight": 20}, "c": {"in_flight": 28}, "d": {"in_flight": 20}},
        allowance=2),
    # prefix_spread: behind a long shared prefix, the first `spread` of its first block's order, in the
    # conversation's own order, then on down the first block's order
    "one endpoint for a long shared prefix: another conversation goes where the first did": Row(
        LONG_OTHER, Way.HASHED, "d", spread=1),
    "two endpoints for a long shared prefix: a conversation takes the first of them in its own order": Row(
        LONG_OTHER, Way.HASHED, "c", spread=2),
    "two endpoints for a long shared prefix, LONG_ONE's first among them": Row(LONG_ONE, Way.HASHED, "d",
                                                                              spread=2),
    "its first of the two above the bound: the other": Row(
        LONG_OTHER, Way.OVERRIDDEN_BY_LOAD, "d", config={"c": {"in_flight": 3}}, spread=2),
    "both above the bound: down the shared block's order": Row(
        LONG_OTHER, Way.OVERRIDDEN_BY_LOAD, "a", config={"c": {"in_flight": 3}, "d": {"in_flight": 3}},
        spread=2),
    "its one above the bound: on down the shared block's order (dcab), not the conversation's (dacb)": Row(
        LONG_ONE, Way.OVERRIDDEN_BY_LOAD, "c", config={"d": {"in_flight": 3}}, spread=1),
    "one of the two ejected: the other is first": Row(LONG_ONE, Way.HASHED, "c",
                                                       config={"d": {"ejected_until": 200}}, spread=2),
    "a short shared prefix is not spread": Row(OTHER_CONVERSATION, Way.HASHED, "a", spread=1),
    "an affinity key is not spread": Row(Prefix([*LONG, 22], LONG_PREFIX_BLOCKS, SESSION), Way.AFFINITY_KEY, "b",
                                         spread=1),
    "a hit is not spread": Row(LONG_TWO, Way.HIT, "a", LONG_PREFIX_BLOCKS + 1, [(LONG_ONE, "a", 0.0)],
                               spread=1),
    "a conversation block out of range (a client's) stands for the first": Row(
        Prefix([22, 33], 7), Way.HASHED, "d"),
    "every endpoint ejected: the soonest to recover, as P2C's panic routing": Row(
        TURN_ONE, Way.BALANCED, "b", 0,
        config={"a": {"ejected_until": 300}, "b": {"ejected_until": 150}, "c": {"ejected_until": 300},
                "d": {"ejected_until": 300}}),
    "none within the bound has room (the rest excluded): the least loaded with room": Row(
        TURN_ONE, Way.OVERRIDDEN_BY_LOAD, "c", 0,
        config={"a": {"in_flight": 1, "max_in_flight": 1}, "c": {"in_flight": 9}}, exclude="bd"),
}


@pytest.mark.parametrize("row", TABLE.values(), ids=TABLE.keys())
def test_the_choice(row: Row) -> None:
    affinity = CacheAffinity(load_slack=0.25, max_entries=1024, max_age=MAX_AGE, load_allowance=row.allowance,
                             prefix_spread=row.spread)
    for prefix, name, when in row.served:
        affinity.served(prefix, url(name), when)
    endpoints = states(**row.config)

    decision = affinity.choose(endpoints, row.prefix, row.now, random.Random(1),
                               frozenset(url(n) for n in row.exclude))

    assert decision is not None
    assert (decision.way, decision.matched) == (row.way, row.matched)
    if row.endpoint is not None:
        assert decision.endpoint.url == url(row.endpoint)


def test_none_when_every_healthy_endpoint_is_full() -> None:
    endpoints = states(**{n: {"in_flight": 1, "max_in_flight": 1} for n in "abcd"})

    assert CacheAffinity(0.25, 1024, MAX_AGE).choose(endpoints, TURN_ONE, 0.0, random.Random(1)) is None


def test_the_first_turn_served_is_found_by_the_second_on_the_same_worker() -> None:
    affinity = CacheAffinity(0.25, 1024, MAX_AGE)
    endpoints = states(d={"in_flight": 3})  # the first turn is pushed off its rendezvous endpoint
    first = affinity.choose(endpoints, TURN_ONE, 0.0, random.Random(1))
    assert first is not None and first.way is Way.OVERRIDDEN_BY_LOAD
    affinity.served(TURN_ONE, first.endpoint.url, 0.0)
    endpoints[3].in_flight = 0

    second = affinity.choose(endpoints, TURN_TWO, 1.0, random.Random(1))

    assert second is not None and (second.way, second.endpoint.url) == (Way.HIT, first.endpoint.url)


def test_weights_bound_each_endpoint_by_its_share() -> None:
    endpoints = [EndpointState(url=url("a"), weight=3), EndpointState(url=url("b"), weight=1)]
    for e in endpoints:
        e.in_flight = 2  # of 5 with this one: a may hold ceil(1.25 * 5 * 3/4) = 5, b ceil(1.25 * 5 * 1/4) = 2

    for served, way in (("a", Way.HIT), ("b", Way.OVERRIDDEN_BY_LOAD)):
        affinity = CacheAffinity(0.25, 1024, MAX_AGE)
        affinity.served(TURN_ONE, url(served), 0.0)
        decision = affinity.choose(endpoints, TURN_TWO, 1.0, random.Random(1))
        assert decision is not None and (decision.way, decision.endpoint.url) == (way, url("a"))


@pytest.mark.parametrize(("allowance", "way", "endpoint"), [(3, Way.HIT, "b"), (2, Way.OVERRIDDEN_BY_LOAD, "a")])
def test_the_allowance_is_over_the_others_mean_scaled_to_the_weight(allowance: float, way: Way,
                                                                    endpoint: str) -> None:
    """b (weight 1 of 4) with 3 of 5, this one counted: the relative bound is ceil(1.25 x 5/4) = 2; a's mean per
    unit of weight is 2/3, so b is 3 - 2/3 = 2.33 above it: within an allowance of 3, not of 2."""
    endpoints = [EndpointState(url=url("a"), weight=3), EndpointState(url=url("b"), weight=1)]
    for e in endpoints:
        e.in_flight = 2
    affinity = CacheAffinity(0.25, 1024, MAX_AGE, load_allowance=allowance)
    affinity.served(TURN_ONE, url("b"), 0.0)

    decision = affinity.choose(endpoints, TURN_TWO, 1.0, random.Random(1))

    assert decision is not None and (decision.way, decision.endpoint.url) == (way, url(endpoint))


def test_the_allowance_never_empties_the_other_endpoint_of_two() -> None:
    """Two endpoints, three requests in flight on one, none on the other: the fourth is 4 above the other's
    0, past an allowance of 2 (and past ceil(1.25 x 4/2) = 3): it goes to the other."""
    endpoints = [EndpointState(url=url("a")), EndpointState(url=url("b"))]
    endpoints[0].in_flight = 3
    affinity = CacheAffinity(0.25, 1024, MAX_AGE, load_allowance=2)
    affinity.served(TURN_ONE, url("a"), 0.0)

    decision = affinity.choose(endpoints, TURN_TWO, 1.0, random.Random(1))

    assert decision is not None and (decision.way, decision.endpoint.url) == (Way.OVERRIDDEN_BY_LOAD, url("b"))


# --- the map ------------------------------------------------------------------------------------


def test_the_map_keeps_at_most_its_entries_and_the_most_recent_ones() -> None:
    seen = PrefixMap(max_entries=64, max_age=MAX_AGE)
    for i in range(1000):
        seen.remember([i * 10 + j for j in range(4)], 0, url("a"), float(i))
        assert len(seen) <= 64 + 4

    assert seen.longest([9990, 9991, 9992, 9993], 0, 1000.0) == (url("a"), 4)
    assert seen.longest([0, 1, 2, 3], 0, 1000.0) is None  # long since dropped


def test_the_map_remembers_a_chain_from_its_conversation_block_on() -> None:
    seen = PrefixMap(max_entries=64, max_age=MAX_AGE)
    seen.remember([11, 22, 33], 1, url("a"), 0.0)

    assert seen.longest([11, 22, 33, 44], 1, 1.0) == (url("a"), 3)
    assert seen.longest([11], 0, 1.0) is None  # the block others share was not remembered
