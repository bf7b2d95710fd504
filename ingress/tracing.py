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

A span is a plain record (`Span`), encoded as it ends (`ingress/otlp.py`) into a bounded queue that a thread
sends in batches over OTLP/HTTP, never blocking a request; a span that finds the queue full, or whose batch
the collector refused or could not be reached for, is dropped and counted (`ingress_trace_spans_dropped_total`).
Why not the OpenTelemetry SDK on this path: its four spans of a request cost ~260 µs of CPU before any
encoding (bench/notes/tracing.md); these cost a tenth of that, encoding included. The W3C trace context,
sampling (parent-based, then by ratio) and the OTLP payload are the standard's; tests decode what is sent
with opentelemetry-proto. No span holds a prompt's or an answer's text unless its route opts in.
"""

from __future__ import annotations

import collections
import http.client
import itertools
import os
import random
import threading
import time
import urllib.parse
from collections.abc import Mapping
from typing import Any

import msgspec

from ingress import metrics, otlp
from ingress.log import get_logger
from ingress.settings import Tracing

# The endpoints traced, and each one's gen_ai.operation.name (the Responses and Messages APIs are chat
# with another shape: ingress.api names which).
OPERATIONS = {"/v1/chat/completions": "chat", "/v1/completions": "text_completion", "/v1/embeddings": "embeddings",
              "/v1/responses": "chat", "/v1/messages": "chat", "/v1/messages/count_tokens": "count_tokens"}
_SPAN_ID = slice(36, 52)  # where a traceparent holds the parent's span id
SCOPE = "ingress"
log = get_logger("ingress.tracing")


class Span:
    """One span, as the OTLP payload has it (`otlp.SpanData`): ids, times in Unix nanoseconds, attributes,
    events, status. Ended once, into its tracer's queue."""

    __slots__ = ("_traceparent", "attributes", "end_ns", "events", "flags", "kind", "name", "owner", "parent_id",
                 "remote_parent", "span_id", "start_ns", "status", "status_message", "trace_id", "trace_state")

    def __init__(self, owner: Tracer, name: str, kind: int, trace_id: int, parent_id: int, *, flags: int = 1,
                 trace_state: str | None = None, remote_parent: bool = False, start_ns: int | None = None,
                 attributes: dict[str, Any] | None = None) -> None:
        self.owner, self.name, self.kind = owner, name, kind
        self.trace_id, self.parent_id, self.span_id = trace_id, parent_id, random.getrandbits(64) or 1
        self.flags, self.trace_state, self.remote_parent = flags, trace_state, remote_parent
        self.start_ns = time.time_ns() if start_ns is None else start_ns
        self.end_ns = 0
        self.attributes: dict[str, Any] = attributes if attributes is not None else {}
        self.events: list[tuple[str, int, Mapping[str, Any]]] = []
        self.status, self.status_message = otlp.STATUS_UNSET, ""
        self._traceparent: str | None = None

    @property
    def traceparent(self) -> str:
        """The span's W3C context, as the hop and the passport carry it (asked up to three times a span)."""
        if self._traceparent is None:
            self._traceparent = f"00-{self.trace_id:032x}-{self.span_id:016x}-{self.flags:02x}"
        return self._traceparent

    def set_attribute(self, name: str, value: Any) -> None:
        self.attributes[name] = value

    def add_event(self, name: str, at_ns: int | None = None, attributes: Mapping[str, Any] | None = None) -> None:
        self.events.append((name, time.time_ns() if at_ns is None else at_ns, attributes or {}))

    def fail(self, error_type: str, description: str) -> None:
        self.attributes["error.type"] = error_type
        self.status, self.status_message = otlp.STATUS_ERROR, description[:200]

    def child(self, name: str, kind: int, **options: Any) -> Span:
        return Span(self.owner, name, kind, self.trace_id, self.span_id, flags=self.flags,
                    trace_state=self.trace_state, **options)

    def end(self, end_ns: int | None = None) -> None:
        self.end_ns = time.time_ns() if end_ns is None else end_ns
        self.owner.submit(self)


def _parent(traceparent: str) -> tuple[int, int, int]:
    """A well-formed traceparent's trace id, span id and flags."""
    return int(traceparent[3:35], 16), int(traceparent[36:52], 16), int(traceparent[53:55], 16)


