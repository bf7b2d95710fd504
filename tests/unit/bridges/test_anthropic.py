"""The Anthropic dialect (ingress/bridges/anthropic.py), without a socket: chat requests → Messages API
requests, every field mapped or refused; the recorded answers, streams and refusals of
tests/fixtures/anthropic/ (the ones the official SDK reads through the fake) → our answers and chunks,
for any split of the bytes."""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec
import pytest
from bad_requests import assert_nested_too_deeply, deep_buffer
from fakes.anthropic import fixture
from hypothesis import given, settings
from hypothesis import strategies as st

from ingress import wire
from ingress.bridges import anthropic_request
from ingress.bridges.anthropic import AnthropicDialect
from ingress.bridges.dialect import EngineFailed, Target, Unsupported
from ingress.encoding.requests import encode_messages_request, encode_request, encode_text_request
from ingress.oai import chat
from ingress.oai.codec import decode_chat_request
from ingress.oai.completions import TextCompletionRequest
from ingress.translate.stream import StreamTranslator
from ingress.wire.passport import Passport

CREATED = 1_700_000_000
DIALECT = AnthropicDialect(clock=lambda: CREATED)
TARGET = Target(url="https://api.anthropic.com", api_key="sk-ant-secret", max_tokens=1000)
HELLO = [{"role": "user", "content": "Hello"}]
STREAMS = ("text", "tool_use", "thinking")


def buffer(doc: dict[str, Any], extra: dict[str, Any] | None = None) -> bytes:
    request = decode_chat_request(json.dumps({"model": "claude-sonnet-4-5", **doc}).encode())
    return bytes(encode_request(request, "r", Passport(), "anthropic", None,
                                json.dumps(extra) if extra is not None else None))


def body(doc: dict[str, Any], target: Target = TARGET, **kw: Any) -> dict[str, Any]:
    call = DIALECT.build(buffer(doc, **kw), target)
    result: dict[str, Any] = json.loads(call.request.body)
    return result


def refused(doc: dict[str, Any]) -> str:
    with pytest.raises(Unsupported) as raised:
        DIALECT.build(buffer(doc), TARGET)
    assert raised.value.info().status == 400 and raised.value.info().code == "unsupported_parameter"
    return raised.value.param


# --- the request -----------------------------------------------------------------------------------


def test_the_request_is_a_messages_call_with_the_targets_credentials() -> None:
    call = DIALECT.build(buffer({"messages": HELLO, "stream": True}), TARGET)
    assert (call.request.method, call.request.path, call.request.stream) == ("POST", "/v1/messages", True)
    assert dict(call.request.headers) == {"content-type": "application/json", "anthropic-version": "2023-06-01",
                                          "x-api-key": "sk-ant-secret"}
    assert json.loads(call.request.body) == {"model": "claude-sonnet-4-5", "max_tokens": 1000, "stream": True,
                                             "messages": [{"role": "user",
                                                           "content": [{"type": "text", "text": "Hello"}]}]}
    assert "sk-ant-secret" not in repr(call) and "sk-ant-secret" not in repr(TARGET)  # never logged


def test_system_and_developer_are_lifted_in_order_and_turns_merged() -> None:
    sent = body({"messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "developer", "content": [{"type": "text", "text": "Answer in French."}]},
        {"role": "user", "content": [{"type": "text", "text": "there"}, {"type": "text", "text": "  "}]},
        {"role": "assistant", "content": ""},
        {"role": "assistant", "content": "Bonjour"},
    ]})
    assert sent["system"] == [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Answer in French."}]
    assert sent["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Bonjour"}]},
    ]


def test_tool_results_come_first_in_the_user_turn_after_the_tool_use() -> None:
    sent = body({"messages": [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "toolu_1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Paris"}'}},
            {"id": "toolu_2", "type": "function", "function": {"name": "weather", "arguments": ""}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"},
        {"role": "user", "content": "and be quick"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": ""},
    ]})
    assert sent["messages"][1] == {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "toolu_2", "name": "weather", "input": {}}]}
    assert sent["messages"][2] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "sunny"}]},
        {"type": "tool_result", "tool_use_id": "toolu_2"},
        {"type": "text", "text": "and be quick"}]}
    assert len(sent["messages"]) == 3


def test_legacy_function_calls_get_ids_that_their_results_answer() -> None:
    sent = body({"functions": [{"name": "lookup", "parameters": {"type": "object", "properties": {}}}],
                 "function_call": {"name": "lookup"},
                 "messages": [{"role": "user", "content": "find x"},
                              {"role": "assistant", "content": None,
                               "function_call": {"name": "lookup", "arguments": '{"q":"x"}'}},
                              {"role": "function", "name": "lookup", "content": "found"}]})
    use, result = sent["messages"][1]["content"][0], sent["messages"][2]["content"][0]
    assert use == {"type": "tool_use", "id": "call_legacy_1", "name": "lookup", "input": {"q": "x"}}
    assert result == {"type": "tool_result", "tool_use_id": "call_legacy_1",
                      "content": [{"type": "text", "text": "found"}]}
    assert sent["tool_choice"] == {"type": "tool", "name": "lookup"}


