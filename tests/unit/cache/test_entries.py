"""A cached answer as stored and as served (ingress/cache/entries.py): only whole successful answers are
kept, either shape is served from either, and an entry altered in its store is a miss."""

from __future__ import annotations

import hashlib

from ingress import wire
from ingress.cache.entries import DIGEST, EMBEDDINGS, STREAM, WHOLE, entry, served
from ingress.wire.convert import stream_response

RESPONSE = wire.Response(id="a", model="m", created=1, choices=[wire.Choice(content="hi", finish_reason="stop")],
                         usage=wire.Usage(prompt_tokens=1, completion_tokens=1, total_tokens=2))
CHUNKS = [wire.Chunk(sequence=0, id="a", model="m", created=1, role="assistant", content="hi"),
          wire.Chunk(sequence=1, finish_reason="stop"),
          wire.Chunk(sequence=2, usage=RESPONSE.usage, done=True)]
WHOLE_BUF = bytes(wire.write_response(RESPONSE))
FRAMES = b"".join(bytes(wire.write_chunk(c)) for c in CHUNKS)
ERROR = bytes(wire.write_error(wire.ErrorInfo(status=500, message="no")))


def test_only_whole_successful_answers_are_kept() -> None:
    assert entry(WHOLE, WHOLE_BUF) == b"W" + digest(WHOLE_BUF) + WHOLE_BUF
    assert entry(STREAM, FRAMES) == b"S" + digest(FRAMES) + FRAMES
    assert entry(WHOLE, ERROR) is None
    assert entry(WHOLE, FRAMES) is None
    assert entry(EMBEDDINGS, WHOLE_BUF) is None
    assert entry(STREAM, FRAMES[: len(FRAMES) // 2]) is None  # cut short
    assert entry(STREAM, bytes(wire.write_chunk(CHUNKS[0]))) is None  # no final frame
    assert entry(STREAM, bytes(wire.write_chunk(CHUNKS[0])) + bytes(wire.write_error(
        wire.ErrorInfo(status=500, message="no"), framed=True))) is None  # failed
    vectors = bytes(wire.write_embeddings(wire.Embeddings(vectors=[[0.5]], model="e")))
    assert entry(EMBEDDINGS, vectors) == b"E" + digest(vectors) + vectors


def stored(tag: bytes, answer: bytes) -> bytes:
    return tag + digest(answer) + answer


def digest(answer: bytes) -> bytes:
    return hashlib.blake2b(answer, digest_size=DIGEST).digest()


def test_either_shape_is_served_from_either() -> None:
    assert served(stored(b"W", WHOLE_BUF), WHOLE) == WHOLE_BUF
    assert served(stored(b"S", FRAMES), STREAM) == FRAMES
    streamed = served(stored(b"W", WHOLE_BUF), STREAM)
    assert streamed is not None and stream_response(streamed) == served(stored(b"S", streamed), WHOLE)
    made_whole = served(stored(b"S", FRAMES), WHOLE)
    assert made_whole is not None and wire.decode_response(made_whole) == RESPONSE


def test_what_cannot_be_served_is_a_miss() -> None:
    assert served(b"", WHOLE) is None
    assert served(stored(b"X", WHOLE_BUF), WHOLE) is None
    assert served(stored(b"E", WHOLE_BUF), WHOLE) is None  # embeddings are not a completion
    assert served(stored(b"W", WHOLE_BUF), EMBEDDINGS) is None
    altered = bytearray(stored(b"S", FRAMES))
    altered[-5] ^= 1
    assert served(bytes(altered), STREAM) is None  # altered in the store: the digest no longer matches
    assert served(bytes(altered), WHOLE) is None
    assert served(stored(b"S", FRAMES[:-3]), WHOLE) is None  # a stream that does not read whole
    assert served(stored(b"W", WHOLE_BUF[:20]), STREAM) is None
