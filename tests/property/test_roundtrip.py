"""Every buffer we write passes the C++ Verifier and reads back as what was written.

Requests go OpenAI JSON → decode_chat_request → encode → (Verifier) → decode_request and are compared
as JSON. A few things are canonical on the wire rather than lost; `canonical()` applies them to both
sides before comparing:

- `stop` given as a string travels as a one-element list;
- `stream: false` and an absent `stream` are the same (the wire carries a bool);
- of `stream_options.include_usage` only `true` travels (false and absent are the same);
- `tools: []` travels as no tools;
- legacy `functions` / `function_call` travel as the `tools` / `tool_choice` they mean (the buffer's
  `legacy_functions` says they were sent so);
- `temperature` travels as float32 and comes back as the shortest decimal of that float32.

Logit-bias token ids are generated without leading zeros: "007" and "7" are the same token on the
wire (see test_codec for what that means for a request that spells one token twice).

Every buffer also reads back the same through the generated readers (readers.py) as through flatc's
own accessors (tests/support/flatc_reference.py).

Answers (Response, Chunk, ErrorInfo) come back field for field, except that a Chunk's `created` of 0
reads back as None (0 is the schema default, so "unset" and 0 are one value) and a FunctionCall `type`
of "" reads back as "function".
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
import stock_buffers
from cxx_oracle import CxxVerifier
from flatc_reference import flatc_read, same
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingress import wire
from ingress.encoding.reading import decode_request
from ingress.encoding.requests import encode_request
from ingress.encoding.stock import encode_request_stock
from ingress.oai import chat
from ingress.oai.codec import decode_chat_request
from ingress.wire import decode
from ingress.wire._generated import readers
from ingress.wire.decode import shortest_float32
from ingress.wire.passport import Passport
from ingress.wire.stock import BuilderPool

pytestmark = pytest.mark.cxx

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)

INT32_MAX = 2**31 - 1

# --- strings -------------------------------------------------------------------------------------

SPECIAL = ["", " ", "é", "日本語", "🚀", "👩‍👩‍👧", "\x00", "a\nb\r\n", "\u2028", '"\\', "\ufeff", "\U0010ffff"]
HUGE = ["x" * 100_000, "🚀" * 25_000, "é\x00" * 20_000]

text = st.one_of(st.text(max_size=30), st.sampled_from(SPECIAL))
# Message content and tool arguments are where prompts are long.
long_text = st.one_of(text, text, text, st.sampled_from(HUGE))


def bounded(min_size: int, max_size: int) -> st.SearchStrategy[str]:
    return st.text(min_size=min_size, max_size=max_size)


function_name = st.text(alphabet="abcXYZ019_-", min_size=1, max_size=64)


def u(bits: int) -> st.SearchStrategy[int]:
    top = 2**bits - 1
    return st.one_of(st.integers(0, top), st.sampled_from([0, top]))


def i(bits: int) -> st.SearchStrategy[int]:
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    return st.one_of(st.integers(low, high), st.sampled_from([low, -1, 0, high]))


def nullable(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """An optional field sent as a value or as an explicit null."""
    return st.one_of(strategy, st.none())


# --- opaque JSON ---------------------------------------------------------------------------------

json_scalar = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                        st.floats(allow_nan=False, allow_infinity=False), text)
json_value = st.recursive(json_scalar, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                               st.dictionaries(text, inner, max_size=3)), max_leaves=8)
json_object = st.dictionaries(text, json_value, max_size=4)

# --- request -------------------------------------------------------------------------------------

breakpoint_ = {"prompt_cache_breakpoint": nullable(st.fixed_dictionaries(
    {"mode": st.just("explicit")}, optional={"ttl": nullable(st.sampled_from(["30m", "12h"]))}))}
text_part = st.fixed_dictionaries({"type": st.just("text"), "text": long_text}, optional=breakpoint_)
refusal_part = st.fixed_dictionaries({"type": st.just("refusal"), "refusal": text})
image_part = st.fixed_dictionaries({"type": st.just("image_url"), "image_url": st.fixed_dictionaries(
    {"url": bounded(1, 30)}, optional={"detail": nullable(st.sampled_from(["auto", "low", "high", "original"]))})},
    optional=breakpoint_)
audio_part = st.fixed_dictionaries({"type": st.just("input_audio"), "input_audio": st.fixed_dictionaries(
    {"data": text, "format": st.sampled_from(["wav", "mp3"])})}, optional=breakpoint_)
file_part = st.fixed_dictionaries({"type": st.just("file"), "file": st.fixed_dictionaries(
    {}, optional={"file_data": nullable(text), "file_id": nullable(text), "filename": nullable(text)})},
    optional=breakpoint_)
user_part = st.one_of(text_part, image_part, audio_part, file_part)


def content(part: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(long_text, st.lists(part, max_size=4))


tool_call = st.one_of(
    st.fixed_dictionaries(
        {"id": bounded(1, 20), "function": st.fixed_dictionaries({"name": text, "arguments": long_text})},
        optional={"type": st.just("function")}),
    st.fixed_dictionaries({"id": bounded(1, 20), "type": st.just("custom"),
                           "custom": st.fixed_dictionaries({"name": text, "input": long_text})}),
)
named = {"name": nullable(text)}
system_message = st.fixed_dictionaries({"role": st.just("system"), "content": content(text_part)}, optional=named)
developer_message = st.fixed_dictionaries({"role": st.just("developer"), "content": content(text_part)},
                                          optional=named)
user_message = st.fixed_dictionaries({"role": st.just("user"), "content": content(user_part)}, optional=named)
tool_message = st.fixed_dictionaries(
    {"role": st.just("tool"), "content": content(text_part), "tool_call_id": bounded(1, 20)})


@st.composite
def assistant_message(draw: st.DrawFn) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant"}
    body = draw(st.one_of(st.none(), content(st.one_of(text_part, refusal_part))))
    calls = draw(st.one_of(st.none(), st.lists(tool_call, max_size=3)))
    if body is None and not calls:
        calls = [draw(tool_call)]
    if body is not None or draw(st.booleans()):
        message["content"] = body
    if calls is not None:
        message["tool_calls"] = calls
    message.update(draw(st.fixed_dictionaries({}, optional={
        "name": nullable(text), "refusal": nullable(text),
        "audio": nullable(st.fixed_dictionaries({"id": bounded(1, 20)})),
        "function_call": nullable(st.fixed_dictionaries({"name": text, "arguments": long_text}))})))
    return message


function_message = st.fixed_dictionaries({"role": st.just("function"), "content": nullable(long_text), "name": text})
message = st.one_of(system_message, developer_message, user_message, assistant_message(), tool_message,
                    function_message)

custom_format = st.one_of(st.just({"type": "text"}), st.fixed_dictionaries({"type": st.just("grammar"), "grammar": (
    st.fixed_dictionaries({"definition": long_text, "syntax": st.sampled_from(["lark", "regex"])}))}))
tool = st.one_of(
    st.fixed_dictionaries(
        {"function": st.fixed_dictionaries({"name": function_name}, optional={
            "description": nullable(text), "parameters": json_object, "strict": nullable(st.booleans())})},
        optional={"type": st.just("function")}),
    st.fixed_dictionaries({"type": st.just("custom"), "custom": st.fixed_dictionaries(
        {"name": function_name}, optional={"description": nullable(text), "format": nullable(custom_format)})}),
)
legacy_function = st.fixed_dictionaries({"name": function_name}, optional={
    "description": nullable(text), "parameters": json_object})
response_format = st.one_of(
    st.just({"type": "text"}),
    st.just({"type": "json_object"}),
    st.fixed_dictionaries({"type": st.just("json_schema"), "json_schema": st.fixed_dictionaries(
        {"name": function_name},
        optional={"description": nullable(text), "schema": json_object, "strict": nullable(st.booleans())})}),
)
float32_temperature = st.floats(0.0, 2.0, width=32).map(shortest_float32)
token_id = st.one_of(st.integers(0, INT32_MAX), st.sampled_from([0, INT32_MAX])).map(str)

OPTIONAL_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "frequency_penalty": nullable(st.floats(-2.0, 2.0)),
    "logit_bias": nullable(st.dictionaries(token_id, st.floats(-100.0, 100.0), max_size=5)),
    "logprobs": nullable(st.booleans()),
    "top_logprobs": nullable(st.integers(0, 20)),
    "max_tokens": nullable(st.one_of(st.integers(1, INT32_MAX), st.just(INT32_MAX))),
    "max_completion_tokens": nullable(st.one_of(st.integers(1, INT32_MAX), st.just(1))),
    "metadata": nullable(st.dictionaries(bounded(1, 64), st.one_of(bounded(0, 30), st.just("v" * 512)), max_size=16)),
    "n": nullable(st.integers(1, 128)),
    "parallel_tool_calls": nullable(st.booleans()),
    "presence_penalty": nullable(st.floats(-2.0, 2.0)),
    "reasoning_effort": nullable(bounded(1, 32)),
    "response_format": nullable(response_format),
    "seed": nullable(i(64)),
    "service_tier": nullable(bounded(1, 32)),
    "stop": nullable(st.one_of(text, st.lists(text, max_size=4))),
    "temperature": nullable(st.one_of(float32_temperature, st.floats(0.0, 2.0))),
    "tools": nullable(st.lists(tool, max_size=4)),
    "top_p": nullable(st.floats(0.0, 1.0)),
    "user": nullable(bounded(0, 256)),
    "audio": nullable(st.fixed_dictionaries({
        "format": st.sampled_from(["wav", "aac", "mp3", "flac", "opus", "pcm16"]),
        "voice": st.one_of(bounded(1, 256), st.fixed_dictionaries({"id": bounded(1, 20)}))})),
    "modalities": nullable(st.lists(st.sampled_from(["text", "audio"]), max_size=2)),
    "moderation": nullable(st.fixed_dictionaries({"model": bounded(1, 256)}, optional={"policy": nullable(
        st.fixed_dictionaries({}, optional={side: nullable(st.fixed_dictionaries(
            {"mode": st.sampled_from(["score", "block"])})) for side in ("input", "output")}))})),
    "prediction": nullable(st.fixed_dictionaries({"type": st.just("content"), "content": content(text_part)})),
    "prompt_cache_key": nullable(bounded(0, 256)),
    "prompt_cache_options": nullable(st.fixed_dictionaries({}, optional={
        "mode": nullable(st.sampled_from(["implicit", "explicit"])), "ttl": nullable(st.just("30m"))})),
    "prompt_cache_retention": nullable(st.sampled_from(["in_memory", "24h"])),
    "safety_identifier": nullable(bounded(0, 128)),
    "store": nullable(st.booleans()),
    "verbosity": nullable(st.sampled_from(["low", "medium", "high"])),
    "web_search_options": nullable(st.fixed_dictionaries({}, optional={
        "search_context_size": nullable(st.sampled_from(["low", "medium", "high"])),
        "user_location": nullable(st.fixed_dictionaries({"type": st.just("approximate"), "approximate": (
            st.fixed_dictionaries({}, optional={
                "city": nullable(bounded(0, 256)), "country": nullable(st.sampled_from(["US", "ch", "JP"])),
                "region": nullable(text), "timezone": nullable(text)}))}))})),
}


@st.composite
def chat_request(draw: st.DrawFn) -> dict[str, Any]:
    doc = draw(st.fixed_dictionaries(
        {"model": bounded(1, 256), "messages": st.lists(message, min_size=1, max_size=6)}, optional=OPTIONAL_FIELDS))
    stream = draw(st.sampled_from([None, False, True, "absent"]))
    if stream != "absent":
        doc["stream"] = stream
    if stream is True and draw(st.booleans()):
        doc["stream_options"] = draw(st.fixed_dictionaries({}, optional={
            "include_usage": nullable(st.booleans()), "include_obfuscation": nullable(st.booleans())}))
    if "tools" not in doc and draw(st.booleans()):  # the legacy form instead
        functions = draw(st.lists(legacy_function, min_size=1, max_size=3))
        doc["functions"] = functions
        legacy: list[Any] = [None, "none", "auto", {"name": functions[0]["name"]}, "absent"]
        if (function_call := draw(st.sampled_from(legacy))) != "absent":
            doc["function_call"] = function_call
        return doc
    choices: list[Any] = [None, "none", "auto", "required"]
    for t in (doc.get("tools") or [])[:1]:
        kind = t.get("type", "function")
        choices.append({"type": kind, kind: {"name": t[kind]["name"]}})
        mode = draw(st.sampled_from(["auto", "required"]))
        choices.append({"type": "allowed_tools", "allowed_tools": {
            "mode": mode, "tools": [{"type": kind, kind: {"name": t[kind]["name"]}}]}})
    choice = draw(st.sampled_from([*choices, "absent"]))
    if choice != "absent":
        doc["tool_choice"] = choice
    return doc


passports = st.builds(
    Passport,
    tenant_id=nullable(text), key_id=nullable(text), prompt_tokens_estimate=u(32), prefix_hash=u(64),
    priority=i(8), deadline_unix_ms=i(64), traceparent=nullable(text), tracestate=nullable(text),
    prefix_blocks=nullable(st.lists(u(64), max_size=40)), conversation_block=u(32),
)


def canonical(request: chat.ChatCompletionRequest) -> bytes:
    """The request as JSON, with the wire's canonical forms (see the module docstring) applied."""
    options = request.stream_options
    if options is not None:
        options = chat.StreamOptions(include_usage=options.include_usage or None,
                                     include_obfuscation=options.include_obfuscation)
    temperature = request.temperature
    if temperature is not None:
        temperature = shortest_float32(struct.unpack("<f", struct.pack("<f", temperature))[0])
    tools, tool_choice = request.tools, request.tool_choice
    if request.functions is not None:
        tools = [chat.Tool(function=chat.FunctionDef(name=f.name, description=f.description, parameters=f.parameters))
                 for f in request.functions]
    if (legacy := request.function_call) is not None:
        tool_choice = legacy if isinstance(legacy, str) else chat.NamedToolChoice(function=legacy)
    return msgspec.json.encode(msgspec.structs.replace(
        request,
        stop=[request.stop] if isinstance(request.stop, str) else request.stop,
        stream=request.stream or None,
        stream_options=options if options != chat.StreamOptions() else None,
        tools=tools or None,
        tool_choice=tool_choice,
        functions=None,
        function_call=None,
        temperature=temperature,
    ))


