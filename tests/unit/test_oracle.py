"""The C++ Verifier oracle: it accepts what flatc and the Python builder emit, and rejects damage."""

from __future__ import annotations

import json
import random
import struct
from pathlib import Path
from typing import Any

import flatbuffers
import pytest
from cxx_oracle import CxxVerifier

from codegen.flatc import run_flatc
from ingress.wire._generated.LLMGateway import CompletionRequest as request_mod
from ingress.wire._generated.LLMGateway import Error as error_mod
from ingress.wire._generated.LLMGateway import LogitBias as logit_bias_mod
from ingress.wire._generated.LLMGateway import ToolCall as tool_call_mod
from ingress.wire._generated.LLMGateway.CompletionChunk import CompletionChunk
from ingress.wire._generated.LLMGateway.CompletionRequest import CompletionRequest
from ingress.wire._generated.LLMGateway.CompletionResponse import CompletionResponse
from ingress.wire._generated.LLMGateway.EmbeddingRequest import EmbeddingRequest
from ingress.wire._generated.LLMGateway.EmbeddingResponse import EmbeddingResponse
from ingress.wire._generated.LLMGateway.Error import Error
from ingress.wire._generated.LLMGateway.FinishReason import FinishReason
from ingress.wire._generated.LLMGateway.ModelProvider import ModelProvider
from ingress.wire._generated.LLMGateway.Role import Role

SCHEMA = Path(__file__).resolve().parents[2] / "schema" / "llm_gateway.fbs"

ROOTS: dict[str, tuple[str, type[Any], bytes]] = {
    "request": ("CompletionRequest", CompletionRequest, b"LGRQ"),
    "response": ("CompletionResponse", CompletionResponse, b"LGRS"),
    "chunk": ("CompletionChunk", CompletionChunk, b"LGCK"),
    "error": ("Error", Error, b"LGER"),
    "embedding_request": ("EmbeddingRequest", EmbeddingRequest, b"LGEQ"),
    "embedding_response": ("EmbeddingResponse", EmbeddingResponse, b"LGES"),
}

USAGE = {
    "prompt_tokens": 1200,
    "completion_tokens": 34,
    "total_tokens": 1234,
    "cached_tokens": 1024,
    "reasoning_tokens": 0,
    "cache_write_tokens": 512,
    "prompt_image_tokens": 85,
    "prompt_text_tokens": 1115,
    "completion_text_tokens": 34,
}

REQUEST: dict[str, Any] = {
    "request_id": "req-0001",
    "provider": ModelProvider.Anthropic,
    "model_name": "gpt-4o-mini",
    "system_prompt": "Réponds en français. 日本語でも可。",
    "user_prompt": "what is 🚀?\nanswer in one line",
    "max_tokens": 256,
    "temperature": 0.5,
    "tools": [
        {
            "name": "get_weather",
            "arguments_json": '{"type":"object","properties":{"city":{"type":"string"}}}',
            "description": "Wetter für eine Stadt",
            "type": "function",
            "strict": False,  # optional bool set to false: present, not None
        },
        {"name": "noop", "arguments_json": "{}"},
    ],
    "messages": [
        {"role": Role.System, "content": "be brief"},
        {
            "role": Role.User,
            "parts": [
                {"type": "text", "text": "what is in this image?"},
                {"type": "image_url", "payload_json": '{"url":"https://example.com/a.png"}'},
            ],
            "name": "ana",
        },
        {
            "role": Role.Assistant,
            "tool_calls": [
                {"id": "call_1", "type": "function", "name": "get_weather", "arguments": '{"city":"Zürich"}'}
            ],
            "refusal": "",
        },
        {"role": Role.Tool, "content": "14 °C", "tool_call_id": "call_1"},
    ],
    "tool_choice_json": '"auto"',
    "top_p": 0.0,  # optional scalar set to its zero value: stored and read back as 0.0
    "n": None,  # optional scalar sent as null: absent, read back as None
    "stop": ["\n\n", "END", "终"],
    "seed": -42,
    "presence_penalty": 0.25,
    "max_completion_tokens": 1024,
    "response_format": {"type": "json_schema", "json_schema_json": '{"name":"answer","strict":true}'},
    "logit_bias": [{"token_id": 50256, "bias": -100.0}, {"token_id": 7, "bias": 2.5}],
    "user": "user-ü",
    "stream": True,
    "include_usage": True,
    "metadata": [{"key": "team", "value": "search"}, {"key": "ключ", "value": "значение"}],
    "passport": {
        "tenant_id": "tenant-7",
        "key_id": "key-3",
        "prompt_tokens_estimate": 4294967295,
        "prefix_hash": 18446744073709551615,
        "priority": -3,
        "deadline_unix_ms": 1767225600123,
        "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "tracestate": "vendor=a:b",
    },
    "temperature_set": True,
    "max_tokens_set": True,
    "parallel_tool_calls": False,
    "logprobs": True,
    "top_logprobs": 0,
    "reasoning_effort": "high",
    "service_tier": "default",
}

