"""Answers in Google's Gemini shape (ingress/translate/gemini.py): whole answers candidate by candidate, finish
reasons and usage; a stream's events, frame by frame, function calls whole. Every answer and event is read by
the google-genai SDK's own client, answered in-process."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from gemini_sdk import sdk_generate, sdk_stream
from google.genai import errors as sdk_errors

from ingress import wire
from ingress.errors import UpstreamAnswered, UpstreamProtocolError
from ingress.translate.gemini import GeminiStreamTranslator, error_event, response_from_answer
from ingress.wire import Chunk, ToolCallDelta
from ingress.wire.answer import decode_frame

SIG = "c2lnbmF0dXJl"  # base64


def answer(*choices: wire.Choice, usage: wire.Usage | None = None, thoughts: bool = False) -> dict[str, Any]:
    """The answer made of a service's response, as JSON, once the SDK has read it."""
    r = response_from_answer(wire.Response(id="up", model="served", created=1, choices=list(choices), usage=usage),
                             id="resp-edge", model="gemini-x", include_thoughts=thoughts)
    body = msgspec.json.encode(r)
    sdk_generate(body)
    return msgspec.json.decode(body)  # type: ignore[no-any-return]  # a JSON object


def test_a_text_answer_with_its_usage_and_the_edges_id_and_model() -> None:
    got = answer(wire.Choice(content="Hello", finish_reason="stop"),
                 usage=wire.Usage(prompt_tokens=12, completion_tokens=30, reasoning_tokens=20, cached_tokens=4))
    assert got == {"candidates": [{"content": {"role": "model", "parts": [{"text": "Hello"}]}, "finishReason": "STOP",
                                   "index": 0}],
                   "usageMetadata": {"promptTokenCount": 12, "candidatesTokenCount": 10, "totalTokenCount": 42,
                                     "cachedContentTokenCount": 4, "thoughtsTokenCount": 20},
                   "modelVersion": "gemini-x", "responseId": "resp-edge"}
    sdk = sdk_generate(msgspec.json.encode(response_from_answer(wire.Response(
        id="up", model="m", created=1, choices=[wire.Choice(content="Hello", finish_reason="stop")]),
        id="r", model="gemini-x")))
    assert sdk.text == "Hello" and sdk.response_id == "r" and sdk.model_version == "gemini-x"


def test_thoughts_text_and_function_calls_in_googles_order_the_signature_on_the_first_part_after_thoughts() -> None:
    choice = wire.Choice(content="Let me look.", reasoning="The user wants weather.", signature=SIG,
                         finish_reason="tool_calls",
                         tool_calls=[wire.FunctionCall(id="call_1", name="weather", arguments='{"city": "Paris"}'),
                                     wire.FunctionCall(id="", name="time", arguments="")])
    assert answer(choice, thoughts=True)["candidates"][0] == {"content": {"role": "model", "parts": [
        {"text": "The user wants weather.", "thought": True},
        {"text": "Let me look.", "thoughtSignature": SIG},
        {"functionCall": {"name": "weather", "args": {"city": "Paris"}, "id": "call_1"}},
        {"functionCall": {"name": "time", "args": {}, "id": "call_resp-edge_1"}}]}, "finishReason": "STOP", "index": 0}
    without = answer(choice)["candidates"][0]["content"]["parts"]  # includeThoughts not asked: no thoughts
    assert without[0] == {"text": "Let me look.", "thoughtSignature": SIG}
    sdk = sdk_generate(msgspec.json.encode(response_from_answer(wire.Response(id="u", model="m", created=1,
                                                                              choices=[choice]), id="r", model="g")))
    assert [(c.name, c.args) for c in sdk.function_calls or ()] == [("weather", {"city": "Paris"}), ("time", {})]


def test_a_signature_google_clients_cannot_read_is_left_out() -> None:
    parts = answer(wire.Choice(content="x", signature="not base64!"))["candidates"][0]["content"]["parts"]
    assert parts == [{"text": "x"}]