class Tracer:
    """A worker's sampling, span queue and exporter; `begin` starts a request's trace, `span` any other."""

    def __init__(self, config: Tracing) -> None:
        self.ratio, self.config = config.sample_ratio, config
        self._queue: collections.deque[bytes] = collections.deque()  # ended spans, encoded
        self._prefix = otlp.resource_prefix({"service.name": config.service_name, "telemetry.sdk.language": "python",
                                             "telemetry.sdk.name": "ingress"}, SCOPE, _version())
        headers = {name: os.environ.get(env, "") for name, env in config.headers_env.items()}
        self._exporter = _Exporter(config, headers, self._queue, self._prefix)

    def sampled(self, traceparent: str | None) -> bool:
        """Whether a request is traced: as its caller's sampled flag says, else at the configured ratio.
        Decided before any span is made: an unsampled request costs one random number."""
        if traceparent is not None:
            return int(traceparent[53:55], 16) & 1 == 1
        return random.random() < self.ratio

    def span(self, name: str, kind: int, traceparent: str | None, tracestate: str | None,
             attributes: dict[str, Any] | None = None) -> Span:
        """A span started now: the child of `traceparent`'s span (another process's), else a new trace's root."""
        if traceparent is None:
            return Span(self, name, kind, random.getrandbits(128) or 1, 0, attributes=attributes)
        trace_id, parent_id, flags = _parent(traceparent)
        return Span(self, name, kind, trace_id, parent_id, flags=flags, trace_state=tracestate, remote_parent=True,
                    attributes=attributes)

    def begin(self, traceparent: str | None, tracestate: str | None) -> RequestTrace | None:
        """The request's server span, started now, as the child of the caller's span if it sent one; None
        when the request is not sampled."""
        if not self.sampled(traceparent):
            return None
        return RequestTrace(self.span("request", otlp.KIND_SERVER, traceparent, tracestate), tracestate)

    def submit(self, span: Span) -> None:
        """An ended span, encoded at once (in the event loop, a few µs: an export thread encoding batches
        held the interpreter's lock for milliseconds at a time, and the loop waited for it) and queued for
        the exporter; dropped and counted when the queue is full."""
        queue = self._queue
        if len(queue) >= self.config.max_queue:
            metrics.child(metrics.TRACE_SPANS_DROPPED, "queue_full").inc()
            return
        queue.append(otlp.span(span))
        if len(queue) >= self.config.max_batch:
            self._exporter.wake()

    def flush(self, timeout_s: float = 5.0) -> None:
        """Send what is queued (a drain's end), then stop the exporter: blocking, so run off the event loop."""
        self._exporter.stop(timeout_s)


def _version() -> str:
    from ingress import __version__

    return __version__


class _Exporter:
    """The thread that sends the queued spans: a batch every `flush_interval`, or as soon as `max_batch`
    are waiting; one POST of an ExportTraceServiceRequest each, on a kept-alive connection, within
    `export_timeout`. A batch that fails (an error status, no connection, too slow) is dropped and counted:
    the collector's absence must cost the edge nothing but its spans."""

    def __init__(self, config: Tracing, headers: dict[str, str], queue: collections.deque[bytes],
                 prefix: tuple[bytes, bytes]) -> None:
        url = urllib.parse.urlsplit(config.endpoint)
        self._https, self._host, self._port = url.scheme == "https", url.hostname or "", url.port
        self._path = url.path or "/v1/traces"
        self._headers = {"Content-Type": "application/x-protobuf", **headers}
        self._config, self._queue, self._prefix = config, queue, prefix
        self._event, self._stopping = threading.Event(), False
        self._connection: http.client.HTTPConnection | None = None
        self._sender = threading.Thread(target=self._run, name="ingress-trace-export", daemon=True)
        self._sender.start()

    def wake(self) -> None:
        if not self._event.is_set():
            self._event.set()

    def stop(self, timeout_s: float) -> None:
        self._stopping = True
        self._event.set()
        self._sender.join(timeout_s)

    def _run(self) -> None:
        interval, full = self._config.flush_interval, self._config.max_batch
        while True:
            self._event.wait(interval)
            self._event.clear()
            # What is queued, then whole batches only: the spans that arrive while a batch is sent wait for
            # the next interval or a full batch, not a POST each (which cost the loop a thread switch a span).
            self._send(self._batch())
            while len(self._queue) >= full or (self._stopping and self._queue):
                self._send(self._batch())
            if self._stopping:
                if self._connection is not None:
                    self._connection.close()
                return

    def _batch(self) -> list[bytes]:
        queue, batch = self._queue, []
        for _ in range(min(len(queue), self._config.max_batch)):
            batch.append(queue.popleft())
        return batch

    def _send(self, spans: list[bytes]) -> None:
        if not spans:
            return
        try:
            body = otlp.export_encoded(self._prefix, spans)
            connection = self._connection or self._connect()
            connection.request("POST", self._path, body, self._headers)
            response = connection.getresponse()
            response.read()
            ok = 200 <= response.status < 300
            if response.will_close or not ok:
                self._close()
        except Exception as exc:  # the collector unreachable, too slow, a fault: never the edge's
            self._close()
            ok = False
            log.debug("trace export failed", error=type(exc).__name__)
        if ok:
            metrics.TRACE_SPANS_EXPORTED.inc(len(spans))
        else:
            metrics.TRACE_SPANS_DROPPED.labels("export_failed").inc(len(spans))

    def _connect(self) -> http.client.HTTPConnection:
        kind = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        self._connection = kind(self._host, self._port, timeout=self._config.export_timeout)
        return self._connection

    def _close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


