"""decode_chat_request: every bad body is a 400 naming the field; every valid field is carried."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from bad_requests import (
    BAD_REQUESTS,
    MISNAMED_PARAMS,
    MISSING,
    TOOL,
    USER,
    Bad,
    body,
    deep,
    deeper_than_allowed,
    message,
)

from ingress.encoding.requests import encode_request
from ingress.errors import InvalidRequest
from ingress.oai import chat
from ingress.oai.codec import (
    MAX_NESTING,
    NESTED_TOO_DEEPLY,
    check_nesting,
    decode_chat_request,
    decode_chat_request_forwarding,
)
from ingress.wire import read_request
from ingress.wire.passport import Passport


def refusal(raw: bytes) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        decode_chat_request(raw)
    return info.value


@pytest.mark.parametrize("bad", BAD_REQUESTS)
def test_bad_request_is_refused_with_its_param(bad: Bad) -> None:
    exc = refusal(bad.body)
    assert (exc.status, exc.type, exc.code, exc.param) == (400, "invalid_request_error", bad.code, bad.param)
    if bad.param is not None:
        assert f"'{bad.param}'" in exc.message
    # Nothing internal (a RecursionError, msgspec's exception) travels along with the error.
    assert exc.__cause__ is None and (exc.__context__ is None or exc.__suppress_context__)


@pytest.mark.parametrize("raw", [pytest.param(row.values[0], id=row.id) for row in MISNAMED_PARAMS])
def test_bad_dict_entry_is_refused(raw: bytes) -> None:
    exc = refusal(raw)
    assert (exc.status, exc.type, exc.code) == (400, "invalid_request_error", "invalid_request")


@pytest.mark.parametrize(("raw", "params"), MISNAMED_PARAMS)
def test_dict_key_and_value_errors_name_the_field(raw: bytes, params: set[str]) -> None:
    assert refusal(raw).param in params


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(body(tools=[{"type": "function", "function": {"name": "get_weather\n"}}]), id="function-name"),
        pytest.param(body(tools=[TOOL], tool_choice={"type": "function", "function": {"name": "get_weather\n"}}),
                     id="tool-choice-name"),
        pytest.param(body(response_format={"type": "json_schema", "json_schema": {"name": "answer\n"}}),
                     id="json-schema-name"),
        pytest.param(body(logit_bias={"50256\n": 1}), id="logit-bias-token"),
    ],
)
def test_name_with_trailing_newline_is_refused(raw: bytes) -> None:
    assert refusal(raw).status == 400


def test_logit_bias_token_spelled_twice_is_refused_or_merged() -> None:
    raw = body(logit_bias={"50256": -100, "050256": 100})
    try:
        request = decode_chat_request(raw)
    except InvalidRequest as exc:
        assert exc.param is not None and exc.param.startswith("logit_bias")
        return
    view = read_request(bytes(encode_request(request, "req-1", Passport())))
    tokens = [view.LogitBias(i).TokenId() for i in range(view.LogitBiasLength())]
    assert len(tokens) == len(set(tokens))


def test_error_renders_in_openai_shape() -> None:
    exc = refusal(body(temperature=2.5))
    assert exc.body() == {
        "error": {
            "message": "Invalid value for 'temperature': Expected `float` <= 2.0.",
            "type": "invalid_request_error",
            "param": "temperature",
            "code": "invalid_request",
        }
    }


# --- what is accepted ----------------------------------------------------------------------------

PARAMETERS = {"type": "object", "properties": {"city": {"type": "string", "description": "Zürich, 東京"}},
              "required": ["city"], "additionalProperties": False}

MAXIMAL: dict[str, Any] = {
    "model": "gpt-4o-mini",
    "messages": [
        {"role": "system", "content": "be brief", "name": "policy"},
        {"role": "developer", "content": [{"type": "text", "text": "answer in French"}], "name": "dev"},
        {
            "role": "user",
            "name": "ana",
            "content": [
                {"type": "text", "text": "what is in this image? 🚀",
                 "prompt_cache_breakpoint": {"mode": "explicit", "ttl": "12h"}},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "original"},
                 "prompt_cache_breakpoint": {"mode": "explicit"}},
                {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"},
                 "prompt_cache_breakpoint": {"mode": "explicit", "ttl": "30m"}},
                {"type": "file", "file": {"file_data": "JVBERi0=", "file_id": "file-1", "filename": "a.pdf"},
                 "prompt_cache_breakpoint": {"mode": "explicit"}},
            ],
        },
        {
            "role": "assistant",
            "name": "bot",
            "content": [{"type": "text", "text": "let me check"}, {"type": "refusal", "refusal": "not that"}],
            "refusal": "partly",
            "tool_calls": [{"id": "call_1", "type": "function",
                            "function": {"name": "get_weather", "arguments": "{\"city\":\"Zürich\"}"}},
                           {"id": "call_2", "type": "custom", "custom": {"name": "run_sql", "input": "SELECT 1"}}],
            "audio": {"id": "audio_1"},
            "function_call": {"name": "get_weather", "arguments": "{}"},
        },
        {"role": "function", "name": "get_weather", "content": "14 °C"},
        {"role": "tool", "content": [{"type": "text", "text": "14 °C"}], "tool_call_id": "call_1"},
        {"role": "user", "content": "and tomorrow?"},
    ],
    "frequency_penalty": -2.0,
    "logit_bias": {"0": -100.0, "50256": 100.0, "2147483647": 0.5},
    "logprobs": True,
    "top_logprobs": 20,
    "max_tokens": 2**31 - 1,
    "max_completion_tokens": 1,
    "metadata": {**{f"key{i}": "v" for i in range(15)}, "k" * 64: "v" * 512},
    "n": 128,
    "parallel_tool_calls": False,
    "presence_penalty": 2.0,
    "reasoning_effort": "high",
    "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "description": "d",
                                                               "schema": PARAMETERS, "strict": True}},
    "seed": -(2**63),
    "service_tier": "default",
    "stop": ["\n\n", "END", "终", ""],
    "stream": True,
    "stream_options": {"include_usage": True, "include_obfuscation": False},
    "temperature": 2.0,
    "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Wetter",
                                                "parameters": PARAMETERS, "strict": True}}],
    "top_p": 1.0,
    "user": "u" * 256,
    "audio": {"format": "pcm16", "voice": {"id": "voice_1"}},
    "modalities": ["text", "audio"],
    "moderation": {"model": "omni-moderation-latest", "policy": {"input": {"mode": "block"},
                                                                 "output": {"mode": "score"}}},
    "prediction": {"type": "content", "content": [{"type": "text", "text": "def f(): pass"}]},
    "prompt_cache_key": "k" * 256,
    "prompt_cache_options": {"mode": "explicit", "ttl": "30m"},
    "prompt_cache_retention": "24h",
    "safety_identifier": "s" * 128,
    "store": False,
    "verbosity": "low",
    "web_search_options": {"search_context_size": "high", "user_location": {
        "type": "approximate", "approximate": {"city": "Zürich", "country": "CH", "region": "ZH",
                                               "timezone": "Europe/Zurich"}}},
}
LEGACY = ("function_call", "functions")  # the legacy forms of tools and tool_choice: not sent with them


def test_maximal_request_sets_every_field() -> None:
    request = decode_chat_request(json.dumps(MAXIMAL).encode())
    assert [f for f in request.__struct_fields__ if getattr(request, f) is None] == list(LEGACY)
    assert [type(m).__name__ for m in request.messages] == [
        "SystemMessage", "DeveloperMessage", "UserMessage", "AssistantMessage", "FunctionMessage", "ToolMessage",
        "UserMessage"]
    user = request.messages[2]
    assert isinstance(user, chat.UserMessage) and isinstance(user.content, list)
    assert [type(p).__name__ for p in user.content] == ["TextPart", "ImagePart", "AudioPart", "FilePart"]
    assert request.tools is not None and request.tools[0].function is not None
    assert json.loads(bytes(request.tools[0].function.parameters)) == PARAMETERS
    assert isinstance(request.tool_choice, chat.NamedToolChoice) and request.tool_choice.function is not None
    assert request.tool_choice.function.name == "get_weather"
    assert request.stop == ["\n\n", "END", "终", ""]
    assert (request.seed, request.max_tokens, request.n, request.temperature) == (-(2**63), 2**31 - 1, 128, 2.0)
    # Decoding is idempotent: what the codec accepted, re-encoded, is accepted as the same request.
    assert decode_chat_request(msgspec.json.encode(request)) == request


@pytest.mark.parametrize(
    ("fields", "attribute", "value"),
    [
        pytest.param({"temperature": 0}, "temperature", 0.0, id="temperature-0"),
        pytest.param({"temperature": 1}, "temperature", 1.0, id="temperature-int"),
        pytest.param({"top_p": 0.0}, "top_p", 0.0, id="top-p-0"),
        pytest.param({"n": 1}, "n", 1, id="n-1"),
        pytest.param({"max_tokens": 1}, "max_tokens", 1, id="max-tokens-1"),
        pytest.param({"seed": 2**63 - 1}, "seed", 2**63 - 1, id="seed-int64-max"),
        pytest.param({"top_logprobs": 0}, "top_logprobs", 0, id="top-logprobs-0"),
        pytest.param({"presence_penalty": -2}, "presence_penalty", -2.0, id="presence-penalty--2"),
        pytest.param({"logit_bias": {"1": -100}}, "logit_bias", {"1": -100.0}, id="logit-bias--100"),
        pytest.param({"logit_bias": {}}, "logit_bias", {}, id="logit-bias-empty"),
        pytest.param({"stop": "END"}, "stop", "END", id="stop-string"),
        pytest.param({"stop": []}, "stop", [], id="stop-empty-list"),
        pytest.param({"metadata": {}}, "metadata", {}, id="metadata-empty"),
        pytest.param({"tool_choice": "required", "tools": [TOOL]}, "tool_choice", "required",
                     id="tool-choice-required"),
        pytest.param({"tool_choice": "none"}, "tool_choice", "none", id="tool-choice-none-without-tools"),
        pytest.param({"stream": False}, "stream", False, id="stream-false"),
        pytest.param({"response_format": {"type": "json_object"}}, "response_format", chat.JsonObjectFormat(),
                     id="response-format-json-object"),
        pytest.param({"messages": [USER, {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c", "function": {"name": "f", "arguments": ""}}]}]}, "messages",
            [chat.UserMessage(content="hi"), chat.AssistantMessage(tool_calls=[
                chat.ToolCallIn(id="c", function=chat.FunctionCallIn(name="f", arguments=""))])],
            id="assistant-null-content-with-tool-calls"),
        pytest.param({"messages": [{"role": "user", "content": ""}]}, "messages", [chat.UserMessage(content="")],
                     id="empty-content"),
        pytest.param({"messages": [{"role": "user", "content": []}]}, "messages", [chat.UserMessage(content=[])],
                     id="empty-parts"),
    ],
)
def test_boundary_values_are_accepted(fields: dict[str, Any], attribute: str, value: Any) -> None:
    assert getattr(decode_chat_request(body(**fields)), attribute) == value


def test_tool_parameters_are_kept_verbatim() -> None:
    raw = body()[:-1] + b',"tools":[{"type":"function","function":{"name":"f","parameters": { "a" : [1, 2.50] } }}]}'
    request = decode_chat_request(raw)
    assert request.tools is not None and request.tools[0].function is not None
    assert bytes(request.tools[0].function.parameters) == b'{ "a" : [1, 2.50] }'


def test_duplicate_keys_keep_the_last_value() -> None:
    # As with Python's json module; OpenAI's own behaviour for duplicate keys is not documented.
    raw = b'{"model": "a", "model": "b", "messages": [{"role": "user", "content": "hi"}]}'
    assert decode_chat_request(raw).model == "b"


# --- fields that are not OpenAI's, on a route that forwards them ---------------------------------


def forwarding(raw: bytes, forwards: bool = True) -> tuple[chat.ChatCompletionRequest, str | None]:
    asked: list[str] = []

    def route_forwards(model: str) -> bool:
        asked.append(model)
        return forwards

    result = decode_chat_request_forwarding(raw, route_forwards)
    assert asked in ([], ["ingress-demo"])
    return result


def test_extras_are_split_from_the_openai_fields() -> None:
    request, extra = forwarding(body(top_k=40, temperature=0.5, guided_json={"type": "object"}, min_p=0.1))
    assert request == decode_chat_request(body(temperature=0.5))
    assert extra is not None and json.loads(extra) == {"top_k": 40, "guided_json": {"type": "object"}, "min_p": 0.1}


def test_a_body_without_extras_has_none_and_asks_no_route() -> None:
    assert forwarding(body(temperature=0.5)) == (decode_chat_request(body(temperature=0.5)), None)


@pytest.mark.parametrize(("raw", "forwards", "param"), [
    pytest.param(body(top_k=40), False, "top_k", id="route-refuses"),
    pytest.param(body(top_k=40, temperature=5), True, "temperature", id="bad-openai-field-after-the-extra"),
    pytest.param(body(temperature=5, top_k=40), True, "temperature", id="bad-openai-field-before-the-extra"),
    pytest.param(message(role="user", content="hi", top_k=1), True, "messages[0].top_k", id="nested-extra"),
    pytest.param(body(model=MISSING, top_k=1), True, "top_k", id="no-model"),
    pytest.param(b'{"top_k": 1, "model": 7, "messages": [{"role": "user", "content": "hi"}]}', True, "top_k",
                 id="model-not-a-string"),
])
def test_what_forwarding_still_refuses(raw: bytes, forwards: bool, param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        decode_chat_request_forwarding(raw, lambda model: forwards)
    assert (info.value.status, info.value.param) == (400, param)


@pytest.mark.parametrize(("levels", "forwards"), [
    pytest.param(MAX_NESTING + 1, True, id="one-level-too-deep-to-forward"),
    pytest.param(990, True, id="too-deep-to-skip-route-forwards"),
    pytest.param(990, False, id="too-deep-to-skip-route-refuses"),
    pytest.param(100_000, True, id="100000-deep-route-forwards"),
    pytest.param(100_000, False, id="100000-deep-route-refuses"),
])
def test_an_extra_nested_too_deeply_is_refused_as_such(levels: int, forwards: bool) -> None:
    # Too deep to read (the model is then unknown, so on any route), or to forward.
    with pytest.raises(InvalidRequest) as info:
        decode_chat_request_forwarding(deeper_than_allowed(levels), lambda model: forwards)
    exc = info.value
    assert (exc.status, exc.code, exc.param, exc.message) == (400, "invalid_json", None, NESTED_TOO_DEEPLY)
    assert exc.__cause__ is None and exc.__suppress_context__


def test_opaque_json_and_extras_at_the_nesting_limit_are_carried() -> None:
    schema = {"p": "@"}
    raw = body(tools=[{"type": "function", "function": {"name": "f", "parameters": schema}}], x="@")
    raw = raw.replace(b'"@"', deep(MAX_NESTING - 1).encode(), 1).replace(b'"@"', deep(MAX_NESTING).encode(), 1)
    request, extra = forwarding(raw)
    assert request.tools is not None and request.tools[0].function is not None
    assert bytes(request.tools[0].function.parameters) == b'{"p": ' + deep(MAX_NESTING - 1).encode() + b"}"
    assert extra == '{"x":' + deep(MAX_NESTING) + "}"


@pytest.mark.parametrize("value", [
    pytest.param("[" * (MAX_NESTING + 1), id="brackets-in-a-string"),
    pytest.param(['"[', "\\[{", "\\"] * MAX_NESTING, id="escapes-and-brackets-in-strings"),
    pytest.param([[1]] * MAX_NESTING, id="many-shallow-arrays"),
])
def test_brackets_that_do_not_nest_are_not_counted_as_depth(value: object) -> None:
    check_nesting(json.dumps({"p": value}).encode())


def test_brackets_in_strings_do_not_hide_depth() -> None:
    value: object = "x"
    for _ in range(MAX_NESTING):
        value = ['\\"]}', value]  # each level also holds a string that closes two, were it read as JSON
    check_nesting(json.dumps(value).encode())
    with pytest.raises(InvalidRequest) as info:
        check_nesting(json.dumps({"p": value}).encode())
    assert (info.value.code, info.value.param) == ("invalid_json", None)
