"""Verify FlatBuffers that came from outside before anything reads them; a failure is a WireError.

The checks are the generated verifier's strict ones (ingress.wire.verifier_runtime.Verifier lists them):
those of FlatBuffers' C++ Verifier, plus valid UTF-8 in every string, sane vtable headers, aligned
vector elements, and work bounded by the buffer's size.
"""

from __future__ import annotations

from collections.abc import Callable

from ingress.wire._generated import verifier as _gen
from ingress.wire.decode import WireError
from ingress.wire.runtime import Buffer
from ingress.wire.verifier_runtime import MAX_SIZE, VerifyError


def _verify(check: Callable[..., None], buf: Buffer, size_prefixed: bool, max_size: int) -> None:
    try:
        check(buf, size_prefixed=size_prefixed, max_size=max_size)
    except VerifyError as exc:
        raise WireError(str(exc)) from exc


def verify_request(buf: Buffer, *, max_size: int = MAX_SIZE) -> None:
    """Raise WireError unless `buf` is a whole CompletionRequest buffer, shorter than `max_size`."""
    _verify(_gen.verify_CompletionRequest, buf, False, max_size)


def verify_response(buf: Buffer, *, max_size: int = MAX_SIZE) -> None:
    """Raise WireError unless `buf` is a whole CompletionResponse buffer."""
    _verify(_gen.verify_CompletionResponse, buf, False, max_size)


def verify_chunk(frame: Buffer, size_prefixed: bool = True, *, max_size: int = MAX_SIZE) -> None:
    """Raise WireError unless `frame` is one CompletionChunk frame, its size prefix included.

    Verify a frame before stripping its prefix: its 8-byte fields are aligned from the start of the
    prefix, so the same bytes without it fail the alignment checks (in C++ too).
    """
    _verify(_gen.verify_CompletionChunk, frame, size_prefixed, max_size)


def verify_error(buf: Buffer, *, size_prefixed: bool = False, max_size: int = MAX_SIZE) -> None:
    """Raise WireError unless `buf` is an Error buffer: alone, or a whole frame when `size_prefixed`."""
    _verify(_gen.verify_Error, buf, size_prefixed, max_size)


def verify_embedding_request(buf: Buffer, *, max_size: int = MAX_SIZE) -> None:
    """Raise WireError unless `buf` is a whole EmbeddingRequest buffer, shorter than `max_size`."""
    _verify(_gen.verify_EmbeddingRequest, buf, False, max_size)


def verify_embedding_response(buf: Buffer, *, max_size: int = MAX_SIZE) -> None:
    """Raise WireError unless `buf` is a whole EmbeddingResponse buffer."""
    _verify(_gen.verify_EmbeddingResponse, buf, False, max_size)