class RequestTrace:
    """One request's spans. The server span is live from `begin`; its children are made as their stages
    run, or after them from the Exchange's marks (perf_counter readings, placed on the wall clock by the
    offset taken when the trace began)."""

    __slots__ = ("_attempt", "_buffer", "_headers", "_offset", "_span_at", "content", "span", "tracestate")

    def __init__(self, span: Span, tracestate: str | None) -> None:
        self.span, self.tracestate = span, tracestate
        self._offset = time.time_ns() - time.perf_counter_ns()
        self._attempt: Span | None = None
        self._buffer: bytearray | None = None
        self._headers: dict[str, str] | None = None
        self._span_at: int | None = None
        self.content = False  # the route put the prompt on the span: the answer's text goes there too

    @property
    def traceparent(self) -> str:
        """What the hop carries before an attempt names itself: the server span's context."""
        return self.span.traceparent

    def ns(self, mark: float) -> int:
        """A perf_counter mark on the wall clock, in nanoseconds."""
        return int(mark * 1e9) + self._offset

    def hop(self, buffer: bytes | bytearray | None, headers: dict[str, str]) -> bytes | bytearray | None:
        """Where the hop's traceparent lives (the encoded request's passport, and its headers), for each
        attempt to write its own span id into; returns the buffer to send (made writable if it was not)."""
        self._headers = headers
        if buffer is None:
            return buffer
        writable = buffer if isinstance(buffer, bytearray) else bytearray(buffer)
        # The passport's traceparent is this span's, whose id is fresh and random: found by its bytes (a
        # memchr-speed search), where reading the passport through the flatbuffers runtime cost ~20 µs.
        at = writable.find(self.span.traceparent.encode())
        self._buffer, self._span_at = writable, at if at >= 0 else None
        return writable

    def asked(self, request: object, provider: str, content: bool = False) -> None:
        """What the decoded request asks, on the server span: its parameters, and (`content`: the route opted
        in) its prompt as it is sent, after the guardrails' redaction."""
        span = self.span
        span.set_attribute("gen_ai.provider.name", provider)
        for name, field in _ASKED:
            value = getattr(request, field, None)
            if value is not None and not isinstance(value, msgspec.UnsetType):
                span.set_attribute(name, value)
        if content:
            self.content = True
            span.set_attribute("gen_ai.input.messages", _json.encode(input_messages(request)).decode())

    def output(self, texts: list[str], finish_reasons: list[str]) -> None:
        """The answer's text, when the route opted in (`asked(content=True)`): one assistant message a choice."""
        if self.content:
            messages = [{"role": "assistant", "parts": [{"type": "text", "content": text}],
                         **({"finish_reason": finish} if finish else {})}
                        for text, finish in itertools.zip_longest(texts, finish_reasons[:len(texts)])]
            self.span.set_attribute("gen_ai.output.messages", _json.encode(messages).decode())

    def answered(self, response_id: str, finish_reasons: list[str], texts: list[str]) -> None:
        """A whole answer's id and why each choice ended, on the server span (and its text, if the route
        opted in)."""
        self.span.attributes.update({"gen_ai.response.id": response_id,
                                     "gen_ai.response.finish_reasons": finish_reasons})
        self.output(texts, finish_reasons)

    def attempt(self, group: str, endpoint: str, number: int, route: str | None = None) -> None:
        """An attempt begins: its span, and the hop names it as the parent of what the service does. `route`:
        the route of the chain that makes it (its name), and the model it sends."""
        self.end_attempt(None)
        attributes: dict[str, Any] = {"server.address": endpoint, "ingress.group": group, "ingress.attempt": number}
        if route is not None:
            attributes["ingress.route"] = route
        span = self._attempt = self.span.child("attempt", otlp.KIND_CLIENT, attributes=attributes)
        traceparent = span.traceparent
        if self._headers is not None:
            self._headers["traceparent"] = traceparent
            if self.tracestate:
                self._headers["tracestate"] = self.tracestate
        if self._buffer is not None and self._span_at is not None:
            self._buffer[self._span_at + _SPAN_ID.start:self._span_at + _SPAN_ID.stop] = traceparent[_SPAN_ID].encode()

    def end_attempt(self, error: BaseException | None, end: float | None = None) -> None:
        """The current attempt's span ends: failed with `error`, or (None) its part done."""
        span, self._attempt = self._attempt, None
        if span is None:
            return
        if error is not None:
            span.fail(error_type(error), str(getattr(error, "message", "")) or type(error).__name__)
        span.end(self.ns(end) if end is not None else None)

    def child(self, name: str, start: float, end: float, attributes: Mapping[str, Any] | None = None) -> None:
        """A child span of a stage already run, from its perf_counter marks."""
        span = self.span.child(name, otlp.KIND_INTERNAL, start_ns=self.ns(start),
                               attributes=dict(attributes) if attributes else None)
        span.end(self.ns(end))

    def finish(self, name: str, attributes: Mapping[str, Any], usage: Mapping[str, Any], *,
               first_token: float | None,
               attempt_error: BaseException | None, attempt_end: float | None,
               error: tuple[str, str | None] | None) -> None:
        """The request has ended: the server span gets its name and attributes, the time of its first
        token, and `error` (its type, and a description when it is the server's failure, which sets the
        span's status: a refusal of bad input or over a limit is the edge doing its job, only named)."""
        self.end_attempt(attempt_error, attempt_end)
        span = self.span
        span.name = name
        span.attributes.update(attributes)
        if first_token is not None:
            span.add_event("first_token", self.ns(first_token))
        span.add_event("usage", None, usage)
        if error is not None:
            kind, description = error
            if description is None:
                span.set_attribute("error.type", kind)
            else:
                span.fail(kind, description)
        span.end()


