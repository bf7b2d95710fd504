"""Embeddings request bodies the edge must refuse, shared by the codec and the HTTP tests.

Each row is a raw body, the OpenAI error `param` it must be refused with (None for errors of the body
as a whole) and the error `code`, as in bad_requests.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from bad_requests import MISSING, Bad, body_level, deep, spliced

from ingress.oai.embeddings import MAX_INPUT_TOKENS, MAX_INPUTS, MAX_REQUEST_TOKENS


def embeddings_body(**fields: Any) -> bytes:
    """A minimal valid embeddings request with `fields` set (or removed, given MISSING)."""
    doc: dict[str, Any] = {"model": "ingress-demo", "input": "hello"}
    doc.update(fields)
    return json.dumps({k: v for k, v in doc.items() if v is not MISSING}).encode()


BAD_EMBEDDINGS = [
    *body_level(embeddings_body, "input"),
    # Embeddings forward no engine extras: an unknown field is refused by name, however deep its value.
    pytest.param(Bad(spliced("x", deep(100_000), embeddings_body), "x"), id="unknown-field-nested-100000-deep"),
    # Missing or mistyped fields.
    pytest.param(Bad(embeddings_body(model=MISSING), "model"), id="missing-model"),
    pytest.param(Bad(embeddings_body(input=MISSING), "input"), id="missing-input"),
    pytest.param(Bad(embeddings_body(model=""), "model"), id="model-empty"),
    pytest.param(Bad(embeddings_body(model=7), "model"), id="model-int"),
    pytest.param(Bad(embeddings_body(input=None), "input"), id="input-null"),
    pytest.param(Bad(embeddings_body(input=7), "input"), id="input-int"),
    pytest.param(Bad(embeddings_body(input={"text": "a"}), "input"), id="input-object"),
    pytest.param(Bad(embeddings_body(input=[None]), "input[0]"), id="input-item-null"),
    pytest.param(Bad(embeddings_body(input=[1.5]), "input[0]"), id="token-float"),
    pytest.param(Bad(embeddings_body(input=[True]), "input[0]"), id="token-bool"),
    pytest.param(Bad(embeddings_body(input=[[1, "a"]]), "input[0][1]"), id="token-list-with-a-string"),
    pytest.param(Bad(embeddings_body(input=[[[1]]]), "input[0][0]"), id="token-list-nested"),
    # Empty inputs: OpenAI refuses an empty string and empty arrays.
    pytest.param(Bad(embeddings_body(input=""), "input"), id="input-empty-string"),
    pytest.param(Bad(embeddings_body(input=[]), "input"), id="input-empty-list"),
    pytest.param(Bad(embeddings_body(input=["a", ""]), "input[1]"), id="input-empty-string-in-list"),
    pytest.param(Bad(embeddings_body(input=[[1], []]), "input[1]"), id="input-empty-token-list"),
    # One kind of item per list.
    pytest.param(Bad(embeddings_body(input=["a", 1]), "input[1]"), id="string-then-token"),
    pytest.param(Bad(embeddings_body(input=[1, "a"]), "input[1]"), id="token-then-string"),
    pytest.param(Bad(embeddings_body(input=[[1], 2]), "input[1]"), id="token-list-then-token"),
    pytest.param(Bad(embeddings_body(input=["a", [1]]), "input[1]"), id="string-then-token-list"),
    # Bounds: token ids, counts.
    pytest.param(Bad(embeddings_body(input=[-1]), "input[0]"), id="token-negative"),
    pytest.param(Bad(embeddings_body(input=[2**31]), "input[0]"), id="token-2**31"),
    pytest.param(Bad(embeddings_body(input=[[0, 2**40]]), "input[0][1]"), id="token-2**40-in-list"),
    pytest.param(Bad(embeddings_body(input=["a"] * (MAX_INPUTS + 1)), "input"), id="2049-strings"),
    pytest.param(Bad(embeddings_body(input=[[1]] * (MAX_INPUTS + 1)), "input"), id="2049-token-lists"),
    pytest.param(Bad(embeddings_body(input=[1] * (MAX_INPUT_TOKENS + 1)), "input"), id="8193-tokens"),
    pytest.param(Bad(embeddings_body(input=[[1] * (MAX_INPUT_TOKENS + 1)]), "input[0]"), id="8193-tokens-in-a-list"),
    pytest.param(Bad(embeddings_body(input=[[1] * MAX_INPUT_TOKENS] * (MAX_REQUEST_TOKENS // MAX_INPUT_TOKENS + 1)),
                     "input"), id="over-300000-tokens-in-all"),
    # The other fields.
    pytest.param(Bad(embeddings_body(dimensions=0), "dimensions"), id="dimensions-0"),
    pytest.param(Bad(embeddings_body(dimensions=-3), "dimensions"), id="dimensions-negative"),
    pytest.param(Bad(embeddings_body(dimensions=2**31), "dimensions"), id="dimensions-2**31"),
    pytest.param(Bad(embeddings_body(dimensions=1.5), "dimensions"), id="dimensions-float"),
    pytest.param(Bad(embeddings_body(dimensions="8"), "dimensions"), id="dimensions-string"),
    pytest.param(Bad(embeddings_body(encoding_format="base85"), "encoding_format"), id="encoding-format-base85"),
    pytest.param(Bad(embeddings_body(encoding_format="FLOAT"), "encoding_format"), id="encoding-format-upper"),
    pytest.param(Bad(embeddings_body(encoding_format=1), "encoding_format"), id="encoding-format-int"),
    pytest.param(Bad(embeddings_body(user="u" * 257), "user"), id="user-257-chars"),
    pytest.param(Bad(embeddings_body(user=1), "user"), id="user-int"),
    # Unknown fields are refused, as OpenAI does; chat's fields are no embeddings fields.
    pytest.param(Bad(embeddings_body(inputs=["a"]), "inputs"), id="unknown-field"),
    pytest.param(Bad(embeddings_body(messages=[{"role": "user", "content": "hi"}]), "messages"),
                 id="a-chat-field"),
]
