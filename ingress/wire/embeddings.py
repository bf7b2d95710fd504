"""Embeddings on the wire: the EmbeddingRequest, and the answers both ways.

The edge encodes the request (from OpenAI's: ingress/encoding/embeddings.py, through
`encode_embedding_request_data`) and decodes the service's answer (`decode_embeddings_answer`: an
EmbeddingResponse, or its Error raised); a Python service reads the request (`read_embedding_request`;
`read_embedding_request_data` once it verified it with its own bound) and writes its answer
(`encode_embeddings`). Vectors travel as FlatBuffers `[float]` vectors: float32, little-endian, never JSON.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from ingress.errors import IngressError, UpstreamProtocolError
from ingress.wire import decode, identifiers, verify
from ingress.wire import types as wire_types
from ingress.wire._generated import encoders as gen
from ingress.wire._generated import readers
from ingress.wire.answer import error_of

EmbeddingRequestData = gen.EmbeddingRequestData
EmbeddingInputData = gen.EmbeddingInputData


class Embeddings(msgspec.Struct, kw_only=True):
    """An EmbeddingResponse as plain data: one vector per input, in the inputs' order."""

    model: str
    vectors: list[list[float]]
    usage: wire_types.Usage | None = None


def _fresh(encode: Callable[..., None], data: object) -> bytearray:
    buf = bytearray()
    encode(buf, data)
    return buf


def encode_embedding_request_data(data: gen.EmbeddingRequestData) -> bytearray:
    """One EmbeddingRequest buffer (identifier LGEQ)."""
    return _fresh(gen.encode_EmbeddingRequest, data)


def read_embedding_request(buf: bytes) -> gen.EmbeddingRequestData:
    """An EmbeddingRequest from outside, verified, every field read (for services)."""
    verify.verify_embedding_request(buf)
    return read_embedding_request_data(buf)


def read_embedding_request_data(buf: bytes) -> gen.EmbeddingRequestData:
    """A verified EmbeddingRequest, every field read (for a service that verified it with its own bound)."""
    if identifiers.identifier_of(buf) != identifiers.EMBEDDING_REQUEST:
        raise decode.WireError(f"expected an LGEQ buffer, got {identifiers.identifier_of(buf)!r}")
    return readers.read_EmbeddingRequest(buf)


def embeddings_data(e: Embeddings) -> gen.EmbeddingResponseData:
    return gen.EmbeddingResponseData(model=e.model, data=[gen.EmbeddingData(vector=v) for v in e.vectors],
                                     usage=e.usage)


def encode_embeddings(e: Embeddings) -> bytearray:
    """One EmbeddingResponse buffer (identifier LGES), for a service's answer."""
    return _fresh(gen.encode_EmbeddingResponse, embeddings_data(e))


def decode_embeddings(buf: bytes) -> Embeddings:
    """A verified EmbeddingResponse buffer."""
    if identifiers.identifier_of(buf) != identifiers.EMBEDDING_RESPONSE:
        raise decode.WireError(f"expected an LGES buffer, got {identifiers.identifier_of(buf)!r}")
    r = readers.read_EmbeddingResponse(buf)
    return Embeddings(model=r.model or "", vectors=[e.vector or [] for e in r.data or ()], usage=r.usage)


def decode_embeddings_answer(body: bytes, *, verify_answer: bool = True) -> Embeddings:
    """A service's answer to an EmbeddingRequest: its vectors, or its Error raised as UpstreamAnswered."""
    try:
        if identifiers.identifier_of(body) == identifiers.ERROR:
            raise error_of(body, verify_error=verify_answer)
        if verify_answer:
            verify.verify_embedding_response(body)
        return decode_embeddings(body)
    except IngressError:
        raise
    except Exception as exc:  # unverified, a malformed buffer can fail anywhere in the generated readers
        raise UpstreamProtocolError("The model service sent an unreadable answer.") from exc
