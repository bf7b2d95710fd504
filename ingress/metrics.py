"""Prometheus metrics: all defined here, each recorded where what it counts happens.

A request's summary (count, duration, overhead, upstream time, first token, tokens, its group's prompt and
cached tokens, a cache-affine choice, refusal) is recorded from its Exchange in one place, the edge's
middleware. The rest as they happen: retries and chunk gaps in
the pipeline (a stream's gaps marked by `Gaps`), admissions and the limit store's
calls in tenancy/, endpoint health in upstream/ (and on scrape), connections refused before any HTTP
in the edge, GC pauses and live tasks here.

With several worker processes, PROMETHEUS_MULTIPROC_DIR (set by the supervisor before any worker
starts) makes every worker write its values to shared files, and /metrics aggregates them.

Folded, as Envoy flushes its stats: what the event loop records through `child` (counters, histograms) is
kept in plain per-worker fields, a few attribute updates, and added to prometheus-client by `fold`: every
second (the app's `metrics-fold` task), before each scrape this worker serves, and at the end of a drain.
With several workers a scrape may miss another worker's last second; a worker killed with SIGKILL loses
at most its last second of counts. Recorded directly: gauges of the present (requests in flight, endpoint
health, the breaker), and what other threads count (the trace exporter's).

Labels stay bounded: `model` is a name some route serves (or "other"), never an arbitrary string; `group` a
configured group's name.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import platform
import time
from bisect import bisect_left
from importlib import metadata
from typing import Any, overload

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.metrics import MetricWrapperBase

LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
OVERHEAD = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25)
CHUNK = (0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
PAUSE = (0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25)
BLOCKS = (0, 1, 2, 4, 8, 16, 32, 64)  # a prefix chain's blocks (ingress/wire/prefix.py: at most ~50 of the edge's)

REQUESTS = Counter("ingress_requests", "Requests by route, model and status.", ["route", "model", "status"])
DURATION = Histogram("ingress_request_duration_seconds", "Total request latency.", ["route"], buckets=LATENCY)
OVERHEAD_S = Histogram("ingress_overhead_seconds", "Time spent in the proxy, excluding the upstream.", ["route"],
                       buckets=OVERHEAD)
UPSTREAM = Histogram("ingress_upstream_duration_seconds", "Upstream exchange time, send to last byte.", ["group"],
                     buckets=LATENCY)
TTFT = Histogram("ingress_time_to_first_token_seconds", "Request start to the first streamed byte.", ["model"],
                 buckets=LATENCY)
INTER_CHUNK = Histogram("ingress_inter_chunk_seconds", "Gap between two streamed chunks.", ["model"], buckets=CHUNK)
IN_FLIGHT = Gauge("ingress_in_flight", "Requests in progress.", multiprocess_mode="livesum")
TOKENS = Counter("ingress_tokens", "Tokens by model and kind (prompt, completion).", ["model", "kind"])
ENDPOINT_HEALTHY = Gauge("ingress_upstream_endpoint_healthy", "1 when an endpoint may be chosen.",
                         ["group", "endpoint"], multiprocess_mode="livemax")
# Cache-affine groups (ingress/routing/affinity.py): `group` is a configured group's name, `way` one of Way's
# five. One choice a request: its last attempt's.
AFFINITY_CHOICES = Counter("ingress_affinity_choices", "Cache-affine choices by group and way: hit (where the "
                           "prefix was last served), hashed (rendezvous hashing of the conversation), affinity_key "
                           "(the client's key, hashed), overridden_by_load (the preferred endpoint full or above the "
                           "load bound), balanced (nothing to go by: as P2C).", ["group", "way"])
AFFINITY_MATCHED = Histogram("ingress_affinity_matched_blocks", "A cache-affine choice's longest remembered chain "
                             "of the request's prefix blocks (512 bytes of prompt each; 0: none), by group.",
                             ["group"], buckets=BLOCKS)
GROUP_TOKENS = Counter("ingress_upstream_tokens", "Prompt tokens the services reported, by group and kind: prompt, "
                       "and cached (of them, read from the service's prefix cache). Cached over prompt is the hit "
                       "ratio the group's choice buys.", ["group", "kind"])
RETRIES = Counter("ingress_retries", "Requests sent again to another endpoint or the fallback group.", ["group"])
ROUTE_ATTEMPTS = Counter("ingress_route_attempts", "Attempts by the route of a fallback chain that made them "
                         "(its name) and outcome: ok, the class of failure that moved the request on (or ended it), "
                         "error (a failure that never moves), skipped (a fallback route the request cannot go to).",
                         ["route", "outcome"])
SPLITS = Counter("ingress_split_requests", "Requests a split route sent to each of its variants.", ["route", "variant"])
REJECTIONS = Counter("ingress_rejections", "Requests refused by the edge, by reason.", ["reason"])
HINTS_NOT_SENT = Counter("ingress_hints_not_sent", "Processing hints of Messages and Responses requests "
                         "(cache_control TTLs, context_management, earlier thinking, client_metadata, OpenAI's "
                         "built-in tools...) not sent to a service that has no use for them, and late system "
                         "messages folded into user turns, by hint.", ["hint"])
CACHE_LOOKUPS = Counter("ingress_response_cache_lookups", "Requests to a route with a response cache, by route and "
                        "outcome: hit (served from the cache), miss (sent; its answer stored if it completes), "
                        "bypass (not cacheable: no-store, or not deterministic).", ["route", "outcome"])
CACHE_COALESCED = Counter("ingress_cache_coalesced", "Requests to a route with a response cache answered with "
                          "the answer of an identical request already in flight in the same worker (each also a "
                          "hit), by route.", ["route"])
CACHE_STORES = Counter("ingress_response_cache_stores", "Answers stored in the response cache, by backend.",
                       ["backend"])
CACHE_EVICTIONS = Counter("ingress_response_cache_evictions", "Entries the memory backend dropped before their TTL "
                          "to stay within [cache] memory_bytes.", ["backend"])
CACHE_ERRORS = Counter("ingress_response_cache_errors", "Calls to a response-cache store that failed or missed "
                       "their deadline (each a miss, never an error), by backend and call.", ["backend", "call"])
TRACE_SPANS_EXPORTED = Counter("ingress_trace_spans_exported", "Spans the collector accepted ([tracing]).")
TRACE_SPANS_DROPPED = Counter("ingress_trace_spans_dropped", "Spans not exported, by reason: queue_full (the "
                              "collector slower than the spans come) or export_failed (refused or unreachable).",
                              ["reason"])
# Tenancy. `tenant` is a configured tenant's name (bounded by the configuration).
ADMISSIONS = Counter("ingress_admissions", "Admission decisions by tenant and outcome (admitted, limited, "
                     "degraded_local, degraded_allow, degraded_refuse).", ["tenant", "outcome"])
LIMITED = Counter("ingress_limited", "Requests refused by a limit, by tenant, the limit's owner (key, tenant, model) "
                  "and kind (requests, tokens, input_tokens, output_tokens, concurrency, budget).",
                  ["tenant", "scope", "kind"])
PROMPT_COUNTED = Counter("ingress_prompt_tokens_counted", "Prompt tokens as the edge counted them, of requests "
                         "whose usage came: against ingress_tokens_total{kind=\"prompt\"}, the count's accuracy.",
                         ["model"])
TOKENS_RESERVED = Counter("ingress_tokens_reserved", "Tokens reserved at admission (the estimate).", ["tenant"])
TOKENS_SETTLED = Counter("ingress_tokens_settled", "Tokens charged when requests settled (the usage).", ["tenant"])
TOKENS_REFUNDED = Counter("ingress_tokens_refunded", "Reserved tokens given back when requests settled.", ["tenant"])
LEASES_EXPIRED = Counter("ingress_leases_expired", "Concurrency leases that expired unrenewed (a worker died).")
STORE_LATENCY = Histogram("ingress_limit_store_seconds", "Round trips to the limit store, by call.", ["call"],
                          buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1))
STORE_ERRORS = Counter("ingress_limit_store_errors", "Limit-store calls that failed, by call and reason.",
                       ["call", "reason"])
BREAKER_OPEN = Gauge("ingress_limit_breaker_open", "1 while the limit store's circuit breaker is open.",
                     multiprocess_mode="livemax")
GC_COLLECTIONS = Counter("ingress_gc_collections", "Garbage collections by generation.", ["generation"])
GC_PAUSE = Histogram("ingress_gc_pause_seconds", "Garbage-collection pauses.", buckets=PAUSE)
# Read on scrape (not on the request path): with several workers, the sum of each live worker's count as
# of the last scrape it served.
EVENT_LOOP_TASKS = Gauge("ingress_event_loop_tasks", "Asyncio tasks alive in the event loop, counted on scrape: "
                         "a count that keeps growing at a steady load is a leak.", multiprocess_mode="livesum")
BUILD = Gauge("ingress_build_info", "Build information.", ["version", "python", "flatbuffers"],
              multiprocess_mode="max")


class Gaps:
    """One stream's gaps between chunks, each observed into the folded histogram (a bisect and two
    additions: the fold adds them to prometheus-client's buckets)."""

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
    counts it) and added to them at the fold: prometheus-client keeps them apart, not cumulated."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, target: Any) -> None:
        super().__init__(target)
        self.bounds: list[float] = target._upper_bounds
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
        for bucket, n in zip(self.target._buckets, counts, strict=True):
            if n:
                bucket.inc(n)
        self.target._sum.inc(self.sum)
        self.sum = 0.0