def provider_span(tracer: Tracer, buf: bytes, dialect: str, target: str, headers: dict[str, str],
                  operation: str = "chat") -> Span | None:
    """A bridge's span around its call to the engine or provider: the child of the span that sent the
    request (its passport's context, read in place), named for the operation ("chat", "embeddings") and
    model; `headers` (the engine request's) then carry its own context on, which vLLM and others continue.
    None when the request is not sampled: the engine is then told the sender's context as it is."""
    from ingress.wire.passport import model_name, trace_context

    traceparent, tracestate = trace_context(buf)
    if not tracer.sampled(traceparent):
        if traceparent:
            headers["traceparent"] = traceparent
            if tracestate:
                headers["tracestate"] = tracestate
        return None
    model = model_name(buf)
    span = tracer.span(f"{operation} {model}" if model else operation, otlp.KIND_CLIENT, traceparent, tracestate,
                       {"gen_ai.operation.name": operation, "gen_ai.provider.name": dialect,
                        "gen_ai.request.model": model, "server.address": target})
    headers["traceparent"] = span.traceparent
    if tracestate:
        headers["tracestate"] = tracestate
    return span


def provider_answered(span: Span, status: int, headers: Mapping[str, str]) -> None:
    """The provider's answer head, on its span: the status and the provider's own request id."""
    span.set_attribute("http.response.status_code", status)
    request_id = headers.get("request-id") or headers.get("x-request-id")
    if request_id:
        span.set_attribute("ingress.provider.request_id", request_id[:128])


# The request's parameters a span carries: (attribute, the decoded request's field), the first one set.
_ASKED = (("gen_ai.request.max_tokens", "max_completion_tokens"), ("gen_ai.request.max_tokens", "max_tokens"),
          ("gen_ai.request.temperature", "temperature"), ("gen_ai.request.top_p", "top_p"),
          ("gen_ai.request.seed", "seed"), ("gen_ai.request.stream", "stream"))


_json = msgspec.json.Encoder()


def input_messages(request: object) -> list[dict[str, Any]]:
    """A request's prompt in the GenAI conventions' input-messages shape: each message's role and text (a
    text completion's prompts and embeddings' inputs as user messages; token ids as their list)."""
    from ingress.encoding.requests import message_text
    from ingress.oai.chat import ROLES

    messages = getattr(request, "messages", None)
    if messages is not None:
        return [{"role": ROLES[type(m)], "parts": [{"type": "text", "content": message_text(m)}]} for m in messages]
    texts = getattr(request, "prompts", None) or getattr(request, "inputs", None) or []
    return [{"role": "user", "parts": [{"type": "text", "content": t if isinstance(t, str) else str(t)}]}
            for t in texts]


def error_type(error: BaseException) -> str:
    code = getattr(error, "code", None) or getattr(error, "type", None)
    return str(code) if code else type(error).__qualname__
