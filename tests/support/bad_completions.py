"""Legacy text-completion request bodies the edge must refuse, shared by the codec and the HTTP tests.

Each row is a raw body, the OpenAI error `param` it must be refused with (None for errors of the body
as a whole) and the error `code`, as in bad_requests.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from bad_requests import JSON, MISSING, Bad, body_level, deep, spliced

from ingress.oai.completions import MAX_PROMPTS


def completions_body(**fields: Any) -> bytes:
    """A minimal valid text-completion request with `fields` set (or removed, given MISSING)."""
    doc: dict[str, Any] = {"model": "ingress-demo", "prompt": "hello"}
    doc.update(fields)
    return json.dumps({k: v for k, v in doc.items() if v is not MISSING}).encode()


BAD_COMPLETIONS = [
    *body_level(completions_body, "prompt"),
    # Unknown fields, at the top and nested.
    pytest.param(Bad(completions_body(promt="typo"), "promt"), id="unknown-field"),
    pytest.param(Bad(completions_body(messages=[{"role": "user", "content": "hi"}]), "messages"),
                 id="chat-messages-field"),
    pytest.param(Bad(completions_body(stream=True, stream_options={"include_usage": True, "x": 1}),
                     "stream_options.x"), id="unknown-nested-field"),
    pytest.param(Bad(spliced("x", deep(100_000), completions_body), None, JSON),
                 id="unknown-field-nested-100000-deep"),
    # Missing or mistyped fields.
    pytest.param(Bad(completions_body(model=MISSING), "model"), id="missing-model"),
    pytest.param(Bad(completions_body(prompt=MISSING), "prompt"), id="missing-prompt"),
    pytest.param(Bad(completions_body(model=""), "model"), id="model-empty"),
    pytest.param(Bad(completions_body(prompt=None), "prompt"), id="prompt-null"),
    pytest.param(Bad(completions_body(prompt=7), "prompt"), id="prompt-int"),
    pytest.param(Bad(completions_body(prompt={"text": "a"}), "prompt"), id="prompt-object"),
    pytest.param(Bad(completions_body(prompt=[]), "prompt"), id="prompt-empty-list"),
    pytest.param(Bad(completions_body(prompt=[[1], []]), "prompt[1]"), id="prompt-empty-token-list"),
    pytest.param(Bad(completions_body(prompt=[1.5]), "prompt[0]"), id="token-float"),
    pytest.param(Bad(completions_body(prompt=[True]), "prompt[0]"), id="token-bool"),
    pytest.param(Bad(completions_body(prompt=[[1, "a"]]), "prompt[0][1]"), id="token-list-with-a-string"),
    pytest.param(Bad(completions_body(prompt=["a", 1]), "prompt[1]"), id="string-then-token"),
    pytest.param(Bad(completions_body(prompt=[[1], 2]), "prompt[1]"), id="token-list-then-token"),
    pytest.param(Bad(completions_body(prompt=[-1]), "prompt[0]"), id="token-negative"),
    pytest.param(Bad(completions_body(prompt=[2**31]), "prompt[0]"), id="token-2**31"),
    pytest.param(Bad(completions_body(prompt=["a"] * (MAX_PROMPTS + 1)), "prompt"), id="2049-prompts"),
    pytest.param(Bad(completions_body(echo="yes"), "echo"), id="echo-string"),
    pytest.param(Bad(completions_body(suffix=1), "suffix"), id="suffix-int"),
    pytest.param(Bad(completions_body(user="u" * 257), "user"), id="user-too-long"),
    pytest.param(Bad(completions_body(stream="true"), "stream"), id="stream-string"),
    # Bounds, as OpenAI documents them.
    pytest.param(Bad(completions_body(logprobs=6), "logprobs"), id="logprobs-6"),
    pytest.param(Bad(completions_body(logprobs=-1), "logprobs"), id="logprobs-negative"),
    pytest.param(Bad(completions_body(logprobs=True), "logprobs"), id="logprobs-bool"),
    pytest.param(Bad(completions_body(best_of=21), "best_of"), id="best_of-21"),
    pytest.param(Bad(completions_body(best_of=1, n=2), "best_of"), id="best_of-below-n"),
    pytest.param(Bad(completions_body(best_of=2, stream=True), "best_of"), id="best_of-streamed"),
    pytest.param(Bad(completions_body(n=0), "n"), id="n-0"),
    pytest.param(Bad(completions_body(n=129), "n"), id="n-129"),
    pytest.param(Bad(completions_body(max_tokens=-1), "max_tokens"), id="max_tokens-negative"),
    pytest.param(Bad(completions_body(max_tokens=2**31), "max_tokens"), id="max_tokens-2**31"),
    pytest.param(Bad(completions_body(temperature=2.5), "temperature"), id="temperature-2.5"),
    pytest.param(Bad(completions_body(top_p=1.5), "top_p"), id="top_p-1.5"),
    pytest.param(Bad(completions_body(presence_penalty=-3), "presence_penalty"), id="presence_penalty--3"),
    pytest.param(Bad(completions_body(frequency_penalty=3), "frequency_penalty"), id="frequency_penalty-3"),
    pytest.param(Bad(completions_body(seed=2**63), "seed"), id="seed-2**63"),
    pytest.param(Bad(completions_body(stop=["a"] * 5), "stop"), id="stop-5"),
    pytest.param(Bad(completions_body(stop=7), "stop"), id="stop-int"),
    pytest.param(Bad(completions_body(logit_bias={"7": 101}), "logit_bias"), id="logit_bias-101"),
    pytest.param(Bad(completions_body(logit_bias={"x": 1}), "logit_bias"), id="logit_bias-not-an-id"),
    pytest.param(Bad(completions_body(logit_bias={"4294967296": 1}), "logit_bias.4294967296"),
                 id="logit_bias-id-too-big"),
    pytest.param(Bad(completions_body(stream_options={"include_usage": True}), "stream_options"),
                 id="stream_options-without-stream"),
    # The prompt's token logprobs OpenAI answers then are not carried (oai/completions.py).
    pytest.param(Bad(completions_body(echo=True, logprobs=0), "logprobs"), id="logprobs-with-echo"),
    pytest.param(Bad(completions_body(echo=True, logprobs=5, stream=True), "logprobs"),
                 id="logprobs-with-echo-streamed"),
]
