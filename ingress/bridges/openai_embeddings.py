"""The OpenAI-compatible dialect's embeddings (sans-I/O): our EmbeddingRequest → `POST /v1/embeddings` of
vLLM, llama.cpp's llama-server (`--embeddings`), TEI, Ollama or OpenAI itself; its list → our Embeddings.

Every field is carried: each input as it came (a text, or a list of token ids), `dimensions`, `user`, and
the route's model name (none: the engine's own). The engine is always asked for base64: its answer is a
quarter of the bytes of the same floats written as JSON numbers, and reads in 60-85% of the time (1 to 16
vectors of 384 to 1,536 floats); the edge writes the vectors for its client in the format the client
asked for. An engine that ignores `encoding_format` and answers floats is read as well.

The answer is read leniently (what an engine adds is ignored; `index` orders the vectors) but never
wrongly: one vector per input, else a 502 `upstream_protocol_error`; and vectors of the length asked for
in `dimensions`, else a 400 `unsupported_parameter` naming it (llama-server answers its model's whole
vectors whatever `dimensions` says: the client is told, never given vectors of another length). An
error in the engine's shape answered with a 200 is that error (`failures.engine_error`).
"""

from __future__ import annotations

import binascii
import sys
from array import array
from typing import Any

import msgspec

from ingress.bridges.dialect import EngineFailed, EngineRequest, Target, Unsupported, count, sized_as_asked, under
from ingress.bridges.failures import protocol_error
from ingress.bridges.openai_json import NO_JSON, engine_answer
from ingress.bridges.openai_request import request_headers
from ingress.wire import types as wire_types
from ingress.wire.embeddings import EmbeddingRequestData, Embeddings, read_embedding_request_data

EMBEDDINGS_PATH = "/v1/embeddings"
_BIG_ENDIAN = sys.byteorder == "big"


# --- the request ----------------------------------------------------------------------------------


def _inputs(request: EmbeddingRequestData) -> list[str | list[int]]:
    inputs: list[str | list[int]] = []
    for i, item in enumerate(request.inputs or ()):
        if item.text is not None:
            inputs.append(item.text)
        elif item.tokens is not None:
            inputs.append(item.tokens)
        else:
            raise Unsupported(f"input[{i}]", f"Input {i} holds neither a text nor token ids.")
    return inputs


def request_body(request: EmbeddingRequestData, model: str) -> dict[str, Any]:
    """The engine's JSON body: every input, `dimensions` and `user` as the client sent them, the route's
    `model` (none: the engine's own), and base64 asked for."""
    body: dict[str, Any] = {"input": _inputs(request), "encoding_format": "base64"}
    if model:
        body["model"] = model
    if request.dimensions is not None:
        body["dimensions"] = request.dimensions
    if request.user is not None:
        body["user"] = request.user
    return body


class EmbeddingsCall:
    """One embeddings request's exchange with an OpenAI-compatible engine: what to send, what reads the answer."""

    def __init__(self, request: EngineRequest, *, model: str, inputs: int, dimensions: int | None) -> None:
        self.request = request
        self._model = model
        self._inputs = inputs
        self._dimensions = dimensions

    def answer(self, body: bytes) -> Embeddings:
        return read_embeddings(body, model=self._model, inputs=self._inputs, dimensions=self._dimensions)


def build_embeddings(buf: bytes, target: Target) -> EmbeddingsCall:
    """The call for a verified EmbeddingRequest buffer: to `/v1/embeddings` under the target's URL, with the
    route's model name (the buffer's), else the target's."""
    request = read_embedding_request_data(buf)
    model = request.model_name or target.model or ""
    body = request_body(request, model)
    engine = EngineRequest(path=under(target, EMBEDDINGS_PATH), headers=request_headers(target, False),
                           body=msgspec.json.encode(body), stream=False)
    return EmbeddingsCall(engine, model=model, inputs=len(body["input"]), dimensions=request.dimensions)


# --- the answer -----------------------------------------------------------------------------------


class _Item(msgspec.Struct):
    index: int | None = None
    embedding: list[float] | str | None = None  # float32s as base64 (asked for), or JSON numbers


class _Usage(msgspec.Struct):
    prompt_tokens: int | None = None
    total_tokens: int | None = None


class _List(msgspec.Struct):
    """An embeddings list, or an error in any engine's shape (failures.py reads it)."""

    object: str | None = None
    model: str | None = None
    data: list[_Item] | None = None
    usage: _Usage | None = None
    error: msgspec.Raw = NO_JSON


_list = msgspec.json.Decoder(_List, strict=False)


def _vector(embedding: list[float] | str | None, i: int) -> list[float]:
    if isinstance(embedding, list):
        return embedding
    if embedding is None:
        raise EngineFailed(protocol_error(f"The engine's embedding {i} has no vector."))
    try:
        raw = binascii.a2b_base64(embedding, strict_mode=True)
    except (binascii.Error, ValueError) as exc:
        raise EngineFailed(protocol_error(f"The engine's embedding {i} is not base64: {exc}.")) from None
    if len(raw) % 4:
        raise EngineFailed(protocol_error(f"The engine's embedding {i} is {len(raw)} bytes, not float32s."))
    floats = array("f", raw)
    if _BIG_ENDIAN:
        floats.byteswap()
    return floats.tolist()


def read_embeddings(body: bytes, *, model: str, inputs: int, dimensions: int | None) -> Embeddings:
    """The engine's embeddings list as ours: `inputs` vectors in the inputs' order, of `dimensions` floats
    when the client asked for them, with the engine's counts as usage (`model`: the name sent, when the
    engine names none)."""
    answer = engine_answer(_list, body)
    items = answer.data or []
    if len(items) != inputs:
        raise EngineFailed(protocol_error(f"The engine answered {len(items)} embeddings for {inputs} inputs."))
    if all(item.index is not None for item in items):
        items = sorted(items, key=lambda item: item.index or 0)
    if any(item.index not in (None, n) for n, item in enumerate(items)):
        indexes = [item.index for item in items]
        raise EngineFailed(protocol_error(f"The engine's embeddings are indexed {indexes[:8]}, not 0 to {inputs - 1}."))
    vectors = [_vector(item.embedding, n) for n, item in enumerate(items)]
    sized_as_asked(vectors, dimensions, "The engine")
    usage = None
    if answer.usage is not None:
        prompt = count(answer.usage.prompt_tokens)
        usage = wire_types.Usage(prompt_tokens=prompt, total_tokens=count(answer.usage.total_tokens) or prompt)
    return Embeddings(model=answer.model or model, vectors=vectors, usage=usage)
