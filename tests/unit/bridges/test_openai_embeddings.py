"""The OpenAI-compatible dialect's embeddings (ingress/bridges/openai_embeddings.py): the `/v1/embeddings`
request built from an EmbeddingRequest buffer for each input form and field, and what it reads of an
engine's answer (llama-server's, as it wrote them: tests/fixtures/bridges/openai/llamacpp_embeddings_*.json),
broken answers and refusals included."""

from __future__ import annotations

import base64
import json
from array import array
from pathlib import Path
from typing import Any

import msgspec
import pytest
from bad_embeddings import embeddings_body

from ingress import wire
from ingress.bridges.anthropic import AnthropicDialect
from ingress.bridges.dialect import EngineFailed, Target, Unsupported
from ingress.bridges.openai import OpenAIDialect
from ingress.bridges.openai_embeddings import read_embeddings, request_body
from ingress.encoding.embeddings import encode_embedding_request
from ingress.oai.embeddings import decode_embedding_request
from ingress.wire._generated import encoders
from ingress.wire.embeddings import EmbeddingInputData, EmbeddingRequestData
from ingress.wire.passport import Passport

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "bridges" / "openai"
DIALECT = OpenAIDialect(clock=lambda: 1_700_000_000.0)
TARGET = Target(url="http://127.0.0.1:8000", api_key="sk-bridge-key")


def buffer(model_name: str | None = None, **fields: Any) -> bytes:
    """The EmbeddingRequest the edge sends for a client's body with `fields`, the route naming `model_name`."""
    request = decode_embedding_request(embeddings_body(**fields))
    return bytes(encode_embedding_request(request, "req-7", Passport(), "openai", model_name))


def nameless() -> bytes:
    """An EmbeddingRequest naming no model (a binary client's: the edge always names one)."""
    buf = bytearray()
    encoders.encode_EmbeddingRequest(buf, EmbeddingRequestData(inputs=[EmbeddingInputData(text="hello")]))
    return bytes(buf)


def sent(buf: bytes, target: Target = TARGET) -> dict[str, Any]:
    body: dict[str, Any] = msgspec.json.decode(DIALECT.embed(buf, target).request.body)
    return body


def answer(*vectors: list[float], base64_: bool = True, **extra: Any) -> bytes:
    """An engine's embeddings list as OpenAI writes it: base64 float32s (as asked), or JSON numbers."""
    data = [{"object": "embedding", "index": i,
             "embedding": base64.b64encode(array("f", v).tobytes()).decode() if base64_ else v}
            for i, v in enumerate(vectors)]
    doc = {"object": "list", "data": data, "model": "text-embedding-3-small",
           "usage": {"prompt_tokens": 5, "total_tokens": 5}, **extra}
    return json.dumps(doc).encode()


# --- the request ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("given", "carried"), [
    pytest.param("hello", ["hello"], id="a-string"),
    pytest.param(["a", "b c"], ["a", "b c"], id="strings"),
    pytest.param([15339, 1917], [[15339, 1917]], id="token-ids-as-one-input-of-ids"),
    pytest.param([[1, 2, 3], [4]], [[1, 2, 3], [4]], id="token-id-lists"),
])
def test_every_input_form_goes_to_embeddings_as_texts_or_token_ids(given: Any, carried: list[Any]) -> None:
    call = DIALECT.embed(buffer(input=given), TARGET)
    assert call.request.path == "/v1/embeddings" and call.request.stream is False
    assert msgspec.json.decode(call.request.body) == {"input": carried, "encoding_format": "base64",
                                                      "model": "ingress-demo"}


def test_dimensions_and_user_are_carried_and_base64_is_always_asked() -> None:
    for client_format in ("float", "base64", None):
        body = sent(buffer(dimensions=256, user="u-7", encoding_format=client_format))
        assert (body["dimensions"], body["user"], body["encoding_format"]) == (256, "u-7", "base64")


def test_the_routes_model_name_else_the_targets_else_none() -> None:
    assert sent(buffer("text-embedding-3-small"))["model"] == "text-embedding-3-small"
    assert sent(nameless(), Target(url="http://e", model="bge-m3"))["model"] == "bge-m3"
    assert "model" not in sent(nameless(), Target(url="http://e"))  # the engine's one model


def test_the_targets_path_and_key_and_never_authorization_from_its_headers() -> None:
    call = DIALECT.embed(buffer(), Target(url="https://gw.example/openai/v1", api_key="sk-k", headers={"X-Org": "o"}))
    assert call.request.path == "/openai/v1/embeddings"
    assert call.request.headers["authorization"] == "Bearer sk-k" and call.request.headers["x-org"] == "o"
    assert call.request.headers["content-type"] == "application/json"
    bare = DIALECT.embed(buffer(), Target(url="http://e", headers={"Authorization": "Bearer leaked"}))
    assert "authorization" not in bare.request.headers


