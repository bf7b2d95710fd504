"""Choose an endpoint: power of two choices, weighted, least outstanding requests; healthy first.

When every endpoint with room is ejected, the one whose ejection ends soonest is used ("panic" routing,
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
    candidates = [e for e in endpoints if e.url not in exclude and e.has_room()]
    if not candidates:
        return None
    healthy = [e for e in candidates if e.healthy(now)]
    if not healthy:
        return min(candidates, key=lambda e: e.ejected_until)
    if len(healthy) == 1:
        return healthy[0]
    weights = [e.weight for e in healthy]
    first, second = rng.choices(healthy, weights=weights, k=2)
    # Ties (always, when nothing is outstanding) keep the first pick, itself drawn by weight: the
    # traffic split follows the weights at low concurrency and the loads at high concurrency.
    return second if second.load() < first.load() else first
