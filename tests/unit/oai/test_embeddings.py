"""The strict embeddings request codec (ingress/oai/embeddings.py): every input form OpenAI allows, the
optional fields kept, and a bad body refused naming the field."""

from __future__ import annotations

from typing import Any

import pytest
from bad_embeddings import BAD_EMBEDDINGS, embeddings_body
from bad_requests import Bad

from ingress.errors import InvalidRequest
from ingress.oai.embeddings import MAX_INPUT_TOKENS, MAX_INPUTS, decode_embedding_request


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
