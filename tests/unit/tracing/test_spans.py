"""ingress/tracing/spans.py: a span's W3C context and its children, the tracer's sampling and bounded queue,
and one request's trace: the attempt's span id written into the hop, the request's attributes, its end."""

from __future__ import annotations

import msgspec
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from ingress.oai.codec import decode_chat_request
from ingress.settings import Tracing
from ingress.tracing import otlp
from ingress.tracing.spans import Tracer
from unit.tracing.conftest import Recording

CALLER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
UNSAMPLED = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"


def test_a_span_s_context_is_its_trace_its_own_id_and_its_flags(tracer: Recording) -> None:
    root = tracer.span("request", otlp.KIND_SERVER, None, None)
    child = root.child("attempt", otlp.KIND_CLIENT)

    assert root.traceparent == f"00-{root.trace_id:032x}-{root.span_id:016x}-01"
    assert (root.parent_id, root.remote_parent) == (0, False)  # a new trace's root
    assert (child.trace_id, child.parent_id, child.flags) == (root.trace_id, root.span_id, 1)
    assert child.span_id != root.span_id and child.traceparent.startswith(root.traceparent[:36])


def test_a_caller_s_span_is_the_remote_parent(tracer: Recording) -> None:
    span = tracer.span("request", otlp.KIND_SERVER, CALLER, "vendor=a")

    assert f"{span.trace_id:032x}" == CALLER[3:35] and f"{span.parent_id:016x}" == CALLER[36:52]
    assert (span.remote_parent, span.trace_state) == (True, "vendor=a")
    assert span.traceparent[:36] == CALLER[:36] and span.traceparent[36:52] != CALLER[36:52]


def test_sampling_follows_the_caller_s_flag_else_the_ratio() -> None:
    never = Tracer(Tracing(endpoint="http://127.0.0.1:9/v1/traces", sample_ratio=0.0, flush_interval=60.0))
    try:
        assert never.sampled(CALLER) and not never.sampled(UNSAMPLED)
        assert not any(never.sampled(None) for _ in range(100))
        assert never.begin(None, None) is None and never.begin(UNSAMPLED, None) is None
        trace = never.begin(CALLER, "k=v")
        assert trace is not None and trace.span.kind == otlp.KIND_SERVER and trace.tracestate == "k=v"
    finally:
        never.flush(2.0)


def test_an_ended_span_is_queued_encoded_and_a_full_queue_drops_it() -> None:
    tracer = Tracer(Tracing(endpoint="http://127.0.0.1:9/v1/traces", max_queue=2, flush_interval=60.0))
    try:
        spans = [tracer.span(f"s{i}", otlp.KIND_INTERNAL, None, None) for i in range(3)]
        spans[0].set_attribute("gen_ai.request.model", "gpt-4o")
        spans[0].add_event("first_token", 5)
        spans[1].fail("rate_limited", "x" * 300)
        for span in spans:
            span.end()

        queued = list(tracer._queue)
        sent = ExportTraceServiceRequest.FromString(otlp.export_encoded(tracer._prefix, queued))
    finally:
        tracer.flush(0.1)
    read = sent.resource_spans[0].scope_spans[0].spans
    assert [s.name for s in read] == ["s0", "s1"]  # the third found the queue full
    assert read[0].attributes[0].key == "gen_ai.request.model" and read[0].events[0].name == "first_token"
    assert read[1].status.code == otlp.STATUS_ERROR and len(read[1].status.message) == 200


