"""Chat-completion request bodies the edge must refuse, shared by the codec and the HTTP tests.

Each row is a raw body, the OpenAI error `param` it must be refused with (None for errors of the body
as a whole) and the error `code`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, NamedTuple

import msgspec
import pytest

from ingress.bridges.dialect import Unsupported
from ingress.encoding.requests import encode_request
from ingress.oai import chat
from ingress.oai.codec import MAX_NESTING
from ingress.wire.passport import Passport

USER = {"role": "user", "content": "hi"}
TOOL = {"type": "function", "function": {"name": "get_weather"}}
MISSING = object()  # a field value meaning "leave the field out"


def body(**fields: Any) -> bytes:
    """A minimal valid request with `fields` set (or removed, given MISSING)."""
    doc: dict[str, Any] = {"model": "ingress-demo", "messages": [USER]}
    doc.update(fields)
    return json.dumps({k: v for k, v in doc.items() if v is not MISSING}).encode()


def message(**fields: Any) -> bytes:
    """A request whose only message is `fields`."""
    return body(messages=[fields])


def user_part(part: dict[str, Any]) -> bytes:
    return message(role="user", content=[part])


def deep(levels: int) -> str:
    """A JSON value nested `levels` deep."""
    return "[" * levels + "]" * levels


def spliced(field: str, raw_json: str, make: Callable[[], bytes] | None = None) -> bytes:
    """A valid request (chat's, or the one `make` builds) with one more top-level field whose value is
    written verbatim."""
    return (make or body)()[:-1] + f',"{field}":{raw_json}}}'.encode()


def deeper_than_allowed(levels: int = 100_000) -> bytes:
    """An unknown top-level field `x` `levels` deep, in a valid chat request: whether the route refuses
    engine extras or forwards them, it is refused as nested too deeply, never a 500."""
    return spliced("x", deep(levels))


class Bad(NamedTuple):
    body: bytes
    param: str | None
    code: str = "invalid_request"


JSON = "invalid_json"


def body_level(make: Callable[..., bytes], field: str) -> list[Any]:
    """The refusals of a body as a whole, for an endpoint whose valid minimal body `make()` builds and
    whose text `field` holds "hello": truncated, empty, not an object, bad UTF-8, nested 5,000 deep."""
    return [
        pytest.param(Bad(b'{"model": "ingress-demo",', None, JSON), id="truncated-json"),
        pytest.param(Bad(b"", None, JSON), id="empty-body"),
        pytest.param(Bad(b"[]", None), id="json-array"),
        pytest.param(Bad(make().replace(b'"hello"', b'"h\xffi"'), None, JSON), id="invalid-utf8"),
        pytest.param(Bad(make(**{field: "@"}).replace(b'"@"', b"[" * 5000 + b"]" * 5000), f"{field}[0][0]"),
                     id=f"{field}-nested-5000-deep"),
    ]

BAD_REQUESTS = [
    # The body as a whole.
    pytest.param(Bad(b'{"model": "ingress-demo",', None, JSON), id="truncated-json"),
    pytest.param(Bad(b"", None, JSON), id="empty-body"),
    pytest.param(Bad(b"   ", None, JSON), id="blank-body"),
    pytest.param(Bad(body() + b"x", None, JSON), id="trailing-garbage"),
    pytest.param(Bad(spliced("temperature", "NaN"), None, JSON), id="nan-literal"),
    pytest.param(Bad(b"\xef\xbb\xbf" + body(), None, JSON), id="utf8-bom"),
    pytest.param(Bad(b"[]", None), id="json-array"),
    pytest.param(Bad(b'"hello"', None), id="json-string"),
    pytest.param(Bad(b"null", None), id="json-null"),
    pytest.param(Bad(b"42", None), id="json-number"),
    pytest.param(Bad(body().replace(b'"hi"', b'"h\xff\xfei"'), None, JSON), id="invalid-utf8-in-string"),
    pytest.param(Bad(body().replace(b'"hi"', rb'"\ud800"'), None, JSON), id="lone-surrogate-escape"),
    pytest.param(
        Bad(body(tools=[{"type": "function", "function": {"name": "f", "parameters": {"p": "@"}}}])
            .replace(b'"@"', deep(5000).encode()), None, JSON),
        id="parameters-nested-5000-deep",
    ),
    pytest.param(
        Bad(body(response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": {"p": "@"}}})
            .replace(b'"@"', deep(5000).encode()), None, JSON),
        id="schema-nested-5000-deep",
    ),
    # Opaque JSON (a schema, the engine extras) is held to MAX_NESTING levels, and an unknown field too
    # deep to skip is refused as such on every route (it was a RecursionError).
    pytest.param(Bad(deeper_than_allowed(), None, JSON), id="unknown-field-nested-100000-deep"),
    pytest.param(Bad(deeper_than_allowed(990), None, JSON), id="unknown-field-nested-990-deep"),
    pytest.param(
        Bad(body(tools=[{"type": "function", "function": {"name": "f", "parameters": {"p": "@"}}}])
            .replace(b'"@"', deep(MAX_NESTING).encode()), None, JSON),
        id="parameters-nested-one-level-too-deep",
    ),
    pytest.param(
        Bad(body(functions=[{"name": "f", "parameters": {"p": "@"}}])
            .replace(b'"@"', deep(MAX_NESTING).encode()), None, JSON),
        id="legacy-parameters-nested-one-level-too-deep",
    ),
    pytest.param(
        Bad(body(response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": {"p": "@"}}})
            .replace(b'"@"', deep(MAX_NESTING).encode()), None, JSON),
        id="schema-nested-one-level-too-deep",
    ),
    pytest.param(
        Bad(body(tools=[TOOL], tool_choice={"type": "allowed_tools", "allowed_tools": {
            "mode": "auto", "tools": [{"type": "function", "function": {"name": "get_weather"}, "x": "@"}]}})
            .replace(b'"@"', deep(MAX_NESTING).encode()), None, JSON),
        id="allowed-tool-nested-one-level-too-deep",
    ),
    # Wrong types.
    pytest.param(Bad(body(model=1), "model"), id="model-int"),
    pytest.param(Bad(body(model=None), "model"), id="model-null"),
    pytest.param(Bad(body(messages={"role": "user"}), "messages"), id="messages-object"),
    pytest.param(Bad(body(messages="hi"), "messages"), id="messages-string"),
    pytest.param(Bad(message(role="user", content=1), "messages[0].content"), id="content-int"),
    pytest.param(Bad(message(role="user", content=[1]), "messages[0].content[0]"), id="content-part-int"),
    pytest.param(Bad(body(temperature="0.5"), "temperature"), id="temperature-string"),
    pytest.param(Bad(body(temperature=True), "temperature"), id="temperature-bool"),
    pytest.param(Bad(body(stream="yes"), "stream"), id="stream-string"),
    pytest.param(Bad(body(max_tokens=1.5), "max_tokens"), id="max-tokens-float"),
    pytest.param(Bad(body(seed=1.0), "seed"), id="seed-float"),
    pytest.param(Bad(body(tools=TOOL), "tools"), id="tools-object"),
    pytest.param(Bad(body(stop=1), "stop"), id="stop-int"),
    pytest.param(Bad(body(stop=["a", 1]), "stop[1]"), id="stop-item-int"),
    # Missing fields.
    pytest.param(Bad(body(model=MISSING), "model"), id="missing-model"),
    pytest.param(Bad(body(messages=MISSING), "messages"), id="missing-messages"),
    pytest.param(Bad(message(role="user"), "messages[0].content"), id="missing-content"),
    pytest.param(Bad(message(content="hi"), "messages[0].role"), id="missing-role"),
    pytest.param(Bad(message(role="tool", content="14 C"), "messages[0].tool_call_id"), id="missing-tool-call-id"),
    pytest.param(Bad(body(tools=[{"type": "function"}]), "tools[0].function"), id="missing-function"),
    pytest.param(Bad(body(tools=[{"type": "function", "function": {}}]), "tools[0].function.name"),
                 id="missing-function-name"),
    pytest.param(Bad(user_part({"type": "image_url", "image_url": {}}), "messages[0].content[0].image_url.url"),
                 id="missing-image-url"),
    pytest.param(
        Bad(message(role="assistant", tool_calls=[{"type": "function", "function": {"name": "f", "arguments": ""}}]),
            "messages[0].tool_calls[0].id"),
        id="missing-tool-call-id-in-call",
    ),
    pytest.param(
        Bad(message(role="assistant", tool_calls=[{"id": "c", "type": "function", "function": {"name": "f"}}]),
            "messages[0].tool_calls[0].function.arguments"),
        id="missing-arguments",
    ),
    pytest.param(Bad(body(response_format={}), "response_format.type"), id="missing-response-format-type"),
    # Values outside the accepted set.
    pytest.param(Bad(body(messages=[]), "messages"), id="empty-messages"),
    pytest.param(Bad(message(role="robot", content="hi"), "messages[0].role"), id="unknown-role"),
    pytest.param(Bad(user_part({"type": "video", "video": {}}), "messages[0].content[0].type"), id="unknown-part-type"),
    pytest.param(
        Bad(message(role="system", content=[{"type": "image_url", "image_url": {"url": "u"}}]),
            "messages[0].content[0].type"),
        id="image-part-in-system-message",
    ),
    pytest.param(
        Bad(user_part({"type": "image_url", "image_url": {"url": "u", "detail": "ultra"}}),
            "messages[0].content[0].image_url.detail"),
        id="unknown-image-detail",
    ),
    pytest.param(
        Bad(user_part({"type": "input_audio", "input_audio": {"data": "", "format": "flac"}}),
            "messages[0].content[0].input_audio.format"),
        id="unknown-audio-format",
    ),
    pytest.param(
        Bad(message(role="assistant", tool_calls=[{"id": "c", "type": "mcp",
                                                    "function": {"name": "f", "arguments": ""}}]),
            "messages[0].tool_calls[0].type"),
        id="unknown-tool-call-type",
    ),
    pytest.param(
        Bad(message(role="assistant", tool_calls=[{"id": "c", "type": "custom",
                                                    "function": {"name": "f", "arguments": ""}}]),
            "messages[0].tool_calls[0].function"),
        id="custom-tool-call-with-function",
    ),
    pytest.param(Bad(message(role="assistant", tool_calls=[{"id": "c", "type": "custom"}]),
                     "messages[0].tool_calls[0].custom"), id="custom-tool-call-without-custom"),
    pytest.param(Bad(body(tools=[{"type": "custom", "function": {"name": "f"}}]), "tools[0].function"),
                 id="custom-tool-with-function"),
    pytest.param(Bad(body(tools=[{"type": "function"}]), "tools[0].function"), id="function-tool-without-function"),
    pytest.param(Bad(body(tools=[{"type": "custom", "custom": {"name": "g", "format": {"type": "grammar", "grammar": {
        "definition": "x", "syntax": "ebnf"}}}}]), "tools[0].custom.format.grammar.syntax"),
        id="custom-tool-unknown-grammar-syntax"),
    pytest.param(Bad(body(tool_choice={"type": "allowed_tools", "allowed_tools": {"mode": "any", "tools": []}}),
                     "tool_choice.allowed_tools.mode"), id="allowed-tools-unknown-mode"),
    pytest.param(Bad(body(tool_choice={"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": [
        {"type": "function", "function": {"name": "f"}}, "f"]}}), "tool_choice.allowed_tools.tools[1]"),
        id="allowed-tools-entry-not-an-object"),
    pytest.param(Bad(body(tool_choice={"type": "allowed_tools", "function": {"name": "f"}}),
                     "tool_choice.function"), id="allowed-tools-choice-with-function"),
    pytest.param(Bad(message(role="function", content="x"), "messages[0].name"), id="function-message-without-name"),
    pytest.param(Bad(user_part({"type": "text", "text": "a", "prompt_cache_breakpoint": {"mode": "implicit"}}),
                     "messages[0].content[0].prompt_cache_breakpoint.mode"), id="breakpoint-mode-implicit"),
    pytest.param(Bad(user_part({"type": "text", "text": "a", "prompt_cache_breakpoint": {"mode": "explicit",
                                                                                         "ttl": "1h"}}),
                     "messages[0].content[0].prompt_cache_breakpoint.ttl"), id="breakpoint-ttl-1h"),
    pytest.param(Bad(body(audio={"format": "ogg", "voice": "alloy"}), "audio.format"), id="audio-unknown-format"),
    pytest.param(Bad(body(audio={"format": "wav"}), "audio.voice"), id="audio-without-voice"),
    pytest.param(Bad(body(modalities=["video"]), "modalities[0]"), id="modalities-video"),
    pytest.param(Bad(body(modalities=["text", "audio", "text"]), "modalities"), id="modalities-3"),
    pytest.param(Bad(body(prediction={"type": "diff", "content": "x"}), "prediction.type"),
                 id="prediction-unknown-type"),
    pytest.param(Bad(body(prompt_cache_retention="1h"), "prompt_cache_retention"), id="prompt-cache-retention-1h"),
    pytest.param(Bad(body(prompt_cache_key="k" * 257), "prompt_cache_key"), id="prompt-cache-key-257-chars"),
    pytest.param(Bad(body(prompt_cache_options={"ttl": "24h"}), "prompt_cache_options.ttl"),
                 id="prompt-cache-options-ttl-24h"),
    pytest.param(Bad(body(safety_identifier="s" * 129), "safety_identifier"), id="safety-identifier-129-chars"),
    pytest.param(Bad(body(store="no"), "store"), id="store-string"),
    pytest.param(Bad(body(verbosity="max"), "verbosity"), id="verbosity-max"),
    pytest.param(Bad(body(web_search_options={"search_context_size": "huge"}),
                     "web_search_options.search_context_size"), id="web-search-context-size-huge"),
    pytest.param(Bad(body(web_search_options={"user_location": {"type": "approximate", "approximate": {
        "country": "USA"}}}), "web_search_options.user_location.approximate.country"),
        id="web-search-country-3-letters"),
    pytest.param(Bad(body(moderation={"policy": {}}), "moderation.model"), id="moderation-without-model"),
    pytest.param(Bad(body(moderation={"model": "m", "policy": {"input": {"mode": "warn"}}}),
                     "moderation.policy.input.mode"), id="moderation-unknown-mode"),
    pytest.param(Bad(body(functions=[{"name": "f g"}]), "functions[0].name"), id="legacy-function-name-space"),
    pytest.param(Bad(body(functions=[]), "functions"), id="legacy-functions-empty"),
    pytest.param(Bad(body(function_call="required"), "function_call"), id="legacy-function-call-required"),
    pytest.param(Bad(body(response_format={"type": "xml"}), "response_format.type"), id="unknown-response-format"),
    pytest.param(Bad(body(tool_choice="maybe"), "tool_choice"), id="unknown-tool-choice"),
    pytest.param(Bad(body(model=""), "model"), id="model-empty"),
    pytest.param(Bad(body(model="m" * 257), "model"), id="model-257-chars"),
    pytest.param(Bad(message(role="tool", content="x", tool_call_id=""), "messages[0].tool_call_id"),
                 id="tool-call-id-empty"),
    pytest.param(Bad(body(tools=[{"type": "function", "function": {"name": "get weather"}}]),
                     "tools[0].function.name"), id="function-name-space"),
    pytest.param(Bad(body(tools=[{"type": "function", "function": {"name": "f" * 65}}]), "tools[0].function.name"),
                 id="function-name-65-chars"),
    pytest.param(Bad(body(reasoning_effort=""), "reasoning_effort"), id="reasoning-effort-empty"),
    pytest.param(Bad(body(service_tier="t" * 33), "service_tier"), id="service-tier-33-chars"),
    pytest.param(Bad(body(user="u" * 257), "user"), id="user-257-chars"),
    # Unknown fields are refused, as OpenAI does.
    pytest.param(Bad(body(temprature=0.5), "temprature"), id="unknown-top-level-field"),
    pytest.param(Bad(message(role="user", content="hi", mood="happy"), "messages[0].mood"), id="unknown-message-field"),
    pytest.param(Bad(user_part({"type": "text", "text": "a", "extra": 1}), "messages[0].content[0].extra"),
                 id="unknown-part-field"),
    pytest.param(Bad(body(tools=[{"type": "function", "function": {"name": "f", "bar": 1}}]),
                     "tools[0].function.bar"), id="unknown-function-field"),
    pytest.param(Bad(body(stream=True, stream_options={"x": 1}), "stream_options.x"), id="unknown-stream-option"),
    # Numbers out of range.
    pytest.param(Bad(body(temperature=2.5), "temperature"), id="temperature-2.5"),
    pytest.param(Bad(body(temperature=-1), "temperature"), id="temperature-negative"),
    pytest.param(Bad(spliced("temperature", "1e999"), "temperature"), id="temperature-1e999"),
    pytest.param(Bad(body(top_p=1.5), "top_p"), id="top-p-1.5"),
    pytest.param(Bad(body(n=0), "n"), id="n-0"),
    pytest.param(Bad(body(n=129), "n"), id="n-129"),
    pytest.param(Bad(body(max_tokens=0), "max_tokens"), id="max-tokens-0"),
    pytest.param(Bad(body(max_tokens=2**31), "max_tokens"), id="max-tokens-2**31"),
    pytest.param(Bad(body(max_completion_tokens=0), "max_completion_tokens"), id="max-completion-tokens-0"),
    pytest.param(Bad(body(seed=2**63), "seed"), id="seed-2**63"),
    pytest.param(Bad(body(seed=-(2**63) - 1), "seed"), id="seed-below-int64"),
    pytest.param(Bad(body(seed=2**70), "seed"), id="seed-2**70"),
    pytest.param(Bad(body(presence_penalty=3), "presence_penalty"), id="presence-penalty-3"),
    pytest.param(Bad(body(frequency_penalty=-2.5), "frequency_penalty"), id="frequency-penalty--2.5"),
    pytest.param(Bad(body(top_logprobs=21), "top_logprobs"), id="top-logprobs-21"),
    pytest.param(Bad(body(top_logprobs=-1), "top_logprobs"), id="top-logprobs--1"),
    pytest.param(Bad(body(logit_bias={"2147483648": 1}), "logit_bias.2147483648"), id="logit-bias-key-2**31"),
    pytest.param(Bad(body(logit_bias={"4294967295": 1}), "logit_bias.4294967295"), id="logit-bias-key-2**32-1"),
    # Too many items.
    pytest.param(Bad(body(stop=["a", "b", "c", "d", "e"]), "stop"), id="stop-5-strings"),
    pytest.param(Bad(body(metadata={f"k{i}": "v" for i in range(17)}), "metadata"), id="metadata-17-keys"),
    pytest.param(Bad(body(tools=[TOOL] * 129), "tools"), id="tools-129"),
    # Opaque JSON that must be an object.
    pytest.param(Bad(body(tools=[{"type": "function", "function": {"name": "f", "parameters": [1]}}]),
                     "tools[0].function.parameters"), id="parameters-array"),
    pytest.param(Bad(body(tools=[{"type": "function", "function": {"name": "f", "parameters": "{}"}}]),
                     "tools[0].function.parameters"), id="parameters-string"),
    pytest.param(Bad(body(tools=[{"type": "function", "function": {"name": "f", "parameters": None}}]),
                     "tools[0].function.parameters"), id="parameters-null"),
    pytest.param(Bad(body(tools=[TOOL, {"type": "function", "function": {"name": "g", "parameters": 1}}]),
                     "tools[1].function.parameters"), id="parameters-number-second-tool"),
    pytest.param(
        Bad(body(response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": []}}),
            "response_format.json_schema.schema"),
        id="schema-array",
    ),
    # Rules across fields.
    pytest.param(Bad(body(stream_options={"include_usage": True}), "stream_options"), id="stream-options-no-stream"),
    pytest.param(Bad(body(stream=False, stream_options={"include_usage": True}), "stream_options"),
                 id="stream-options-stream-false"),
    pytest.param(Bad(message(role="assistant"), "messages[0].content"), id="assistant-without-content"),
    pytest.param(Bad(body(messages=[USER, {"role": "assistant", "tool_calls": []}]), "messages[1].content"),
                 id="assistant-empty-tool-calls"),
    pytest.param(Bad(body(tool_choice={"type": "function", "function": {"name": "f"}}), "tool_choice.function.name"),
                 id="named-tool-choice-without-tools"),
    pytest.param(Bad(body(tools=[TOOL], tool_choice={"type": "function", "function": {"name": "not_offered"}}),
                     "tool_choice.function.name"),
                 id="named-tool-choice-not-offered"),
    pytest.param(Bad(body(tools=[], tool_choice={"type": "function", "function": {"name": "f"}}),
                     "tool_choice.function.name"),
                 id="named-tool-choice-empty-tools"),
    pytest.param(Bad(body(tools=[TOOL], tool_choice={"type": "custom", "custom": {"name": "get_weather"}}),
                     "tool_choice.custom.name"), id="named-custom-choice-names-a-function-tool"),
    pytest.param(Bad(body(tools=[TOOL], functions=[{"name": "f"}]), "functions"), id="legacy-functions-with-tools"),
    pytest.param(Bad(body(functions=[{"name": "f"}], tool_choice="auto"), "functions"),
                 id="legacy-functions-with-tool-choice"),
    pytest.param(Bad(body(tools=[TOOL], function_call="auto"), "function_call"),
                 id="legacy-function-call-with-tools"),
    pytest.param(Bad(body(functions=[{"name": "f"}], function_call={"name": "g"}), "function_call.name"),
                 id="legacy-function-call-not-offered"),
    pytest.param(Bad(body(functions=[{"name": "f", "parameters": [1]}]), "functions[0].parameters"),
                 id="legacy-parameters-array"),
]

# Refused, but the `param` does not name the field: msgspec reports errors in a dict's keys as
# "at `key` in `$.logit_bias`" (which the codec's path pattern does not read, leaving param None) and
# errors in a dict's values under the placeholder path `$.logit_bias[...]`. Each row lists the params a
# client could act on.
MISNAMED_PARAMS = [
    pytest.param(body(logit_bias={"1": 101}), {"logit_bias", "logit_bias.1"}, id="logit-bias-value-101"),
    pytest.param(body(logit_bias={"abc": 1}), {"logit_bias", "logit_bias.abc"}, id="logit-bias-key-abc"),
    pytest.param(body(logit_bias={"99999999999": 1}), {"logit_bias", "logit_bias.99999999999"},
                 id="logit-bias-key-11-digits"),
    pytest.param(body(metadata={"k" * 65: "v"}), {"metadata", "metadata." + "k" * 65}, id="metadata-key-65-chars"),
    pytest.param(body(metadata={"": "v"}), {"metadata", "metadata."}, id="metadata-key-empty"),
    pytest.param(body(metadata={"k": "v" * 513}), {"metadata", "metadata.k"}, id="metadata-value-513-chars"),
]


def deep_buffer(where: str, levels: int, provider: str) -> bytes:
    """A buffer as a binary client may send it to a bridge (the edge reads none of its JSON), with
    `where` (parameters, schema, extra_json or a tool call's arguments) nested `levels` deep."""
    nested = "[" * levels + "]" * levels
    deep_object = msgspec.Raw(f'{{"p":{nested}}}'.encode())
    tools = [chat.Tool(function=chat.FunctionDef(name="f", parameters=deep_object))]
    messages: list[chat.Message] = [chat.UserMessage(content="hi")]
    if where == "arguments":
        messages.append(chat.AssistantMessage(tool_calls=[chat.ToolCallIn(
            id="c1", function=chat.FunctionCallIn(name="f", arguments=nested))]))
        messages.append(chat.ToolMessage(content="done", tool_call_id="c1"))
    schema = chat.JsonSchemaResponseFormat(chat.JsonSchemaFormat(name="s", schema=deep_object))
    request = chat.ChatCompletionRequest(model="m", messages=messages, tools=tools if where == "parameters" else None,
                                         response_format=schema if where == "schema" else None)
    extra = f'{{"x":{nested}}}' if where == "extra_json" else None
    return bytes(encode_request(request, "r", Passport(), provider, None, extra))


def assert_nested_too_deeply(build: Callable[[], object]) -> None:
    """`build` refuses JSON nested too deeply as the edge refuses such a body: its 400."""
    with pytest.raises(Unsupported) as raised:
        build()
    info = raised.value.info()
    assert (info.status, info.type, info.code, info.param) == (400, "invalid_request_error", "invalid_json", None)
    assert info.message == "The request body is nested too deeply."
