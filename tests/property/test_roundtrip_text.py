"""Every legacy text-completion request we write passes the C++ Verifier and reads back as it was sent.

Requests go OpenAI JSON → decode_text_request → encode_text_request → (Verifier) → decode_text_request
of the buffer, and are compared in the wire's canonical forms: one prompt is a list of one, `stop` a
list, false `echo` / `stream` / `include_usage` absent, `temperature` the shortest decimal of its
float32. The generated readers read each buffer as flatc's own accessors do.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import msgspec
import pytest
from cxx_oracle import CxxVerifier
from flatc_reference import flatc_read, same
from hypothesis import given
from hypothesis import strategies as st
from property.test_roundtrip import INT32_MAX, SETTINGS, bounded, i, long_text, nullable, passports, text

from ingress.encoding import reading
from ingress.encoding.requests import encode_text_request
from ingress.oai.chat import StreamOptions
from ingress.oai.completions import TextCompletionRequest, decode_text_request
from ingress.wire import decode
from ingress.wire._generated import readers
from ingress.wire.decode import shortest_float32
from ingress.wire.passport import Passport

pytestmark = pytest.mark.cxx

token_id = st.one_of(st.integers(0, INT32_MAX), st.sampled_from([0, INT32_MAX]))
token_ids = st.lists(token_id, min_size=1, max_size=40)
prompt = st.one_of(long_text, st.lists(long_text, min_size=1, max_size=6), token_ids,
                   st.lists(token_ids, min_size=1, max_size=6))


def finite(low: float, high: float) -> st.SearchStrategy[float]:
    return st.floats(low, high, allow_nan=False, allow_infinity=False)


@st.composite
def text_request(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(nullable(st.integers(1, 128)))
    stream = draw(nullable(st.booleans()))
    optional: dict[str, Any] = {
        "echo": nullable(st.booleans()),
        "suffix": nullable(text),
        "logprobs": nullable(st.integers(0, 5)),
        "max_tokens": nullable(st.one_of(st.integers(0, INT32_MAX), st.just(0))),
        "temperature": nullable(finite(0.0, 2.0)),
        "top_p": nullable(finite(0.0, 1.0)),
        "presence_penalty": nullable(finite(-2.0, 2.0)),
        "frequency_penalty": nullable(finite(-2.0, 2.0)),
        "seed": nullable(i(64)),
        "stop": nullable(st.one_of(text, st.lists(text, max_size=4))),
        "logit_bias": nullable(st.dictionaries(token_id.map(str), st.integers(-100, 100), max_size=4)),
        "user": nullable(bounded(0, 256)),
    }
    doc = draw(st.fixed_dictionaries({"model": bounded(1, 256), "prompt": prompt}, optional=optional))
    if n is not None:
        doc["n"] = n
    if stream is not None:
        doc["stream"] = stream
    if stream:
        doc["stream_options"] = draw(st.fixed_dictionaries({}, optional={"include_usage": nullable(st.booleans())}))
    if doc.get("echo") and doc.get("logprobs") is not None:  # refused together: one of the two goes
        del doc[draw(st.sampled_from(["echo", "logprobs"]))]
    if draw(st.booleans()) and not stream:  # best_of above 1 is never streamed, and never below n
        doc["best_of"] = draw(st.integers(n or 1, max(n or 1, 20))) if (n or 1) <= 20 else None
    return doc


def canonical(request: TextCompletionRequest, model: str) -> bytes:
    options = request.stream_options
    if options is not None:
        options = StreamOptions(include_usage=options.include_usage or None,
                                include_obfuscation=options.include_obfuscation)
    temperature = request.temperature
    if temperature is not None:
        temperature = shortest_float32(struct.unpack("<f", struct.pack("<f", temperature))[0])
    return msgspec.json.encode(msgspec.structs.replace(
        request,
        model=model,
        prompt=request.prompts,
        stop=[request.stop] if isinstance(request.stop, str) else request.stop,
        echo=request.echo or None,
        stream=request.stream or None,
        stream_options=options if options != StreamOptions() else None,
        temperature=temperature,
    ))


@SETTINGS
@given(doc=text_request(), ascii_only=st.booleans(), request_id=text, passport=passports,
       upstream_model=nullable(bounded(1, 40)))
def test_text_request_round_trips_through_the_wire(
    cxx_verifier: CxxVerifier, doc: dict[str, Any], ascii_only: bool, request_id: str, passport: Passport,
    upstream_model: str | None,
) -> None:
    request = decode_text_request(json.dumps(doc, ensure_ascii=ascii_only).encode())
    buf = bytes(encode_text_request(request, request_id, passport, "self_hosted", upstream_model))
    assert cxx_verifier.verify("request", buf)

    assert canonical(reading.decode_text_request(buf), upstream_model or request.model) == \
        canonical(request, upstream_model or request.model)
    assert same(readers.read_CompletionRequest(buf), flatc_read("CompletionRequest", buf))
    view = decode.read_request(buf)
    assert view.TextCompletion() and view.RequestId() == request_id.encode() and view.MessagesLength() == 0
    first_text = next((p for p in request.prompts if isinstance(p, str)), None)
    assert view.UserPrompt() == (first_text.encode() if first_text is not None else None)
    assert readers.read_CompletionRequest(buf).passport == passport
