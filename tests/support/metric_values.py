"""A metric's value as prometheus-client holds it, once what the loop recorded has been folded in
(ingress/metrics/: the request path's counts reach prometheus-client every second and at a scrape)."""

from __future__ import annotations

from prometheus_client import REGISTRY

from ingress import metrics


def sample_value(name: str, labels: dict[str, str] | None = None) -> float | None:
    metrics.fold()
    return REGISTRY.get_sample_value(name, labels or {})