@pytest.mark.parametrize(("finish", "expected"), [
    ("stop", "STOP"), ("length", "MAX_TOKENS"), ("content_filter", "SAFETY"), ("tool_calls", "STOP"),
    ("refusal", "SAFETY"), ("pause_turn", "OTHER"), (None, "STOP"), ("something_new", "OTHER")])
def test_finish_reasons_map_to_googles(finish: str | None, expected: str) -> None:
    assert answer(wire.Choice(content="x", finish_reason=finish))["candidates"][0]["finishReason"] == expected


def test_each_choice_is_a_candidate_at_its_index_and_logprobs_are_googles() -> None:
    top = [wire.TopLogprob(token="a", logprob=-0.5), wire.TopLogprob(token="b", logprob=-1.5)]
    got = answer(wire.Choice(index=0, content="a", logprobs=[wire.TokenLogprob(token="a", logprob=-0.5,
                                                                                top_logprobs=top)]),
                 wire.Choice(index=1, content="b", finish_reason="length"))
    assert [c["index"] for c in got["candidates"]] == [0, 1]
    assert got["candidates"][0]["avgLogprobs"] == -0.5
    assert got["candidates"][0]["logprobsResult"] == {
        "chosenCandidates": [{"token": "a", "logProbability": -0.5}],
        "topCandidates": [{"candidates": [{"token": "a", "logProbability": -0.5},
                                          {"token": "b", "logProbability": -1.5}]}]}


@pytest.mark.parametrize("arguments", ['["a"]', '{"unclosed": ', "42"])
def test_tool_arguments_that_are_not_a_json_object_cannot_be_answered(arguments: str) -> None:
    with pytest.raises(UpstreamProtocolError, match="tool call 0"):
        answer(wire.Choice(tool_calls=[wire.FunctionCall(id="t", name="f", arguments=arguments)]))


# --- streams ---------------------------------------------------------------------------------------


def frames(*chunks: Chunk) -> list[bytes]:
    return [bytes(wire.write_chunk(msgspec.structs.replace(c, sequence=n))) for n, c in enumerate(chunks)]


def stream(*chunks: Chunk, thoughts: bool = False) -> list[dict[str, Any]]:
    t = GeminiStreamTranslator(id="resp-edge", model="gemini-x", include_thoughts=thoughts)
    events = [e for f in frames(*chunks) for e in t.read_frame(f)]
    t.finish()
    bodies = [msgspec.json.encode(e) for e in events]
    sdk_stream(bodies)  # every event one the SDK reads
    return [msgspec.json.decode(b) for b in bodies]


def parts(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for e in events for c in e["candidates"] for p in c.get("content", {}).get("parts", [])]