RequestEncoder = Callable[[chat.ChatCompletionRequest, str, Passport], bytes]
_builders = BuilderPool(size=2)  # reused across examples on purpose

REQUEST_ENCODERS = [
    pytest.param(encode_request, id="generated"),
    pytest.param(lambda request, rid, passport: encode_request_stock(_builders, request, rid, passport),
                 id="stock"),
]


@pytest.mark.parametrize("encode_request", REQUEST_ENCODERS)
@SETTINGS
@given(doc=chat_request(), ascii_only=st.booleans(), request_id=text, passport=passports)
def test_request_round_trips_through_the_wire(
    cxx_verifier: CxxVerifier, encode_request: RequestEncoder, doc: dict[str, Any], ascii_only: bool,
    request_id: str, passport: Passport,
) -> None:
    request = decode_chat_request(json.dumps(doc, ensure_ascii=ascii_only).encode())
    buf = encode_request(request, request_id, passport)
    assert cxx_verifier.verify("request", buf)

    assert canonical(decode_request(buf)) == canonical(request)
    assert same(readers.read_CompletionRequest(bytes(buf)), flatc_read("CompletionRequest", bytes(buf)))
    view = decode.read_request(buf)
    assert view.RequestId() == request_id.encode()
    p = view.Passport()
    assert Passport(
        tenant_id=_s(p.TenantId()), key_id=_s(p.KeyId()), prompt_tokens_estimate=p.PromptTokensEstimate(),
        prefix_hash=p.PrefixHash(), priority=p.Priority(), deadline_unix_ms=p.DeadlineUnixMs(),
        traceparent=_s(p.Traceparent()), tracestate=_s(p.Tracestate()),
        prefix_blocks=None if p.PrefixBlocksIsNone() else [p.PrefixBlocks(j) for j in range(p.PrefixBlocksLength())],
        conversation_block=p.ConversationBlock(),
    ) == passport