def test_each_attempt_writes_its_own_span_id_into_the_hop(tracer: Recording) -> None:
    trace = tracer.begin(CALLER, "vendor=a")
    assert trace is not None
    buffer = b"head " + trace.traceparent.encode() + b" tail"
    headers: dict[str, str] = {}

    writable = trace.hop(buffer, headers)
    trace.attempt("main", "http://10.0.0.1:9000", 1, route="gpt")
    first = headers["traceparent"]
    trace.attempt("main", "http://10.0.0.2:9000", 2)
    second = headers["traceparent"]

    assert isinstance(writable, bytearray) and bytes(writable) == b"head " + second.encode() + b" tail"
    assert first[:36] == second[:36] == trace.traceparent[:36] and first != second
    assert headers["tracestate"] == "vendor=a"
    attempt = tracer.ended[0]  # the first attempt ended when the second began
    assert (attempt.name, attempt.kind, attempt.parent_id) == ("attempt", otlp.KIND_CLIENT, trace.span.span_id)
    assert attempt.attributes == {"server.address": "http://10.0.0.1:9000", "ingress.group": "main",
                                  "ingress.attempt": 1, "ingress.route": "gpt"}
    assert attempt.traceparent == first


def test_the_request_s_parameters_and_its_prompt_only_when_asked(tracer: Recording) -> None:
    request = decode_chat_request(msgspec.json.encode({
        "model": "gpt-4o", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 7,
        "temperature": 0.5, "stream": True}))
    quiet, loud = tracer.begin(None, None), tracer.begin(None, None)
    assert quiet is not None and loud is not None

    quiet.asked(request, "openai")
    loud.asked(request, "openai", content=True)
    quiet.answered("chatcmpl-1", ["stop"], ["hi there"])
    loud.answered("chatcmpl-2", ["stop"], ["hi there"])

    assert quiet.span.attributes == {"gen_ai.provider.name": "openai", "gen_ai.request.max_tokens": 7,
                                     "gen_ai.request.temperature": 0.5, "gen_ai.request.stream": True,
                                     "gen_ai.response.id": "chatcmpl-1", "gen_ai.response.finish_reasons": ["stop"]}
    assert msgspec.json.decode(loud.span.attributes["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "hello"}]}]
    assert msgspec.json.decode(loud.span.attributes["gen_ai.output.messages"]) == [
        {"role": "assistant", "parts": [{"type": "text", "content": "hi there"}], "finish_reason": "stop"}]


@pytest.mark.parametrize(("error", "status", "message"), [
    (None, otlp.STATUS_UNSET, ""),
    (("rate_limited", None), otlp.STATUS_UNSET, ""),  # a refusal is named, not a failure
    (("upstream_error", "the endpoint closed the connection"), otlp.STATUS_ERROR,
     "the endpoint closed the connection"),
])
def test_the_finished_request_is_named_and_failed_only_for_the_server_s_faults(
        tracer: Recording, error: tuple[str, str | None] | None, status: int, message: str) -> None:
    trace = tracer.begin(None, None)
    assert trace is not None
    trace.attempt("main", "http://10.0.0.1:9000", 1)

    trace.finish("chat gpt-4o", {"gen_ai.request.model": "gpt-4o"}, {"gen_ai.usage.input_tokens": 3},
                 first_token=None, attempt_error=None, attempt_end=None, error=error)

    attempt, server = tracer.ended
    assert attempt.name == "attempt" and server is trace.span and server.name == "chat gpt-4o"
    assert server.attributes["gen_ai.request.model"] == "gpt-4o"
    assert [name for name, _, _ in server.events] == ["usage"]
    assert (server.status, server.status_message) == (status, message)
    assert server.attributes.get("error.type") == (error[0] if error else None)
    assert server.end_ns >= server.start_ns > 0


def test_a_stage_already_run_becomes_a_child_at_its_marks(tracer: Recording) -> None:
    trace = tracer.begin(None, None)
    assert trace is not None

    trace.child("admission", 10.0, 10.25, {"ingress.tenant": "t"})

    [span] = tracer.ended
    assert (span.name, span.kind, span.parent_id) == ("admission", otlp.KIND_INTERNAL, trace.span.span_id)
    assert (span.start_ns, span.end_ns) == (trace.ns(10.0), trace.ns(10.25))
    assert span.end_ns - span.start_ns == 250_000_000