def test_a_text_stream_is_one_event_per_token_then_the_finish_and_usage() -> None:
    events = stream(Chunk(sequence=0, role="assistant", content=""), Chunk(sequence=0, content="Hel"),
                    Chunk(sequence=0, content="lo"), Chunk(sequence=0, finish_reason="stop"),
                    Chunk(sequence=0, usage=wire.Usage(prompt_tokens=3, completion_tokens=2), done=True))
    assert events == [
        {"candidates": [{"content": {"role": "model", "parts": [{"text": "Hel"}]}, "index": 0}],
         "modelVersion": "gemini-x", "responseId": "resp-edge"},
        {"candidates": [{"content": {"role": "model", "parts": [{"text": "lo"}]}, "index": 0}],
         "modelVersion": "gemini-x", "responseId": "resp-edge"},
        {"candidates": [{"finishReason": "STOP", "index": 0}], "modelVersion": "gemini-x", "responseId": "resp-edge",
         "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 2, "totalTokenCount": 5}}]
    assert all("usageMetadata" not in e for e in events[:-1])


def test_function_call_arguments_are_emitted_whole_once_the_call_is_complete() -> None:
    events = stream(
        Chunk(sequence=0, reasoning="Think.", signature=SIG),
        Chunk(sequence=0, tool_calls=[ToolCallDelta(index=0, id="c0", name="weather")]),
        Chunk(sequence=0, tool_calls=[ToolCallDelta(index=0, arguments='{"city": ')]),
        Chunk(sequence=0, tool_calls=[ToolCallDelta(index=0, arguments='"Paris"}')]),
        Chunk(sequence=0, tool_calls=[ToolCallDelta(index=1, name="time", arguments="{}")]),
        Chunk(sequence=0, finish_reason="tool_calls", done=True), thoughts=True)
    assert parts(events) == [
        {"text": "Think.", "thought": True},
        {"functionCall": {"name": "weather", "args": {"city": "Paris"}, "id": "c0"}, "thoughtSignature": SIG},
        {"functionCall": {"name": "time", "args": {}, "id": "call_resp-edge_1"}}]
    assert events[-1]["candidates"][0]["finishReason"] == "STOP"
    sdk = sdk_stream([msgspec.json.encode(e) for e in events])
    assert [c.name for e in sdk for c in e.function_calls or ()] == ["weather", "time"]


def test_thoughts_are_streamed_only_when_asked_for_and_counted_either_way() -> None:
    chunks = (Chunk(sequence=0, reasoning="hmm"), Chunk(sequence=0, content="ok", finish_reason="stop", done=True))
    assert parts(stream(*chunks)) == [{"text": "ok"}]
    t = GeminiStreamTranslator(id="r", model="g")
    for f in frames(*chunks):
        t.read_frame(f)
    assert t.output == ["hmm", "ok"] and t.finish_reasons == ["stop"]


def test_a_signature_nothing_took_comes_on_the_last_event() -> None:
    events = stream(Chunk(sequence=0, reasoning="r", signature=SIG), Chunk(sequence=0, done=True), thoughts=True)
    assert events[-1]["candidates"][0]["content"]["parts"] == [{"text": "", "thoughtSignature": SIG}]


def test_candidates_stream_at_their_indices_and_all_finish_on_the_last_event() -> None:
    events = stream(Chunk(sequence=0, choice_index=0, content="a"), Chunk(sequence=0, choice_index=1, content="b"),
                    Chunk(sequence=0, choice_index=1, finish_reason="length"),
                    Chunk(sequence=0, choice_index=0, finish_reason="stop", done=True))
    assert [c["index"] for e in events[:2] for c in e["candidates"]] == [0, 1]
    assert events[-1]["candidates"] == [{"finishReason": "STOP", "index": 0},
                                        {"finishReason": "MAX_TOKENS", "index": 1}]


def test_frames_read_in_place_make_the_events_decoded_frames_make() -> None:
    fast = GeminiStreamTranslator(id="r", model="g")
    slow = GeminiStreamTranslator(id="r", model="g")
    for f in frames(Chunk(sequence=0, tool_calls=[ToolCallDelta(index=0, name="f", arguments="{}")]),
                    Chunk(sequence=0, content="tok"), Chunk(sequence=0, content="en", done=True)):
        assert fast.read_frame(f) == slow.feed(decode_frame(f))


def test_broken_streams_are_protocol_errors_and_an_error_frame_is_raised() -> None:
    t = GeminiStreamTranslator(id="r", model="g")
    with pytest.raises(UpstreamProtocolError, match="skipped"):
        t.feed(Chunk(sequence=1, content="x"))
    t = GeminiStreamTranslator(id="r", model="g")
    t.read_frame(frames(Chunk(sequence=0, content="x"))[0])
    with pytest.raises(UpstreamProtocolError, match="before it was complete"):
        t.finish()
    with pytest.raises(UpstreamAnswered):
        t.read_frame(bytes(wire.write_error(wire.ErrorInfo(status=503, message="busy"), framed=True)))


def test_an_error_event_ends_a_stream_and_the_sdk_raises_it() -> None:
    event = msgspec.json.encode(error_event(UpstreamAnswered(503, "server_error", "upstream_overloaded", "busy", None)))
    with pytest.raises(sdk_errors.ServerError) as caught:
        sdk_stream([b'{"candidates": [{"content": {"role": "model", "parts": [{"text": "a"}]}, "index": 0}]}', event])
    assert (caught.value.code, caught.value.status) == (503, "UNAVAILABLE")