def _s(value: bytes | None) -> str | None:
    return None if value is None else value.decode()


@SETTINGS
@given(doc=chat_request(), request_id=text, passport=passports)
def test_both_encoders_write_the_same_request(doc: dict[str, Any], request_id: str, passport: Passport) -> None:
    request = decode_chat_request(json.dumps(doc).encode())
    generated = bytes(encode_request(request, request_id, passport))
    built = encode_request_stock(BuilderPool(), request, request_id, passport)
    assert msgspec.json.encode(decode_request(generated)) == msgspec.json.encode(decode_request(built))


@SETTINGS
@given(doc=chat_request(), extras=st.dictionaries(bounded(1, 20), json_value, min_size=1, max_size=4))
def test_engine_extras_travel_verbatim(cxx_verifier: CxxVerifier, doc: dict[str, Any], extras: dict[str, Any]) -> None:
    # A forwarding route's extras: one JSON object, as text, beside the request (codec.py splits them).
    request = decode_chat_request(json.dumps(doc).encode())
    extra_json = json.dumps(extras, ensure_ascii=False)
    for buf in (bytes(encode_request(request, "r", Passport(), "openai", None, extra_json)),
                encode_request_stock(_builders, request, "r", Passport(), "openai", None, extra_json)):
        assert cxx_verifier.verify("request", buf)
        assert decode.read_request(buf).ExtraJson() == extra_json.encode()
        assert canonical(decode_request(buf)) == canonical(request)


