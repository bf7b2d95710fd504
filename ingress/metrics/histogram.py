"""A histogram added to in bulk: the folded histograms' collector, in place of prometheus-client's Histogram.

prometheus-client's Histogram takes one observation at a time (`observe`: a lock, and with several workers
a file write, each), and has no public way to add a bucket's count at once. The fold adds a second's
observations bucket by bucket, so the folded families are this collector instead, registered in the same
registry and exposed as a Histogram is: the same names, labels, buckets and samples (`_bucket` cumulative,
`_count`, `_sum`, `_created`), in the same order.

Each bucket's count and the sum are prometheus-client's value class (`prometheus_client.values.ValueClass`,
what its own metrics hold), keyed as a Histogram keys them. In one process that is a float under a lock,
read here by `collect`; with several workers (PROMETHEUS_MULTIPROC_DIR) it is an entry in this worker's
file, which the MultiProcessCollector behind /metrics reads and sums with every other worker's as it does
a Histogram's: it never calls `collect` here, and needs nothing else from this module.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Sequence

from prometheus_client import REGISTRY, CollectorRegistry, values
from prometheus_client.metrics_core import HistogramMetricFamily, Metric
from prometheus_client.utils import INF, floatToGoString

# As prometheus-client reads it for its own metrics' `_created` (at import; its runtime switch,
# disable_created_metrics(), is not seen here).
_CREATED = os.environ.get("PROMETHEUS_DISABLE_CREATED_SERIES", "False").lower() not in ("true", "1", "t")


class Series:
    """One label set's buckets (each bucket's own count, not cumulated) and sum."""

    __slots__ = ("bounds", "bucket_values", "created", "labels", "les", "sum_value")

    def __init__(self, family: BulkHistogram, labels: tuple[str, ...]) -> None:
        self.labels = labels
        self.bounds, self.les = family.bounds, family.les
        self.created = time.time()
        name, doc, names = family.name, family.documentation, family.labelnames
        self.sum_value = values.ValueClass("histogram", name, name + "_sum", names, labels, doc)
        self.bucket_values = [values.ValueClass("histogram", name, name + "_bucket", (*names, "le"), (*labels, le), doc)
                              for le in self.les]

    def add(self, counts: Sequence[int], total: float) -> None:
        """Add counts[i] observations to bucket i (the first bound >= each, as `observe` counts it), and
        their sum."""
        for value, n in zip(self.bucket_values, counts, strict=True):
            if n:
                value.inc(n)
        self.sum_value.inc(total)

    def observe(self, amount: float) -> None:
        """One observation, as prometheus-client's Histogram.observe counts it."""
        for value, bound in zip(self.bucket_values, self.bounds, strict=True):
            if amount <= bound:
                value.inc(1)
                break
        self.sum_value.inc(amount)

    def cumulative(self) -> list[tuple[str, float]]:
        """The `le` buckets as exposed: each the count of observations up to its bound."""
        acc, buckets = 0.0, []
        for value, le in zip(self.bucket_values, self.les, strict=True):
            acc += value.get()
            buckets.append((le, acc))
        return buckets


class BulkHistogram:
    """A histogram family (a prometheus-client collector): its series by label values, exposed as
    prometheus-client's Histogram of the same name, labels and buckets is."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = (), *,
                 buckets: Sequence[float], registry: CollectorRegistry | None = REGISTRY) -> None:
        bounds = [float(b) for b in buckets]
        if bounds != sorted(bounds):
            raise ValueError("Buckets not in sorted order")
        if not bounds or bounds[-1] != INF:
            bounds.append(INF)
        if len(bounds) < 2:
            raise ValueError("Must have at least two buckets")
        if bounds[0] < 0:  # a Histogram's exposition drops _sum then; HistogramMetricFamily's, _count too
            raise ValueError("A negative bucket is not supported here")
        if "le" in labelnames:
            raise ValueError("Invalid label metric name: le")
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.bounds = bounds
        self.les: list[str] = [floatToGoString(b) for b in bounds]  # type: ignore[no-untyped-call]  # unannotated upstream
        self._series: dict[tuple[str, ...], Series] = {}
        self._lock = threading.Lock()
        if not self.labelnames:
            self.labels()  # as a Histogram without labels, exposed from the start
        if registry is not None:
            registry.register(self)

    def labels(self, *labelvalues: str) -> Series:
        """The series of these label values (made, and exposed at zero, the first time)."""
        if len(labelvalues) != len(self.labelnames):
            raise ValueError(f"{self.name}: {len(self.labelnames)} label values expected, got {labelvalues!r}")
        found = self._series.get(labelvalues)
        if found is None:
            with self._lock:
                found = self._series.get(labelvalues)
                if found is None:
                    found = self._series[labelvalues] = Series(self, labelvalues)
        return found

    def describe(self) -> Iterable[Metric]:
        return [HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)]

    def collect(self) -> Iterable[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        with self._lock:
            series = list(self._series.values())
        for one in series:
            family.add_metric(one.labels, one.cumulative(), one.sum_value.get())
            if _CREATED:
                family.add_sample(self.name + "_created", dict(zip(self.labelnames, one.labels, strict=True)),
                                  one.created)
        return [family]
