"""edge.sse: a Delta rendered from its head's template is the same bytes as its chunk encoded the general
way, whatever its head, choice and content, and as heads change on one writer; the events of a Burst
(frames that arrived in one read) are the bytes of each event rendered alone, one after the other; Google's
streams, as SSE and as a JSON array, read as Google's SDK and a JSON parser read them."""

from __future__ import annotations

import msgspec
import pytest
from gemini_sdk import sdk_stream
from hypothesis import given, settings
from hypothesis import strategies as st

from ingress import pipeline
from ingress.edge.sse import GeminiArrayWriter, GeminiSseWriter, SseWriter
from ingress.errors import UpstreamUnavailable
from ingress.gemini import answers as gm
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


def _gemini_events() -> list[gm.GenerateContentResponse]:
    head = gm.GenerateContentResponse(candidates=[gm.Candidate(content=gm.Content(parts=[gm.Part(text="Hi")]),
                                                               index=0)], model_version="m", response_id="r")
    last = gm.GenerateContentResponse(candidates=[gm.Candidate(finish_reason="STOP", index=0)], model_version="m",
                                      response_id="r", usage_metadata=gm.UsageMetadata(
                                          prompt_token_count=1, candidates_token_count=1, total_token_count=2))
    return [head, last]


def test_googles_sse_is_a_data_line_an_event_and_nothing_else() -> None:
    writer = GeminiSseWriter()
    head, last = _gemini_events()
    rendered = [writer.render(e) for e in (pipeline.HEARTBEAT, pipeline.OPENED, head, pipeline.Burst([head, last]),
                                           pipeline.DONE)]
    event, both = b"data: " + msgspec.json.encode(head) + b"\r\n\r\n", writer.event(head) + writer.event(last)
    assert rendered == [b"", b"", event, both, b""]
    parsed = sdk_stream([msgspec.json.encode(head), msgspec.json.encode(last)])  # as Google's SDK reads them
    assert [c.text for c in parsed] == ["Hi", None] and parsed[1].usage_metadata is not None
    failed = writer.render(pipeline.Failed(UpstreamUnavailable("gone", after_head=True)))
    assert msgspec.json.decode(failed.removeprefix(b"data: "))["error"]["status"] == "UNAVAILABLE"


@pytest.mark.parametrize("fail", [False, True])
def test_googles_array_stream_is_one_json_array_however_it_ends(fail: bool) -> None:
    writer = GeminiArrayWriter()
    head, last = _gemini_events()
    ending = pipeline.Failed(UpstreamUnavailable("gone", after_head=True)) if fail else pipeline.DONE
    data = b"".join(writer.render(e) for e in (pipeline.OPENED, head, pipeline.HEARTBEAT, pipeline.Burst([last]),
                                               ending))
    assert data.startswith(b"[{") and b"},\r\n{" in data
    elements = msgspec.json.decode(data)
    assert elements[:2] == [msgspec.to_builtins(head), msgspec.to_builtins(last)]
    assert len(elements) == (3 if fail else 2) and (not fail or elements[2]["error"]["status"] == "UNAVAILABLE")
    assert GeminiArrayWriter().render(pipeline.DONE) == b"[]"
