"""Embeddings without I/O: the strict request codec (oai/embeddings.py), the wire tables both ways
(wire/embeddings.py, the request's from OpenAI's in encoding/embeddings.py) and the translation to OpenAI's
list, base64 included (translate/embeddings.py)."""

from __future__ import annotations

import base64
import json
import math
import struct
from typing import Any

import msgspec
import pytest
from bad_embeddings import BAD_EMBEDDINGS, embeddings_body
from bad_requests import Bad
from openai import NOT_GIVEN
from openai._models import construct_type
from openai.lib._parsing._embeddings import parse_embedding_response
from openai.types import CreateEmbeddingResponse

from ingress import wire
from ingress.encoding.embeddings import encode_embedding_request
from ingress.encoding.passport import RequestMeta, compute_embedding_passport
from ingress.errors import InvalidRequest, UpstreamAnswered, UpstreamProtocolError
from ingress.oai.embeddings import MAX_INPUT_TOKENS, MAX_INPUTS, decode_embedding_request
from ingress.translate.embeddings import encode_base64, translate_embeddings
from ingress.wire.embeddings import (
    Embeddings,
    decode_embeddings,
    decode_embeddings_answer,
    read_embedding_request,
    read_embedding_request_data,
)
from ingress.wire.passport import Passport

PASSPORT = Passport(tenant_id="t", key_id="k", prompt_tokens_estimate=3, prefix_hash=7, traceparent="tp")

# --- decoding -------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", BAD_EMBEDDINGS)
def test_bad_body_is_refused_naming_the_field(bad: Bad) -> None:
    with pytest.raises(InvalidRequest) as info:
        decode_embedding_request(bad.body)
    assert (info.value.param, info.value.code) == (bad.param, bad.code)
    assert info.value.status == 400


