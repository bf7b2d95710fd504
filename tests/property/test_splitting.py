"""Byte streams split anywhere: frames and SSE events come out the same whatever the read boundaries."""

from __future__ import annotations

import itertools

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingress import wire
from ingress.edge.sse import DONE, SseWriter
from ingress.translate.body import StreamBody
from ingress.translate.stream import StreamTranslator
from ingress.wire import Chunk, ToolCallDelta, Usage
from ingress.wire.framing import MAX_FRAME, PREFIX, FrameDecoder, FrameError, frame

SETTINGS = settings(max_examples=80, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

text = st.one_of(st.text(max_size=20), st.sampled_from(["", "é", "日本", "🚀", "👩‍👩‍👧", "\n\n", "data: x", "\r\n"]))


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    """`data` cut at every position in `cuts` (empty pieces included: feeding b"" must be harmless)."""
    points = [0, *sorted(cuts), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(points)]


def cuts_of(data: st.DataObject, size: int) -> list[int]:
    return data.draw(st.lists(st.integers(0, size), max_size=12), label="cuts")


def decode_frames(pieces: list[bytes], max_frame: int = 1 << 20) -> tuple[list[bytes], FrameDecoder]:
    decoder = FrameDecoder(max_frame)
    frames: list[bytes] = []
    for piece in pieces:
        frames += decoder.feed(piece)
    return frames, decoder


# --- frames --------------------------------------------------------------------------------------

chunk_payloads = st.builds(Chunk, sequence=st.integers(0, 2**64 - 1), content=st.one_of(st.none(), text),
                           done=st.booleans()).map(lambda c: wire.write_chunk(c)[4:])
payloads = st.lists(st.one_of(st.binary(min_size=8, max_size=300), chunk_payloads), max_size=6)


@SETTINGS
@given(payloads=payloads, data=st.data())
def test_frames_survive_any_split(payloads: list[bytes], data: st.DataObject) -> None:
    stream = b"".join(frame(p) for p in payloads)
    frames, decoder = decode_frames(split(stream, cuts_of(data, len(stream))))
    assert frames == [frame(p) for p in payloads]  # whole frames, size prefix included
    assert decoder.pending == 0
    decoder.finish()


@SETTINGS
@given(payloads=st.lists(st.binary(min_size=8, max_size=100), min_size=1, max_size=4), data=st.data())
def test_stream_cut_inside_a_frame_fails_at_finish(payloads: list[bytes], data: st.DataObject) -> None:
    stream = b"".join(frame(p) for p in payloads)
    boundaries = {0}
    for p in payloads:
        boundaries.add(max(boundaries) + PREFIX.size + len(p))
    end = data.draw(st.integers(1, len(stream) - 1).filter(lambda n: n not in boundaries), label="end")
    cut = stream[:end]
    frames, decoder = decode_frames(split(cut, cuts_of(data, len(cut))))
    whole = max(b for b in boundaries if b < end)
    assert b"".join(frames) == stream[:whole]
    assert decoder.pending == end - whole
    with pytest.raises(FrameError, match="inside a frame"):
        decoder.finish()


bad_sizes = st.one_of(st.integers(0, 7), st.integers(1025, 2**32 - 1))  # outside 8..1024


@SETTINGS
@given(size=bad_sizes, valid=st.lists(st.binary(min_size=8, max_size=50), max_size=3), data=st.data())
def test_a_bad_size_prefix_fails_as_soon_as_it_is_read(size: int, valid: list[bytes], data: st.DataObject) -> None:
    # However the bytes are split: the frames before the bad prefix, then the error, raised by the
    # feed() whose piece completed the prefix (never later: nothing may ever feed the decoder again),
    # and by every call after it, whatever follows.
    good = b"".join(frame(p) for p in valid)
    stream = good + PREFIX.pack(size) + data.draw(st.binary(max_size=16), label="tail")
    pieces = split(stream, cuts_of(data, len(stream)))
    decoder = FrameDecoder(1024)
    frames: list[bytes] = []
    read = 0
    with pytest.raises(FrameError) as caught:
        for piece in pieces:
            read += len(piece)
            for f in decoder.feed(piece):
                frames.append(f)
    assert str(caught.value) == f"frame size {size} is outside 8..1024"
    assert frames == [frame(p) for p in valid]
    assert read - len(piece) < len(good) + PREFIX.size <= read  # the piece that completed the prefix
    with pytest.raises(FrameError, match=f"frame size {size} "):
        decoder.feed(b"")
    with pytest.raises(FrameError, match=f"frame size {size} "):
        decoder.finish()


@SETTINGS
@given(size=bad_sizes, valid=st.lists(st.binary(min_size=8, max_size=50), max_size=3),
       first=st.integers(0, 3), data=st.data())
def test_frames_and_error_are_the_same_for_every_split(size: int, valid: list[bytes], first: int,
                                                       data: st.DataObject) -> None:
    # What the feeds give (frames, then the error; finish() never called: a caller loops over feed()
    # only) is the same for the stream fed in one piece, with its first `first` frames fed on their
    # own, or split anywhere.
    stream = b"".join(frame(p) for p in valid) + PREFIX.pack(size) + bytes(8)

    def outcome(pieces: list[bytes]) -> tuple[list[bytes], str]:
        decoder = FrameDecoder(1024)
        frames: list[bytes] = []
        try:
            for piece in pieces:
                for f in decoder.feed(piece):
                    frames.append(f)
        except FrameError as exc:
            return frames, str(exc)
        return frames, ""

    alone = b"".join(frame(p) for p in valid[:first])
    expected = outcome([stream])
    assert expected == ([frame(p) for p in valid], f"frame size {size} is outside 8..1024")
    assert outcome([alone, stream[len(alone):]]) == expected
    assert outcome(split(stream, cuts_of(data, len(stream)))) == expected


@pytest.mark.parametrize("size", [8, 1024])
def test_size_prefix_at_the_bounds_is_accepted(size: int) -> None:
    frames, decoder = decode_frames([frame(bytes(size))], max_frame=1024)
    assert frames == [frame(bytes(size))]
    decoder.finish()


def test_bad_prefix_fed_a_byte_at_a_time() -> None:
    decoder = FrameDecoder(1024)
    for byte in PREFIX.pack(3)[:3]:
        assert list(decoder.feed(bytes([byte]))) == []
    with pytest.raises(FrameError):
        decoder.feed(PREFIX.pack(3)[3:])


# --- SSE -----------------------------------------------------------------------------------------


class SseParser:
    """The least an SSE client does: lines on \\n, `data:` fields joined, an event at a blank line."""

    def __init__(self) -> None:
        self._buf = b""
        self._data: list[str] = []

    def feed(self, data: bytes) -> list[str]:
        self._buf += data
        events: list[str] = []
        while True:
            line, sep, rest = self._buf.partition(b"\n")
            if not sep:
                return events
            self._buf = rest
            line = line.removesuffix(b"\r")
            if not line:
                if self._data:
                    events.append("\n".join(self._data))
                    self._data = []
            elif line.startswith(b"data:"):
                self._data.append(line[5:].removeprefix(b" ").decode())

    def finish(self) -> None:
        assert self._buf == b"" and self._data == [], "the stream ended inside an event"


@st.composite
def answer_streams(draw: st.DrawFn) -> tuple[list[Chunk], list[str], list[str]]:
    """Chunks of one streamed answer, with the content pieces and the tool-call argument pieces in it."""
    content = draw(st.lists(text, max_size=8))
    arguments = draw(st.lists(text, max_size=5))
    chunks = [Chunk(sequence=0, id="chatcmpl-up", model="m", created=1, role="assistant", content="")]
    chunks += [Chunk(sequence=0, content=piece) for piece in content]
    if arguments:
        chunks.append(Chunk(sequence=0, tool_calls=[ToolCallDelta(index=0, id="call_1", type="function",
                                                                  name="f", arguments="")]))
        chunks += [Chunk(sequence=0, tool_calls=[ToolCallDelta(index=0, arguments=a)]) for a in arguments]
    chunks.append(Chunk(sequence=0, finish_reason="tool_calls" if arguments else "stop"))
    chunks.append(Chunk(sequence=0, usage=Usage(prompt_tokens=3, completion_tokens=len(content)), done=True))
    chunks = [msgspec.structs.replace(c, sequence=i) for i, c in enumerate(chunks)]
    return chunks, content, arguments


def translate_frames(pieces: list[bytes], include_usage: bool) -> list[bytes]:
    """What the edge writes for an upstream body read in `pieces`: the streaming core's chunks as SSE."""
    body = StreamBody(StreamTranslator(id="chatcmpl-edge", model="m", created=1, include_usage=include_usage),
                      MAX_FRAME)
    writer = SseWriter()
    events = []
    for piece in pieces:
        read = body.feed(piece)
        assert read.error is None
        events += [writer.render(c) for c in read.chunks]
    assert body.done
    return [*events, DONE]


@SETTINGS
@given(stream=answer_streams(), include_usage=st.booleans(), data=st.data())
def test_sse_events_survive_any_split(
    stream: tuple[list[Chunk], list[str], list[str]], include_usage: bool, data: st.DataObject
) -> None:
    chunks, content, arguments = stream
    upstream = b"".join(wire.write_chunk(c) for c in chunks)
    sse = b"".join(translate_frames(split(upstream, cuts_of(data, len(upstream))), include_usage))

    parser = SseParser()
    events: list[str] = []
    for piece in split(sse, cuts_of(data, len(sse))):
        events += parser.feed(piece)
    parser.finish()

    assert events[-1] == "[DONE]"
    objects = [msgspec.json.decode(e) for e in events[:-1]]
    # The same chunks as a translator fed the chunks directly, in one piece.
    direct = StreamTranslator(id="chatcmpl-edge", model="m", created=1, include_usage=include_usage)
    expected = [msgspec.json.decode(msgspec.json.encode(o)) for c in chunks for o in direct.feed(c)]
    assert objects == expected

    deltas = [o["choices"][0]["delta"] for o in objects if o["choices"]]
    assert "".join(d.get("content", "") for d in deltas) == "".join(content)
    calls = [t for d in deltas for t in d.get("tool_calls", [])]
    assert "".join(t.get("function", {}).get("arguments", "") for t in calls) == "".join(arguments)
    assert [o["usage"] for o in objects if "usage" in o][-1:] == (
        [{"prompt_tokens": 3, "completion_tokens": len(content), "total_tokens": 3 + len(content),
          "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
          "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0,
                                        "rejected_prediction_tokens": 0}}]
        if include_usage else [])
    assert all(o["id"] == "chatcmpl-up" for o in objects)


def test_sse_events_are_independent_of_the_reused_buffer() -> None:
    writer = SseWriter()
    first = writer.event({"a": "x" * 100})
    second = writer.event({"b": 1})
    assert first == b'data: {"a":"' + b"x" * 100 + b'"}\n\n'
    assert second == b'data: {"b":1}\n\n'
