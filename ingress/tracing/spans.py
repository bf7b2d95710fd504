"""Spans and a request's trace: the span records, the tracer that samples and queues them (ended, encoded),
and one request's spans made from its stages and its Exchange's marks."""

from __future__ import annotations

import collections
import itertools
import os
import random
import time
from collections.abc import Mapping
from typing import Any

import msgspec

from ingress import metrics
from ingress.settings import Tracing
from ingress.tracing import otlp
from ingress.tracing.export import Exporter
from ingress.tracing.genai import ASKED, error_type, input_messages

_SPAN_ID = slice(36, 52)  # where a traceparent holds the parent's span id
SCOPE = "ingress"
_json = msgspec.json.Encoder()


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
        self._exporter = Exporter(config, headers, self._queue, self._prefix)

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
        for name, field in ASKED:
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

