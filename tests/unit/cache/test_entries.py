"""A cached answer as stored and as served (ingress/cache/entries.py): only whole successful answers are
kept, with the route and model that made them; either shape is served from either, with them; an entry of
the first format (no producer) is still served, naming none; and an entry altered in its store, or of a
format not known, is a miss."""

from __future__ import annotations

import hashlib

from ingress import wire
from ingress.cache.entries import DIGEST, EMBEDDINGS, STREAM, WHOLE, Stored, entry, served
from ingress.wire.convert import stream_response

RESPONSE = wire.Response(id="a", model="m", created=1, choices=[wire.Choice(content="hi", finish_reason="stop")],
                         usage=wire.Usage(prompt_tokens=1, completion_tokens=1, total_tokens=2))
CHUNKS = [wire.Chunk(sequence=0, id="a", model="m", created=1, role="assistant", content="hi"),
          wire.Chunk(sequence=1, finish_reason="stop"),
          wire.Chunk(sequence=2, usage=RESPONSE.usage, done=True)]
WHOLE_BUF = bytes(wire.write_response(RESPONSE))
FRAMES = b"".join(bytes(wire.write_chunk(c)) for c in CHUNKS)
ERROR = bytes(wire.write_error(wire.ErrorInfo(status=500, message="no")))
VECTORS = bytes(wire.write_embeddings(wire.Embeddings(vectors=[[0.5]], model="e")))
BY = ("claude", "claude-sonnet-4-5")  # a fallback route of the request's chain, which answered
PRODUCER = b"\x00\x06claude\x00\x11claude-sonnet-4-5"


