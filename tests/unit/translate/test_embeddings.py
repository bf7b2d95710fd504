"""Embeddings translated to OpenAI's list (ingress/translate/embeddings.py): its shape, floats as JSON
numbers or base64 that the SDK's own decoder reads back the same; and to Google's answer, as its SDK reads it."""

from __future__ import annotations

import base64
import json
import math
import struct
from typing import Any

import msgspec
import pytest
from gemini_sdk import sdk_embed
from openai import NOT_GIVEN
from openai._models import construct_type
from openai.lib._parsing._embeddings import parse_embedding_response
from openai.types import CreateEmbeddingResponse

from ingress import wire
from ingress.translate.embeddings import encode_base64, translate_embeddings, translate_gemini_embeddings
from ingress.wire.embeddings import Embeddings

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


@pytest.mark.parametrize("usage", [wire.Usage(prompt_tokens=7, total_tokens=7), None])
def test_googles_answer_is_read_by_its_sdk_a_vector_per_request(usage: wire.Usage | None) -> None:
    vectors = [[0.5, -0.25], [0.125, 1.0]]
    answer = translate_gemini_embeddings(Embeddings(model="m", vectors=vectors, usage=usage), batch=True)
    read = sdk_embed(msgspec.json.encode(answer))
    assert [e.values for e in read.embeddings or []] == vectors
    one = msgspec.json.decode(msgspec.json.encode(translate_gemini_embeddings(Embeddings(model="m", vectors=vectors[:1],
                                                                               usage=usage), batch=False)))
    assert one["embedding"] == {"values": vectors[0]}
    if usage is None:
        assert "usageMetadata" not in one and read.usage_metadata is None
    else:
        assert one["usageMetadata"] == {"promptTokenCount": 7, "totalTokenCount": 7}
        assert read.usage_metadata is not None and read.usage_metadata.prompt_token_count == 7