def test_images_documents_and_cache_breakpoints() -> None:
    mark = {"prompt_cache_breakpoint": {"mode": "explicit"}}
    sent = body({"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg", "detail": "auto"}},
        {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERi0=", "filename": "a.pdf"}},
        {"type": "text", "text": "What are these?", **mark}]}]})
    assert sent["messages"][0]["content"] == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}},
        {"type": "text", "text": "What are these?", "cache_control": {"type": "ephemeral"}}]


@pytest.mark.parametrize(("part", "param"), [
    ({"type": "image_url", "image_url": {"url": "data:image/tiff;base64,AAAA"}},
     "messages[0].content[0].image_url.url"),
    ({"type": "image_url", "image_url": {"url": "ftp://x/y.png"}}, "messages[0].content[0].image_url.url"),
    ({"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}},
     "messages[0].content[0].image_url.detail"),
    ({"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}, "messages[0].content[0]"),
    ({"type": "file", "file": {"file_id": "file-abc"}}, "messages[0].content[0]"),
])
def test_parts_anthropic_cannot_take_are_refused_by_name(part: dict[str, Any], param: str) -> None:
    assert refused({"messages": [{"role": "user", "content": [part]}]}) == param


@pytest.mark.parametrize(("ttl", "sent_ttl"), [(None, None), ("30m", "1h"), ("12h", "1h")])
def test_a_cache_breakpoints_ttl_is_anthropics_nearest_never_a_failure(ttl: str | None, sent_ttl: str | None) -> None:
    mark = {"mode": "explicit", **({"ttl": ttl} if ttl else {})}
    sent = body({"messages": [{"role": "user", "content": [{"type": "text", "text": "x",
                                                              "prompt_cache_breakpoint": mark}]}]})
    control = sent["messages"][0]["content"][0]["cache_control"]
    assert control == ({"type": "ephemeral"} if sent_ttl is None else {"type": "ephemeral", "ttl": "1h"})


def test_tools_keep_their_whole_schema() -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
              "required": ["city"], "additionalProperties": False, "$defs": {"x": {"type": "integer"}}}
    sent = body({"messages": HELLO, "tools": [
        {"type": "function", "function": {"name": "weather", "description": "Weather", "parameters": schema,
                                          "strict": True}},
        {"type": "function", "function": {"name": "now"}},
        {"type": "function", "function": {"name": "ping", "parameters": {"properties": {}}}}]})
    assert sent["tools"] == [
        {"name": "weather", "description": "Weather", "input_schema": schema, "strict": True},
        {"name": "now", "input_schema": {"type": "object", "properties": {}}},
        {"name": "ping", "input_schema": {"properties": {}, "type": "object"}}]
    assert "tool_choice" not in sent


@pytest.mark.parametrize("key", ["anyOf", "oneOf", "allOf"])
def test_a_top_level_union_schema_is_refused_before_any_call(key: str) -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {key: [{"type": "object"}]}}}]
    assert refused({"messages": HELLO, "tools": tools}) == "tools[0].function.parameters"


TOOLS = [{"type": "function", "function": {"name": "f"}}]


@pytest.mark.parametrize(("choice", "parallel", "sent"), [
    ("auto", None, {"type": "auto"}),
    ("required", None, {"type": "any"}),
    ("none", None, {"type": "none"}),
    ({"type": "function", "function": {"name": "f"}}, None, {"type": "tool", "name": "f"}),
    (None, False, {"type": "auto", "disable_parallel_tool_use": True}),
    ("required", False, {"type": "any", "disable_parallel_tool_use": True}),
    ({"type": "function", "function": {"name": "f"}}, False,
     {"type": "tool", "name": "f", "disable_parallel_tool_use": True}),
    ("none", False, {"type": "none"}),
])
def test_tool_choice(choice: Any, parallel: bool | None, sent: dict[str, Any]) -> None:
    doc: dict[str, Any] = {"messages": HELLO, "tools": TOOLS}
    if choice is not None:
        doc["tool_choice"] = choice
    if parallel is not None:
        doc["parallel_tool_calls"] = parallel
    assert body(doc)["tool_choice"] == sent


