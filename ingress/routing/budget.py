"""A retry budget (as in Finagle and Linkerd): retries stay a bounded share of traffic, so an outage
is never amplified by every client retrying at once. Pure: `now` is passed in."""

from __future__ import annotations


class RetryBudget:
    """Each request deposits `ratio` of a retry; each retry withdraws one; `min_per_s` trickle in over
    time so that light traffic can still retry. The balance is capped, so a quiet period banks little.

    It starts with its reserve, the minimum over the window (`min_per_s * window_s`), as Finagle's and
    Linkerd's do: an edge started a moment ago (each replica of a rolling deploy, each one an autoscaler
    adds) can retry and fall back at once, as an idle warm one can. The bound on a storm is the same for
    both: over any window, retries are at most the reserve plus `ratio` of the requests plus the trickle."""

    def __init__(self, ratio: float, min_per_s: float, now: float, window_s: float = 10.0) -> None:
        self._ratio = ratio
        self._min_per_s = min_per_s
        self._cap = max(10.0, min_per_s * window_s)
        self._balance = min_per_s * window_s
        self._last = now

    def _refill(self, now: float) -> None:
        elapsed = max(0.0, now - self._last)
        self._last = now
        self._balance = min(self._cap, self._balance + elapsed * self._min_per_s)

    def deposit(self, now: float) -> None:
        """Called once per request."""
        self._refill(now)
        self._balance = min(self._cap, self._balance + self._ratio)

    def withdraw(self, now: float) -> bool:
        """True when a retry may be made now."""
        self._refill(now)
        if self._balance >= 1.0:
            self._balance -= 1.0
            return True
        return False
