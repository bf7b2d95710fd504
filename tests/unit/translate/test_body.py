"""translate.body: the streaming core gives, for a body read in any pieces, the chunks the translator makes
of its frames, then the error that came after them in the same read; nothing after the final frame; and
at the end of a body cut short (between frames or inside one), its error."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingress import wire
from ingress.errors import UpstreamAnswered, UpstreamProtocolError
from ingress.oai.chat_answers import ChatCompletionChunk
from ingress.translate.body import Read, StreamBody
from ingress.translate.stream import Delta, StreamTranslator
from ingress.translate.text import TextStreamTranslator
from ingress.wire import Chunk, ErrorInfo

FRAMES = [bytes(wire.write_chunk(c)) for c in (
    Chunk(sequence=0, id="up", model="m", created=1, role="assistant", content=""),
    Chunk(sequence=1, content="Hello"),
    Chunk(sequence=2, content=" world"),
    Chunk(sequence=3, finish_reason="stop", done=True),
)]
BODY = b"".join(FRAMES)


def body() -> StreamBody[ChatCompletionChunk | Delta]:
    return StreamBody(StreamTranslator(id="chatcmpl-x", model="m", created=1, include_usage=False), 1 << 20)


def contents(chunks: list[ChatCompletionChunk | Delta]) -> str:
    whole = [c.chunk() if isinstance(c, Delta) else c for c in chunks]
    return "".join(ch.delta.content or "" for c in whole for ch in c.choices)


@settings(max_examples=200, deadline=None, database=None)
@given(st.lists(st.integers(0, len(BODY)), max_size=8))
def test_any_split_gives_the_same_chunks_and_ends_done(cuts: list[int]) -> None:
    core, chunks = body(), []
    bounds = [0, *sorted(cuts), len(BODY)]
    for start, end in itertools.pairwise(bounds):
        read = core.feed(BODY[start:end])
        assert read.error is None
        chunks += read.chunks
    assert core.done
    assert contents(chunks) == "Hello world"
    assert core.end() == Read([], None)  # a complete stream has nothing wrong at its end


def test_nothing_after_the_final_frame_is_read() -> None:
    core = body()
    read = core.feed(BODY + FRAMES[1] + b"\xff\xff\xff\xff garbage")
    assert read.error is None and core.done
    assert contents(read.chunks) == "Hello world"


def test_an_error_frame_comes_after_the_chunks_of_its_read() -> None:
    error = bytes(wire.write_error(ErrorInfo(status=429, message="slow down", type="rate_limit"), framed=True))
    read = body().feed(FRAMES[0] + FRAMES[1] + error)
    assert contents(read.chunks) == "Hello"
    assert isinstance(read.error, UpstreamAnswered) and read.error.status == 429


def test_a_malformed_frame_is_the_services_protocol_error_after_the_good_ones() -> None:
    read = body().feed(FRAMES[0] + FRAMES[1] + b"\x02\x00\x00\x00xx")  # a size below any frame's
    assert contents(read.chunks) == "Hello"
    assert isinstance(read.error, UpstreamProtocolError)
    assert "malformed stream" in str(read.error)


@pytest.mark.parametrize("rest", [b"", FRAMES[2][:5]], ids=["between frames", "inside a frame"])
def test_a_body_cut_short_fails_at_its_end(rest: bytes) -> None:
    core = body()
    assert core.feed(FRAMES[0] + FRAMES[1] + rest).error is None
    read = core.end()
    assert read.chunks == [] and isinstance(read.error, UpstreamProtocolError)


def test_a_skipped_frame_is_refused() -> None:
    read = body().feed(FRAMES[0] + FRAMES[2])
    assert isinstance(read.error, UpstreamProtocolError) and "skipped" in str(read.error)


def test_a_text_completion_goes_through_the_same_core() -> None:
    core = StreamBody(TextStreamTranslator(id="cmpl-x", model="m", created=1, include_usage=False), 1 << 20)
    read = core.feed(BODY)
    assert read.error is None and core.done
    assert "".join(c.choices[0].text for c in read.chunks if c.choices) == "Hello world"


def test_each_frames_chunks_are_told_as_they_are_made() -> None:
    """`sent` hears of each frame's chunks, one call a frame: the gaps between chunks are timed by frame,
    not by read, whatever the split."""
    told: list[int] = []
    core = StreamBody(StreamTranslator(id="chatcmpl-x", model="m", created=1, include_usage=False), 1 << 20,
                      told.append)
    read = core.feed(BODY)
    assert told == [1, 1, 1, 1] and len(read.chunks) == 4  # the role, two tokens, the finish: a chunk each