def test_max_tokens_from_the_request_or_the_targets_default() -> None:
    assert body({"messages": HELLO})["max_tokens"] == 1000
    assert body({"messages": HELLO}, Target(url="u", max_tokens=77))["max_tokens"] == 77
    assert body({"messages": HELLO, "max_tokens": 50})["max_tokens"] == 50
    assert body({"messages": HELLO, "max_tokens": 50, "max_completion_tokens": 60})["max_tokens"] == 60


def test_sampling_stop_and_user() -> None:
    sent = body({"messages": HELLO, "temperature": 0.5, "top_p": 0.9, "stop": "END", "user": "u-1"})
    assert (sent["temperature"], sent["top_p"], sent["stop_sequences"], sent["metadata"]) == (
        0.5, 0.9, ["END"], {"user_id": "u-1"})
    assert body({"messages": HELLO, "stop": ["a", "b"]})["stop_sequences"] == ["a", "b"]
    assert refused({"messages": HELLO, "temperature": 1.5}) == "temperature"


def test_the_target_model_when_the_route_names_none() -> None:
    request = decode_chat_request(json.dumps({"model": "x", "messages": HELLO}).encode())
    buf = bytes(encode_request(request, "r", Passport(), "anthropic", ""))
    assert json.loads(DIALECT.build(buf, TARGET).request.body)["model"] == "x"


def test_a_text_completion_is_refused() -> None:
    buf = bytes(encode_text_request(TextCompletionRequest(model="m", prompt="Once"), "r", Passport()))
    with pytest.raises(Unsupported) as raised:
        DIALECT.build(buf, TARGET)
    assert raised.value.param == "prompt"


def test_engine_extras_are_sent_but_never_replace_a_field() -> None:
    sent = body({"messages": HELLO}, extra={"top_k": 5, "thinking": {"type": "enabled", "budget_tokens": 2000}})
    assert (sent["top_k"], sent["thinking"]) == (5, {"type": "enabled", "budget_tokens": 2000})
    with pytest.raises(Unsupported) as raised:
        DIALECT.build(buffer({"messages": HELLO}, extra={"system": "sneaky"}), TARGET)
    assert raised.value.param == "system"


# Every field of the chat request, set: either refused by its name, or sent (the body differs from the
# request without it). A field that needs nothing sent says why here.
NOTHING_TO_SEND = {"stream_options": "Anthropic always counts usage; the edge shows it only when asked",
                   "prompt_cache_key": "Anthropic keys its cache by the prompt's breakpoints (agents send one)",
                   "prompt_cache_retention": "the breakpoints' TTL is Anthropic's"}
SAMPLES: dict[str, Any] = {
    "model": "claude-opus-4-1", "messages": [{"role": "user", "content": "Hello?"}],
    "frequency_penalty": 0.5, "logit_bias": {"50256": -100}, "logprobs": True, "top_logprobs": 2,
    "max_tokens": 10, "max_completion_tokens": 20, "metadata": {"k": "v"}, "n": 2, "parallel_tool_calls": False,
    "presence_penalty": 0.5, "reasoning_effort": "high",
    "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object"}}},
    "seed": 1, "service_tier": "default", "stop": "END", "stream": True, "stream_options": {"include_usage": True},
    "temperature": 0.3, "tool_choice": "required", "tools": TOOLS, "top_p": 0.5, "user": "u",
    "audio": {"format": "wav", "voice": "alloy"}, "function_call": "auto",
    "functions": [{"name": "g"}], "modalities": ["text", "audio"],
    "moderation": {"model": "omni-moderation-latest"}, "prediction": {"type": "content", "content": "x"},
    "prompt_cache_key": "k", "prompt_cache_options": {"mode": "explicit"}, "prompt_cache_retention": "24h",
    "safety_identifier": "s", "store": True, "verbosity": "low",
    "web_search_options": {"search_context_size": "low"},
}
NEEDS: dict[str, dict[str, Any]] = {
    "tool_choice": {"tools": TOOLS}, "parallel_tool_calls": {"tools": TOOLS}, "stream_options": {"stream": True},
    "top_logprobs": {}, "function_call": {"functions": [{"name": "g"}]},
}


def test_every_field_of_the_chat_request_is_mapped_or_refused() -> None:
    fields = set(chat.ChatCompletionRequest.__struct_fields__)
    assert set(anthropic_request.FIELDS) == fields
    assert set(SAMPLES) == fields
    for name, value in SAMPLES.items():
        base: dict[str, Any] = {"messages": HELLO, **NEEDS.get(name, {})}
        doc = {**base, name: value}
        try:
            sent = body(doc)
        except Unsupported as exc:
            assert exc.param == name, (name, exc.param)
            assert anthropic_request.FIELDS[name].startswith("refused"), name
            continue
        assert anthropic_request.FIELDS[name] and not anthropic_request.FIELDS[name].startswith("refused ("), name
        if name in NOTHING_TO_SEND:
            assert sent == body(base)
        else:
            assert sent != body(base), f"{name} was dropped"


