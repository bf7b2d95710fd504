"""A cached answer as stored, and as served (sans-I/O): the service's own answer in the contract, tagged
with its shape, and given back in the shape a request asks for, converted when the shapes differ
(ingress/wire/convert.py).

    WHOLE       b"W" + a CompletionResponse buffer
    STREAM      b"S" + a stream's frames, the final one last
    EMBEDDINGS  b"E" + an EmbeddingResponse buffer
"""

from __future__ import annotations

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


def entry(shape: Shape, answer: bytes) -> bytes | None:
    """What to store of a successful answer in `shape`; None if it is not one to keep: not a whole
    answer of its kind, or a stream that is not whole (cut short, failed, ended by an Error frame)."""
    if shape == STREAM:
        if not complete_stream(answer):
            return None
    elif identifiers.identifier_of(answer) != _IDENTIFIER[shape]:
        return None
    return _TAGS[shape] + answer


def served(value: bytes, shape: Shape) -> bytes | None:
    """The stored answer in the shape asked for: as stored, or converted (a whole answer streamed, a stream
    made whole); None when it cannot be (an entry of another kind, or one that does not read back)."""
    stored = _SHAPES.get(value[0]) if value else None
    body = value[1:]
    if stored == shape:
        return body if shape != STREAM or complete_stream(body) else None
    try:
        if stored == WHOLE and shape == STREAM:
            return response_frames(body)
        if stored == STREAM and shape == WHOLE:
            return stream_response(body)
    except Exception:  # an entry that does not verify or convert is a miss
        return None
    return None