# --- answers -------------------------------------------------------------------------------------

finish_reason = st.sampled_from([None, "stop", "length", "tool_calls", "content_filter", "pause_turn", "refusal"])
usage = st.builds(wire.Usage, prompt_tokens=u(32), completion_tokens=u(32), total_tokens=u(32),
                  cached_tokens=u(32), reasoning_tokens=u(32), prompt_audio_tokens=u(32),
                  completion_audio_tokens=u(32), accepted_prediction_tokens=u(32), rejected_prediction_tokens=u(32),
                  cache_write_tokens=u(32), prompt_image_tokens=u(32), prompt_text_tokens=u(32),
                  completion_text_tokens=u(32), web_search_requests=u(32), web_fetch_requests=u(32))


def _float32(bits: int) -> float:
    value: float = struct.unpack("<f", struct.pack("<I", bits))[0]
    return 0.0 if value != value else value  # NaN is not equal to itself


# A logprob is a float32 on the wire: any float32 (drawn by its bits, NaN aside) comes back exact.
logprob = st.one_of(u(32).map(_float32), st.sampled_from([0.0, -0.0, -0.5, -9999.0, float("-inf")]))
token_bytes = nullable(st.lists(u(8), max_size=8))
top_logprob = st.builds(wire.TopLogprob, token=nullable(text), logprob=logprob, bytes=token_bytes)
token_logprob = st.builds(wire.TokenLogprob, token=nullable(text), logprob=logprob, bytes=token_bytes,
                          top_logprobs=nullable(st.lists(top_logprob, max_size=3)))
