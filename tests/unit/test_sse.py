"""edge.sse: the events of a Burst (frames that arrived in one read) are the bytes of each event rendered
alone, one after the other."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ingress import pipeline
from ingress.edge.sse import SseWriter
from ingress.oai import answers as out

TEXT = st.text(max_size=30)
CHUNKS = st.builds(
    out.ChatCompletionChunk, id=TEXT, created=st.integers(0, 2**40), model=TEXT,
    choices=st.lists(st.builds(out.ChunkChoiceOut, index=st.integers(0, 3),
                               delta=st.builds(out.DeltaOut, content=TEXT, role=st.sampled_from(["assistant"])),
                               finish_reason=st.none() | st.sampled_from(["stop"])), max_size=2))


@settings(max_examples=300, deadline=None, database=None)
@given(st.lists(CHUNKS, min_size=2, max_size=6))
def test_a_burst_renders_as_its_events_one_after_the_other(chunks: list[out.ChatCompletionChunk]) -> None:
    writer, alone = SseWriter(), SseWriter()
    together = writer.render(pipeline.Burst(list(chunks)))
    assert together == b"".join(alone.render(c) for c in chunks)
    assert writer.render(chunks[0]) == alone.render(chunks[0])  # the buffer is reused, not left longer
