"""A worker's self-tuning in-flight limit, from how long requests wait on the worker's own work (sans-I/O).

The limit is a TCP-Vegas-style estimate, as Netflix's concurrency-limits (`VegasLimit`, `Gradient2Limit`)
and Envoy's adaptive concurrency filter make one, with one change for a proxy: the latency it watches is
the edge's own time, a request's time in the worker less its time at the upstream. A model generating for
ten seconds is not the worker being slow; the worker's own queue is what grows past saturation, where
every request admitted waits behind the others' parsing, encoding and answering on one event loop.

Each window (at least `WINDOW_S` and `WINDOW_SAMPLES` requests) gives, by Little's law, the requests that
were on the worker's own work (being worked on, or waiting for the event loop behind the others) rather
than at the upstream:

    queue = in flight x mean own time / mean total time

Vegas subtracts what the pipe holds with no queue (in flight x minimum / mean); here that is the request
the event loop is running, at most one, and a minimum is not kept: a worker saturated from its start (or
for longer than any window a minimum is kept over) never shows it, and a minimum taken under load would
hold the limit high. The limit then moves towards the size that keeps that queue at `target`:

    limit x clamp(target / queue, 1 - MAX_DOWN, 1 + MAX_UP)

smoothed, within [min, max], and raised only when the window used at least half of it (a worker that is
not using its limit has shown nothing about a larger one).
"""

from __future__ import annotations

from dataclasses import dataclass

WINDOW_S = 0.1  # a window lasts at least this long...
WINDOW_SAMPLES = 16  # ...and holds at least this many requests
MAX_UP = 0.25  # a window raises the limit by at most this share...
MAX_DOWN = 0.25  # ...and lowers it by at most this one: a burst of another process's CPU reads as a queue
SMOOTHING = 0.5  # of the step towards the new size, the share taken


@dataclass(frozen=True)
class Window:
    """What one window measured, and the limit it left (for metrics and tests)."""

    samples: int
    queue: float
    limit: int


class ConcurrencyLimit:
    """The limit (`int(self)`): `observe` each finished request's own and total time with the number in
    flight when it ended; a `Window` is returned whenever the limit was worked out again."""

    __slots__ = ("_count", "_in_flight", "_limit", "_own", "_start", "_total", "_used", "max_limit", "min_limit",
                 "target")

    def __init__(self, *, initial: int, min_limit: int, max_limit: int, target: float) -> None:
        if not 1 <= min_limit <= max_limit:
            raise ValueError("the limits need 1 <= min_limit <= max_limit")
        self.min_limit, self.max_limit, self.target = min_limit, max_limit, target
        self._limit = float(min(max(initial, min_limit), max_limit))
        self._start: float | None = None
        self._count = 0
        self._own = self._total = 0.0
        self._in_flight = 0
        self._used = 0

    def __int__(self) -> int:
        return int(self._limit)

    def observe(self, own: float, total: float, in_flight: int, now: float) -> Window | None:
        """One request ended at `now` after `total` seconds (from its admission), `own` of them the worker's
        (not the upstream's), with `in_flight` requests admitted at the time (itself included)."""
        own = max(own, 0.0)
        total = max(total, own, 1e-9)
        if self._start is None:
            self._start = now
        self._count += 1
        self._own += own
        self._total += total
        self._in_flight += in_flight
        self._used = max(self._used, in_flight)
        if self._count < WINDOW_SAMPLES or now - self._start < WINDOW_S:
            return None
        return self._update(now)

    def _update(self, now: float) -> Window:
        n = self._count
        mean_in_flight = self._in_flight / n
        queue = mean_in_flight * self._own / self._total
        limit = self._limit
        gradient = min(max(self.target / queue, 1 - MAX_DOWN), 1 + MAX_UP) if queue > 0 else 1 + MAX_UP
        if gradient > 1 and self._used * 2 < limit:
            gradient = 1.0  # not using the limit: no evidence for a larger one
        new = limit + SMOOTHING * (limit * gradient - limit)
        if gradient > 1:
            new = max(new, limit + 1)  # a small limit still grows
        self._limit = min(max(new, float(self.min_limit)), float(self.max_limit))
        self._start, self._count, self._own, self._total, self._in_flight, self._used = now, 0, 0.0, 0.0, 0, 0
        return Window(samples=n, queue=queue, limit=int(self._limit))
