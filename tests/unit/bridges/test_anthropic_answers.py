"""Anthropic's answers and streams as ours (ingress/bridges/anthropic_answers.py): the recorded answers and
streams of tests/fixtures/anthropic/ (the ones the official SDK reads through the fake) made into our
answers and chunks, for any split of the bytes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fakes.anthropic import fixture
from hypothesis import given, settings
from hypothesis import strategies as st

from ingress import wire
from ingress.bridges.dialect import EngineFailed
from ingress.translate.stream import StreamTranslator
from unit.bridges.test_anthropic import CREATED, DIALECT, HELLO, STREAMS, TARGET, answer, buffer, decode, sse

# --- whole answers ---------------------------------------------------------------------------------

def test_a_whole_answer_and_its_usage() -> None:
    r = answer("text")
    assert (r.id, r.model, r.created) == ("msg_013Zva2CMHLNnXjNJJKqJ2EF", "claude-sonnet-4-5-20250929", CREATED)
    assert r.choices == [wire.Choice(index=0, content="Hi! My name is Claude.", finish_reason="stop")]
    assert r.usage == wire.Usage(prompt_tokens=2095 + 1800 + 120, completion_tokens=12, total_tokens=4027,
                                 cached_tokens=1800, cache_write_tokens=120)


def test_a_whole_answer_with_tool_calls() -> None:
    (choice,) = answer("tool_use").choices
    assert choice.content == "I'll check the weather in San Francisco."
    assert [(c.id, c.name, json.loads(c.arguments)) for c in choice.tool_calls] == [
        ("toolu_01A09q90qw90lq917835lq9", "get_weather", {"location": "San Francisco, CA", "unit": "celsius"}),
        ("toolu_01B7XfG2cW1zv1sLQk3F8hJ4", "get_time", {})]
    assert choice.finish_reason == "tool_calls"


def test_thinking_is_reasoning_never_content() -> None:
    r = answer("thinking")
    (choice,) = r.choices
    assert choice.content == "27 * 453 = 12,231"
    assert choice.reasoning == "27 * 453: 27 * 400 = 10,800; 27 * 53 = 1,431; together 12,231."
    assert choice.finish_reason == "length"
    assert choice.signature == "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"  # to send the thinking back
    assert r.usage is not None and r.usage.reasoning_tokens == 280
    assert wire.decode_response(bytes(wire.write_response(r))) == r  # the wire carries it


def test_redacted_thinking_the_stop_sequence_and_server_tools_travel_on() -> None:
    doc = {"id": "m", "type": "message", "role": "assistant", "model": "c", "content": [
        {"type": "thinking", "thinking": "first", "signature": "sig-1"},
        {"type": "redacted_thinking", "data": "opaque-1"},
        {"type": "thinking", "thinking": " second", "signature": "sig-2"},
        {"type": "redacted_thinking", "data": "opaque-2"},
        {"type": "text", "text": "Done. END"}],
        "stop_reason": "stop_sequence", "stop_sequence": "END",
        "usage": {"input_tokens": 9, "output_tokens": 4,
                  "server_tool_use": {"web_search_requests": 2, "web_fetch_requests": 1}}}
    r = DIALECT.build(buffer({"messages": HELLO}), TARGET).answer(json.dumps(doc).encode())
    (choice,) = r.choices
    assert (choice.reasoning, choice.signature) == ("first second", "sig-2")  # one reasoning: the last signature
    assert choice.redacted_thinking == ["opaque-1", "opaque-2"]
    assert (choice.finish_reason, choice.stop_sequence, choice.content) == ("stop", "END", "Done. END")
    assert r.usage is not None and (r.usage.web_search_requests, r.usage.web_fetch_requests) == (2, 1)
    assert wire.decode_response(bytes(wire.write_response(r))) == r


@pytest.mark.parametrize(("reason", "finish"), [
    ("end_turn", "stop"), ("stop_sequence", "stop"), ("pause_turn", "pause_turn"), ("max_tokens", "length"),
    ("model_context_window_exceeded", "length"), ("tool_use", "tool_calls"), ("refusal", "refusal"),
    ("something_new", "stop"), (None, "stop"),
])
def test_stop_reasons(reason: str | None, finish: str) -> None:
    doc: dict[str, Any] = {"id": "m", "type": "message", "role": "assistant", "model": "c", "content": [],
                           "stop_reason": reason, "usage": {"input_tokens": 1, "output_tokens": 1}}
    call = DIALECT.build(buffer({"messages": HELLO}), TARGET)
    assert call.answer(json.dumps(doc).encode()).choices[0].finish_reason == finish


def test_an_unreadable_answer_is_an_engine_failure() -> None:
    with pytest.raises(EngineFailed) as raised:
        DIALECT.build(buffer({"messages": HELLO}), TARGET).answer(b"<html>bad gateway</html>")
    assert (raised.value.info.status, raised.value.info.code) == (502, "upstream_protocol_error")


# --- streams ---------------------------------------------------------------------------------------

def test_the_tool_use_stream() -> None:
    T = wire.ToolCallDelta  # a short name for a table of deltas
    usage = wire.Usage(prompt_tokens=872, completion_tokens=89, total_tokens=961, cached_tokens=300,
                       cache_write_tokens=100)
    assert decode(fixture("tool_use.sse")) == [
        wire.Chunk(sequence=0, id="msg_014p7gG3wDgGV9EUtLvnow3U", model="claude-sonnet-4-5-20250929",
                   created=CREATED, role="assistant", content=""),
        wire.Chunk(sequence=1, content="Okay"),
        wire.Chunk(sequence=2, content=", let's check the weather."),
        wire.Chunk(sequence=3, tool_calls=[T(index=0, id="toolu_01T1x1fJ34qAmk2tNTrN7Up6", type="function",
                                             name="get_weather", arguments="")]),
        *[wire.Chunk(sequence=4 + k, tool_calls=[T(index=0, arguments=piece)]) for k, piece in enumerate(
            ['{"location":', ' "San', " Francisc", 'o, CA"', ", ", '"unit": "fah', 'renheit"}'])],
        wire.Chunk(sequence=11, tool_calls=[T(index=1, id="toolu_01Hn4c5aVzMRYpR9Zc4kQ2uW", type="function",
                                              name="get_time", arguments="")]),
        wire.Chunk(sequence=12, tool_calls=[T(index=1, arguments="{}")]),  # no input came: still an object
        wire.Chunk(sequence=13, finish_reason="tool_calls", usage=usage, done=True),
    ]


def test_the_thinking_stream_keeps_reasoning_out_of_content() -> None:
    chunks = decode(fixture("thinking.sse"))
    assert "".join(c.reasoning or "" for c in chunks) == (
        "Let me solve this step by step:\n\n1. First break down 27 * 453\n2. 453 = 400 + 50 + 3")
    assert "".join(c.content or "" for c in chunks) == "27 * 453 = 12,231"
    last = chunks[-1]
    assert (last.done, last.finish_reason) == (True, "length")
    # message_delta's counts are cumulative and replace message_start's
    assert last.usage == wire.Usage(prompt_tokens=50, completion_tokens=310, total_tokens=360, cached_tokens=5,
                                    reasoning_tokens=280)
    # the signature_delta: after the block's reasoning, before the text, for the reasoning streamed so far
    signed = [i for i, c in enumerate(chunks) if c.signature is not None]
    assert [chunks[i].signature for i in signed] == ["EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"]
    assert max(i for i, c in enumerate(chunks) if c.reasoning) < signed[0] < min(
        i for i, c in enumerate(chunks) if c.content)


def test_a_stream_carries_redacted_thinking_the_stop_sequence_and_server_tools() -> None:
    def block(i: int, kind: str, **body: Any) -> dict[str, Any]:
        return {"type": "content_block_start", "index": i, "content_block": {"type": kind, **body}}

    def delta(i: int, kind: str, **body: Any) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": i, "delta": {"type": kind, **body}}

    chunks = decode(sse(
        {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "c",
                                              "content": [], "usage": {"input_tokens": 5, "output_tokens": 1}}},
        block(0, "redacted_thinking", data="opaque"), {"type": "content_block_stop", "index": 0},
        block(1, "text", text=""), delta(1, "text_delta", text="a b END"),
        delta(1, "citations_delta", citation={"type": "char_location", "cited_text": "a", "document_index": 0,
                                              "start_char_index": 0, "end_char_index": 1}),
        {"type": "content_block_stop", "index": 1},
        {"type": "message_delta", "delta": {"stop_reason": "stop_sequence", "stop_sequence": "END"},
         "usage": {"output_tokens": 3, "server_tool_use": {"web_search_requests": 1, "web_fetch_requests": 0}}},
        {"type": "message_stop"}))
    assert [c.redacted_thinking for c in chunks if c.redacted_thinking] == [["opaque"]]
    assert "".join(c.content or "" for c in chunks) == "a b END"
    last = chunks[-1]
    assert (last.done, last.finish_reason, last.stop_sequence) == (True, "stop", "END")
    assert last.usage is not None and last.usage.web_search_requests == 1
    assert [wire.decode_chunk(bytes(wire.write_chunk(c))[4:]) for c in chunks] == chunks


@pytest.mark.parametrize("reason", ["pause_turn", "refusal"])
def test_a_streams_stop_reason_that_openai_has_no_name_for_travels_as_it_is(reason: str) -> None:
    chunks = decode(fixture("text.sse").replace(b'"stop_reason":"end_turn"', f'"stop_reason":"{reason}"'.encode()))
    assert chunks[-1].finish_reason == reason


@pytest.mark.parametrize("name", STREAMS)
def test_streams_are_numbered_and_read_by_the_edge(name: str) -> None:
    chunks = decode(fixture(f"{name}.sse"))
    assert [c.sequence for c in chunks] == list(range(len(chunks)))
    assert [c.done for c in chunks] == [False] * (len(chunks) - 1) + [True]
    translator = StreamTranslator(id="x", model="m", created=1, include_usage=True)
    deltas = [c for chunk in chunks for c in translator.feed_frame(bytes(wire.write_chunk(chunk)))]
    translator.finish()
    text = "".join(c.choices[0].delta.content for c in deltas if c.choices and isinstance(
        c.choices[0].delta.content, str))
    assert text == "".join(c.content or "" for c in chunks)
    assert translator.usage == chunks[-1].usage and deltas[-1].usage is not None


def test_a_stream_cut_before_message_stop_is_an_error() -> None:
    stream = DIALECT.build(buffer({"messages": HELLO, "stream": True}), TARGET).stream()
    chunks = stream.feed(fixture("cut.sse"))
    assert "".join(c.content or "" for c in chunks) == "Hello there" and not any(c.done for c in chunks)
    with pytest.raises(EngineFailed) as raised:
        stream.finish()
    assert raised.value.info.status == 502


def test_an_error_event_is_an_engine_failure_with_its_status() -> None:
    stream = DIALECT.build(buffer({"messages": HELLO, "stream": True}), TARGET).stream()
    with pytest.raises(EngineFailed) as raised:
        stream.feed(fixture("overloaded.sse"))
    assert (raised.value.info.status, raised.value.info.code) == (503, "upstream_overloaded")
    assert raised.value.info.retry_after == 1  # as for a 529 that named no wait


def test_an_overloaded_event_before_any_content_fails_with_no_content_and_a_wait() -> None:
    stream = DIALECT.build(buffer({"messages": HELLO, "stream": True}), TARGET).stream()
    with pytest.raises(EngineFailed) as raised:
        stream.feed(fixture("overloaded_at_start.sse"))
    assert [(c.role, c.content) for c in raised.value.chunks] == [("assistant", "")]  # message_start's: no content
    assert (raised.value.info.status, raised.value.info.retry_after) == (503, 1)


def test_an_event_before_message_start_or_for_an_unknown_block_is_broken() -> None:
    for data in (b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n',
                 fixture("text.sse").replace(b'"index":0,"delta"', b'"index":7,"delta"'),
                 b"event: message_start\ndata: {not json\n\n"):
        with pytest.raises(EngineFailed) as raised:
            decode(data)
        assert raised.value.info.code == "upstream_protocol_error"


def test_the_last_event_without_its_blank_line_still_ends_the_stream() -> None:
    data = fixture("text.sse")
    assert decode(data.removesuffix(b"\n")) == decode(data)


def test_every_split_of_every_stream_gives_the_same_chunks() -> None:
    for name in STREAMS:
        data = fixture(f"{name}.sse")
        whole = decode(data)
        for at in range(len(data) + 1):
            assert decode(data, [data[:at], data[at:]]) == whole, (name, at)


@settings(max_examples=150, deadline=None)
@given(name=st.sampled_from(STREAMS), cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=12),
       crlf=st.booleans())
def test_any_pieces_and_line_endings_give_the_same_chunks(name: str, cuts: list[int], crlf: bool) -> None:
    data = fixture(f"{name}.sse")
    whole = decode(data)
    if crlf:
        data = data.replace(b"\n", b"\r\n")
    points = sorted({min(c, len(data)) for c in cuts})
    pieces = [data[i:j] for i, j in zip([0, *points], [*points, len(data)], strict=True)]
    assert decode(data, pieces) == whole


NOISE = [b"event: ping\ndata: {\"type\": \"ping\"}\n\n", b": a comment\n\n",
         b'event: brand_new_event\ndata: {"type":"brand_new_event","x":1}\n\n',
         b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
         b'"delta":{"type":"brand_new_delta","x":1}}\n\n']


@settings(max_examples=150, deadline=None)
@given(name=st.sampled_from(STREAMS), where=st.lists(st.tuples(st.integers(min_value=0), st.sampled_from(NOISE)),
                                                       max_size=6))
def test_pings_comments_and_unknown_events_change_nothing(name: str, where: list[tuple[int, bytes]]) -> None:
    data = fixture(f"{name}.sse")
    events = [e + b"\n\n" for e in data.split(b"\n\n") if e]
    for at, noise in where:
        position = 2 + at % (len(events) - 2)  # after message_start and the first block's start
        events.insert(position, noise)
    assert decode(b"".join(events)) == decode(data)


# --- errors ----------------------------------------------------------------------------------------

def test_the_chunks_before_an_error_event_in_the_same_data_travel_with_it() -> None:
    stream = DIALECT.build(buffer({"messages": HELLO, "stream": True}), TARGET).stream()
    text = fixture("text.sse")
    cut = text.index(b"event: content_block_stop")
    error = b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n'
    with pytest.raises(EngineFailed) as raised:
        stream.feed(text[:cut] + error)
    assert raised.value.info.status == 503
    assert "".join(c.content or "" for c in raised.value.chunks) == "Hello! Nice to meet you é 🌍."
