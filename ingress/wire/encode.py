"""Encode the answer tables, and a request's data, into FlatBuffers.

One mapping (wire types → the schema's data classes), then the generated forward encoder. A client's
request becomes a CompletionRequestData on the edge's side (ingress/encoding/requests.py) and is encoded
here (`encode_request_data`). The stock flatbuffers.Builder path, kept as the reference, is in `stock.py`
(the request's) and tests/support/stock_buffers.py (the answers' and embeddings', which only tests use).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ingress.wire import types as wire_types
from ingress.wire._generated import encoders as gen
from ingress.wire._generated import enums

PROVIDERS = enums.MODEL_PROVIDER_VALUES
ROLES = enums.ROLE_VALUES
FINISH_REASONS = enums.FINISH_REASON_VALUES


# --- wire types → answer data ---------------------------------------------------------------------


def _calls(calls: list[wire_types.FunctionCall]) -> list[gen.FunctionCallData] | None:
    return [gen.FunctionCallData(id=c.id, type=c.type, name=c.name, arguments=c.arguments) for c in calls] or None


def response_data(r: wire_types.Response) -> gen.CompletionResponseData:
    choices = [
        gen.ChoiceData(index=c.index, finish_reason=FINISH_REASONS[c.finish_reason], message=gen.MessageData(
            role=ROLES["assistant"], content=c.content, tool_calls=_calls(c.tool_calls), refusal=c.refusal),
            logprobs=c.logprobs, refusal_logprobs=c.refusal_logprobs, annotations=c.annotations or None,
            reasoning=c.reasoning, signature=c.signature, redacted_thinking=c.redacted_thinking or None,
            stop_sequence=c.stop_sequence)
        for c in r.choices
    ]
    return gen.CompletionResponseData(id=r.id, model=r.model, created=r.created, choices=choices,
                                      usage=r.usage, system_fingerprint=r.system_fingerprint,
                                      service_tier=r.service_tier)


def chunk_data(c: wire_types.Chunk) -> gen.CompletionChunkData:
    deltas = c.tool_calls or None
    return gen.CompletionChunkData(
        sequence=c.sequence, id=c.id, model=c.model, created=c.created or 0, choice_index=c.choice_index,
        role=ROLES[c.role] if c.role is not None else None, content=c.content, tool_calls=deltas,
        finish_reason=FINISH_REASONS[c.finish_reason], usage=c.usage, refusal=c.refusal,
        system_fingerprint=c.system_fingerprint, done=c.done,
        logprobs=c.logprobs, refusal_logprobs=c.refusal_logprobs, service_tier=c.service_tier,
        reasoning=c.reasoning, signature=c.signature, redacted_thinking=c.redacted_thinking or None,
        stop_sequence=c.stop_sequence,
    )


def error_data(e: wire_types.ErrorInfo) -> gen.ErrorData:
    return gen.ErrorData(status=e.status, type=e.type, code=e.code, message=e.message, param=e.param)


# --- the encoder ----------------------------------------------------------------------------------


def _fast(encode: Callable[..., None], data: Any, size_prefixed: bool = False) -> bytearray:
    # A fresh bytearray each time, handed over as it is: reusing one measured no faster in CPython,
    # whose bytearray.clear() releases the storage anyway, and copying it out to bytes cost as much
    # as encoding at 1 MB (bench/micro.py keeps both comparisons).
    buf = bytearray()
    encode(buf, data, size_prefixed=size_prefixed)
    return buf


def encode_request_data(data: wire_types.CompletionRequestData) -> bytearray:
    """One CompletionRequest buffer (identifier LGRQ)."""
    buf = bytearray()  # as in _fast, inline: one call fewer on every request
    gen.encode_CompletionRequest(buf, data)
    return buf


def encode_response(response: wire_types.Response) -> bytearray:
    """One CompletionResponse buffer."""
    return _fast(gen.encode_CompletionResponse, response_data(response))


def encode_chunk_frame(chunk: wire_types.Chunk) -> bytearray:
    """One size-prefixed CompletionChunk frame."""
    return _fast(gen.encode_CompletionChunk, chunk_data(chunk), size_prefixed=True)


def encode_error(error: wire_types.ErrorInfo, *, framed: bool = False) -> bytearray:
    """An Error buffer, alone or as a size-prefixed stream frame."""
    return _fast(gen.encode_Error, error_data(error), size_prefixed=framed)
