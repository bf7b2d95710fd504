"""Chat requests as Gemini requests (ingress/bridges/gemini_request.py), built through the dialect: every field
mapped or refused, turns and tool results in Google's shape, media, tools and tool choice, thinking, and the
thought signatures that ride in tool call ids."""

from __future__ import annotations

from typing import Any

import pytest

from ingress.bridges import gemini_request
from ingress.bridges.dialect import Unsupported
from ingress.bridges.gemini_request import signed_id, split_id
from ingress.oai import chat
from unit.bridges.test_gemini import DIALECT, HELLO, SIGNATURE, TARGET, body, buffer


def refused(doc: dict[str, Any]) -> str:
    with pytest.raises(Unsupported) as raised:
        DIALECT.build(buffer(doc), TARGET)
    assert raised.value.info().code == "unsupported_parameter"
    return raised.value.param


def test_a_plain_request() -> None:
    assert body({"messages": HELLO}) == {"contents": [{"role": "user", "parts": [{"text": "Hello"}]}]}


def test_system_lifted_turns_merged_and_tool_results_as_function_responses() -> None:
    sent = body({"messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "developer", "content": "In French."},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": signed_id("gcall_r_0", SIGNATURE), "type": "function",
             "function": {"name": "weather", "arguments": '{"city":"Paris"}'}},
            {"id": "call_2", "type": "function", "function": {"name": "clock", "arguments": ""}}]},
        {"role": "tool", "tool_call_id": signed_id("gcall_r_0", SIGNATURE), "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_2", "content": '{"time": "12:00"}'},
        {"role": "user", "content": [{"type": "text", "text": "Thanks"},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                                     {"type": "image_url", "image_url": {"url": "https://x.example/a.jpg"}}]},
    ]})
    assert sent["systemInstruction"] == {"parts": [{"text": "Be brief.\n\nIn French."}]}
    assert sent["contents"] == [
        {"role": "user", "parts": [{"text": "Weather in Paris and Rome?"}]},
        {"role": "model", "parts": [
            {"text": "Checking."},
            {"functionCall": {"name": "weather", "args": {"city": "Paris"}}, "thoughtSignature": SIGNATURE},
            {"functionCall": {"name": "clock", "args": {}}}]},
        {"role": "user", "parts": [
            {"functionResponse": {"name": "weather", "response": {"output": "sunny"}}},
            {"functionResponse": {"name": "clock", "response": {"time": "12:00"}}},
            {"text": "Thanks"}, {"inlineData": {"mimeType": "image/png", "data": "AAAA"}},
            {"fileData": {"fileUri": "https://x.example/a.jpg", "mimeType": "image/jpeg"}}]}]


def test_tools_tool_choice_and_generation_config() -> None:
    tools = [{"type": "function", "function": {"name": "weather", "description": "d",
                                               "parameters": {"type": "object", "properties": {}}}},
             {"type": "function", "function": {"name": "clock"}}]
    sent = body({"messages": HELLO, "tools": tools, "tool_choice": {"type": "function", "function": {"name": "clock"}},
                 "temperature": 0.2, "top_p": 0.9, "max_completion_tokens": 99, "max_tokens": 5, "n": 2, "seed": 7,
                 "stop": ["END"], "presence_penalty": 0.5, "frequency_penalty": -0.5, "reasoning_effort": "medium",
                 "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object"}}},
                 "service_tier": "flex"}, extra={"top_k": 40})
    assert sent["tools"] == [{"functionDeclarations": [
        {"name": "weather", "description": "d", "parametersJsonSchema": {"type": "object", "properties": {}}},
        {"name": "clock"}]}]
    assert sent["toolConfig"] == {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["clock"]}}
    assert sent["generationConfig"] == {
        "temperature": 0.2, "topP": 0.9, "candidateCount": 2, "maxOutputTokens": 99, "seed": 7, "presencePenalty": 0.5,
        "frequencyPenalty": -0.5, "stopSequences": ["END"], "responseMimeType": "application/json",
        "responseJsonSchema": {"type": "object"}, "thinkingConfig": {"thinkingBudget": 8192, "includeThoughts": True},
        "topK": 40}
    assert sent["serviceTier"] == "flex"
    assert body({"messages": HELLO, "reasoning_effort": "none"})["generationConfig"] == {
        "thinkingConfig": {"thinkingBudget": 0}}
    for choice, mode in (("auto", "AUTO"), ("required", "ANY"), ("none", "NONE")):
        assert body({"messages": HELLO, "tools": tools, "tool_choice": choice})["toolConfig"] == {
            "functionCallingConfig": {"mode": mode}}


