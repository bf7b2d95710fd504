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

The spans go to the OpenTelemetry SDK's batch processor: a bounded queue a thread exports over OTLP/HTTP,
never blocking a request; a span that finds the queue full, or whose batch the collector refused, is
dropped and counted (`ingress_trace_spans_dropped_total`). No span holds a prompt's or an answer's text.
"""

from __future__ import annotations

import itertools
import os
import random
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from ingress import metrics
from ingress.settings import Tracing
from ingress.wire.passport import traceparent_at

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span

# The endpoints traced, and each one's gen_ai.operation.name (the Responses and Messages APIs are chat
# with another shape: ingress.api names which).
OPERATIONS = {"/v1/chat/completions": "chat", "/v1/completions": "text_completion", "/v1/embeddings": "embeddings",
              "/v1/responses": "chat", "/v1/messages": "chat", "/v1/messages/count_tokens": "count_tokens"}
_SPAN_ID = slice(36, 52)  # where a traceparent holds the parent's span id


def tracing_problem() -> str | None:
    """Why spans could not be exported from this install, or None."""
    try:
        import opentelemetry.exporter.otlp.proto.http.trace_exporter
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError as exc:
        return f"the OpenTelemetry SDK is not installed ({exc.name}): pip install 'ingress[tracing]'"
    return None


def traceparent_of(span: Span) -> str:
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


class Tracer:
    """A worker's tracer provider, sampler and exporter; `begin` starts a request's trace."""

    def __init__(self, config: Tracing, exporter: SpanExporter | None = None) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.propagators.textmap import DefaultGetter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased
        from opentelemetry.trace import SpanKind
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        headers = {name: os.environ.get(env, "") for name, env in config.headers_env.items()}
        exporter = exporter or OTLPSpanExporter(endpoint=config.endpoint, headers=headers,
                                                timeout=config.export_timeout)
        self.provider = TracerProvider(resource=Resource.create({"service.name": config.service_name}),
                                       sampler=ParentBased(ALWAYS_ON))  # `sampled` decided before the SDK runs
        self.ratio = config.sample_ratio
        self.provider.add_span_processor(_batch(exporter, config))
        self.tracer = self.provider.get_tracer("ingress")
        self._propagator, self._getter = TraceContextTextMapPropagator(), DefaultGetter()
        self._server, self._client, self._internal = SpanKind.SERVER, SpanKind.CLIENT, SpanKind.INTERNAL

    def sampled(self, traceparent: str | None) -> bool:
        """Whether a request is traced: as its caller's sampled flag says, else at the configured ratio.
        Decided before any span is made: an unsampled request costs the SDK nothing."""
        if traceparent is not None:
            return int(traceparent[53:55], 16) & 1 == 1
        return random.random() < self.ratio

    def begin(self, traceparent: str | None, tracestate: str | None) -> RequestTrace | None:
        """The request's server span, started now, as the child of the caller's span if it sent one; None
        when the request is not sampled."""
        if not self.sampled(traceparent):
            return None
        carrier = {"traceparent": traceparent, "tracestate": tracestate} if traceparent else {}
        parent = self._propagator.extract(carrier) if carrier else None
        span = self.tracer.start_span("request", context=parent, kind=self._server)
        return RequestTrace(self, span, tracestate)

    def flush(self, timeout_s: float = 5.0) -> None:
        """Export what is queued (a drain's end), then stop: blocking, so run off the event loop."""
        self.provider.force_flush(int(timeout_s * 1000))
        self.provider.shutdown()


class RequestTrace:
    """One request's spans. The server span is live from `begin`; its children are made as their stages
    run, or after them from the Exchange's marks (perf_counter readings, placed on the wall clock by the
    offset taken when the trace began)."""

    __slots__ = ("_attempt", "_buffer", "_headers", "_offset", "_span_at", "content", "owner", "span", "tracestate")

    def __init__(self, owner: Tracer, span: Span, tracestate: str | None) -> None:
        self.owner, self.span, self.tracestate = owner, span, tracestate
        self._offset = time.time_ns() - time.perf_counter_ns()
        self._attempt: Span | None = None
        self._buffer: bytearray | None = None
        self._headers: dict[str, str] | None = None
        self._span_at: int | None = None
        self.content = False  # the route put the prompt on the span: the answer's text goes there too

    @property
    def recording(self) -> bool:
        return self.span.is_recording()

    @property
    def traceparent(self) -> str:
        """What the hop carries before an attempt names itself: the server span's context."""
        return traceparent_of(self.span)

    def ns(self, mark: float) -> int:
        """A perf_counter mark on the wall clock, in nanoseconds."""
        return int(mark * 1e9) + self._offset

    def hop(self, buffer: bytes | bytearray | None, headers: dict[str, str]) -> bytes | bytearray | None:
        """Where the hop's traceparent lives (the encoded request's passport, and its headers), for each
        attempt to write its own span id into; returns the buffer to send (made writable if it was not)."""
        self._headers = headers
        if buffer is None or not self.recording:
            return buffer
        writable = buffer if isinstance(buffer, bytearray) else bytearray(buffer)
        self._buffer, self._span_at = writable, traceparent_at(writable)  # read in place
        return writable

    def asked(self, request: object, provider: str, content: bool = False) -> None:
        """What the decoded request asks, on the server span: its parameters, and (`content`: the route opted
        in) its prompt as it is sent, after the guardrails' redaction."""
        if not self.recording:
            return
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
        if self.content and self.recording:
            messages = [{"role": "assistant", "parts": [{"type": "text", "content": text}],
                         **({"finish_reason": finish} if finish else {})}
                        for text, finish in itertools.zip_longest(texts, finish_reasons[:len(texts)])]
            self.span.set_attribute("gen_ai.output.messages", _json.encode(messages).decode())

    def answered(self, response_id: str, finish_reasons: list[str], texts: list[str]) -> None:
        """A whole answer's id and why each choice ended, on the server span (and its text, if the route
        opted in)."""
        if self.recording:
            self.span.set_attributes({"gen_ai.response.id": response_id,
                                      "gen_ai.response.finish_reasons": finish_reasons})
            self.output(texts, finish_reasons)

    def attempt(self, group: str, endpoint: str, number: int) -> None:
        """An attempt begins: its span, and the hop names it as the parent of what the service does."""
        self.end_attempt(None)
        from opentelemetry.trace import set_span_in_context

        span = self._attempt = self.owner.tracer.start_span(
            "attempt", context=set_span_in_context(self.span), kind=self.owner._client,
            attributes={"server.address": endpoint, "ingress.group": group, "ingress.attempt": number})
        if not span.is_recording():
            return
        traceparent = traceparent_of(span)
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
            fail(span, error_type(error), str(getattr(error, "message", "")) or type(error).__name__)
        span.end(self.ns(end) if end is not None else None)

    def child(self, name: str, start: float, end: float, attributes: Mapping[str, Any] | None = None) -> None:
        """A child span of a stage already run, from its perf_counter marks."""
        if not self.recording:
            return
        from opentelemetry.trace import set_span_in_context

        span = self.owner.tracer.start_span(name, context=set_span_in_context(self.span),
                                            kind=self.owner._internal, attributes=attributes,
                                            start_time=self.ns(start))
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
        if not span.is_recording():
            return
        span.update_name(name)
        span.set_attributes(attributes)
        if first_token is not None:
            span.add_event("first_token", timestamp=self.ns(first_token))
        span.add_event("usage", attributes=usage)
        if error is not None:
            error_type, description = error
            if description is None:
                span.set_attribute("error.type", error_type)
            else:
                fail(span, error_type, description)
        span.end()


def provider_span(tracer: Tracer, buf: bytes, dialect: str, target: str, headers: dict[str, str]) -> Span | None:
    """A bridge's span around its call to the engine or provider: the child of the span that sent the
    request (its passport's context, read in place), named for the operation and model; `headers` (the
    engine request's) then carry its own context on, which vLLM and others continue. None when the
    request is not sampled: the engine is then told the sender's context as it is."""
    from ingress.wire.decode import read_request
    from ingress.wire.passport import trace_context

    traceparent, tracestate = trace_context(buf)
    if not tracer.sampled(traceparent):
        if traceparent:
            headers["traceparent"] = traceparent
            if tracestate:
                headers["tracestate"] = tracestate
        return None
    carrier = {"traceparent": traceparent, "tracestate": tracestate or ""} if traceparent else {}
    parent = tracer._propagator.extract(carrier) if carrier else None
    model = (read_request(buf).ModelName() or b"").decode("utf-8", "replace")
    span = tracer.tracer.start_span(f"chat {model}" if model else "chat", context=parent, kind=tracer._client,
                                    attributes={"gen_ai.operation.name": "chat", "gen_ai.provider.name": dialect,
                                                "gen_ai.request.model": model, "server.address": target})
    if span.is_recording() or traceparent:
        headers["traceparent"] = traceparent_of(span)
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
    from ingress.oai.chat import ROLES
    from ingress.wire.encode import message_text

    messages = getattr(request, "messages", None)
    if messages is not None:
        return [{"role": ROLES[type(m)], "parts": [{"type": "text", "content": message_text(m)}]} for m in messages]
    texts = getattr(request, "prompts", None) or getattr(request, "inputs", None) or []
    return [{"role": "user", "parts": [{"type": "text", "content": t if isinstance(t, str) else str(t)}]}
            for t in texts]


def error_type(error: BaseException) -> str:
    code = getattr(error, "code", None) or getattr(error, "type", None)
    return str(code) if code else type(error).__qualname__


def fail(span: Span, error_type: str, description: str) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("error.type", error_type)
    span.set_status(Status(StatusCode.ERROR, description[:200]))


def _batch(exporter: SpanExporter, config: Tracing) -> Any:
    """The SDK's batch processor, counting the spans it drops: when its queue is full, and a batch the
    collector refused or could not be reached for (the SDK's exporter has retried within its timeout)."""
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Counted(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            try:
                result = exporter.export(spans)
            except Exception:  # an exporter's bug must not stop the thread that exports
                result = SpanExportResult.FAILURE
            if result == SpanExportResult.SUCCESS:
                metrics.TRACE_SPANS_EXPORTED.inc(len(spans))
            else:
                metrics.TRACE_SPANS_DROPPED.labels("export_failed").inc(len(spans))
            return result

        def shutdown(self) -> None:
            exporter.shutdown()

        def force_flush(self, timeout_millis: int = 30_000) -> bool:
            return exporter.force_flush(timeout_millis)

    class Batch(BatchSpanProcessor):
        def on_end(self, span: ReadableSpan) -> None:
            queue = getattr(getattr(self, "_batch_processor", None), "_queue", None)  # the SDK's, bounded
            if queue is not None and len(queue) >= config.max_queue:
                metrics.TRACE_SPANS_DROPPED.labels("queue_full").inc()
            super().on_end(span)

    return Batch(Counted(), max_queue_size=config.max_queue, max_export_batch_size=config.max_batch,
                 schedule_delay_millis=config.flush_interval * 1000,
                 export_timeout_millis=config.export_timeout * 1000)
