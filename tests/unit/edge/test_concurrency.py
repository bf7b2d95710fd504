"""ConcurrencyLimit: the worker's in-flight limit follows the queue on its own work, within its bounds."""

from __future__ import annotations

import pytest

from ingress.edge.concurrency import MAX_DOWN, WINDOW_S, WINDOW_SAMPLES, ConcurrencyLimit, Window

UPSTREAM = 0.020  # each request's time at the upstream
WORK = 0.0005  # a request's own time with nothing ahead of it


class Feed:
    """Requests ending at a steady pace, each with `own` seconds of the worker's and UPSTREAM of the upstream."""

    def __init__(self, limit: ConcurrencyLimit) -> None:
        self.limit = limit
        self.now = 1000.0
        self.windows: list[Window] = []

    def window(self, own: float, in_flight: int | None = None) -> Window:
        """One whole window's requests (all at `in_flight`, by default the limit: the worker uses it all)."""
        n = WINDOW_SAMPLES
        for _ in range(2 * n):
            self.now += WINDOW_S / (n - 2)
            used = int(self.limit) if in_flight is None else in_flight
            if (found := self.limit.observe(own, own + UPSTREAM, used, self.now)) is not None:
                self.windows.append(found)
                return found
        raise AssertionError("two windows' worth of requests gave no update")


def limit(initial: int = 32, min_limit: int = 4, max_limit: int = 512, target: float = 8.0) -> ConcurrencyLimit:
    return ConcurrencyLimit(initial=initial, min_limit=min_limit, max_limit=max_limit, target=target)


def test_the_queue_a_window_reports_is_littles_law_over_the_own_time() -> None:
    feed = Feed(limit(initial=40))
    found = feed.window(WORK + 0.010, in_flight=40)
    # 40 in flight, each 10.5 ms of its 30.5 ms on the worker: 40 x 10.5 / 30.5 = 13.8 on the worker at a time
    assert found.queue == pytest.approx(40 * (WORK + 0.010) / (WORK + 0.010 + UPSTREAM))
    assert found.samples == WINDOW_SAMPLES


def test_no_update_before_a_window_has_both_its_time_and_its_requests() -> None:
    lim = limit()
    for i in range(WINDOW_SAMPLES - 1):
        assert lim.observe(WORK, WORK + UPSTREAM, 32, 1000.0 + i) is None  # long enough, too few requests
    lim = limit()
    for i in range(WINDOW_SAMPLES * 3):
        assert lim.observe(WORK, WORK + UPSTREAM, 32, 1000.0 + i * WINDOW_S / (WINDOW_SAMPLES * 4)) is None


def test_a_worker_with_no_queue_raises_its_limit_while_it_uses_it() -> None:
    feed = Feed(limit(initial=32))
    sizes = [feed.window(WORK).limit for _ in range(8)]
    assert sizes == sorted(sizes) and sizes[-1] > 32 * 1.5


def test_a_limit_not_used_is_not_raised() -> None:
    feed = Feed(limit(initial=32))
    assert {feed.window(WORK, in_flight=10).limit for _ in range(8)} == {32}


def test_a_growing_queue_lowers_the_limit_by_at_most_max_down_a_window() -> None:
    feed = Feed(limit(initial=256))
    feed.window(WORK)
    before = int(feed.limit)
    after = feed.window(0.100, in_flight=256).limit  # a queue of ~200 on the worker
    assert before * (1 - MAX_DOWN) <= after < before
    sizes = [feed.window(0.100).limit for _ in range(10)]
    assert sizes == sorted(sizes, reverse=True) and sizes[-1] < before / 4


def test_the_limit_settles_where_the_queue_is_the_target() -> None:
    """A worker whose own time grows with what it holds beyond 20 requests (each one more adds 1 ms for all):
    the limit settles where its queue is near the target, from below and from above."""
    def own(in_flight: int) -> float:
        return WORK + max(in_flight - 20, 0) * 0.001

    for start in (8, 400):
        feed = Feed(limit(initial=start))
        for _ in range(60):
            feed.window(own(int(feed.limit)))
        settled = feed.windows[-10:]
        assert min(w.limit for w in settled) > 20 and max(w.limit for w in settled) < 40, start
        assert all(2 < w.queue < 16 for w in settled), start


def test_limits_out_of_order_are_refused() -> None:
    with pytest.raises(ValueError):
        limit(min_limit=10, max_limit=5)
    with pytest.raises(ValueError):
        limit(min_limit=0)
    assert int(limit(initial=1000, max_limit=100)) == 100
    assert int(limit(initial=1, min_limit=4)) == 4
