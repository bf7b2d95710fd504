"""edge.sse: a Delta rendered from its head's template is the same bytes as its chunk encoded the general
way, whatever its head, choice and content, and as heads change on one writer; the events of a Burst
(frames that arrived in one read) are the bytes of each event rendered alone, one after the other."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ingress import pipeline
from ingress.edge.sse import SseWriter
from ingress.oai import chat_answers
from ingress.translate.stream import Delta, Head

TEXT = st.text(max_size=30)
CHUNKS = st.builds(
    chat_answers.ChatCompletionChunk, id=TEXT, created=st.integers(0, 2**40), model=TEXT,
    choices=st.lists(st.builds(chat_answers.ChunkChoiceOut, index=st.integers(0, 3),
                               delta=st.builds(chat_answers.DeltaOut, content=TEXT,
                                               role=st.sampled_from(["assistant"])),
                               finish_reason=st.none() | st.sampled_from(["stop"])), max_size=2))


@settings(max_examples=300, deadline=None, database=None)
@given(st.lists(CHUNKS, min_size=2, max_size=6))
def test_a_burst_renders_as_its_events_one_after_the_other(chunks: list[chat_answers.ChatCompletionChunk]) -> None:
    writer, alone = SseWriter(), SseWriter()
    together = writer.render(pipeline.Burst(list(chunks)))
    assert together == b"".join(alone.render(c) for c in chunks)
    assert writer.render(chunks[0]) == alone.render(chunks[0])  # the buffer is reused, not left longer


ANY = st.text(st.characters(codec="utf-8"), max_size=20) | st.sampled_from(["\x00", '"', "\\u0000", "</script>"])
HEADS = st.builds(Head, id=ANY, model=ANY, created=st.integers(0, 2**62), system_fingerprint=st.none() | ANY,
                  service_tier=st.none() | ANY, include_usage=st.booleans())
DELTAS = st.builds(Delta, head=HEADS, index=st.integers(0, 2**32 - 1), content=ANY)


@settings(max_examples=500, deadline=None, database=None)
@given(st.lists(DELTAS, min_size=1, max_size=8))
def test_a_delta_from_its_template_is_its_chunk_encoded(deltas: list[Delta]) -> None:
    writer, general = SseWriter(), SseWriter()
    for d in deltas + deltas[:1]:  # heads changing, and back to the first
        assert writer.render(d) == general.render(d.chunk())


@settings(max_examples=200, deadline=None, database=None)
@given(st.lists(DELTAS | CHUNKS, min_size=2, max_size=6))
def test_a_mixed_burst_renders_as_its_events(events: list[Delta | chat_answers.ChatCompletionChunk]) -> None:
    alone = SseWriter()
    assert SseWriter().render(pipeline.Burst(list(events))) == b"".join(alone.render(e) for e in events)