def test_an_input_with_neither_text_nor_ids_is_refused_naming_it() -> None:
    request = EmbeddingRequestData(inputs=[EmbeddingInputData(text="a"), EmbeddingInputData()])
    with pytest.raises(Unsupported) as refused:
        request_body(request, "m")
    assert refused.value.info().param == "input[1]" and refused.value.info().status == 400


def test_anthropics_dialect_has_no_embeddings() -> None:
    assert not hasattr(AnthropicDialect(), "embed")  # the service refuses them, naming the bridge


# --- the answer -----------------------------------------------------------------------------------


def test_llama_servers_base64_and_float_answers_are_the_same_float32_vectors() -> None:
    as_base64 = (FIXTURES / "llamacpp_embeddings_base64.json").read_bytes()
    as_floats = (FIXTURES / "llamacpp_embeddings_float.json").read_bytes()
    one = read_embeddings(as_base64, model="smollm2", inputs=2, dimensions=None)
    other = read_embeddings(as_floats, model="smollm2", inputs=2, dimensions=None)
    assert [len(v) for v in one.vectors] == [576, 576]  # SmolLM2-135M's n_embd
    assert one.vectors == [array("f", v).tolist() for v in other.vectors]  # the engine's floats are float32s
    assert one.usage == other.usage == wire.Usage(prompt_tokens=10, total_tokens=10)
    assert one.model == "smollm2"
    for doc in (json.loads(as_base64), json.loads(as_floats)):
        assert doc["usage"] == {"prompt_tokens": 10, "total_tokens": 10}


def test_a_whole_answer_through_the_call_written_as_our_buffer() -> None:
    call = DIALECT.embed(buffer("text-embedding-3-small", input=["a", "b"], dimensions=3), TARGET)
    embeddings = call.answer(answer([0.5, -0.25, 1.0], [0.0, 2.0**-20, -3.5]))
    assert embeddings == wire.Embeddings(model="text-embedding-3-small", vectors=[[0.5, -0.25, 1.0],
                                                                                  [0.0, 2.0**-20, -3.5]],
                                         usage=wire.Usage(prompt_tokens=5, total_tokens=5))
    assert wire.embeddings.decode_embeddings(bytes(wire.write_embeddings(embeddings))) == embeddings


def test_floats_answered_by_an_engine_that_ignores_the_format_are_read_too() -> None:
    floats = read_embeddings(answer([0.1, 0.2], base64_=False), model="m", inputs=1, dimensions=2)
    assert floats.vectors == [[0.1, 0.2]]


def test_vectors_are_put_in_the_inputs_order_by_index() -> None:
    doc = json.loads(answer([1.0], [2.0], [3.0]))
    doc["data"].reverse()
    assert read_embeddings(json.dumps(doc).encode(), model="m", inputs=3, dimensions=None).vectors == [[1.0], [2.0],
                                                                                                      [3.0]]
    for item in doc["data"]:
        del item["index"]  # none: as listed
    assert read_embeddings(json.dumps(doc).encode(), model="m", inputs=3, dimensions=None).vectors == [[3.0], [2.0],
                                                                                                      [1.0]]


@pytest.mark.parametrize(("usage", "expected"), [
    ({"prompt_tokens": 7, "total_tokens": 7}, wire.Usage(prompt_tokens=7, total_tokens=7)),
    ({"prompt_tokens": 7}, wire.Usage(prompt_tokens=7, total_tokens=7)),
    ({"prompt_tokens": -1, "total_tokens": 2**40}, wire.Usage(prompt_tokens=0, total_tokens=2**32 - 1)),
    (None, None),
])
def test_usage_is_the_engines_count(usage: dict[str, int] | None, expected: wire.Usage | None) -> None:
    doc = json.loads(answer([1.0]))
    doc["usage"] = usage
    assert read_embeddings(json.dumps(doc).encode(), model="m", inputs=1, dimensions=None).usage == expected


def test_a_model_the_engine_names_is_the_answers() -> None:
    doc = json.loads(answer([1.0]))
    assert read_embeddings(json.dumps(doc).encode(), model="sent", inputs=1, dimensions=None).model == \
        "text-embedding-3-small"
    del doc["model"]
    assert read_embeddings(json.dumps(doc).encode(), model="sent", inputs=1, dimensions=None).model == "sent"


def test_dimensions_the_engine_did_not_honour_are_refused_naming_them() -> None:
    """llama-server answers its model's whole vectors whatever `dimensions` asks: the client is told."""
    as_base64 = (FIXTURES / "llamacpp_embeddings_base64.json").read_bytes()
    with pytest.raises(EngineFailed) as refused:
        read_embeddings(as_base64, model="smollm2", inputs=2, dimensions=64)
    info = refused.value.info
    assert (info.status, info.code, info.param) == (400, "unsupported_parameter", "dimensions")
    assert "576 dimensions, not 64" in info.message


def _with(doc: dict[str, Any], **changes: Any) -> bytes:
    return json.dumps({**doc, **changes}).encode()


GOOD = json.loads(answer([1.0, 2.0], [3.0, 4.0]))