def test_the_mapped_values_of_newer_fields() -> None:
    sent = body({"messages": HELLO, "reasoning_effort": "low", "service_tier": "auto", "safety_identifier": "s",
                 "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": {
                     "type": "object", "properties": {"a": {"type": "string"}}}}}})
    assert sent["output_config"] == {"effort": "low", "format": {
        "type": "json_schema", "schema": {"type": "object", "properties": {"a": {"type": "string"}}}}}
    assert (sent["service_tier"], sent["metadata"]) == ("auto", {"user_id": "s"})
    assert "output_config" not in body({"messages": HELLO, "response_format": {"type": "text"}})
    cases: list[tuple[dict[str, Any], str]] = [({"response_format": {"type": "json_object"}}, "response_format"),
                       ({"reasoning_effort": "minimal"}, "reasoning_effort"),
                       ({"service_tier": "flex"}, "service_tier"),
                       ({"user": "a", "safety_identifier": "b"}, "safety_identifier"),
                       ({"n": 2}, "n"), ({"logprobs": True}, "logprobs"), ({"seed": 3}, "seed")]
    for doc, param in cases:
        assert refused({"messages": HELLO, **doc}) == param
    body({"messages": HELLO, "n": 1, "logprobs": False, "store": False, "modalities": ["text"]})  # asks nothing


# --- whole answers ---------------------------------------------------------------------------------


def answer(name: str) -> wire.Response:
    return DIALECT.build(buffer({"messages": HELLO}), TARGET).answer(fixture(f"{name}.json"))


def test_a_whole_answer_and_its_usage() -> None:
    r = answer("text")
    assert (r.id, r.model, r.created) == ("msg_013Zva2CMHLNnXjNJJKqJ2EF", "claude-sonnet-4-5-20250929", CREATED)
    assert r.choices == [wire.Choice(index=0, content="Hi! My name is Claude.", finish_reason="stop")]
    assert r.usage == wire.Usage(prompt_tokens=2095 + 1800 + 120, completion_tokens=12, total_tokens=4027,
                                 cached_tokens=1800, cache_write_tokens=120)


def test_a_whole_answer_with_tool_calls() -> None:
    (choice,) = answer("tool_use").choices
    assert choice.content == "I'll check the weather in San Francisco."
    assert [(c.id, c.name, json.loads(c.arguments)) for c in choice.tool_calls] == [
        ("toolu_01A09q90qw90lq917835lq9", "get_weather", {"location": "San Francisco, CA", "unit": "celsius"}),
        ("toolu_01B7XfG2cW1zv1sLQk3F8hJ4", "get_time", {})]
    assert choice.finish_reason == "tool_calls"


def test_thinking_is_reasoning_never_content() -> None:
    r = answer("thinking")
    (choice,) = r.choices
    assert choice.content == "27 * 453 = 12,231"
    assert choice.reasoning == "27 * 453: 27 * 400 = 10,800; 27 * 53 = 1,431; together 12,231."
    assert choice.finish_reason == "length"
    assert choice.signature == "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"  # to send the thinking back
    assert r.usage is not None and r.usage.reasoning_tokens == 280
    assert wire.decode_response(bytes(wire.write_response(r))) == r  # the wire carries it


def test_redacted_thinking_the_stop_sequence_and_server_tools_travel_on() -> None:
    doc = {"id": "m", "type": "message", "role": "assistant", "model": "c", "content": [
        {"type": "thinking", "thinking": "first", "signature": "sig-1"},
        {"type": "redacted_thinking", "data": "opaque-1"},
        {"type": "thinking", "thinking": " second", "signature": "sig-2"},
        {"type": "redacted_thinking", "data": "opaque-2"},
        {"type": "text", "text": "Done. END"}],
        "stop_reason": "stop_sequence", "stop_sequence": "END",
        "usage": {"input_tokens": 9, "output_tokens": 4,
                  "server_tool_use": {"web_search_requests": 2, "web_fetch_requests": 1}}}
    r = DIALECT.build(buffer({"messages": HELLO}), TARGET).answer(json.dumps(doc).encode())
    (choice,) = r.choices
    assert (choice.reasoning, choice.signature) == ("first second", "sig-2")  # one reasoning: the last signature
    assert choice.redacted_thinking == ["opaque-1", "opaque-2"]
    assert (choice.finish_reason, choice.stop_sequence, choice.content) == ("stop", "END", "Done. END")
    assert r.usage is not None and (r.usage.web_search_requests, r.usage.web_fetch_requests) == (2, 1)
    assert wire.decode_response(bytes(wire.write_response(r))) == r


