"""Prometheus metrics: all declared in one module (families.py), each recorded where what it counts happens.

A request's summary (count, duration, overhead, upstream time, first token, tokens, its group's prompt and
cached tokens, a cache-affine choice, refusal) is recorded from its Exchange in one place, the edge's
middleware. The rest as they happen: retries and chunk gaps in
the pipeline (a stream's gaps marked by `Gaps`), admissions and the limit store's
calls in tenancy/, endpoint health in upstream/ (and on scrape), connections refused before any HTTP
in the edge, GC pauses and live tasks here.

With several worker processes, PROMETHEUS_MULTIPROC_DIR (set by the supervisor before any worker
starts) makes every worker write its values to shared files, and /metrics aggregates them.

Folded, as Envoy flushes its stats: what the event loop records through `child` (counters, histograms) is
kept in plain per-worker fields, a few attribute updates, and added to the metrics by `fold`: every
second (the app's `metrics-fold` task), before each scrape this worker serves, and at the end of a drain.
With several workers a scrape may miss another worker's last second; a worker killed with SIGKILL loses
at most its last second of counts. Recorded directly: gauges of the present (requests in flight, endpoint
health, the breaker), and what other threads count (the trace exporter's).

Labels stay bounded: `model` is a name some route serves (or "other"), never an arbitrary string; `group` a
configured group's name.

The histograms are our own collector (`histogram.py`), registered with prometheus-client and exposed as its
Histogram is, since it has no public way to add a bucket's count at once; nothing here reads or writes a
private field of prometheus-client's.

The package: every metric declared (`families.py`), the histograms added to in bulk (`histogram.py`), the
folding of what the event loop records (`folding.py`), the GC's pauses noted and recorded (`gcpauses.py`),
the exposition (`exposition.py`).
"""

from ingress.metrics.exposition import count_tasks, render, set_build_info
from ingress.metrics.families import (
    ADMISSIONS,
    AFFINITY_CHOICES,
    AFFINITY_MATCHED,
    BLOCKS,
    BREAKER_OPEN,
    BUILD,
    CACHE_COALESCED,
    CACHE_ERRORS,
    CACHE_EVICTIONS,
    CACHE_LOOKUPS,
    CACHE_STORES,
    CHUNK,
    CONCURRENCY_LIMIT,
    CONCURRENCY_REFUSED,
    CONCURRENCY_WAIT,
    CONCURRENCY_WAITING,
    CONVERSATION_ITEMS,
    CONVERSATIONS_CREATED,
    DURATION,
    ENDPOINT_HEALTHY,
    EVENT_LOOP_TASKS,
    GC_COLLECTIONS,
    GC_PAUSE,
    GROUP_TOKENS,
    HINTS_NOT_SENT,
    IN_FLIGHT,
    INTER_CHUNK,
    LATENCY,
    LEASES_EXPIRED,
    LEDGER_ERRORS,
    LIMITED,
    OVERHEAD,
    OVERHEAD_S,
    PAUSE,
    PROMPT_COUNTED,
    REJECTIONS,
    REQUESTS,
    RESPONSE_STORE_ERRORS,
    RESPONSE_STORE_EVICTIONS,
    RESPONSES_RESUMED,
    RESPONSES_STORED,
    RETRIES,
    ROUTE_ATTEMPTS,
    SPLITS,
    STORE_ERRORS,
    STORE_LATENCY,
    TOKENS,
    TOKENS_REFUNDED,
    TOKENS_RESERVED,
    TOKENS_SETTLED,
    TRACE_SPANS_DROPPED,
    TRACE_SPANS_EXPORTED,
    TTFT,
    UPSTREAM,
)
from ingress.metrics.folding import FoldedCounter, FoldedHistogram, Gaps, child, fold, inter_chunk_gaps
from ingress.metrics.gcpauses import GcRecorder, flush_gc, record_gc
from ingress.metrics.histogram import BulkHistogram

__all__ = [
    "ADMISSIONS",
    "AFFINITY_CHOICES",
    "AFFINITY_MATCHED",
    "BLOCKS",
    "BREAKER_OPEN",
    "BUILD",
    "CACHE_COALESCED",
    "CACHE_ERRORS",
    "CACHE_EVICTIONS",
    "CACHE_LOOKUPS",
    "CACHE_STORES",
    "CHUNK",
    "CONCURRENCY_LIMIT",
    "CONCURRENCY_REFUSED",
    "CONCURRENCY_WAIT",
    "CONCURRENCY_WAITING",
    "CONVERSATIONS_CREATED",
    "CONVERSATION_ITEMS",
    "DURATION",
    "ENDPOINT_HEALTHY",
    "EVENT_LOOP_TASKS",
    "GC_COLLECTIONS",
    "GC_PAUSE",
    "GROUP_TOKENS",
    "HINTS_NOT_SENT",
    "INTER_CHUNK",
    "IN_FLIGHT",
    "LATENCY",
    "LEASES_EXPIRED",
    "LEDGER_ERRORS",
    "LIMITED",
    "OVERHEAD",
    "OVERHEAD_S",
    "PAUSE",
    "PROMPT_COUNTED",
    "REJECTIONS",
    "REQUESTS",
    "RESPONSES_RESUMED",
    "RESPONSES_STORED",
    "RESPONSE_STORE_ERRORS",
    "RESPONSE_STORE_EVICTIONS",
    "RETRIES",
    "ROUTE_ATTEMPTS",
    "SPLITS",
    "STORE_ERRORS",
    "STORE_LATENCY",
    "TOKENS",
    "TOKENS_REFUNDED",
    "TOKENS_RESERVED",
    "TOKENS_SETTLED",
    "TRACE_SPANS_DROPPED",
    "TRACE_SPANS_EXPORTED",
    "TTFT",
    "UPSTREAM",
    "BulkHistogram",
    "FoldedCounter",
    "FoldedHistogram",
    "Gaps",
    "GcRecorder",
    "child",
    "count_tasks",
    "flush_gc",
    "fold",
    "inter_chunk_gaps",
    "record_gc",
    "render",
    "set_build_info",
]
