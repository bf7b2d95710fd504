"""The Gemini dialect's embeddings (ingress/bridges/gemini_embeddings.py): the `batchEmbedContents` request built
from an EmbeddingRequest buffer (a request per input, the dimensions and the route's model on each, the bridge's
key; a Gemini client's body as it sent it), and what it reads of Google's answer, broken answers and refusals
included."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from bad_embeddings import embeddings_body

from ingress.bridges.dialect import EngineFailed, Target, Unsupported
from ingress.bridges.gemini import GeminiDialect
from ingress.bridges.gemini_embeddings import read_embeddings
from ingress.encoding.embeddings import encode_embedding_request
from ingress.oai.embeddings import decode_embedding_request
from ingress.wire._generated import encoders
from ingress.wire.embeddings import EmbeddingInputData, EmbeddingRequestData
from ingress.wire.passport import Passport

DIALECT = GeminiDialect(clock=lambda: 1_700_000_000.0)
TARGET = Target(url="https://generativelanguage.googleapis.com/v1beta", api_key="AIza-bridge")


def buffer(model_name: str = "gemini-embedding-001", **fields: Any) -> bytes:
    request = decode_embedding_request(embeddings_body(**fields))
    return bytes(encode_embedding_request(request, "req-7", Passport(), "gemini", model_name))


def test_each_input_is_a_request_of_the_batch_with_the_dimensions_and_the_routes_model() -> None:
    call = DIALECT.embed(buffer(input=["one", "two"], dimensions=256, user="u-1"), TARGET)
    assert call.request.path == "/v1beta/models/gemini-embedding-001:batchEmbedContents"
    assert call.request.headers["x-goog-api-key"] == "AIza-bridge" and not call.request.stream
    assert msgspec.json.decode(call.request.body) == {"requests": [
        {"model": "models/gemini-embedding-001", "content": {"parts": [{"text": text}]}, "outputDimensionality": 256}
        for text in ("one", "two")]}  # `user`: nothing to send


def nameless() -> bytes:
    """An EmbeddingRequest naming no model (a binary client's: the edge always names one)."""
    buf = bytearray()
    encoders.encode_EmbeddingRequest(buf, EmbeddingRequestData(inputs=[EmbeddingInputData(text="x")]))
    return bytes(buf)


def test_the_targets_model_serves_a_buffer_naming_none_and_a_models_prefix_is_not_doubled() -> None:
    plain = DIALECT.embed(nameless(), Target(url="http://g", model="models/text-embedding-004"))
    assert plain.request.path == "/v1beta/models/text-embedding-004:batchEmbedContents"
    assert msgspec.json.decode(plain.request.body)["requests"][0]["model"] == "models/text-embedding-004"
    with pytest.raises(Unsupported) as none:
        DIALECT.embed(nameless(), Target(url="http://g"))
    assert none.value.param == "model"


@pytest.mark.parametrize("sent", [
    {"requests": [{"model": "models/gemini-embedding-001", "content": {"parts": [{"text": "a"}]},
                   "taskType": "RETRIEVAL_DOCUMENT", "title": "A", "output_dimensionality": 8},
                  {"content": {"parts": [{"text": "b"}]}, "taskType": "RETRIEVAL_DOCUMENT"}]},
    {"content": {"parts": [{"text": "a"}]}, "task_type": "RETRIEVAL_QUERY", "model": "models/x"},
], ids=["batch", "embed-content"])
def test_a_gemini_clients_body_goes_as_sent_each_request_naming_the_routes_model(sent: dict[str, Any]) -> None:
    data = EmbeddingRequestData(model_name="gemini-embedding-001", inputs=[EmbeddingInputData(text="a")],
                                gemini_json=msgspec.json.encode(sent).decode())
    buf = bytearray()
    encoders.encode_EmbeddingRequest(buf, data)
    call = DIALECT.embed(bytes(buf), TARGET)
    requests = sent.get("requests", [sent])
    assert msgspec.json.decode(call.request.body) == {"requests": [
        {**r, "model": "models/gemini-embedding-001"} for r in requests]}
    assert call.request.path == "/v1beta/models/gemini-embedding-001:batchEmbedContents"


@pytest.mark.parametrize("sent", ['{"requests": 5}', "not json", "[1]"])
def test_a_body_as_sent_that_is_not_googles_is_a_decode_error_the_service_answers_400(sent: str) -> None:
    buf = bytearray()  # from a binary client: the edge only sends what it read
    encoders.encode_EmbeddingRequest(buf, EmbeddingRequestData(model_name="m", inputs=[EmbeddingInputData(text="a")],
                                                               gemini_json=sent))
    with pytest.raises(msgspec.DecodeError):  # service.py: 400 invalid_json
        DIALECT.embed(bytes(buf), TARGET)


def test_token_ids_are_refused_naming_the_input() -> None:
    with pytest.raises(Unsupported) as refused:
        DIALECT.embed(buffer(input=[[1, 2, 3]]), TARGET)
    assert (refused.value.param, refused.value.info().status) == ("input[0]", 400)


def _answer(**fields: Any) -> bytes:
    return msgspec.json.encode(fields)


def test_googles_answer_is_a_vector_per_input_in_order_with_its_counts_when_given() -> None:
    values = [[0.5, 0.25], [0.125, -1.0]]
    plain = read_embeddings(_answer(embeddings=[{"values": v} for v in values]), model="m", inputs=2,
                            dimensions=None)
    assert (plain.vectors, plain.usage, plain.model) == (values, None, "m")
    counted = read_embeddings(_answer(embeddings=[{"values": v} for v in values],
                                      usageMetadata={"promptTokenCount": 9, "totalTokenCount": 9}, extra=1),
                              model="m", inputs=2, dimensions=2)
    assert counted.usage is not None and (counted.usage.prompt_tokens, counted.usage.total_tokens) == (9, 9)


@pytest.mark.parametrize(("body", "dimensions", "status", "says"), [
    (b"not json", None, 502, "could not be read"),
    (_answer(embeddings=[{"values": [1.0]}]), None, 502, "1 embeddings for 2 inputs"),
    (_answer(embeddings=[{"values": [1.0]}, {}]), None, 502, "embedding 1 has no values"),
    (_answer(embeddings=[{"values": [1.0]}, {"values": [2.0]}]), 4, 400, "not 4"),
], ids=["unreadable", "too-few", "no-values", "dimensions"])
def test_a_broken_answer_is_an_error_never_wrong_vectors(body: bytes, dimensions: int | None, status: int,
                                                         says: str) -> None:
    with pytest.raises(EngineFailed) as failed:
        read_embeddings(body, model="m", inputs=2, dimensions=dimensions)
    assert failed.value.info.status == status and says in failed.value.info.message
