"""Gemini's answers, streams and failures as our types (ingress/bridges/gemini_answers.py): text, thoughts with
their signature, function calls with ids that carry theirs, usage with thoughts and cached tokens, finish
reasons both kinds, a blocked prompt, an error event, a cut stream."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fakes.gemini import fixture

from ingress import wire
from ingress.bridges.dialect import EngineFailed
from ingress.bridges.gemini_answers import FAILED, FINISH, GeminiStream, decode_answer
from ingress.bridges.gemini_request import split_id

CREATED = 1_700_000_000
THOUGHT_SIGNATURE = "+vv8/f7/++++IHRob3VnaHQtMSBzaWduYXR1cmX//g=="
CALL_SIGNATURE = "+vv8IGNhbGwgc2lnbmF0dXJlIP/vAAAAAAA="


def streamed(data: bytes, piece: int = 0) -> list[wire.Chunk]:
    stream = GeminiStream(CREATED)
    pieces = [data[i:i + piece] for i in range(0, len(data), piece)] if piece else [data]
    out = [c for p in pieces for c in stream.feed(p)]
    return out + stream.finish()


def event(candidates: list[dict[str, Any]], **fields: Any) -> bytes:
    return b"data: " + json.dumps({"candidates": candidates, **fields}).encode() + b"\r\n\r\n"


def test_a_whole_answer_with_its_usage() -> None:
    answer = decode_answer(fixture("text.json"), CREATED)
    assert (answer.id, answer.model, answer.created) == ("resp-text", "gemini-2.5-flash", CREATED)
    (choice,) = answer.choices
    assert (choice.content, choice.finish_reason, choice.tool_calls) == ("Hello from Gemini.", "stop", [])
    assert answer.usage == wire.Usage(prompt_tokens=12, completion_tokens=5, total_tokens=17)


def test_thoughts_are_reasoning_with_their_signature_and_counted_apart() -> None:
    answer = decode_answer(fixture("thinking.json"), CREATED)
    (choice,) = answer.choices
    assert choice.content == "Yes: there are infinitely many primes."
    assert choice.reasoning == "Primes: suppose finitely many, multiply them, add one."
    assert choice.signature == THOUGHT_SIGNATURE
    assert answer.usage == wire.Usage(prompt_tokens=30, completion_tokens=50, total_tokens=80, cached_tokens=8,
                                      reasoning_tokens=41)


def test_a_function_call_is_a_tool_call_whose_id_carries_its_signature() -> None:
    (choice,) = decode_answer(fixture("tool_call.json"), CREATED).choices
    (call,) = choice.tool_calls
    assert (call.name, json.loads(call.arguments), choice.finish_reason) == ("get_weather", {"city": "Paris"},
                                                                             "tool_calls")
    assert call.id.startswith("gcall_resp-tool_0") and split_id(call.id) == (None, CALL_SIGNATURE)
    assert choice.content is None and choice.signature == CALL_SIGNATURE


@pytest.mark.parametrize("piece", [0, 1, 7, 64])
def test_a_stream_in_any_split(piece: int) -> None:
    chunks = streamed(fixture("thinking.sse"), piece)
    assert chunks[0].role == "assistant" and chunks[0].id == "resp-think-s" and chunks[0].model == "gemini-2.5-pro"
    assert [c.sequence for c in chunks] == list(range(len(chunks)))
    assert "".join(c.reasoning or "" for c in chunks) == "Primes: suppose finitely many, multiply them, add one."
    assert "".join(c.content or "" for c in chunks) == "Yes: there are infinitely many primes."
    assert [c.signature for c in chunks if c.signature] == [THOUGHT_SIGNATURE]
    last = chunks[-1]
    assert (last.done, last.finish_reason) == (True, "stop")
    assert last.usage == wire.Usage(prompt_tokens=30, completion_tokens=50, total_tokens=80, cached_tokens=8,
                                    reasoning_tokens=41)


def test_streamed_function_calls_come_whole_numbered_from_zero() -> None:
    chunks = streamed(fixture("tool_call.sse"), 13)
    calls = [d for c in chunks for d in c.tool_calls]
    assert [(d.index, d.name, json.loads(d.arguments or "")) for d in calls] == [
        (0, "get_weather", {"city": "Paris"}), (1, "get_time", {})]
    assert split_id(calls[0].id or "")[1] == CALL_SIGNATURE and split_id(calls[1].id or "")[1] is None
    assert chunks[-1].finish_reason == "tool_calls"


def test_a_stream_that_ends_without_a_finish_reason_is_cut() -> None:
    stream = GeminiStream(CREATED)
    got = stream.feed(fixture("cut.sse"))
    assert "".join(c.content or "" for c in got) == "Hello there"
    with pytest.raises(EngineFailed) as cut:
        stream.finish()
    assert (cut.value.info.status, cut.value.info.code) == (502, "upstream_unavailable")


def test_an_error_event_fails_the_stream_after_what_came() -> None:
    with pytest.raises(EngineFailed) as failed:
        streamed(fixture("error_midway.sse"))
    assert (failed.value.info.status, failed.value.info.code) == (503, "upstream_overloaded")
    assert "".join(c.content or "" for c in failed.value.chunks) == "Hello"


@pytest.mark.parametrize(("reason", "finish"), sorted(FINISH.items()))
def test_finish_reasons(reason: str, finish: str) -> None:
    data = event([{"content": {"parts": [{"text": "x"}]}, "finishReason": reason}])
    assert streamed(data)[-1].finish_reason == finish
    assert decode_answer(data[6:], CREATED).choices[0].finish_reason == finish


@pytest.mark.parametrize("reason", sorted(FAILED))
def test_a_finish_that_is_the_model_failing_is_an_error(reason: str) -> None:
    data = event([{"content": {"parts": [{"text": "x"}]}, "finishReason": reason}])
    with pytest.raises(EngineFailed) as failed:
        decode_answer(data[6:], CREATED)
    assert failed.value.info.status == 502 and reason in failed.value.info.message
    with pytest.raises(EngineFailed):
        streamed(data)


def test_a_blocked_prompt_is_a_content_filter_stop() -> None:
    blocked = json.dumps({"promptFeedback": {"blockReason": "SAFETY"},
                          "usageMetadata": {"promptTokenCount": 4, "totalTokenCount": 4}}).encode()
    assert decode_answer(blocked, CREATED).choices[0].finish_reason == "content_filter"
    assert streamed(b"data: " + blocked + b"\n\n")[-1].finish_reason == "content_filter"


def test_several_candidates_each_finish_and_the_last_is_done() -> None:
    data = event([{"content": {"parts": [{"text": "a"}]}, "index": 0, "finishReason": "STOP"},
                  {"content": {"parts": [{"text": "b"}]}, "index": 1, "finishReason": "MAX_TOKENS"}])
    chunks = streamed(data)
    assert [(c.choice_index, c.content) for c in chunks if c.content] == [(0, "a"), (1, "b")]
    assert [(c.choice_index, c.finish_reason, c.done) for c in chunks if c.finish_reason] == [
        (0, "stop", False), (1, "length", True)]


def test_an_unreadable_answer_is_a_protocol_error() -> None:
    with pytest.raises(EngineFailed) as broken:
        decode_answer(b"<html>", CREATED)
    assert broken.value.info.code == "upstream_protocol_error"
    with pytest.raises(EngineFailed):
        streamed(b"data: {not json}\n\n")
