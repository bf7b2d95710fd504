"""Every metric the edge exports, declared once: its name, help, labels, buckets and multiprocess mode.

The histograms are BulkHistograms (histogram.py): recorded only through `child` and the fold."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

from ingress.metrics.histogram import BulkHistogram

LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
OVERHEAD = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25)
CHUNK = (0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
PAUSE = (0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25)
BLOCKS = (0, 1, 2, 4, 8, 16, 32, 64)  # a prefix chain's blocks (ingress/wire/prefix.py: at most ~50 of the edge's)

REQUESTS = Counter("ingress_requests", "Requests by route, model and status.", ["route", "model", "status"])
DURATION = BulkHistogram("ingress_request_duration_seconds", "Total request latency.", ["route"], buckets=LATENCY)
OVERHEAD_S = BulkHistogram("ingress_overhead_seconds", "Time spent in the proxy, excluding the upstream.",
                           ["route"], buckets=OVERHEAD)
UPSTREAM = BulkHistogram("ingress_upstream_duration_seconds", "Upstream exchange time, send to last byte.",
                         ["group"], buckets=LATENCY)
TTFT = BulkHistogram("ingress_time_to_first_token_seconds", "Request start to the first streamed byte.", ["model"],
                     buckets=LATENCY)
INTER_CHUNK = BulkHistogram("ingress_inter_chunk_seconds", "Gap between two streamed chunks.", ["model"], buckets=CHUNK)
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
AFFINITY_MATCHED = BulkHistogram("ingress_affinity_matched_blocks", "A cache-affine choice's longest remembered "
                                 "chain of the request's prefix blocks (512 bytes of prompt each; 0: none), by group.",
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
# Stored responses and conversations (ingress/state): `backend` is memory or redis, `call` get, put or delete
# (a response's), create, read, update, append, remove or delete (a conversation's).
RESPONSES_STORED = Counter("ingress_responses_stored", "Responses kept for retrieval and previous_response_id "
                           "(store: true), by backend.", ["backend"])
RESPONSES_RESUMED = Counter("ingress_responses_resumed", "Streams of stored responses read again (GET "
                            "/v1/responses/{id}?stream=true), by backend and whether the response was still "
                            "running then.", ["backend", "running"])
RESPONSE_STORE_ERRORS = Counter("ingress_response_store_errors", "Calls to the response store that failed or "
                                "missed their deadline (each a 503 with Retry-After), and sealed values that did "
                                "not open (call \"open\": each read as none), by backend and call.",
                                ["backend", "call"])
CONVERSATIONS_CREATED = Counter("ingress_conversations_created", "Conversations made (POST /v1/conversations), "
                                "by backend.", ["backend"])
CONVERSATION_ITEMS = Counter("ingress_conversation_items_stored", "Items appended to conversations (given when "
                             "one is made, added, or a response's input and output items), by backend.", ["backend"])
RESPONSE_STORE_EVICTIONS = Counter("ingress_response_store_evictions", "Stored responses the memory backend dropped "
                                   "before their retention to stay within [responses] memory_bytes.", ["backend"])
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
STORE_LATENCY = BulkHistogram("ingress_limit_store_seconds", "Round trips to the limit store, by call.", ["call"],
                              buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1))
STORE_ERRORS = Counter("ingress_limit_store_errors", "Limit-store calls that failed, by call and reason.",
                       ["call", "reason"])
LEDGER_ERRORS = Counter("ingress_ledger_errors", "Spend ledger flushes the store did not take, by reason (timeout, "
                        "connection, error: sent again at the next flush; unwritten: rollups left at a stop).",
                        ["reason"])
BREAKER_OPEN = Gauge("ingress_limit_breaker_open", "1 while the limit store's circuit breaker is open.",
                     multiprocess_mode="livemax")
# The worker's in-flight limit (ingress/edge/overload.py): its size now, the requests waiting for a place
# under it, how long each waited, and those refused after waiting `max_wait_ms`.
CONCURRENCY_LIMIT = Gauge("ingress_concurrency_limit", "Requests a worker admits at once, as it tunes the limit "
                          "(summed over the workers).", multiprocess_mode="livesum")
CONCURRENCY_WAITING = Gauge("ingress_concurrency_waiting", "Requests waiting for a place under the in-flight limit.",
                            multiprocess_mode="livesum")
CONCURRENCY_WAIT = BulkHistogram("ingress_concurrency_wait_seconds", "How long requests waited for a place under the "
                                 "in-flight limit (those admitted at once: 0).", buckets=OVERHEAD)
CONCURRENCY_REFUSED = Counter("ingress_concurrency_refused", "Requests refused (503, Retry-After) after waiting "
                              "the longest wait for a place under the in-flight limit.")
GC_COLLECTIONS = Counter("ingress_gc_collections", "Garbage collections by generation.", ["generation"])
GC_PAUSE = BulkHistogram("ingress_gc_pause_seconds", "Garbage-collection pauses.", buckets=PAUSE)
# Read on scrape (not on the request path): with several workers, the sum of each live worker's count as
# of the last scrape it served.
EVENT_LOOP_TASKS = Gauge("ingress_event_loop_tasks", "Asyncio tasks alive in the event loop, counted on scrape: "
                         "a count that keeps growing at a steady load is a leak.", multiprocess_mode="livesum")
BUILD = Gauge("ingress_build_info", "Build information.", ["version", "python", "flatbuffers"],
              multiprocess_mode="max")