@pytest.mark.parametrize(("reason", "finish"), [
    ("end_turn", "stop"), ("stop_sequence", "stop"), ("pause_turn", "pause_turn"), ("max_tokens", "length"),
    ("model_context_window_exceeded", "length"), ("tool_use", "tool_calls"), ("refusal", "refusal"),
    ("something_new", "stop"), (None, "stop"),
])
def test_stop_reasons(reason: str | None, finish: str) -> None:
    doc: dict[str, Any] = {"id": "m", "type": "message", "role": "assistant", "model": "c", "content": [],
                           "stop_reason": reason, "usage": {"input_tokens": 1, "output_tokens": 1}}
    call = DIALECT.build(buffer({"messages": HELLO}), TARGET)
    assert call.answer(json.dumps(doc).encode()).choices[0].finish_reason == finish


def test_an_unreadable_answer_is_an_engine_failure() -> None:
    with pytest.raises(EngineFailed) as raised:
        DIALECT.build(buffer({"messages": HELLO}), TARGET).answer(b"<html>bad gateway</html>")
    assert (raised.value.info.status, raised.value.info.code) == (502, "upstream_protocol_error")


# --- streams ---------------------------------------------------------------------------------------


def decode(data: bytes, pieces: list[bytes] | None = None) -> list[wire.Chunk]:
    stream = DIALECT.build(buffer({"messages": HELLO, "stream": True}), TARGET).stream()
    out: list[wire.Chunk] = []
    for piece in pieces if pieces is not None else [data]:
        out += stream.feed(piece)
    return out + stream.finish()


def test_the_tool_use_stream() -> None:
    T = wire.ToolCallDelta  # a short name for a table of deltas
    usage = wire.Usage(prompt_tokens=872, completion_tokens=89, total_tokens=961, cached_tokens=300,
                       cache_write_tokens=100)
    assert decode(fixture("tool_use.sse")) == [
        wire.Chunk(sequence=0, id="msg_014p7gG3wDgGV9EUtLvnow3U", model="claude-sonnet-4-5-20250929",
                   created=CREATED, role="assistant", content=""),
        wire.Chunk(sequence=1, content="Okay"),
        wire.Chunk(sequence=2, content=", let's check the weather."),
        wire.Chunk(sequence=3, tool_calls=[T(index=0, id="toolu_01T1x1fJ34qAmk2tNTrN7Up6", type="function",
                                             name="get_weather", arguments="")]),
        *[wire.Chunk(sequence=4 + k, tool_calls=[T(index=0, arguments=piece)]) for k, piece in enumerate(
            ['{"location":', ' "San', " Francisc", 'o, CA"', ", ", '"unit": "fah', 'renheit"}'])],
        wire.Chunk(sequence=11, tool_calls=[T(index=1, id="toolu_01Hn4c5aVzMRYpR9Zc4kQ2uW", type="function",
                                              name="get_time", arguments="")]),
        wire.Chunk(sequence=12, tool_calls=[T(index=1, arguments="{}")]),  # no input came: still an object
        wire.Chunk(sequence=13, finish_reason="tool_calls", usage=usage, done=True),
    ]


def test_the_thinking_stream_keeps_reasoning_out_of_content() -> None:
    chunks = decode(fixture("thinking.sse"))
    assert "".join(c.reasoning or "" for c in chunks) == (
        "Let me solve this step by step:\n\n1. First break down 27 * 453\n2. 453 = 400 + 50 + 3")
    assert "".join(c.content or "" for c in chunks) == "27 * 453 = 12,231"
    last = chunks[-1]
    assert (last.done, last.finish_reason) == (True, "length")
    # message_delta's counts are cumulative and replace message_start's
    assert last.usage == wire.Usage(prompt_tokens=50, completion_tokens=310, total_tokens=360, cached_tokens=5,
                                    reasoning_tokens=280)
    # the signature_delta: after the block's reasoning, before the text, for the reasoning streamed so far
    signed = [i for i, c in enumerate(chunks) if c.signature is not None]
    assert [chunks[i].signature for i in signed] == ["EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"]
    assert max(i for i, c in enumerate(chunks) if c.reasoning) < signed[0] < min(
        i for i, c in enumerate(chunks) if c.content)


def sse(*events: dict[str, Any]) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


