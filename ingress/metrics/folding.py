"""What the event loop records, folded (as Envoy flushes its stats): plain per-worker fields a child, added to
prometheus-client every second, before each scrape this worker serves, and at the end of a drain."""

from __future__ import annotations

import time
from bisect import bisect_left
from typing import Any, overload

from prometheus_client import Counter

from ingress.metrics.families import INTER_CHUNK
from ingress.metrics.histogram import BulkHistogram, Series


class Gaps:
    """One stream's gaps between chunks, each observed into the folded histogram (a bisect and two
    additions: the fold adds them to the histogram's buckets)."""

    __slots__ = ("_child", "_last")

    def __init__(self, child: FoldedHistogram) -> None:
        self._child = child
        self._last: float | None = None

    def mark(self, now: float) -> None:
        """A chunk went out at `now` (perf_counter)."""
        last, self._last = self._last, now
        if last is not None:
            self._child.observe(now - last)

    def sent(self, n: int) -> None:
        """n chunks went out now, together."""
        now = time.perf_counter()
        for _ in range(n):
            self.mark(now)


def inter_chunk_gaps(model: str) -> Gaps:
    """A stream's gaps, for INTER_CHUNK under `model` (a metric label: a name some route serves)."""
    return Gaps(child(INTER_CHUNK, model))

class _Folded:
    """A metric child's values since the last fold, in plain fields; queued for `fold` once touched."""

    __slots__ = ("queued", "target")

    def __init__(self, target: Any) -> None:
        self.target = target  # prometheus-client's child (or the metric, without labels)
        self.queued = False

    def _queue(self) -> None:
        self.queued = True
        _queued.append(self)

    def fold(self) -> None:
        raise NotImplementedError


class FoldedCounter(_Folded):
    __slots__ = ("amount",)

    def __init__(self, target: Any) -> None:
        super().__init__(target)
        self.amount = 0.0

    def inc(self, amount: float = 1) -> None:
        if amount < 0:  # as prometheus-client refuses it, here rather than at the fold
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        self.amount += amount
        if not self.queued:
            self._queue()

    def fold(self) -> None:
        self.queued = False
        amount, self.amount = self.amount, 0.0
        if amount:
            self.target.inc(amount)


class FoldedHistogram(_Folded):
    """Observations counted into the histogram's own buckets (the first bound >= the value, as `observe`
    counts it) and added to them at the fold, each bucket's count at once (BulkHistogram's `Series.add`)."""

    __slots__ = ("bounds", "counts", "sum")

    target: Series

    def __init__(self, target: Series) -> None:
        super().__init__(target)
        self.bounds = target.bounds
        self.counts = [0] * len(self.bounds)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value
        if not self.queued:
            self._queue()

    def fold(self) -> None:
        self.queued = False
        counts, self.counts = self.counts, [0] * len(self.bounds)
        total, self.sum = self.sum, 0.0
        self.target.add(counts, total)


@overload
def child(metric: Counter, *labels: str) -> FoldedCounter: ...
@overload
def child(metric: BulkHistogram, *labels: str) -> FoldedHistogram: ...
def child(metric: Counter | BulkHistogram, *labels: str) -> _Folded:
    """The folded child of `metric` for `labels` (the metric itself without labels), memoised:
    prometheus-client's labels() takes a lock and builds a tuple each call (~2 µs), and each of its
    increments takes a lock (a file's, with several workers); the request path records a dozen. Label
    values are bounded. For the event loop's thread only, and not for gauges (see the module's docstring)."""
    key = (metric, labels)
    found = _children.get(key)
    if found is None:
        if isinstance(metric, Counter):
            found = FoldedCounter(metric.labels(*labels) if labels else metric)
        else:
            found = FoldedHistogram(metric.labels(*labels))
        _children[key] = found
    return found


_children: dict[tuple[Counter | BulkHistogram, tuple[str, ...]], _Folded] = {}
_queued: list[_Folded] = []


def fold() -> None:
    """Add what the folded children recorded since the last fold to prometheus-client."""
    global _queued
    queued, _queued = _queued, []
    for folded in queued:
        folded.fold()