RESPONSE: dict[str, Any] = {
    "id": "chatcmpl-abc",
    "model": "gpt-4o-mini-2024-07-18",
    "created": 1767225600,
    "choices": [
        {
            "index": 0,
            "message": {
                "role": Role.Assistant,
                "content": "Hallo 👋",
                "tool_calls": [
                    {"id": "call_9", "type": "function", "name": "lookup", "arguments": '{"q":"naïve"}'},
                    {"id": "call_10", "type": "function", "name": "lookup", "arguments": "{}"},
                ],
            },
            "finish_reason": FinishReason.ToolCalls,
        },
        {
            "index": 1,
            "message": {"role": Role.Assistant, "refusal": "I can't help with that."},
            "finish_reason": FinishReason.ContentFilter,
        },
    ],
    "usage": USAGE,
    "system_fingerprint": "fp_44709d6fcb",
}

CHUNK: dict[str, Any] = {
    "sequence": 9223372036854775813,
    "id": "chatcmpl-abc",
    "model": "gpt-4o-mini",
    "created": 1767225600,
    "choice_index": 3,
    "role": Role.Assistant,
    "content": "Δx ≈ 0",
    "tool_calls": [
        {"index": 0, "id": "call_1", "type": "function", "name": "get_weather", "arguments": '{"ci'},
        {"index": 0, "arguments": 'ty":"Köln"}'},
    ],
    "finish_reason": FinishReason.Length,
    "usage": USAGE,
    "refusal": "",
    "system_fingerprint": "fp_1",
    "done": True,
}

CHUNK_BARE: dict[str, Any] = {"sequence": 1, "role": None, "content": "", "done": False}

ERROR: dict[str, Any] = {
    "status": 429,
    "type": "rate_limit_exceeded",
    "code": "rate_limit",
    "message": "Too many requests — réessayez dans 20 s",
    "param": "model",
}

EMBEDDING_REQUEST: dict[str, Any] = {
    "request_id": "req-0002",
    "provider": ModelProvider.SelfHosted,
    "model_name": "text-embedding-3-small",
    "inputs": [{"text": "Réponds 🚀"}, {"tokens": [0, 15339, 2147483647]}, {"tokens": []}],
    "dimensions": 512,
    "base64": True,
    "user": "user-ü",
    "passport": REQUEST["passport"],
}

EMBEDDING_RESPONSE: dict[str, Any] = {
    "model": "text-embedding-3-small",
    "data": [{"vector": [0.5, -0.25, 1.0, -0.0]}, {"vector": []}, {"vector": [3.0517578125e-05]}],
    "usage": {"prompt_tokens": 9, "total_tokens": 9},
}

DOCUMENTS = [
    pytest.param("request", REQUEST, id="request"),
    pytest.param("response", RESPONSE, id="response"),
    pytest.param("chunk", CHUNK, id="chunk"),
    pytest.param("chunk", CHUNK_BARE, id="chunk-bare"),
    pytest.param("error", ERROR, id="error"),
    pytest.param("embedding_request", EMBEDDING_REQUEST, id="embedding-request"),
    pytest.param("embedding_response", EMBEDDING_RESPONSE, id="embedding-response"),
]