def test_a_stream_carries_redacted_thinking_the_stop_sequence_and_server_tools() -> None:
    def block(i: int, kind: str, **body: Any) -> dict[str, Any]:
        return {"type": "content_block_start", "index": i, "content_block": {"type": kind, **body}}

    def delta(i: int, kind: str, **body: Any) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": i, "delta": {"type": kind, **body}}

    chunks = decode(sse(
        {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "c",
                                              "content": [], "usage": {"input_tokens": 5, "output_tokens": 1}}},
        block(0, "redacted_thinking", data="opaque"), {"type": "content_block_stop", "index": 0},
        block(1, "text", text=""), delta(1, "text_delta", text="a b END"),
        delta(1, "citations_delta", citation={"type": "char_location", "cited_text": "a", "document_index": 0,
                                              "start_char_index": 0, "end_char_index": 1}),
        {"type": "content_block_stop", "index": 1},
        {"type": "message_delta", "delta": {"stop_reason": "stop_sequence", "stop_sequence": "END"},
         "usage": {"output_tokens": 3, "server_tool_use": {"web_search_requests": 1, "web_fetch_requests": 0}}},
        {"type": "message_stop"}))
    assert [c.redacted_thinking for c in chunks if c.redacted_thinking] == [["opaque"]]
    assert "".join(c.content or "" for c in chunks) == "a b END"
    last = chunks[-1]
    assert (last.done, last.finish_reason, last.stop_sequence) == (True, "stop", "END")
    assert last.usage is not None and last.usage.web_search_requests == 1
    assert [wire.decode_chunk(bytes(wire.write_chunk(c))[4:]) for c in chunks] == chunks


@pytest.mark.parametrize("reason", ["pause_turn", "refusal"])
def test_a_streams_stop_reason_that_openai_has_no_name_for_travels_as_it_is(reason: str) -> None:
    chunks = decode(fixture("text.sse").replace(b'"stop_reason":"end_turn"', f'"stop_reason":"{reason}"'.encode()))
    assert chunks[-1].finish_reason == reason


@pytest.mark.parametrize("name", STREAMS)
def test_streams_are_numbered_and_read_by_the_edge(name: str) -> None:
    chunks = decode(fixture(f"{name}.sse"))
    assert [c.sequence for c in chunks] == list(range(len(chunks)))
    assert [c.done for c in chunks] == [False] * (len(chunks) - 1) + [True]
    translator = StreamTranslator(id="x", model="m", created=1, include_usage=True)
    deltas = [c for chunk in chunks for c in translator.feed_frame(bytes(wire.write_chunk(chunk)))]
    translator.finish()
    text = "".join(c.choices[0].delta.content for c in deltas if c.choices and isinstance(
        c.choices[0].delta.content, str))
    assert text == "".join(c.content or "" for c in chunks)
    assert translator.usage == chunks[-1].usage and deltas[-1].usage is not None


def test_a_stream_cut_before_message_stop_is_an_error() -> None:
    stream = DIALECT.build(buffer({"messages": HELLO, "stream": True}), TARGET).stream()
    chunks = stream.feed(fixture("cut.sse"))
    assert "".join(c.content or "" for c in chunks) == "Hello there" and not any(c.done for c in chunks)
    with pytest.raises(EngineFailed) as raised:
        stream.finish()
    assert raised.value.info.status == 502


def test_an_error_event_is_an_engine_failure_with_its_status() -> None:
    stream = DIALECT.build(buffer({"messages": HELLO, "stream": True}), TARGET).stream()
    with pytest.raises(EngineFailed) as raised:
        stream.feed(fixture("overloaded.sse"))
    assert (raised.value.info.status, raised.value.info.code) == (503, "upstream_overloaded")
    assert raised.value.info.retry_after == 1  # as for a 529 that named no wait


def test_an_overloaded_event_before_any_content_fails_with_no_content_and_a_wait() -> None:
    stream = DIALECT.build(buffer({"messages": HELLO, "stream": True}), TARGET).stream()
    with pytest.raises(EngineFailed) as raised:
        stream.feed(fixture("overloaded_at_start.sse"))
    assert [(c.role, c.content) for c in raised.value.chunks] == [("assistant", "")]  # message_start's: no content
    assert (raised.value.info.status, raised.value.info.retry_after) == (503, 1)


def test_an_event_before_message_start_or_for_an_unknown_block_is_broken() -> None:
    for data in (b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n',
                 fixture("text.sse").replace(b'"index":0,"delta"', b'"index":7,"delta"'),
                 b"event: message_start\ndata: {not json\n\n"):
        with pytest.raises(EngineFailed) as raised:
            decode(data)
        assert raised.value.info.code == "upstream_protocol_error"


def test_the_last_event_without_its_blank_line_still_ends_the_stream() -> None:
    data = fixture("text.sse")
    assert decode(data.removesuffix(b"\n")) == decode(data)


def test_every_split_of_every_stream_gives_the_same_chunks() -> None:
    for name in STREAMS:
        data = fixture(f"{name}.sse")
        whole = decode(data)
        for at in range(len(data) + 1):
            assert decode(data, [data[:at], data[at:]]) == whole, (name, at)


@settings(max_examples=150, deadline=None)
@given(name=st.sampled_from(STREAMS), cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=12),
       crlf=st.booleans())