token_logprobs = nullable(st.lists(token_logprob, max_size=4))
annotation = st.builds(wire.Annotation, type=nullable(text), url=nullable(text), title=nullable(text),
                       start_index=u(32), end_index=u(32))
function_call = st.builds(wire.FunctionCall, id=text, name=text, arguments=long_text, type=text)
choice = st.builds(wire.Choice, index=u(32), content=nullable(long_text),
                   tool_calls=st.lists(function_call, max_size=3), refusal=nullable(text), finish_reason=finish_reason,
                   logprobs=token_logprobs, refusal_logprobs=token_logprobs,
                   annotations=st.lists(annotation, max_size=3), reasoning=nullable(long_text),
                   signature=nullable(text), redacted_thinking=st.lists(text, max_size=2),
                   stop_sequence=nullable(text))
responses = st.builds(wire.Response, id=text, model=text, created=i(64), choices=st.lists(choice, max_size=3),
                      usage=nullable(usage), system_fingerprint=nullable(text), service_tier=nullable(text))
tool_call_delta = st.builds(wire.ToolCallDelta, index=u(32), id=nullable(text), name=nullable(text),
                            arguments=nullable(text), type=nullable(text))
chunks = st.builds(
    wire.Chunk, sequence=u(64), choice_index=u(32), id=nullable(text), model=nullable(text), created=nullable(i(64)),
    role=nullable(st.sampled_from(["system", "user", "assistant", "tool", "developer"])), content=nullable(long_text),
    tool_calls=st.lists(tool_call_delta, max_size=3), refusal=nullable(text), finish_reason=finish_reason,
    usage=nullable(usage), system_fingerprint=nullable(text), done=st.booleans(),
    logprobs=token_logprobs, refusal_logprobs=token_logprobs, service_tier=nullable(text),
    reasoning=nullable(long_text), signature=nullable(text), redacted_thinking=st.lists(text, max_size=2),
    stop_sequence=nullable(text),
)
errors = st.builds(wire.ErrorInfo, status=u(16), message=long_text, type=text, code=nullable(text),
                   param=nullable(text))


