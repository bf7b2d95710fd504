"""Splits (ingress/routing/split.py) under any weights: each variant's share of many keys stays within
binomial bounds of its weight's share, and a key keeps its variant while the weights stay as they are."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingress.routing.split import choose

SETTINGS = settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
KEYS = 3000
SIGMAS = 5.0  # a variant outside 5 standard deviations: once in ~1.7 million variants, were the hash fair

weights = st.lists(st.integers(0, 100), min_size=2, max_size=5).filter(lambda w: sum(w) > 0)
# A canary at 1 % (or less) is a split like any other.
canaries = st.tuples(st.integers(1, 10), st.integers(90, 1000)).map(lambda t: [t[0], t[1]])


def _shares(ws: list[int]) -> tuple[tuple[str, int], ...]:
    return tuple((f"variant-{i}", w) for i, w in enumerate(ws))


@SETTINGS
@given(ws=st.one_of(weights, canaries), salt=st.binary(min_size=0, max_size=8))
def test_each_variants_share_stays_within_binomial_bounds(ws: list[int], salt: bytes) -> None:
    shares = _shares(ws)
    counts = dict.fromkeys((name for name, _ in shares), 0)
    for i in range(KEYS):
        counts[choose(salt + i.to_bytes(4, "big"), shares)] += 1
    total = sum(ws)
    for name, weight in shares:
        p = weight / total
        spread = SIGMAS * math.sqrt(KEYS * p * (1 - p)) + 1
        assert abs(counts[name] - KEYS * p) <= spread, (name, weight, counts)


@SETTINGS
@given(ws=weights, keys=st.lists(st.binary(min_size=0, max_size=40), min_size=1, max_size=50), data=st.data())
def test_a_key_keeps_its_variant_while_the_weights_stay(ws: list[int], keys: list[bytes], data: st.DataObject) -> None:
    shares = _shares(ws)
    first = [choose(k, shares) for k in keys]
    reordered = tuple(data.draw(st.permutations(shares)))

    assert [choose(k, shares) for k in keys] == first
    assert [choose(k, reordered) for k in keys] == first  # the order the variants are listed in does not matter
    assert all(dict(shares)[variant] > 0 for variant in first)
