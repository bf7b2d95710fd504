"""ingress/pipeline/stream.py's StartPeek, sans-I/O and table-driven: whether a stream's start was ended by a
filter before any content, however its frames are split across reads."""

from __future__ import annotations

import pytest

from ingress import wire
from ingress.pipeline.stream import StartPeek

HEAD = wire.Chunk(sequence=0, id="chatcmpl-1", model="m", created=1, role="assistant", content="")


def _frames(*chunks: wire.Chunk) -> bytes:
    return b"".join(bytes(wire.write_chunk(c)) for c in chunks)


def _done(n: int) -> wire.Chunk:
    return wire.Chunk(sequence=n, usage=wire.Usage(prompt_tokens=1), done=True)


CASES = [
    ("filtered at once", [HEAD, wire.Chunk(sequence=1, finish_reason="content_filter"), _done(2)], True),
    ("an Anthropic refusal", [HEAD, wire.Chunk(sequence=1, finish_reason="refusal"), _done(2)], True),
    ("content first", [HEAD, wire.Chunk(sequence=1, content="Hi"),
                       wire.Chunk(sequence=2, finish_reason="content_filter")], False),
    ("reasoning first", [HEAD, wire.Chunk(sequence=1, reasoning="hmm"),
                         wire.Chunk(sequence=2, finish_reason="content_filter")], False),
    ("a tool call first", [HEAD, wire.Chunk(sequence=1, tool_calls=[wire.ToolCallDelta(index=0, id="c", name="f")]),
                           wire.Chunk(sequence=2, finish_reason="content_filter")], False),
    ("an empty answer", [HEAD, wire.Chunk(sequence=1, finish_reason="stop"), _done(2)], False),
    ("only the head so far", [HEAD], None),
]


@pytest.mark.parametrize(("chunks", "expected"), [pytest.param(c, e, id=name) for name, c, e in CASES])
@pytest.mark.parametrize("cut", [None, 1, 7, 30])
def test_the_verdict_does_not_depend_on_how_the_bytes_were_split(chunks: list[wire.Chunk], expected: bool | None,
                                                                 cut: int | None) -> None:
    data = _frames(*chunks)
    peek = StartPeek(1 << 20)
    reads = [data] if cut is None else [data[i:i + cut] for i in range(0, len(data), cut)]
    verdict = None
    for read in reads:
        verdict = peek.feed(read)
        if verdict is not None:
            break

    assert verdict is expected


def test_an_unreadable_start_is_left_to_the_streams_own_reading() -> None:
    assert StartPeek(1 << 20).feed(b"\xff\xff\xff\x7fnot a frame") is False
