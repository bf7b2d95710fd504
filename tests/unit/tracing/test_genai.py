"""ingress/tracing/genai.py: the GenAI conventions' prompt shape and error type, and a bridge's span around
its call to a provider: the child of the passport's context, or that context passed on when unsampled."""

from __future__ import annotations

import msgspec
import pytest

from ingress.encoding.requests import encode_request
from ingress.errors import RateLimited, UpstreamTimeout
from ingress.oai.codec import decode_chat_request
from ingress.oai.completions import decode_text_request
from ingress.oai.embeddings import decode_embedding_request
from ingress.settings import Tracing
from ingress.tracing import otlp
from ingress.tracing.genai import error_type, input_messages, provider_answered, provider_span, traced
from ingress.tracing.spans import Tracer
from ingress.wire.passport import Passport
from unit.tracing.conftest import Recording

CALLER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _chat(**fields: object) -> bytes:
    return msgspec.json.encode({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], **fields})


def test_a_chat_request_s_messages_are_its_roles_and_texts() -> None:
    request = decode_chat_request(_chat(messages=[
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]))

    assert input_messages(request) == [
        {"role": "system", "parts": [{"type": "text", "content": "be brief"}]},
        {"role": "user", "parts": [{"type": "text", "content": "ab"}]},
        {"role": "assistant", "parts": [{"type": "text", "content": ""}]}]


def test_prompts_and_inputs_are_user_messages_and_token_ids_their_list() -> None:
    text = decode_text_request(b'{"model": "m", "prompt": ["once", "twice"]}')
    ids = decode_text_request(b'{"model": "m", "prompt": [[1, 2], [3]]}')
    embeddings = decode_embedding_request(b'{"model": "e", "input": "hello"}')

    assert input_messages(text) == [{"role": "user", "parts": [{"type": "text", "content": "once"}]},
                                    {"role": "user", "parts": [{"type": "text", "content": "twice"}]}]
    assert [m["parts"][0]["content"] for m in input_messages(ids)] == ["[1, 2]", "[3]"]
    assert input_messages(embeddings) == [{"role": "user", "parts": [{"type": "text", "content": "hello"}]}]
    assert input_messages(object()) == []


def test_the_error_type_is_its_code_else_its_class() -> None:
    assert error_type(UpstreamTimeout("late")) == "upstream_timeout"
    assert error_type(RateLimited("slow", type_="tokens")) == "rate_limit_exceeded"
    assert error_type(ConnectionResetError()) == "ConnectionResetError"


def test_a_provider_span_is_the_child_of_the_passport_s_context(tracer: Recording) -> None:
    request = decode_chat_request(_chat())
    buf = bytes(encode_request(request, "r", Passport(traceparent=CALLER, tracestate="v=1"), "openai", "gpt-4o-mini"))
    headers: dict[str, str] = {}

    span = provider_span(tracer, buf, "openai", "api.openai.com", headers)
    assert span is not None
    provider_answered(span, 200, {"x-request-id": "req_" + "x" * 200})
    span.end()

    assert (span.name, span.kind, span.remote_parent) == ("chat gpt-4o-mini", otlp.KIND_CLIENT, True)
    assert span.traceparent[:36] == CALLER[:36] and f"{span.parent_id:016x}" == CALLER[36:52]
    assert headers == {"traceparent": span.traceparent, "tracestate": "v=1"}  # the engine continues from it
    assert span.attributes == {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
                               "gen_ai.request.model": "gpt-4o-mini", "server.address": "api.openai.com",
                               "http.response.status_code": 200, "ingress.provider.request_id": "req_" + "x" * 124}
    assert tracer.ended == [span]


@pytest.mark.parametrize(("traceparent", "headers"), [
    (CALLER[:-2] + "00", {"traceparent": CALLER[:-2] + "00", "tracestate": "v=1"}),  # the sender's, as it is
    (None, {}),  # no context, and the ratio says no
])
def test_an_unsampled_request_has_no_span(traceparent: str | None, headers: dict[str, str]) -> None:
    never = Tracer(Tracing(endpoint="http://127.0.0.1:9/v1/traces", sample_ratio=0.0, flush_interval=60.0))
    request = decode_chat_request(_chat())
    buf = bytes(encode_request(request, "r", Passport(traceparent=traceparent, tracestate="v=1")))
    sent: dict[str, str] = {}
    try:
        assert provider_span(never, buf, "anthropic", "api.anthropic.com", sent, "embeddings") is None
    finally:
        never.flush(0.1)
    assert sent == headers


def test_a_provider_span_is_named_for_its_operation_and_model(tracer: Recording) -> None:
    buf = bytes(encode_request(decode_chat_request(_chat()), "r", Passport(traceparent=CALLER)))
    headers: dict[str, str] = {}

    span = provider_span(tracer, buf, "openai", "localhost:8000", headers, "embeddings")

    assert span is not None and span.name == "embeddings gpt-4o" and headers == {"traceparent": span.traceparent}
    provider_answered(span, 503, {})
    assert "ingress.provider.request_id" not in span.attributes


@pytest.mark.parametrize(("path", "expected"), [
    ("/v1/chat/completions", ("chat", "/v1/chat/completions")),
    ("/v1/messages/count_tokens", ("count_tokens", "/v1/messages/count_tokens")),
    ("/v1beta/models/gemini-2.5-pro:generateContent", ("generate_content", "/v1beta/models/{model}:generateContent")),
    ("/v1beta/models/gemini-2.5-pro:streamGenerateContent",
     ("generate_content", "/v1beta/models/{model}:streamGenerateContent")),
    ("/v1/models/llama3:8b:countTokens", ("count_tokens", "/v1/models/{model}:countTokens")),
    ("/v1beta/models/gemini-embedding-001:batchEmbedContents",
     ("embeddings", "/v1beta/models/{model}:batchEmbedContents")),
    ("/v1beta/models/gemini-2.5-pro:predict", None),  # not served: a 404, untraced
    ("/v1beta/models/gemini-2.5-pro", None),
    ("/v1beta/models/:generateContent", None),
    ("/v1/models", None),
    ("/healthz", None),
])
def test_the_traced_paths_are_the_apis_and_googles_by_their_method(path: str,
                                                                   expected: tuple[str, str] | None) -> None:
    """Google's paths name the model: traced by the method after it, their http.route a template without it."""
    assert traced(path) == expected