@overload
def child(metric: Counter, *labels: str) -> FoldedCounter: ...
@overload
def child(metric: Histogram, *labels: str) -> FoldedHistogram: ...
def child(metric: Counter | Histogram, *labels: str) -> _Folded:
    """The folded child of `metric` for `labels` (the metric itself without labels), memoised:
    prometheus-client's labels() takes a lock and builds a tuple each call (~2 µs), and each of its
    increments takes a lock (a file's, with several workers); the request path records a dozen. Label
    values are bounded. For the event loop's thread only, and not for gauges (see the module's docstring)."""
    key = (metric, labels)
    found = _children.get(key)
    if found is None:
        target = metric.labels(*labels) if labels else metric
        found = _children[key] = FoldedCounter(target) if isinstance(metric, Counter) else FoldedHistogram(target)
    return found


_children: dict[tuple[MetricWrapperBase, tuple[str, ...]], _Folded] = {}
_queued: list[_Folded] = []


def fold() -> None:
    """Add what the folded children recorded since the last fold to prometheus-client."""
    global _queued
    queued, _queued = _queued, []
    for folded in queued:
        folded.fold()


def set_build_info() -> None:
    from ingress import __version__

    BUILD.labels(__version__, platform.python_version(), metadata.version("flatbuffers")).set(1)