def test_any_pieces_and_line_endings_give_the_same_chunks(name: str, cuts: list[int], crlf: bool) -> None:
    data = fixture(f"{name}.sse")
    whole = decode(data)
    if crlf:
        data = data.replace(b"\n", b"\r\n")
    points = sorted({min(c, len(data)) for c in cuts})
    pieces = [data[i:j] for i, j in zip([0, *points], [*points, len(data)], strict=True)]
    assert decode(data, pieces) == whole


NOISE = [b"event: ping\ndata: {\"type\": \"ping\"}\n\n", b": a comment\n\n",
         b'event: brand_new_event\ndata: {"type":"brand_new_event","x":1}\n\n',
         b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
         b'"delta":{"type":"brand_new_delta","x":1}}\n\n']


@settings(max_examples=150, deadline=None)
@given(name=st.sampled_from(STREAMS), where=st.lists(st.tuples(st.integers(min_value=0), st.sampled_from(NOISE)),
                                                       max_size=6))
def test_pings_comments_and_unknown_events_change_nothing(name: str, where: list[tuple[int, bytes]]) -> None:
    data = fixture(f"{name}.sse")
    events = [e + b"\n\n" for e in data.split(b"\n\n") if e]
    for at, noise in where:
        position = 2 + at % (len(events) - 2)  # after message_start and the first block's start
        events.insert(position, noise)
    assert decode(b"".join(events)) == decode(data)


# --- errors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("status", "expected"), [
    (400, (400, "invalid_request_error", "invalid_request")),
    (401, (502, "server_error", "upstream_auth_failed")),
    (429, (429, "rate_limit_error", "rate_limit_exceeded")),
    (529, (503, "server_error", "upstream_overloaded")),
])
def test_the_providers_refusals(status: int, expected: tuple[int, str, str]) -> None:
    info = DIALECT.error(status, {"retry-after": "7"}, fixture(f"error_{status}.json"))
    assert (info.status, info.type, info.code) == expected
    said = json.loads(fixture(f"error_{status}.json"))["error"]["message"]
    assert scrubbed_part(said) in info.message


def scrubbed_part(text: str) -> str:
    return text.split("https://")[0].strip()[:60]


@pytest.mark.parametrize(("status", "body", "expected"), [
    (401, b'{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}',
     (401, "authentication_error", "Anthropic refused the key sent with the request: invalid x-api-key")),
    (403, b'{"type":"error","error":{"type":"permission_error","message":"no access"}}',
     (403, "permission_error", "Anthropic refused the key sent with the request: no access")),
    (402, b'{"type":"error","error":{"type":"billing_error","message":"credit balance too low"}}',
     (402, "billing_error", "Anthropic refused the key sent with the request: credit balance too low")),
    (401, b"", (401, "authentication_error", "Anthropic refused the key sent with the request: HTTP 401")),
])
def test_the_clients_own_key_refused_is_its_own_status(status: int, body: bytes,
                                                      expected: tuple[int, str, str]) -> None:
    info = DIALECT.error(status, {}, body, clients_key=True)
    assert (info.status, info.type, info.message) == expected


@pytest.mark.parametrize(("status", "body", "expected"), [
    (403, b'{"type":"error","error":{"type":"permission_error","message":"no access"}}', (502, "upstream_auth_failed")),
    (404, b'{"type":"error","error":{"type":"not_found_error","message":"model: x"}}', (404, "not_found")),
    (413, b'{"type":"error","error":{"type":"request_too_large","message":"big"}}', (413, "request_too_large")),
    (500, b'{"type":"error","error":{"type":"api_error","message":"Internal server error"}}', (502, "upstream_error")),
    (504, b"<html>gateway timeout</html>", (504, "upstream_timeout")),
    (502, b"<html>bad gateway</html>", (502, "upstream_error")),
    (409, b"conflict", (409, "invalid_request")),
    (401, b"", (502, "upstream_auth_failed")),
])
def test_statuses_without_anthropics_shape_too(status: int, body: bytes, expected: tuple[int, str]) -> None:
    info = DIALECT.error(status, {}, body)
    assert (info.status, info.code) == expected


def test_provider_text_is_scrubbed_of_secrets_and_addresses() -> None:
    body = msgspec.json.encode({"type": "error", "error": {"type": "invalid_request_error", "message": (
        "bad key sk-ant-api03-AbCdEf_123-xyz for http://10.0.0.5:8080/v1/messages via proxy.internal:3128, "
        "Bearer abc.def.ghi and 192.168.1.1, x-api-key: sk-ant-zzz " + "x" * 2000)}})
    info = DIALECT.error(400, {}, body)
    for secret in ("sk-ant", "10.0.0.5", "proxy.internal", "abc.def", "192.168", "zzz"):
        assert secret not in info.message
    assert len(info.message) < 700 and re.search(r"bad key \[redacted\]", info.message)