@pytest.mark.parametrize(("body", "words"), [
    pytest.param(b"not json", "unreadable", id="not-json"),
    pytest.param(b"[1, 2]", "unreadable", id="not-an-object"),
    pytest.param(_with(GOOD, data=None), "0 embeddings for 2 inputs", id="no-data"),
    pytest.param(_with(GOOD, data=GOOD["data"][:1]), "1 embeddings for 2 inputs", id="fewer-vectors"),
    pytest.param(_with(GOOD, data=[GOOD["data"][0], GOOD["data"][0]]), "indexed [0, 0]", id="an-index-twice"),
    pytest.param(_with(GOOD, data=[{**GOOD["data"][0], "index": 5}, GOOD["data"][1]]), "indexed [1, 5]",
                 id="an-index-out-of-range"),
    pytest.param(_with(GOOD, data=[{"index": 0}, GOOD["data"][1]]), "embedding 0 has no vector", id="no-vector"),
    pytest.param(_with(GOOD, data=[{"index": 0, "embedding": "not base64!"}, GOOD["data"][1]]), "not base64",
                 id="not-base64"),
    pytest.param(_with(GOOD, data=[{"index": 0, "embedding": "AAAAAAA="}, GOOD["data"][1]]), "5 bytes",
                 id="not-float32s"),
    pytest.param(_with(GOOD, data=[{"index": 0, "embedding": "ÿÿÿÿ"}, GOOD["data"][1]]), "not base64",
                 id="not-ascii"),
    pytest.param(_with(GOOD, data=[{"index": 0, "embedding": [1, "x"]}, GOOD["data"][1]]), "unreadable",
                 id="a-float-that-is-not"),
])
def test_a_broken_answer_is_a_protocol_error(body: bytes, words: str) -> None:
    with pytest.raises(EngineFailed) as failed:
        read_embeddings(body, model="m", inputs=2, dimensions=None)
    info = failed.value.info
    assert (info.status, info.type, info.code) == (502, "server_error", "upstream_protocol_error")
    assert words in info.message


@pytest.mark.parametrize(("body", "status", "code"), [
    (b'{"error": {"message": "Input content cannot be empty", "type": "invalid_request_error", "code": 400}}',
     400, None),
    (b'{"object": "error", "message": "too long", "type": "BadRequestError", "code": 400}', 400, None),
    (b'{"error": {"message": "overloaded", "type": "server_error", "code": 503}}', 503, "upstream_overloaded"),
])
def test_an_error_answered_with_200_is_that_error(body: bytes, status: int, code: str | None) -> None:
    with pytest.raises(EngineFailed) as failed:
        read_embeddings(body, model="m", inputs=1, dimensions=None)
    assert (failed.value.info.status, failed.value.info.code) == (status, code)


@pytest.mark.parametrize(("status", "headers", "body", "expected"), [
    pytest.param(400, {}, b'{"error":{"code":400,"message":"Input content cannot be empty","type":'
                          b'"invalid_request_error"}}',
                 (400, "invalid_request_error", None, "Input content cannot be empty"), id="llama-empty-input"),
    pytest.param(400, {}, b'{"error":{"code":400,"message":"Prompt contains invalid tokens","type":'
                          b'"invalid_request_error"}}',
                 (400, "invalid_request_error", None, "Prompt contains invalid tokens"), id="llama-bad-token-id"),
    pytest.param(400, {}, b'{"error": {"message": "This model does not support specifying dimensions.", "type": '
                          b'"invalid_request_error", "param": null, "code": null}}',
                 (400, "invalid_request_error", None, "This model does not support specifying dimensions."),
                 id="openai-dimensions-on-ada-002"),
    pytest.param(500, {}, b'{"error":{"code":500,"message":"input (701 tokens) is too large to process. increase '
                          b'the physical batch size (current batch size: 512)","type":"server_error"}}',
                 (400, "invalid_request_error", "context_length_exceeded", "input (701 tokens) is too large to "
                  "process. increase the physical batch size (current batch size: 512)"),
                 id="llama-input-over-its-batch"),
    pytest.param(429, {"retry-after-ms": "1500"}, b'{"error": {"message": "Rate limit reached", "type": "tokens", '
                                                  b'"code": "rate_limit_exceeded"}}',
                 (429, "tokens", "rate_limit_exceeded", "Rate limit reached"), id="openai-429"),
    pytest.param(401, {}, b'{"error": {"message": "Incorrect API key provided: sk-proj-abcdef123456."}}',
                 (502, "server_error", "upstream_auth_failed", "The model provider refused the bridge's credentials "
                  "(HTTP 401). It said: Incorrect API key provided: [redacted]."), id="our-key-refused"),
])
def test_the_engines_refusals_are_mapped_as_for_chat(status: int, headers: dict[str, str], body: bytes,
                                                      expected: tuple[int, str, str | None, str]) -> None:
    info = DIALECT.error(status, headers, body)
    assert (info.status, info.type, info.code, info.message) == expected
    if status == 429:
        assert info.retry_after == 2
