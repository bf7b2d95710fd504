"""OpenTelemetry spans of the requests the edge serves, opt-in (`[tracing]`): without it nothing here runs,
and the request path pays one `is None` test.

A traced request is one trace of spans, named and attributed per OpenTelemetry's GenAI conventions:

    chat gpt-4o                 SERVER    the request, from its first byte to its last; parented on the
    │                                     caller's `traceparent`, else a new trace sampled by ratio
    ├── admission               INTERNAL  its limits' round trip to the store (a key and [tenancy] only)
    ├── attempt                 CLIENT    each send to an endpoint: a retry or a fallback is another one;
    │                                     its context is what the hop carries (the passport's traceparent
    │                                     and the header), so a service's or bridge's span is its child
    └── settle                  INTERNAL  the endpoint's slot let go, the reservation charged what was used

A span is a plain record (`Span`), encoded as it ends (`otlp.py`) into a bounded queue that a thread
sends in batches over OTLP/HTTP, never blocking a request; a span that finds the queue full, or whose batch
the collector refused or could not be reached for, is dropped and counted (`ingress_trace_spans_dropped_total`).
Why not the OpenTelemetry SDK on this path: its four spans of a request cost ~260 µs of CPU before any
encoding (bench/notes/tracing.md); these cost a tenth of that, encoding included. The W3C trace context,
sampling (parent-based, then by ratio) and the OTLP payload are the standard's; tests decode what is sent
with opentelemetry-proto. No span holds a prompt's or an answer's text unless its route opts in.

The package: the spans and a request's trace (`spans.py`), the thread that exports them (`export.py`), the
GenAI conventions' attributes (`genai.py`), the OTLP payload (`otlp.py`).
"""

from ingress.tracing.genai import OPERATIONS, error_type, provider_answered, provider_span, traced
from ingress.tracing.spans import RequestTrace, Span, Tracer

__all__ = ["OPERATIONS", "RequestTrace", "Span", "Tracer", "error_type", "provider_answered", "provider_span",
           "traced"]