def _calls(calls: list[wire.FunctionCall]) -> list[wire.FunctionCall]:
    return [msgspec.structs.replace(c, type=c.type or "function") for c in calls]


def canonical_response(r: wire.Response) -> wire.Response:
    return msgspec.structs.replace(r, choices=[msgspec.structs.replace(c, tool_calls=_calls(c.tool_calls))
                                               for c in r.choices])


def canonical_chunk(c: wire.Chunk) -> wire.Chunk:
    return msgspec.structs.replace(c, created=c.created or None)


def _error_stock(error: wire.ErrorInfo, *, framed: bool = False) -> bytes:
    return stock_buffers.encode_error_stock(_builders, error, framed=framed)


ANSWER_ENCODERS: dict[str, tuple[Callable[..., bytes | bytearray], Callable[..., bytes | bytearray],
                              Callable[..., bytes | bytearray]]] = {
    "generated": (wire.write_response, wire.write_chunk, wire.write_error),
    "stock": (
        lambda r: stock_buffers.encode_response_stock(_builders, r),
        lambda c: stock_buffers.encode_chunk_frame_stock(_builders, c),
        _error_stock,
    ),
}


@pytest.mark.parametrize("encoder", list(ANSWER_ENCODERS))
@SETTINGS
@given(response=responses)
def test_response_round_trips(cxx_verifier: CxxVerifier, encoder: str, response: wire.Response) -> None:
    buf = ANSWER_ENCODERS[encoder][0](response)
    assert cxx_verifier.verify("response", buf)
    assert decode.decode_response(bytes(buf)) == canonical_response(response)
    assert same(readers.read_CompletionResponse(bytes(buf)), flatc_read("CompletionResponse", bytes(buf)))


@pytest.mark.parametrize("encoder", list(ANSWER_ENCODERS))
@SETTINGS
@given(chunk=chunks)
def test_chunk_frame_round_trips(cxx_verifier: CxxVerifier, encoder: str, chunk: wire.Chunk) -> None:
    frame = ANSWER_ENCODERS[encoder][1](chunk)
    assert struct.unpack_from("<I", frame)[0] == len(frame) - 4
    assert cxx_verifier.verify("chunk", frame, size_prefixed=True)
    assert decode.decode_chunk(bytes(frame[4:])) == canonical_chunk(chunk)
    assert same(readers.read_CompletionChunk(bytes(frame[4:])), flatc_read("CompletionChunk", bytes(frame[4:])))


@pytest.mark.parametrize("encoder", list(ANSWER_ENCODERS))
@SETTINGS
@given(error=errors, framed=st.booleans())
def test_error_round_trips(cxx_verifier: CxxVerifier, encoder: str, error: wire.ErrorInfo, framed: bool) -> None:
    buf = ANSWER_ENCODERS[encoder][2](error, framed=framed)
    assert cxx_verifier.verify("error", buf, size_prefixed=framed)
    if framed:
        assert struct.unpack_from("<I", buf)[0] == len(buf) - 4
        buf = buf[4:]
    assert decode.decode_error(bytes(buf)) == error
    assert same(readers.read_Error(bytes(buf)), flatc_read("Error", bytes(buf)))
