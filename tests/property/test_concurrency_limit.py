"""The in-flight limit under any sequence of requests: within its bounds, lower when the worker's queue grows,
and back up once it drains."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from ingress.edge.concurrency import WINDOW_S, WINDOW_SAMPLES, ConcurrencyLimit

samples = st.lists(st.tuples(st.floats(0, 5), st.floats(0, 30), st.integers(0, 5000), st.floats(0, 1)),
                   min_size=1, max_size=400)
bounds = st.tuples(st.integers(1, 200), st.integers(0, 800), st.integers(0, 800)).map(
    lambda b: (b[0], b[0] + b[1], b[0] + min(b[1], b[2])))  # min, max, initial within them


def windows(lim: ConcurrencyLimit, now: float, own: float, total: float, count: int) -> tuple[float, list[int]]:
    """`count` windows of requests, each using the whole limit; the limit after each."""
    seen = []
    for _ in range(count):
        for _ in range(WINDOW_SAMPLES * 2):
            now += WINDOW_S / (WINDOW_SAMPLES - 2)
            if lim.observe(own, total, int(lim), now) is not None:
                seen.append(int(lim))
                break
    return now, seen


@settings(max_examples=200, deadline=None)
@given(bounds, st.floats(0.5, 100), samples)
def test_the_limit_stays_within_its_bounds(limits: tuple[int, int, int], target: float,
                                           requests: list[tuple[float, float, int, float]]) -> None:
    low, high, initial = limits
    lim = ConcurrencyLimit(initial=initial, min_limit=low, max_limit=high, target=target)
    now = 0.0
    for own, total, in_flight, step in requests:
        now += step
        found = lim.observe(own, total, in_flight, now)
        assert low <= int(lim) <= high
        if found is not None:
            assert found.limit == int(lim) and found.queue >= 0


@settings(max_examples=100, deadline=None)
@given(st.integers(4, 64), st.floats(0.0, 1.0), st.floats(0.02, 1.0))
def test_a_growing_queue_lowers_the_limit_and_a_drained_one_raises_it_again(
        low: int, share: float, upstream: float) -> None:
    target = 1 + share * (low / 2 - 1)  # at most half the lowest limit
    high = low * 32
    work = upstream * target / (4 * high)  # drained: under a quarter of the target held, even at the highest
    lim = ConcurrencyLimit(initial=low * 8, min_limit=low, max_limit=high, target=target)
    start = int(lim)
    # The worker's own time grows a hundredfold: nearly every request held is held on the worker
    now, down = windows(lim, 0.0, upstream * 100, upstream * 101, 12)
    assert down[-1] < start
    assert all(b <= a for a, b in itertools.pairwise(down))
    bottom = int(lim)
    # ...then drains: a request's own time is its work again, and the limit climbs
    now, up = windows(lim, now, work, work + upstream, 40)
    assert all(b >= a for a, b in itertools.pairwise(up))
    assert int(lim) > bottom