class GcRecorder:
    """A gc.callbacks hook feeding the GC metrics.

    A collection starts inside whatever allocation crosses the threshold, and prometheus-client's locks are
    not reentrant: a collection started while this thread held one (in multiprocess mode one lock guards
    every value, and creating a labelled child allocates under it) would block on it forever if the hook
    updated a metric. So the hook only notes the pause, and `flush()` records what it noted from ordinary
    code: every second (the app's `metrics-fold` task) and before each scrape."""

    def __init__(self) -> None:
        self._started = 0.0
        self.pending: list[tuple[int, float]] = []  # (generation, seconds paused), not yet recorded

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        self.pending.append((info["generation"], time.perf_counter() - self._started))

    def flush(self) -> None:
        if not self.pending:
            return
        pending, self.pending = self.pending, []  # a collection during the updates notes into the new list
        for generation, seconds in pending:
            child(GC_PAUSE).observe(seconds)
            child(GC_COLLECTIONS, str(generation)).inc()


_gc_recorder: GcRecorder | None = None


def record_gc() -> None:
    """Feed the GC metrics from this process's collections (once per process)."""
    global _gc_recorder
    if _gc_recorder is None:
        _gc_recorder = GcRecorder()
        gc.callbacks.append(_gc_recorder)


def flush_gc() -> None:
    """Record the collections noted since the last flush (see GcRecorder)."""
    if _gc_recorder is not None:
        _gc_recorder.flush()


def count_tasks() -> None:
    """Set EVENT_LOOP_TASKS from the running loop (none running: left as it was)."""
    with contextlib.suppress(RuntimeError):  # no running event loop
        EVENT_LOOP_TASKS.set(len(asyncio.all_tasks()))


def render() -> tuple[bytes, str]:
    """The exposition text: this process's metrics, or every worker's when running several."""
    count_tasks()
    flush_gc()
    fold()
    if "PROMETHEUS_MULTIPROC_DIR" in os.environ:
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]  # unannotated upstream
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(), CONTENT_TYPE_LATEST