def test_only_whole_successful_answers_are_kept_with_what_made_them() -> None:
    assert entry(WHOLE, WHOLE_BUF, BY) == stored(b"w", PRODUCER + WHOLE_BUF)
    assert entry(STREAM, FRAMES, BY) == stored(b"s", PRODUCER + FRAMES)
    assert entry(EMBEDDINGS, VECTORS, BY) == stored(b"e", PRODUCER + VECTORS)
    assert entry(WHOLE, ERROR, BY) is None
    assert entry(WHOLE, FRAMES, BY) is None
    assert entry(EMBEDDINGS, WHOLE_BUF, BY) is None
    assert entry(STREAM, FRAMES[: len(FRAMES) // 2], BY) is None  # cut short
    assert entry(STREAM, bytes(wire.write_chunk(CHUNKS[0])), BY) is None  # no final frame
    assert entry(STREAM, bytes(wire.write_chunk(CHUNKS[0])) + bytes(wire.write_error(
        wire.ErrorInfo(status=500, message="no"), framed=True)), BY) is None  # failed
    assert entry(WHOLE, WHOLE_BUF, ("r", "m" * 70_000)) is None  # a model too long for its field
    assert entry(WHOLE, WHOLE_BUF, None) == stored(b"W", WHOLE_BUF)  # what made it not known: no producer


def test_an_entry_gives_back_its_answer_and_what_made_it() -> None:
    for shape, answer in ((WHOLE, WHOLE_BUF), (STREAM, FRAMES), (EMBEDDINGS, VECTORS)):
        value = entry(shape, answer, BY)
        assert value is not None and served(value, shape) == Stored(answer, BY)
    odd = ("ré\"sumé", "")  # any text round-trips, an empty model too
    value = entry(WHOLE, WHOLE_BUF, odd)
    assert value is not None and served(value, WHOLE) == Stored(WHOLE_BUF, odd)
    streamed = served(entry(WHOLE, WHOLE_BUF, BY) or b"", STREAM)  # converted, still with its producer
    assert streamed is not None and streamed.producer == BY and stream_response(streamed.answer) == WHOLE_BUF


def test_an_entry_of_the_first_format_is_served_with_no_producer() -> None:
    """Stored before entries recorded their producer (a Redis store outlives an upgrade): still the answer."""
    assert served(stored(b"W", WHOLE_BUF), WHOLE) == Stored(WHOLE_BUF, None)
    assert served(stored(b"S", FRAMES), STREAM) == Stored(FRAMES, None)
    assert served(stored(b"E", VECTORS), EMBEDDINGS) == Stored(VECTORS, None)
    made_whole = served(stored(b"S", FRAMES), WHOLE)
    assert made_whole is not None and made_whole.producer is None
    assert wire.decode_response(made_whole.answer) == RESPONSE


def stored(tag: bytes, signed: bytes) -> bytes:
    """An entry as its format makes it: the first format's (upper-case tag) digest is of the answer alone."""
    return tag + hashlib.blake2b((b"" if tag.isupper() else tag) + signed, digest_size=DIGEST).digest() + signed


def test_either_shape_is_served_from_either() -> None:
    assert served(stored(b"W", WHOLE_BUF), WHOLE) == (WHOLE_BUF, None)
    assert served(stored(b"s", PRODUCER + FRAMES), STREAM) == (FRAMES, BY)
    streamed = served(stored(b"W", WHOLE_BUF), STREAM)
    assert streamed is not None
    assert (stream_response(streamed.answer), None) == served(stored(b"S", streamed.answer), WHOLE)
    made_whole = served(stored(b"s", PRODUCER + FRAMES), WHOLE)
    assert made_whole is not None and wire.decode_response(made_whole.answer) == RESPONSE and made_whole.producer == BY


def test_what_cannot_be_served_is_a_miss() -> None:
    assert served(b"", WHOLE) is None
    assert served(stored(b"X", WHOLE_BUF), WHOLE) is None  # a format not known
    assert served(stored(b"x", PRODUCER + WHOLE_BUF), WHOLE) is None
    assert served(stored(b"E", WHOLE_BUF), WHOLE) is None  # embeddings are not a completion
    assert served(stored(b"e", PRODUCER + WHOLE_BUF), WHOLE) is None
    assert served(stored(b"W", WHOLE_BUF), EMBEDDINGS) is None
    altered = bytearray(stored(b"S", FRAMES))
    altered[-5] ^= 1
    assert served(bytes(altered), STREAM) is None  # altered in the store: the digest no longer matches
    assert served(bytes(altered), WHOLE) is None
    assert served(stored(b"S", FRAMES[:-3]), WHOLE) is None  # a stream that does not read whole
    assert served(stored(b"W", WHOLE_BUF[:20]), STREAM) is None


def test_an_entry_altered_anywhere_is_a_miss() -> None:
    """The digest covers what is served: the producer as much as the answer, and the tag says the format."""
    value = entry(STREAM, FRAMES, BY)
    assert value is not None
    for at in (1 + DIGEST + 3, 1 + DIGEST + len(PRODUCER) - 1, len(value) - 5):  # the route, the model, the answer
        altered = bytearray(value)
        altered[at] ^= 1
        assert served(bytes(altered), STREAM) is None
    assert served(b"S" + value[1:], STREAM) is None  # read as the first format: its digest does not match
    assert served(b"w" + value[1:], STREAM) is None  # read as another shape than stored
    old = stored(b"S", FRAMES)
    assert served(b"s" + old[1:], STREAM) is None  # an entry of the first format, read as of the new one


def test_a_producer_that_does_not_read_is_a_miss() -> None:
    """Fields whose lengths run past the entry, or that are not UTF-8, even under a digest that matches."""
    assert served(stored(b"w", b"\x00\x06clau"), WHOLE) is None
    assert served(stored(b"w", b"\x00\x01r\xff\xff" + WHOLE_BUF), WHOLE) is None
    assert served(stored(b"w", b"\x00\x02\xff\xfe\x00\x01m" + WHOLE_BUF), WHOLE) is None
    assert served(stored(b"w", b"\x00"), WHOLE) is None