def flatc_binary(
    tmp_path: Path, kind: str, document: dict[str, Any], *, size_prefixed: bool = False, ascii_json: bool = False
) -> bytes:
    """`document` encoded by flatc itself with --root-type for `kind`."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    src = tmp_path / f"{kind}.json"
    src.write_text(json.dumps(document, ensure_ascii=ascii_json), encoding="utf-8")
    out = tmp_path / ("prefixed" if size_prefixed else "plain")
    flags = ["--size-prefixed"] if size_prefixed else []
    run_flatc("-b", *flags, "--root-type", f"LLMGateway.{ROOTS[kind][0]}", "-o", out, SCHEMA, src)
    return (out / f"{kind}.bin").read_bytes()


def with_identifier(buf: bytes, identifier: bytes, *, size_prefixed: bool = False) -> bytes:
    """`buf` with its file identifier replaced (bytes 4..8, or 8..12 after a size prefix)."""
    at = 8 if size_prefixed else 4
    return buf[:at] + identifier + buf[at + 4 :]


def read_back(table: Any, template: dict[str, Any]) -> dict[str, Any]:
    """The fields named in `template`, read through the generated accessors, as plain JSON values."""
    return {key: _read_field(table, key, want) for key, want in template.items()}


def _read_field(table: Any, key: str, want: Any) -> Any:
    accessor = "".join(part.capitalize() for part in key.split("_"))
    if isinstance(want, list):
        count = getattr(table, accessor + "Length")()
        items = [getattr(table, accessor)(i) for i in range(count)]
        return [_plain(item, w) for item, w in zip(items, want, strict=True)]
    return _plain(getattr(table, accessor)(), want)


def _plain(value: Any, want: Any) -> Any:
    if isinstance(want, dict):
        return read_back(value, want)
    return value.decode("utf-8") if isinstance(value, bytes) else value


# (a) buffers encoded by flatc from JSON


@pytest.mark.parametrize(("kind", "document"), DOCUMENTS)
def test_flatc_buffer_reads_back_through_the_python_bindings(
    tmp_path: Path, kind: str, document: dict[str, Any]
) -> None:
    buf = flatc_binary(tmp_path, kind, document)
    root = ROOTS[kind][1].GetRootAs(buf, 0)
    assert read_back(root, document) == document
    # \u escapes (surrogate pairs for astral characters) encode to exactly the same bytes as raw UTF-8.
    assert flatc_binary(tmp_path / "ascii", kind, document, ascii_json=True) == buf


def test_flatc_buffer_keeps_absent_optional_scalars_absent(tmp_path: Path) -> None:
    request = CompletionRequest.GetRootAs(flatc_binary(tmp_path, "request", REQUEST), 0)
    assert (request.N(), request.FrequencyPenalty(), request.TopP(), request.Seed()) == (None, None, 0.0, -42)
    assert request.ToolsLength() == 2 and request.Tools(1).Strict() is None
    chunk = CompletionChunk.GetRootAs(flatc_binary(tmp_path, "chunk", CHUNK_BARE), 0)
    assert chunk.Role() is None and chunk.Usage() is None and chunk.ToolCallsIsNone()


# The schema declares one file_identifier ("LGRQ", for its root_type), and `flatc -b --root-type X`
# stamps that identifier on every buffer it writes, whatever X is. Only the request's buffer
# therefore carries its real identifier; the others are re-stamped before they go to the oracle.


@pytest.mark.cxx
@pytest.mark.parametrize(("kind", "document"), DOCUMENTS)
def test_oracle_accepts_flatc_buffers(
    tmp_path: Path, cxx_verifier: CxxVerifier, kind: str, document: dict[str, Any]
) -> None:
    identifier = ROOTS[kind][2]
    buf = flatc_binary(tmp_path, kind, document)
    assert buf[4:8] == b"LGRQ"
    assert cxx_verifier.verify(kind, buf) is (kind == "request")
    assert cxx_verifier.verify(kind, with_identifier(buf, identifier))

    prefixed = flatc_binary(tmp_path, kind, document, size_prefixed=True)
    assert struct.unpack_from("<I", prefixed)[0] == len(prefixed) - 4 and prefixed[8:12] == b"LGRQ"
    assert cxx_verifier.verify(kind, with_identifier(prefixed, identifier, size_prefixed=True), size_prefixed=True)


# (b) what the oracle must reject


def python_request(*, size_prefixed: bool = False, identifier: bytes | None = b"LGRQ") -> bytes:
    """A CompletionRequest made with the stock flatbuffers.Builder and the generated builders."""
    b = flatbuffers.Builder(256)
    name = b.CreateString("get_weather")
    schema = b.CreateString('{"type":"object"}')
    tool_call_mod.ToolCallStart(b)
    tool_call_mod.ToolCallAddName(b, name)
    tool_call_mod.ToolCallAddArgumentsJson(b, schema)
    tool_call_mod.ToolCallAddStrict(b, True)
    tool = tool_call_mod.ToolCallEnd(b)
    request_mod.CompletionRequestStartToolsVector(b, 1)
    b.PrependUOffsetTRelative(tool)
    tools = b.EndVector()
    request_mod.CompletionRequestStartLogitBiasVector(b, 2)
    for token_id, bias in reversed([(50256, -100.0), (7, 2.5)]):
        logit_bias_mod.CreateLogitBias(b, token_id, bias)
    logit_bias = b.EndVector()
    stops = [b.CreateString(s) for s in ("END", "终")]
    request_mod.CompletionRequestStartStopVector(b, len(stops))
    for stop in reversed(stops):
        b.PrependUOffsetTRelative(stop)
    stop_vector = b.EndVector()
    request_id = b.CreateString("req-42")
    model = b.CreateString("gpt-4o-mini")
    user_prompt = b.CreateString("héllo 🚀")
    request_mod.CompletionRequestStart(b)
    request_mod.CompletionRequestAddRequestId(b, request_id)
    request_mod.CompletionRequestAddProvider(b, ModelProvider.OpenAI)
    request_mod.CompletionRequestAddModelName(b, model)
    request_mod.CompletionRequestAddUserPrompt(b, user_prompt)
    request_mod.CompletionRequestAddMaxTokens(b, 64)
    request_mod.CompletionRequestAddTemperature(b, 0.5)
    request_mod.CompletionRequestAddTools(b, tools)
    request_mod.CompletionRequestAddTopP(b, 0.9)
    request_mod.CompletionRequestAddSeed(b, 0)
    request_mod.CompletionRequestAddStop(b, stop_vector)
    request_mod.CompletionRequestAddLogitBias(b, logit_bias)
    request_mod.CompletionRequestAddStream(b, True)
    root = request_mod.CompletionRequestEnd(b)
    if size_prefixed:
        b.FinishSizePrefixed(root, file_identifier=identifier)
    else:
        b.Finish(root, file_identifier=identifier)
    return bytes(b.Output())


@pytest.mark.cxx
@pytest.mark.parametrize(
    "cut", [lambda n: 0, lambda n: 7, lambda n: n // 2, lambda n: n - 12], ids=["empty", "7", "half", "tail"]
)
def test_oracle_rejects_a_truncated_buffer(cxx_verifier: CxxVerifier, cut: Any) -> None:
    buf = python_request()
    assert cxx_verifier.verify("request", buf)
    assert not cxx_verifier.verify("request", buf[: cut(len(buf))])


@pytest.mark.cxx
def test_oracle_rejects_a_wrong_identifier(cxx_verifier: CxxVerifier) -> None:
    buf = python_request()
    assert not cxx_verifier.verify("request", with_identifier(buf, b"LGRX"))
    for kind in set(ROOTS) - {"request"}:  # a request is no other root, even if its fields fit
        assert not cxx_verifier.verify(kind, buf)
    assert not cxx_verifier.verify("request", python_request(identifier=None))


@pytest.mark.cxx
def test_oracle_rejects_random_garbage(cxx_verifier: CxxVerifier) -> None:
    rng = random.Random(20251219)
    for size in (1, 8, 16, 64, 512, 4096):
        garbage = rng.randbytes(size)
        for kind in ROOTS:
            assert not cxx_verifier.verify(kind, garbage)
            assert not cxx_verifier.verify(kind, garbage, size_prefixed=True)


@pytest.mark.cxx
def test_oracle_rejects_offsets_past_the_end(cxx_verifier: CxxVerifier) -> None:
    buf = bytearray(python_request())
    root_past_end = bytearray(buf)
    struct.pack_into("<I", root_past_end, 0, len(buf))
    assert not cxx_verifier.verify("request", bytes(root_past_end))

    # The model_name field (vtable slot 8) holds a uoffset to its string: aim it past the end.
    table = CompletionRequest.GetRootAs(bytes(buf), 0)._tab
    field = table.Pos + table.Offset(8)
    assert table.Offset(8) != 0
    struct.pack_into("<I", buf, field, len(buf) - field)
    assert not cxx_verifier.verify("request", bytes(buf))


@pytest.mark.cxx
def test_oracle_rejects_a_size_prefix_larger_than_the_data(cxx_verifier: CxxVerifier) -> None:
    buf = bytearray(python_request(size_prefixed=True))
    assert struct.unpack_from("<I", buf)[0] == len(buf) - 4
    assert cxx_verifier.verify("request", bytes(buf), size_prefixed=True)
    for claimed in (len(buf) - 3, len(buf) + 1000, 0xFFFFFFFF):
        struct.pack_into("<I", buf, 0, claimed)
        assert not cxx_verifier.verify("request", bytes(buf), size_prefixed=True)


@pytest.mark.cxx
def test_oracle_rejects_a_size_prefix_smaller_than_the_data(cxx_verifier: CxxVerifier) -> None:
    # flatbuffers::Verifier alone accepts this; the oracle insists on exactly one frame per record.
    buf = python_request(size_prefixed=True)
    assert not cxx_verifier.verify("request", buf + bytes(8), size_prefixed=True)
    shrunk = bytearray(buf)
    struct.pack_into("<I", shrunk, 0, len(buf) - 4 - 8)
    assert not cxx_verifier.verify("request", bytes(shrunk), size_prefixed=True)


@pytest.mark.cxx
def test_oracle_rejects_the_wrong_framing(cxx_verifier: CxxVerifier) -> None:
    assert not cxx_verifier.verify("request", python_request(), size_prefixed=True)
    assert not cxx_verifier.verify("request", python_request(size_prefixed=True))


# (c) buffers made with the stock Python flatbuffers.Builder


@pytest.mark.cxx
def test_oracle_accepts_python_builder_buffers(cxx_verifier: CxxVerifier) -> None:
    plain = python_request()
    prefixed = python_request(size_prefixed=True)
    assert plain[4:8] == b"LGRQ" and prefixed[8:12] == b"LGRQ"
    assert cxx_verifier.verify("request", plain)
    assert cxx_verifier.verify("request", prefixed, size_prefixed=True)

    request = CompletionRequest.GetRootAs(plain, 0)
    assert request.UserPrompt().decode() == "héllo 🚀" and request.Seed() == 0 and request.N() is None
    bias = request.LogitBias(1)
    assert (request.LogitBiasLength(), bias.TokenId(), bias.Bias()) == (2, 7, 2.5)


@pytest.mark.cxx
def test_oracle_accepts_an_error_finished_with_its_own_identifier(cxx_verifier: CxxVerifier) -> None:
    for size_prefixed in (False, True):
        b = flatbuffers.Builder(64)
        message = b.CreateString("upstream timed out — retry")
        error_mod.ErrorStart(b)
        error_mod.ErrorAddStatus(b, 504)
        error_mod.ErrorAddMessage(b, message)
        root = error_mod.ErrorEnd(b)
        finish = b.FinishSizePrefixed if size_prefixed else b.Finish
        finish(root, file_identifier=b"LGER")
        buf = bytes(b.Output())
        assert cxx_verifier.verify("error", buf, size_prefixed=size_prefixed)
        assert not cxx_verifier.verify("request", buf, size_prefixed=size_prefixed)


@pytest.mark.cxx
def test_oracle_answers_stay_in_step_over_many_records(cxx_verifier: CxxVerifier) -> None:
    good, bad = python_request(), python_request()[:20]
    verdicts = [cxx_verifier.verify("request", good if i % 3 else bad) for i in range(600)]
    assert verdicts == [i % 3 != 0 for i in range(600)]


@pytest.mark.cxx
def test_verify_refuses_an_unknown_kind(cxx_verifier: CxxVerifier) -> None:
    with pytest.raises(ValueError, match="unknown kind"):
        cxx_verifier.verify("passport", b"")