@pytest.mark.parametrize(("given", "inputs"), [
    pytest.param("hello", ["hello"], id="a-string"),
    pytest.param(["a", "b c"], ["a", "b c"], id="strings"),
    pytest.param([1, 2, 3], [[1, 2, 3]], id="token-ids-are-one-input"),
    pytest.param([[1], [2, 3]], [[1], [2, 3]], id="token-id-lists"),
    pytest.param(["x"] * MAX_INPUTS, ["x"] * MAX_INPUTS, id="2048-strings"),
    pytest.param([0, 2**31 - 1] * (MAX_INPUT_TOKENS // 2), [[0, 2**31 - 1] * (MAX_INPUT_TOKENS // 2)], id="8192-ids"),
    pytest.param(" ", [" "], id="whitespace-is-not-empty"),
])
def test_every_input_form_is_accepted(given: Any, inputs: list[Any]) -> None:
    request = decode_embedding_request(embeddings_body(input=given))
    assert request.inputs == inputs


def test_optional_fields_are_kept() -> None:
    request = decode_embedding_request(embeddings_body(dimensions=64, encoding_format="base64", user="u-1"))
    assert (request.dimensions, request.encoding_format, request.user) == (64, "base64", "u-1")
    bare = decode_embedding_request(embeddings_body())
    assert (bare.dimensions, bare.encoding_format, bare.user) == (None, None, None)


# --- the wire -------------------------------------------------------------------------------------


@pytest.mark.parametrize("given", ["héllo 🚀", ["a", "b"], [5, 6], [[1, 2], [2**31 - 1]]])
def test_request_reads_back_as_sent(given: Any) -> None:
    request = decode_embedding_request(embeddings_body(input=given, dimensions=8, encoding_format="base64",
                                                       user="u"))
    buf = bytes(encode_embedding_request(request, "req-1", PASSPORT, "self_hosted", "upstream-name"))
    assert wire.identifiers.identifier_of(buf) == b"LGEQ"
    data = read_embedding_request(buf)
    assert (data.request_id, data.model_name) == ("req-1", "upstream-name")
    assert data.provider == wire.PROVIDERS["self_hosted"]
    assert [i.text if i.text is not None else i.tokens for i in data.inputs or ()] == request.inputs
    assert all((i.text is None) != (i.tokens is None) for i in data.inputs or ())
    assert (data.dimensions, data.base64, data.user, data.passport) == (8, True, "u", PASSPORT)


def test_request_without_options_reads_back_absent() -> None:
    buf = bytes(encode_embedding_request(decode_embedding_request(embeddings_body()), "r", PASSPORT))
    data = read_embedding_request(buf)
    assert (data.model_name, data.dimensions, data.base64, data.user) == ("ingress-demo", None, False, None)


def test_a_chat_request_is_no_embedding_request() -> None:
    chat = bytes(wire.write_response(wire.Response(id="x", model="m", created=0, choices=[])))
    with pytest.raises(wire.WireError, match="file identifier"):
        read_embedding_request(chat)
    with pytest.raises(wire.WireError, match="expected an LGEQ buffer"):
        read_embedding_request_data(chat)


def test_a_verified_request_reads_the_same_without_verifying_again() -> None:
    request = decode_embedding_request(embeddings_body(input=["a", "b"], dimensions=8, user="u"))
    buf = bytes(encode_embedding_request(request, "req-1", PASSPORT, "openai", "upstream-name"))
    assert read_embedding_request_data(buf) == read_embedding_request(buf)


def test_answer_reads_back_as_written() -> None:
    sent = Embeddings(model="m", vectors=[[0.5, -1.0, 3.25], [], [2.0**-149]],
                      usage=wire.Usage(prompt_tokens=4, total_tokens=4))
    assert decode_embeddings(bytes(wire.write_embeddings(sent))) == sent


def test_an_error_answer_is_raised_as_the_services_error() -> None:
    error = wire.ErrorInfo(status=429, type="rate_limit_error", code="slow_down", message="later", param="input")
    with pytest.raises(UpstreamAnswered) as info:
        decode_embeddings_answer(bytes(wire.write_error(error)))
    assert (info.value.status, info.value.code, info.value.param) == (429, "slow_down", "input")


@pytest.mark.parametrize("body", [
    pytest.param(b"", id="empty"),
    pytest.param(b"not flatbuffers at all", id="garbage"),
    pytest.param(bytes(wire.write_embeddings(Embeddings(model="m", vectors=[[1.0]])))[:-6], id="truncated"),
    pytest.param(bytes(wire.write_response(wire.Response(id="x", model="m", created=0, choices=[]))),
                 id="a-chat-response"),
])
def test_an_unreadable_answer_is_a_protocol_error(body: bytes) -> None:
    with pytest.raises(UpstreamProtocolError):
        decode_embeddings_answer(body)


def test_an_unverified_unreadable_answer_is_still_a_protocol_error() -> None:
    buf = bytearray(wire.write_embeddings(Embeddings(model="m", vectors=[[1.0, 2.0]])))
    struct.pack_into("<I", buf, 0, len(buf) + 64)  # the root offset points past the end
    with pytest.raises(UpstreamProtocolError):
        decode_embeddings_answer(bytes(buf), verify_answer=False)


# --- the passport ---------------------------------------------------------------------------------


def test_passport_estimates_texts_and_counts_token_ids() -> None:
    meta = RequestMeta(api_key="sk-1", tenant_id="t-1")
    texts = compute_embedding_passport(decode_embedding_request(embeddings_body(input=["abcd" * 3, "ab"])), meta)
    tokens = compute_embedding_passport(decode_embedding_request(embeddings_body(input=[[1, 2], [3]])), meta)
    assert (texts.prompt_tokens_estimate, tokens.prompt_tokens_estimate) == (4, 3)
    assert texts.tenant_id == "t-1" and texts.key_id and texts.traceparent
    again = compute_embedding_passport(decode_embedding_request(embeddings_body(input=["abcd" * 3, "ab"])), meta)
    assert again.prefix_hash == texts.prefix_hash != tokens.prefix_hash


# --- translation ----------------------------------------------------------------------------------

FLOAT32S = [0.0, -0.0, 1.0, -1.5, 0.1, 1e-45, 3.4028234663852886e38, -2.5e-20, 0.333333343267]


def _float32(values: list[float]) -> list[float]:
    return list(struct.unpack(f"<{len(values)}f", struct.pack(f"<{len(values)}f", *values)))


def test_base64_is_little_endian_float32() -> None:
    values = _float32(FLOAT32S)
    assert base64.b64decode(encode_base64(values)) == struct.pack(f"<{len(values)}f", *values)
    assert encode_base64([]) == ""


def _sdk_parse(doc: dict[str, Any]) -> CreateEmbeddingResponse:
    """What the openai SDK does with an answer to its default request (base64 asked for on the user's
    behalf): its response construction and post-parser, on the same JSON."""
    built = construct_type(value=doc, type_=CreateEmbeddingResponse)
    assert isinstance(built, CreateEmbeddingResponse)
    return parse_embedding_response(built, encoding_format=NOT_GIVEN)


def test_the_sdks_own_decoder_reads_back_the_same_floats() -> None:
    vectors = [_float32(FLOAT32S), _float32([math.pi, -math.e])]
    sent = Embeddings(model="m", vectors=vectors, usage=wire.Usage(prompt_tokens=3, total_tokens=3))
    encoded = json.loads(msgspec.json.encode(translate_embeddings(sent, as_base64=True)))
    assert all(isinstance(item["embedding"], str) for item in encoded["data"])
    parsed = _sdk_parse(encoded)
    assert [item.embedding for item in parsed.data] == vectors
    assert [item.index for item in parsed.data] == [0, 1]


def test_floats_are_json_numbers_that_read_back_as_the_same_float32() -> None:
    vectors = [_float32(FLOAT32S)]
    sent = Embeddings(model="m", vectors=vectors)
    doc = json.loads(msgspec.json.encode(translate_embeddings(sent, as_base64=False)))
    assert doc["data"][0]["embedding"] == vectors[0]
    assert _float32(doc["data"][0]["embedding"]) == vectors[0]


def test_translation_has_openais_shape() -> None:
    sent = Embeddings(model="served", vectors=[[1.0], [2.0]], usage=wire.Usage(prompt_tokens=5, total_tokens=0))
    doc = json.loads(msgspec.json.encode(translate_embeddings(sent, as_base64=False)))
    assert doc == {"object": "list", "model": "served", "usage": {"prompt_tokens": 5, "total_tokens": 5},
                   "data": [{"object": "embedding", "index": 0, "embedding": [1.0]},
                            {"object": "embedding", "index": 1, "embedding": [2.0]}]}
    CreateEmbeddingResponse.model_validate(doc)
    bare = translate_embeddings(Embeddings(model="m", vectors=[[1.0]]), as_base64=False)
    assert (bare.usage.prompt_tokens, bare.usage.total_tokens) == (0, 0)
