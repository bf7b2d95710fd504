"""A cached answer as stored, and as served (sans-I/O): the service's own answer in the contract, tagged
with its shape and a digest of it, and given back in the shape a request asks for, converted when the
shapes differ (ingress/wire/convert.py).

    WHOLE       b"W" + digest + a CompletionResponse buffer
    STREAM      b"S" + digest + a stream's frames, the final one last
    EMBEDDINGS  b"E" + digest + an EmbeddingResponse buffer

The digest (16 bytes of the answer's BLAKE2b) is checked before anything is served: an entry a store gives
back altered is a miss. A stream is checked whole (every frame verified, in order, the final one last) once,
before it is stored; served as a stream again, it is read exactly as a live one, frame by frame.
"""

from __future__ import annotations

import hashlib
from typing import Literal

from ingress.wire import identifiers
from ingress.wire.convert import complete_stream, response_frames, stream_response

Shape = Literal["whole", "stream", "embeddings"]
WHOLE: Shape = "whole"
STREAM: Shape = "stream"
EMBEDDINGS: Shape = "embeddings"
_TAGS: dict[Shape, bytes] = {WHOLE: b"W", STREAM: b"S", EMBEDDINGS: b"E"}
_SHAPES = {tag[0]: shape for shape, tag in _TAGS.items()}
_IDENTIFIER: dict[Shape, bytes] = {WHOLE: identifiers.RESPONSE, EMBEDDINGS: identifiers.EMBEDDING_RESPONSE}
DIGEST = 16


def _digest(answer: bytes) -> bytes:
    return hashlib.blake2b(answer, digest_size=DIGEST).digest()


def entry(shape: Shape, answer: bytes) -> bytes | None:
    """What to store of a successful answer in `shape`; None if it is not one to keep: not a whole
    answer of its kind, or a stream that is not whole (cut short, failed, ended by an Error frame)."""
    if shape == STREAM:
        if not complete_stream(answer):
            return None
    elif identifiers.identifier_of(answer) != _IDENTIFIER[shape]:
        return None
    return _TAGS[shape] + _digest(answer) + answer


def served(value: bytes, shape: Shape) -> bytes | None:
    """The stored answer in the shape asked for: as stored, or converted (a whole answer streamed, a stream
    made whole); None when it cannot be (an entry of another kind, or one that does not read back)."""
    stored = _SHAPES.get(value[0]) if value else None
    body = value[1 + DIGEST:]
    if stored is None or value[1:1 + DIGEST] != _digest(body):
        return None
    if stored == shape:
        return body
    try:
        if stored == WHOLE and shape == STREAM:
            return response_frames(body)
        if stored == STREAM and shape == WHOLE:
            return stream_response(body)
    except Exception:  # an entry that does not verify or convert is a miss
        return None
    return None