def test_the_chunks_before_an_error_event_in_the_same_data_travel_with_it() -> None:
    stream = DIALECT.build(buffer({"messages": HELLO, "stream": True}), TARGET).stream()
    text = fixture("text.sse")
    cut = text.index(b"event: content_block_stop")
    error = b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n'
    with pytest.raises(EngineFailed) as raised:
        stream.feed(text[:cut] + error)
    assert raised.value.info.status == 503
    assert "".join(c.content or "" for c in raised.value.chunks) == "Hello! Nice to meet you é 🌍."


def test_an_overloaded_anthropic_is_a_503_with_a_retry_after_whether_or_not_it_named_one() -> None:
    body = b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
    named = DIALECT.error(529, {"retry-after": "7"}, body)
    assert (named.status, named.code, named.retry_after) == (503, "upstream_overloaded", 7)
    assert DIALECT.error(529, {}, body).retry_after == 1
    limited = DIALECT.error(429, {"Retry-After": "12"}, b'{"type":"error","error":{"type":"rate_limit_error"}}')
    assert (limited.status, limited.retry_after) == (429, 12)


# --- JSON nested too deeply: a 400, as at the edge, never a crash -----------------------------------

_DECODED = ("parameters", "schema", "extra_json", "arguments")


@pytest.mark.parametrize("levels", [990, 100_000])
@pytest.mark.parametrize("where", ["parameters", "schema", "extra_json", "arguments"])
def test_json_nested_too_deeply_in_any_field_is_a_400(where: str, levels: int) -> None:
    buf = deep_buffer(where, levels, "anthropic")
    if where not in _DECODED:  # passed along as text, never read
        DIALECT.build(buf, TARGET)
    else:
        assert_nested_too_deeply(lambda: DIALECT.build(buf, TARGET))


# --- a Messages request as its client sent it ------------------------------------------------------


def sent_whole(doc: dict[str, Any], model: str | None = "claude-opus-4-6", betas: list[str] | None = None,
               version: str | None = None) -> bytes:
    """A buffer as the edge makes it for a Messages request bound for Anthropic: the request as sent."""
    request = decode_chat_request(json.dumps({"model": "claude-sonnet-4-5", "messages": HELLO}).encode())
    return bytes(encode_messages_request(request, "r", Passport(), "anthropic", model,
                                         anthropic_json=json.dumps(doc), anthropic_beta=betas,
                                         anthropic_version=version))


AS_SENT = {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": HELLO, "container": "c_1",
           "tools": [{"type": "web_search_20250305", "name": "web_search"}], "zzz_new_beta_field": {"a": [1]}}


def test_a_request_as_sent_goes_as_it_is_with_the_routes_model_name() -> None:
    call = DIALECT.build(sent_whole(AS_SENT, betas=["a-2025", "b-2025"], version="2023-06-01"), TARGET)
    assert json.loads(call.request.body) == {**AS_SENT, "model": "claude-opus-4-6"}
    assert list(json.loads(call.request.body)) == list(AS_SENT)  # its fields in the client's order
    assert call.request.headers["anthropic-beta"] == "a-2025,b-2025"
    assert call.request.headers["anthropic-version"] == "2023-06-01"
    assert call.request.headers["x-api-key"] == "sk-ant-secret" and call.request.path == "/v1/messages"
    assert call.request.stream is False


def test_a_request_as_sent_without_beta_flags_or_version_gets_the_bridges_version() -> None:
    call = DIALECT.build(sent_whole(AS_SENT), TARGET)
    assert "anthropic-beta" not in call.request.headers
    assert call.request.headers["anthropic-version"] == anthropic_request.VERSION


def test_a_count_asks_anthropics_count_tokens_and_answers_with_usage() -> None:
    doc = {"model": "claude-sonnet-4-5", "messages": HELLO, "system": "Be brief."}
    call = DIALECT.count(sent_whole(doc, betas=["a-2025"]), TARGET)
    assert call.request.path == "/v1/messages/count_tokens"
    assert json.loads(call.request.body) == {**doc, "model": "claude-opus-4-6"}
    assert call.request.headers["anthropic-beta"] == "a-2025"
    answer = call.answer(b'{"input_tokens": 77}')
    assert answer.choices == [] and answer.usage is not None and answer.usage.prompt_tokens == 77
    with pytest.raises(EngineFailed) as broken:
        call.answer(b'{"tokens": 77}')
    assert broken.value.info.status == 502


def test_a_count_of_a_chat_request_is_refused() -> None:
    with pytest.raises(Unsupported) as refused_count:
        DIALECT.count(buffer({"messages": HELLO}), TARGET)
    assert refused_count.value.param == "messages"
