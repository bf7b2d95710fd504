"""A cached answer as stored and as served (ingress/cache/entries.py): only whole successful answers are
kept, and either shape is served from either."""

from __future__ import annotations

from ingress import wire
from ingress.cache.entries import EMBEDDINGS, STREAM, WHOLE, entry, served
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
    assert entry(WHOLE, WHOLE_BUF) == b"W" + WHOLE_BUF
    assert entry(STREAM, FRAMES) == b"S" + FRAMES
    assert entry(WHOLE, ERROR) is None
    assert entry(WHOLE, FRAMES) is None
    assert entry(EMBEDDINGS, WHOLE_BUF) is None
    assert entry(STREAM, FRAMES[: len(FRAMES) // 2]) is None  # cut short
    assert entry(STREAM, bytes(wire.write_chunk(CHUNKS[0]))) is None  # no final frame
    assert entry(STREAM, bytes(wire.write_chunk(CHUNKS[0])) + bytes(wire.write_error(
        wire.ErrorInfo(status=500, message="no"), framed=True))) is None  # failed
    vectors = bytes(wire.write_embeddings(wire.Embeddings(vectors=[[0.5]], model="e")))
    assert entry(EMBEDDINGS, vectors) == b"E" + vectors


def test_either_shape_is_served_from_either() -> None:
    assert served(b"W" + WHOLE_BUF, WHOLE) == WHOLE_BUF
    assert served(b"S" + FRAMES, STREAM) == FRAMES
    streamed = served(b"W" + WHOLE_BUF, STREAM)
    assert streamed is not None and stream_response(streamed) == served(b"S" + streamed, WHOLE)
    made_whole = served(b"S" + FRAMES, WHOLE)
    assert made_whole is not None and wire.decode_response(made_whole) == RESPONSE


def test_what_cannot_be_served_is_a_miss() -> None:
    assert served(b"", WHOLE) is None
    assert served(b"X" + WHOLE_BUF, WHOLE) is None
    assert served(b"E" + WHOLE_BUF, WHOLE) is None  # embeddings are not a completion
    assert served(b"W" + WHOLE_BUF, EMBEDDINGS) is None
    assert served(b"S" + FRAMES[:-3], STREAM) is None  # a stored stream that no longer reads whole
    assert served(b"S" + FRAMES[:-3], WHOLE) is None
    assert served(b"W" + WHOLE_BUF[:20], STREAM) is None
