"""The demo's embeddings (ingress/demo/embed.py): deterministic unit vectors, honest token counts."""

from __future__ import annotations

import math
import struct

import pytest

from ingress.demo.embed import (
    DEFAULT_DIMENSIONS,
    MAX_DIMENSIONS,
    MAX_INPUT_TOKENS,
    Refused,
    embed,
    tokens_of,
    vector,
)
from ingress.wire import EmbeddingInputData, EmbeddingRequestData

TEXT = EmbeddingInputData(text="hello there")
TOKENS = EmbeddingInputData(tokens=[15339, 1070])


def _norm(v: list[float]) -> float:
    return math.sqrt(math.fsum(x * x for x in v))


@pytest.mark.parametrize("value", [TEXT, TOKENS, EmbeddingInputData(text="🚀"), EmbeddingInputData(tokens=[0])])
@pytest.mark.parametrize("dimensions", [1, 2, 3, DEFAULT_DIMENSIONS, MAX_DIMENSIONS])
def test_a_vector_is_a_unit_vector_of_float32s(value: EmbeddingInputData, dimensions: int) -> None:
    v = vector(value, dimensions)
    assert len(v) == dimensions
    assert abs(_norm(v) - 1.0) < 1e-6
    assert list(struct.unpack(f"<{dimensions}f", struct.pack(f"<{dimensions}f", *v))) == v  # exact float32s


def test_vectors_are_deterministic_and_differ_by_input() -> None:
    assert vector(TEXT) == vector(EmbeddingInputData(text="hello there"))
    distinct = [vector(TEXT), vector(TOKENS), vector(EmbeddingInputData(text="hello there!")),
                vector(EmbeddingInputData(tokens=[15339]))]
    assert len({tuple(v) for v in distinct}) == len(distinct)


def test_a_text_and_its_bytes_as_token_ids_do_not_collide() -> None:
    text = EmbeddingInputData(text="\x01\x00\x00\x00")
    assert vector(text) != vector(EmbeddingInputData(tokens=[1]))


def test_fewer_dimensions_are_the_first_ones_renormalised() -> None:
    full, short = vector(TEXT, 64), vector(TEXT, 8)
    scale = _norm(full[:8])
    assert all(abs(a / scale - b) < 1e-6 for a, b in zip(full[:8], short, strict=True))


def test_embed_counts_tokens_by_the_demos_words_and_ids() -> None:
    request = EmbeddingRequestData(model_name="m", inputs=[TEXT, TOKENS, EmbeddingInputData(text=" a b c ")],
                                   dimensions=16)
    answer = embed(request)
    assert answer.prompt_tokens == 2 + 2 + 4  # " a b c " is three words and the trailing space
    assert [tokens_of(i) for i in request.inputs or ()] == [2, 2, 4]
    assert answer.vectors == [vector(i, 16) for i in request.inputs or ()]


def test_embed_defaults_to_its_dimensions() -> None:
    assert [len(v) for v in embed(EmbeddingRequestData(inputs=[TEXT])).vectors] == [DEFAULT_DIMENSIONS]


@pytest.mark.parametrize(("request_data", "param"), [
    pytest.param(EmbeddingRequestData(inputs=[TEXT], dimensions=MAX_DIMENSIONS + 1), "dimensions", id="too-wide"),
    pytest.param(EmbeddingRequestData(inputs=[TEXT], dimensions=0), "dimensions", id="no-dimensions"),
    pytest.param(EmbeddingRequestData(inputs=[]), "input", id="no-inputs"),
    pytest.param(EmbeddingRequestData(inputs=[TEXT, EmbeddingInputData(text="w " * MAX_INPUT_TOKENS + "w")]),
                 "input[1]", id="a-text-over-the-token-limit"),
    pytest.param(EmbeddingRequestData(inputs=[EmbeddingInputData(tokens=[1] * (MAX_INPUT_TOKENS + 1))]),
                 "input[0]", id="token-ids-over-the-limit"),
])
def test_embed_refuses_what_it_cannot_do(request_data: EmbeddingRequestData, param: str) -> None:
    with pytest.raises(Refused) as info:
        embed(request_data)
    assert info.value.param == param


def test_the_token_limit_itself_is_accepted() -> None:
    answer = embed(EmbeddingRequestData(inputs=[EmbeddingInputData(text="w " * (MAX_INPUT_TOKENS - 1) + "w")]))
    assert answer.prompt_tokens == MAX_INPUT_TOKENS
