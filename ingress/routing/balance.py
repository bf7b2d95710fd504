"""Choose an endpoint: power of two choices, weighted, least outstanding requests; healthy first.

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
