"""A cached answer as stored, and as served (sans-I/O): the service's own answer in the contract, tagged
with its shape, with the route and model whose attempt made it (its producer), and a digest of both; given
back in the shape a request asks for, converted when the shapes differ (ingress/wire/convert.py), with its
producer.

    WHOLE       b"w" + digest + producer + a CompletionResponse buffer
    STREAM      b"s" + digest + producer + a stream's frames, the final one last
    EMBEDDINGS  b"e" + digest + producer + an EmbeddingResponse buffer

    producer    the route's name and the model, each as a 2-byte big-endian length and its UTF-8 bytes

The producer is the attempt that answered, which on a fallback chain may be a later route than the
request's (whose name and model the entry's key holds): a hit's x-ingress-served-by names it. An entry of
the first format (b"W", b"S", b"E" + digest + the answer), stored before entries recorded their producer
and still in a shared store, is served as ever, with no producer (None): its hit names none.

The digest (16 bytes of BLAKE2b: of the tag and of everything after the digest, the producer and the
answer; the first format's, of the answer alone) is checked before anything is served: an entry a store gives
back altered is a miss (its tag too: an entry is never read as of another format or shape), as is one of a
tag not known. A stream is
checked whole (every frame verified, in order, the final one last) once, before it is stored; served as a
stream again, it is read exactly as a live one, frame by frame.
"""

from __future__ import annotations

import hashlib
from typing import Literal, NamedTuple

from ingress.wire import identifiers
from ingress.wire.convert import complete_stream, response_frames, stream_response

Shape = Literal["whole", "stream", "embeddings"]
WHOLE: Shape = "whole"
STREAM: Shape = "stream"
EMBEDDINGS: Shape = "embeddings"
Producer = tuple[str, str]
"""The route (its name) and the upstream model of the attempt whose answer an entry is."""

_TAGS: dict[Shape, bytes] = {WHOLE: b"w", STREAM: b"s", EMBEDDINGS: b"e"}
_FIRST_TAGS: dict[Shape, bytes] = {WHOLE: b"W", STREAM: b"S", EMBEDDINGS: b"E"}  # no producer
_SHAPES = {tag[0]: shape for shape, tag in _TAGS.items()}
_FIRST_SHAPES = {tag[0]: shape for shape, tag in _FIRST_TAGS.items()}
_IDENTIFIER: dict[Shape, bytes] = {WHOLE: identifiers.RESPONSE, EMBEDDINGS: identifiers.EMBEDDING_RESPONSE}
DIGEST = 16
_LENGTH = 2  # bytes of a producer field's length
_FIELD_MAX = (1 << (8 * _LENGTH)) - 1


class Stored(NamedTuple):
    """An entry, served: the answer in the shape asked for, and its producer (None: an entry of the first
    format, which did not record it)."""

    answer: bytes
    producer: Producer | None


def _digest(data: bytes | memoryview, tag: bytes = b"") -> bytes:
    made = hashlib.blake2b(tag, digest_size=DIGEST)
    made.update(data)
    return made.digest()


def entry(shape: Shape, answer: bytes, producer: Producer | None) -> bytes | None:
    """What to store of a successful answer in `shape`, made by `producer` (None, not known: an entry of the
    first format); None if it is not one to keep: not a whole answer of its kind, a stream that is not whole
    (cut short, failed, ended by an Error frame), or a producer whose name does not fit its field."""
    if shape == STREAM:
        if not complete_stream(answer):
            return None
    elif identifiers.identifier_of(answer) != _IDENTIFIER[shape]:
        return None
    if producer is None:
        return _FIRST_TAGS[shape] + _digest(answer) + answer
    fields = [text.encode("utf-8", "surrogatepass") for text in producer]
    if any(len(field) > _FIELD_MAX for field in fields):
        return None
    signed = b"".join(len(field).to_bytes(_LENGTH, "big") + field for field in fields) + answer
    return _TAGS[shape] + _digest(signed, _TAGS[shape]) + signed


def served(value: bytes, shape: Shape) -> Stored | None:
    """The stored answer in the shape asked for (as stored, or converted: a whole answer streamed, a stream
    made whole), and its producer; None when it cannot be (an entry of another kind or format, altered, or
    one that does not read back)."""
    if len(value) <= DIGEST:
        return None
    if (stored := _SHAPES.get(value[0])) is not None:
        if value[1:1 + DIGEST] != _digest(memoryview(value)[1 + DIGEST:], value[:1]):
            return None
        read = _producer(value, 1 + DIGEST)
        if read is None:
            return None
        producer, at = read
    elif (stored := _FIRST_SHAPES.get(value[0])) is not None:
        producer, at = None, 1 + DIGEST
        if value[1:at] != _digest(memoryview(value)[at:]):
            return None
    else:
        return None
    answer = _shaped(value[at:], stored, shape)
    return Stored(answer, producer) if answer is not None else None


def _producer(value: bytes, at: int) -> tuple[Producer, int] | None:
    """The producer's two fields from `at`, and where the answer begins; None if they do not read."""
    fields: list[str] = []
    for _ in range(2):
        size = int.from_bytes(value[at:at + _LENGTH], "big")
        at += _LENGTH
        if at + size > len(value):
            return None
        try:
            fields.append(value[at:at + size].decode("utf-8", "surrogatepass"))
        except UnicodeDecodeError:
            return None
        at += size
    return (fields[0], fields[1]), at


def _shaped(body: bytes, stored: Shape, shape: Shape) -> bytes | None:
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
