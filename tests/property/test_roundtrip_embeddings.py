"""Every embeddings buffer we write passes the C++ Verifier and reads back as what was written.

Requests go OpenAI JSON → decode_embedding_request → encode (generated and stock) → (Verifier) →
read_embedding_request, and are compared input by input; answers (any float32s, infinities and
-0.0 included) come back bit for bit, and their base64 is what the openai SDK decodes back to the
same floats. Every buffer reads back the same through the generated readers as through flatc's own
accessors (tests/support/flatc_reference.py).
"""

from __future__ import annotations

import base64
import json
import struct
from array import array
from collections.abc import Callable
from typing import Any

import pytest
import stock_buffers
from cxx_oracle import CxxVerifier
from flatc_reference import flatc_read, same
from hypothesis import given
from hypothesis import strategies as st
from property.test_roundtrip import INT32_MAX, SETTINGS, bounded, nullable, passports, text, u

from ingress import wire
from ingress.encoding.embeddings import encode_embedding_request
from ingress.oai.embeddings import EmbeddingRequest, decode_embedding_request
from ingress.translate.embeddings import translate_embeddings
from ingress.wire._generated import readers
from ingress.wire.embeddings import decode_embeddings, read_embedding_request
from ingress.wire.passport import Passport
from ingress.wire.stock import BuilderPool

pytestmark = pytest.mark.cxx

token_id = st.one_of(st.integers(0, INT32_MAX), st.sampled_from([0, INT32_MAX]))
token_ids = st.lists(token_id, min_size=1, max_size=40)
non_empty = st.one_of(bounded(1, 30), st.sampled_from(["é", "日本語", "🚀", "\x00", "\ufeff", "x" * 50_000]))
embedding_input = st.one_of(non_empty, st.lists(non_empty, min_size=1, max_size=6), token_ids,
                            st.lists(token_ids, min_size=1, max_size=6))
embedding_request = st.fixed_dictionaries(
    {"model": bounded(1, 256), "input": embedding_input},
    optional={"dimensions": nullable(st.one_of(st.integers(1, INT32_MAX), st.just(1))),
              "encoding_format": nullable(st.sampled_from(["float", "base64"])),
              "user": nullable(bounded(0, 256))},
)

_builders = BuilderPool(size=2)
RequestEncoder = Callable[[EmbeddingRequest, str, Passport], bytes | bytearray]
REQUEST_ENCODERS = [
    pytest.param(encode_embedding_request, id="generated"),
    pytest.param(lambda r, rid, p: stock_buffers.encode_embedding_request_stock(_builders, r, rid, p), id="stock"),
]


@pytest.mark.parametrize("encode", REQUEST_ENCODERS)
@SETTINGS
@given(doc=embedding_request, ascii_only=st.booleans(), request_id=text, passport=passports)
def test_embedding_request_round_trips(cxx_verifier: CxxVerifier, encode: RequestEncoder, doc: dict[str, Any],
                                       ascii_only: bool, request_id: str, passport: Passport) -> None:
    request = decode_embedding_request(json.dumps(doc, ensure_ascii=ascii_only).encode())
    buf = bytes(encode(request, request_id, passport))
    assert cxx_verifier.verify("embedding_request", buf)

    data = read_embedding_request(buf)
    assert data.request_id == request_id and data.model_name == request.model and data.passport == passport
    assert [i.text if i.text is not None else i.tokens for i in data.inputs or ()] == request.inputs
    assert (data.dimensions, data.base64, data.user) == (
        request.dimensions, request.encoding_format == "base64", request.user)
    assert same(readers.read_EmbeddingRequest(buf), flatc_read("EmbeddingRequest", buf))


float32 = st.floats(width=32, allow_nan=False)
vector = st.one_of(st.lists(float32, max_size=20), st.lists(float32, min_size=1000, max_size=1024))
usage = st.builds(wire.Usage, prompt_tokens=u(32), total_tokens=u(32))
embeddings = st.builds(wire.Embeddings, model=text, vectors=st.lists(vector, max_size=4), usage=nullable(usage))

ANSWER_ENCODERS: list[Any] = [
    pytest.param(wire.write_embeddings, id="generated"),
    pytest.param(lambda e: stock_buffers.encode_embeddings_stock(_builders, e), id="stock"),
]


@pytest.mark.parametrize("encode", ANSWER_ENCODERS)
@SETTINGS
@given(answer=embeddings)
def test_embeddings_round_trip_to_the_bit(cxx_verifier: CxxVerifier, encode: Callable[[wire.Embeddings], bytes],
                                          answer: wire.Embeddings) -> None:
    buf = bytes(encode(answer))
    assert cxx_verifier.verify("embedding_response", buf)
    assert same(decode_embeddings(buf), answer)
    assert same(readers.read_EmbeddingResponse(buf), flatc_read("EmbeddingResponse", buf))


@SETTINGS
@given(answer=embeddings)
def test_base64_decodes_to_the_same_floats_as_the_sdk_reads_them(answer: wire.Embeddings) -> None:
    out = translate_embeddings(answer, as_base64=True)
    for item, sent in zip(out.data, answer.vectors, strict=True):
        assert isinstance(item.embedding, str)
        raw = base64.b64decode(item.embedding)
        assert raw == struct.pack(f"<{len(sent)}f", *sent)
        assert same(array("f", raw).tolist(), sent)  # the openai SDK's own decoding, without numpy