def test_a_signature_survives_its_trip_in_an_id() -> None:
    call_id = signed_id("gcall_r_0", SIGNATURE)
    assert call_id.replace("_", "").replace("-", "").isalnum()  # what every client keeps as it is
    assert split_id(call_id) == (None, SIGNATURE)
    assert split_id(signed_id("google-7", SIGNATURE)) == ("google-7", SIGNATURE)
    assert split_id("call_abc") == ("call_abc", None) and signed_id("x", None) == "x"


SAMPLES: dict[str, Any] = {
    "model": "gemini-2.5-pro", "messages": [{"role": "user", "content": "Other"}], "max_tokens": 5,
    "max_completion_tokens": 6, "temperature": 0.3, "top_p": 0.5, "n": 2, "seed": 1, "presence_penalty": 1.0,
    "frequency_penalty": 1.0, "stop": "X", "stream": True, "stream_options": {"include_usage": True},
    "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "none",
    "functions": [{"name": "f"}], "function_call": "none",
    "response_format": {"type": "json_object"}, "reasoning_effort": "low", "service_tier": "priority",
    "user": "u", "safety_identifier": "s", "prompt_cache_key": "k", "prompt_cache_retention": "24h",
    "parallel_tool_calls": False, "logprobs": True, "top_logprobs": 2, "logit_bias": {"1": 1},
    "metadata": {"a": "b"}, "store": True, "audio": {"format": "wav", "voice": "alloy"}, "modalities": ["audio"],
    "prediction": {"type": "content", "content": "x"}, "moderation": {"model": "m"},
    "prompt_cache_options": {"mode": "explicit"}, "verbosity": "low", "web_search_options": {},
}
NOTHING_TO_SEND = {"stream_options", "user", "safety_identifier", "prompt_cache_key", "prompt_cache_retention"}
NEEDS = {"tool_choice": {"tools": SAMPLES["tools"]}, "function_call": {"functions": SAMPLES["functions"]},
         "stream_options": {"stream": True}, "modalities": {"audio": SAMPLES["audio"]},
         "top_logprobs": {"logprobs": True}, "prompt_cache_options": {}}


def test_every_field_of_the_chat_request_is_mapped_or_refused() -> None:
    fields = set(chat.ChatCompletionRequest.__struct_fields__)
    assert set(gemini_request.FIELDS) == fields
    assert set(SAMPLES) == fields
    for name, value in SAMPLES.items():
        base: dict[str, Any] = {"messages": HELLO, **NEEDS.get(name, {})}
        doc = {**base, name: value}
        try:
            call = DIALECT.build(buffer(doc, model=None), TARGET)  # the request's own model name travels
        except Unsupported as exc:
            assert exc.param in (name, *NEEDS.get(name, {})), (name, exc.param)
            assert gemini_request.FIELDS[name].startswith("refused"), name
            continue
        assert not gemini_request.FIELDS[name].startswith("refused ("), name
        plain = DIALECT.build(buffer(base, model=None), TARGET).request
        if name in NOTHING_TO_SEND:
            assert call.request.body == plain.body, name
        else:
            assert (call.request.body, call.request.path) != (plain.body, plain.path), f"{name} was dropped"


@pytest.mark.parametrize(("doc", "param"), [
    ({"messages": HELLO, "reasoning_effort": "extreme"}, "reasoning_effort"),
    ({"messages": [{"role": "tool", "tool_call_id": "nowhere", "content": "x"}]}, "messages[0].tool_call_id"),
    ({"messages": [*HELLO, {"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "[1]"}}]}]},
     "messages[1].tool_calls[0].function.arguments"),
    ({"messages": [{"role": "user", "content": [{"type": "file", "file": {"file_id": "file-1"}}]}]},
     "messages[0].content[0].file.file_id"),
    ({"messages": [{"role": "system", "content": "only a system message"}]}, "messages"),
])
def test_what_gemini_cannot_take_is_refused_naming_it(doc: dict[str, Any], param: str) -> None:
    assert refused(doc) == param
