"""Chat requests as Messages API requests (ingress/bridges/anthropic_request.py), built through the dialect:
every field mapped or refused, turns and tool results in Anthropic's order, images, documents, cache
breakpoints, tools and tool choice."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ingress.bridges import anthropic_request
from ingress.bridges.dialect import Target, Unsupported
from ingress.encoding.requests import encode_request
from ingress.oai import chat
from ingress.oai.codec import decode_chat_request
from ingress.wire.passport import Passport
from unit.bridges.test_anthropic import DIALECT, HELLO, TARGET, body, buffer, refused


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
