"""Choose an endpoint: power of two choices, weighted, least outstanding requests; healthy first. Or, for a
group with `balance = "round_robin"`, each healthy endpoint with room in turn, by weight (RoundRobin).

When every endpoint is ejected, the one with room whose ejection ends soonest is used ("panic" routing,
as Envoy does below its panic threshold): refusing all traffic would turn a partial outage into a full
one, and a real answer from a recovering endpoint beats a certain error.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from ingress.routing.health import EndpointState


def choose(endpoints: Sequence[EndpointState], now: float, rng: random.Random,
           exclude: frozenset[str] = frozenset()) -> EndpointState | None:
    """The endpoint to try next, or None when every candidate is full (the caller queues or refuses)."""
    eligible = [e for e in endpoints if e.url not in exclude]
    if not any(e.healthy(now) for e in eligible):  # panic: the soonest-recovering endpoint with room
        ejected = [e for e in eligible if e.has_room()]
        return min(ejected, key=lambda e: e.ejected_until) if ejected else None
    healthy = [e for e in eligible if e.healthy(now) and e.has_room()]
    if not healthy:
        return None  # healthy endpoints exist but are full: wait for one, never pick an ejected one
    if len(healthy) == 1:
        return healthy[0]
    weights = [e.weight for e in healthy]
    first, second = rng.choices(healthy, weights=weights, k=2)
    # Ties (always, when nothing is outstanding) keep the first pick, itself drawn by weight: the
    # traffic split follows the weights at low concurrency and the loads at high concurrency.
    return second if second.load() < first.load() else first


class RoundRobin:
    """One group's round robin on one worker: the healthy endpoints with room in turn, each as often as its
    weight, spread out (nginx's smooth weighted round robin: weights 5, 1, 1 give a a b a c a a). Blind to
    load, as a DNS or L4 balancer is; health, ejection (panic routing included), `max_in_flight` and
    exclusion as with choose()."""

    def __init__(self) -> None:
        self._current: dict[str, int] = {}  # each endpoint's running credit, by URL

    def choose(self, endpoints: Sequence[EndpointState], now: float,
               exclude: frozenset[str] = frozenset()) -> EndpointState | None:
        """The endpoint to try next, or None when every candidate is full (the caller queues or refuses)."""
        eligible = [e for e in endpoints if e.url not in exclude]
        if not any(e.healthy(now) for e in eligible):  # panic, as choose()
            ejected = [e for e in eligible if e.has_room()]
            return min(ejected, key=lambda e: e.ejected_until) if ejected else None
        candidates = [e for e in eligible if e.healthy(now) and e.has_room()]
        if not candidates:
            return None
        current = self._current
        best, total = candidates[0], 0
        for e in candidates:
            credit = current.get(e.url, 0) + e.weight
            current[e.url] = credit
            total += e.weight
            if credit > current[best.url]:
                best = e
        current[best.url] -= total
        return best
