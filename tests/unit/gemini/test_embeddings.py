"""Google's embeddings requests read as the contract's embeddings request: the bodies the `google-genai` SDK sends
(its own, caught in process) and the ones clients write by hand (proto names too), each content's text one input;
what only Google's models read named as not sent; and every refusal naming its field by its proto path."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from gemini_sdk import sdk_embed_body
from google.genai import types

from ingress.errors import InvalidRequest
from ingress.gemini.embeddings import read_embed
from ingress.oai.embeddings import MAX_INPUTS

MODEL = "gemini-embedding-001"
TEXTS = ["What is the capital of France?", "Paris is the capital of France."]
TEXT = {"parts": [{"text": "a"}]}


def _read(body: dict[str, Any], *, batch: bool) -> tuple[list[str | list[int]], int | None, list[str]]:
    request, dropped = read_embed(msgspec.json.encode(body), MODEL, batch=batch)
    assert request.model == MODEL
    return request.inputs, request.dimensions, list(dropped)


def test_the_sdks_batch_is_its_texts_in_order_and_names_what_is_not_sent() -> None:
    config = types.EmbedContentConfig(task_type="RETRIEVAL_DOCUMENT", title="Capitals", output_dimensionality=256)
    path, body = sdk_embed_body(TEXTS, config)
    assert path == f"/v1/models/{MODEL}:batchEmbedContents"  # what the SDK calls for embed_content

    request, dropped = read_embed(body, MODEL, batch=True)
    assert (request.inputs, request.dimensions) == (TEXTS, 256)
    assert dropped == {"task_type": "requests[0].task_type", "title": "requests[0].title"}  # where first asked
    assert (request.user, request.encoding_format) == (None, None)


def test_the_sdks_plain_call_sends_nothing_that_is_not_sent() -> None:
    _, body = sdk_embed_body(TEXTS[0])
    assert _read(msgspec.json.decode(body), batch=True) == ([TEXTS[0]], None, [])


def test_embed_content_by_hand_in_either_spelling_and_parts_joined_by_newlines() -> None:
    camel = {"model": f"models/{MODEL}", "content": {"role": "user", "parts": [{"text": "a"}, {"text": "b"}]},
             "outputDimensionality": 8, "taskType": "CLUSTERING"}
    snake = {"content": {"parts": [{"text": "a"}, {"text": "b"}]}, "output_dimensionality": 8,
             "task_type": "CLUSTERING"}
    assert _read(camel, batch=False) == _read(snake, batch=False) == (["a\nb"], 8, ["task_type"])
    assert _read({"content": {"parts": [{"text": "x"}]}, "model": MODEL}, batch=False) == (["x"], None, [])


def test_what_is_not_sent_is_named_where_it_was_first_asked() -> None:
    body = {"requests": [{"content": TEXT}, {"content": TEXT, "title": "T"}, {"content": TEXT, "taskType": "X"}]}
    assert read_embed(msgspec.json.encode(body), MODEL, batch=True)[1] == {"task_type": "requests[2].task_type",
                                                                          "title": "requests[1].title"}


def _refusal(body: dict[str, Any], *, batch: bool) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as refused:
        read_embed(msgspec.json.encode(body), MODEL, batch=batch)
    return refused.value



@pytest.mark.parametrize(("body", "batch", "param", "says"), [
    ({"content": {"parts": [{"text": "a"}, {"fileData": {"fileUri": "gs://b/x.png"}}]}}, False,
     "content.parts[1].file_data", "only text is embedded here"),
    ({"content": {"parts": [{"text": "a", "inlineData": {"mimeType": "text/plain", "data": "YQ=="}}]}}, False,
     "content.parts[0].text", "only text is embedded here"),
    ({"content": {"parts": [{"thoughtSignature": "c2ln"}]}}, False, "content.parts[0].data",
     "only text is embedded here"),
    ({"requests": []}, True, "requests", "Invalid value at 'requests'"),
    ({"requests": [{"content": TEXT}, {"content": {"parts": [{"text": ""}]}}]}, True, "requests[1].content.parts",
     "no text to embed"),
    ({"content": {}}, False, "content.parts", "must not be empty"),
    ({"requests": [{"content": TEXT, "model": "models/text-embedding-004"}]}, True, "requests[0].model",
     "'models/text-embedding-004', and the URL models/gemini-embedding-001"),
    ({"requests": [{"content": TEXT}, {"content": TEXT, "outputDimensionality": 3}]}, True,
     "requests[1].output_dimensionality", "the same output_dimensionality"),
    ({"content": TEXT, "outputDimensionality": -1}, False, "output_dimensionality", "Invalid value"),
    ({"contents": [TEXT]}, False, "contents", 'Unknown name "contents"'),
    ({}, False, "content", "EmbedContentRequest.content: content is not specified"),
    ({"requests": [{"content": TEXT}] * (MAX_INPUTS + 1)}, True, "requests", "Invalid value at 'requests'"),
], ids=["file", "two-kinds", "signature-only", "no-requests", "empty-text", "no-parts", "other-model",
        "mixed-dimensions", "negative-dimensions", "unknown-field", "no-content", "too-many"])
def test_what_would_change_the_answer_is_refused_naming_the_field(body: dict[str, Any], batch: bool, param: str,
                                                                  says: str) -> None:
    refused = _refusal(body, batch=batch)
    assert refused.param == param and says in refused.message, (refused.param, refused.message)
