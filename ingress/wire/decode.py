"""Read FlatBuffers from bytes: zero-copy request views, and answers as plain data."""

from __future__ import annotations

import struct
from typing import TypeAlias

from ingress.wire import identifiers
from ingress.wire import types as wire_types
from ingress.wire._generated import encoders as gen
from ingress.wire._generated import enums, readers
from ingress.wire._generated.LLMGateway.CompletionRequest import CompletionRequest

ROLE_NAMES = enums.ROLE_NAMES
FINISH_NAMES = enums.FINISH_REASON_NAMES
PROVIDER_NAMES = enums.MODEL_PROVIDER_NAMES


class WireError(ValueError):
    """A buffer is not of the expected type or cannot be read."""


def _expect(buf: bytes, identifier: bytes) -> None:
    if identifiers.identifier_of(buf) != identifier:
        raise WireError(f"expected a {identifier.decode()} buffer, got {identifiers.identifier_of(buf)!r}")


def _s(value: bytes | None) -> str | None:
    return None if value is None else value.decode()


RequestView: TypeAlias = CompletionRequest  # what read_request gives: the generated reader's table, read in place


def read_request(buf: bytes) -> RequestView:
    """A zero-copy view of a CompletionRequest; fields are read from `buf` when accessed."""
    _expect(buf, identifiers.REQUEST)
    return CompletionRequest.GetRootAs(buf, 0)


def read_request_data(buf: bytes) -> gen.CompletionRequestData:
    """A verified CompletionRequest, every field read (for services that use the whole request)."""
    _expect(buf, identifiers.REQUEST)
    return readers.read_CompletionRequest(buf)


def _call(c: gen.FunctionCallData) -> wire_types.FunctionCall:
    return wire_types.FunctionCall(id=c.id or "", name=c.name or "", arguments=c.arguments or "",
                                   type=c.type or "function")


def _bad(what: str, value: int) -> str:
    raise WireError(f"unknown {what} {value}")


def _enum(names: tuple[str | None, ...], value: int, what: str) -> str | None:
    return names[value] if 0 <= value < len(names) else _bad(what, value)


def _choice(c: gen.ChoiceData) -> wire_types.Choice:
    m = c.message
    return wire_types.Choice(
        index=c.index,
        content=m.content if m else None,
        tool_calls=[_call(t) for t in m.tool_calls] if m and m.tool_calls else [],
        refusal=m.refusal if m else None,
        finish_reason=_enum(FINISH_NAMES, c.finish_reason, "finish_reason"),
        logprobs=c.logprobs, refusal_logprobs=c.refusal_logprobs, annotations=c.annotations or [],
        reasoning=c.reasoning, signature=c.signature, redacted_thinking=c.redacted_thinking or [],
        stop_sequence=c.stop_sequence,
    )


# The answers are read with the generated readers (readers.py): a verified buffer's fields come out in
# one struct call each, about ten times faster than through the flatbuffers runtime's accessors.


def decode_response(buf: bytes) -> wire_types.Response:
    """A verified CompletionResponse buffer."""
    _expect(buf, identifiers.RESPONSE)
    r = readers.read_CompletionResponse(buf)
    return wire_types.Response(id=r.id or "", model=r.model or "", created=r.created,
                               choices=[_choice(c) for c in r.choices] if r.choices else [],
                               usage=r.usage, system_fingerprint=r.system_fingerprint, service_tier=r.service_tier)


def decode_chunk(buf: bytes) -> wire_types.Chunk:
    """A verified chunk frame's buffer (size prefix already stripped)."""
    _expect(buf, identifiers.CHUNK)
    k = readers.read_CompletionChunk(buf)
    role = k.role
    return wire_types.Chunk(
        sequence=k.sequence, choice_index=k.choice_index, id=k.id, model=k.model, created=k.created or None,
        role=None if role is None else _enum(ROLE_NAMES, role, "role"), content=k.content,
        tool_calls=k.tool_calls or [],
        refusal=k.refusal, finish_reason=_enum(FINISH_NAMES, k.finish_reason, "finish_reason"),
        usage=k.usage, system_fingerprint=k.system_fingerprint, done=k.done,
        logprobs=k.logprobs, refusal_logprobs=k.refusal_logprobs, service_tier=k.service_tier,
        reasoning=k.reasoning, signature=k.signature, redacted_thinking=k.redacted_thinking or [],
        stop_sequence=k.stop_sequence,
    )


def decode_error(buf: bytes) -> wire_types.ErrorInfo:
    """A verified Error buffer (size prefix already stripped)."""
    _expect(buf, identifiers.ERROR)
    e = readers.read_Error(buf)
    return wire_types.ErrorInfo(status=e.status, message=e.message or "", type=e.type or "", code=e.code, param=e.param)


# --- a float32 as the decimal it was sent as (a request's sampling fields, a token's logprob) -------


def shortest_float32(value: float) -> float:
    """The shortest decimal that reads back as the same float32 (0.699999988 -> 0.7)."""
    packed = struct.pack("<f", value)
    for digits in range(1, 10):
        candidate = float(f"{value:.{digits}g}")
        if struct.pack("<f", candidate) == packed:
            return candidate
    return value
