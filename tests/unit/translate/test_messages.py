"""Answers in Anthropic's Messages shape (ingress/translate/messages.py, ingress/anthropic/answers.py): whole
answers block by block, stop reasons and usage; the error table; a stream's events, frame by frame. Every
message and event is read back by the official SDK's own models."""

from __future__ import annotations

from typing import Any

import msgspec
import pydantic
import pytest
from anthropic.types import Message as SdkMessage
from anthropic.types import RawMessageStreamEvent
from anthropic.types.shared import ErrorResponse

from ingress import errors, wire
from ingress.anthropic import answers
from ingress.errors import UpstreamAnswered, UpstreamProtocolError
from ingress.translate.messages import MessagesStreamTranslator, error_event, message_from_response
from ingress.wire import Chunk, ToolCallDelta
from ingress.wire.answer import content_delta, decode_frame

EVENT = pydantic.TypeAdapter(RawMessageStreamEvent)
ERROR = pydantic.TypeAdapter(ErrorResponse)


def plain(obj: object) -> Any:
    return msgspec.json.decode(msgspec.json.encode(obj))


def message(*choices: wire.Choice, usage: wire.Usage | None = None, tier: str | None = None) -> dict[str, Any]:
    """The message made of an answer, as JSON, once the SDK has read it."""
    m = message_from_response(wire.Response(id="chatcmpl-up", model="served", created=1, choices=list(choices),
                                            usage=usage, service_tier=tier), id="msg_edge", model="claude-x")
    SdkMessage.model_validate_json(msgspec.json.encode(m))
    result: dict[str, Any] = plain(m)
    return result


# --- whole answers ---------------------------------------------------------------------------------


def test_a_text_answer_is_one_text_block_with_the_edges_id_and_model() -> None:
    m = message(wire.Choice(content="Hello", finish_reason="stop"),
                usage=wire.Usage(prompt_tokens=12, completion_tokens=3))
    assert m == {"id": "msg_edge", "type": "message", "role": "assistant", "model": "claude-x",
                 "content": [{"type": "text", "text": "Hello"}], "stop_reason": "end_turn", "stop_sequence": None,
                 "usage": {"input_tokens": 12, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                           "output_tokens": 3, "service_tier": "standard"}}


def test_blocks_come_thinking_redacted_text_then_tool_use() -> None:
    m = message(wire.Choice(content="Let me look.", reasoning="The user wants weather.", signature="sig==",
                            redacted_thinking=["opaque-1", "opaque-2"], finish_reason="tool_calls",
                            tool_calls=[wire.FunctionCall(id="toolu_1", name="weather", arguments='{"city": "Paris"}'),
                                        wire.FunctionCall(id="", name="time", arguments="")]))
    assert m["content"] == [
        {"type": "thinking", "thinking": "The user wants weather.", "signature": "sig=="},
        {"type": "redacted_thinking", "data": "opaque-1"},
        {"type": "redacted_thinking", "data": "opaque-2"},
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "toolu_msg_edge_1", "name": "time", "input": {}},  # no id, no arguments
    ]
    assert m["stop_reason"] == "tool_use"


def test_tool_input_is_kept_as_the_model_wrote_it() -> None:
    arguments = '{"n": 1.50, "big": 12345678901234567890, "s": "é"}'
    m = message_from_response(wire.Response(id="x", model="m", created=1, choices=[wire.Choice(
        tool_calls=[wire.FunctionCall(id="t", name="f", arguments=arguments)], finish_reason="tool_calls")]),
        id="msg", model="m")
    assert arguments.encode() in msgspec.json.encode(m)


@pytest.mark.parametrize("arguments", ['["a"]', '{"unclosed": ', "42", "not json"])
def test_tool_arguments_that_are_not_a_json_object_cannot_be_answered(arguments: str) -> None:
    choice = wire.Choice(tool_calls=[wire.FunctionCall(id="t", name="f", arguments=arguments)])
    with pytest.raises(UpstreamProtocolError, match="tool call 0"):
        message(choice)


def test_thinking_without_a_signature_and_a_signature_without_thinking() -> None:
    assert message(wire.Choice(reasoning="hmm"))["content"] == [{"type": "thinking", "thinking": "hmm",
                                                                 "signature": ""}]
    assert message(wire.Choice(signature="s"))["content"] == [{"type": "thinking", "thinking": "", "signature": "s"}]
    assert message(wire.Choice(content="", reasoning=""))["content"] == []  # nothing said: no empty block


def test_citations_are_web_search_results_citing_their_span() -> None:
    annotation = wire.Annotation(type="url_citation", url="https://example.com/p", title="Page", start_index=4,
                                 end_index=9)
    [block] = message(wire.Choice(content="See Paris today.", annotations=[annotation]))["content"]
    assert block == {"type": "text", "text": "See Paris today.", "citations": [
        {"type": "web_search_result_location", "cited_text": "Paris", "url": "https://example.com/p",
         "title": "Page", "encrypted_index": ""}]}


def test_only_the_first_choice_is_answered() -> None:
    m = message(wire.Choice(index=0, content="first"), wire.Choice(index=1, content="second"))
    assert m["content"] == [{"type": "text", "text": "first"}]
    m = message(wire.Choice(index=1, content="second"), wire.Choice(index=0, content="first"))
    assert m["content"] == [{"type": "text", "text": "first"}]
    assert message()["content"] == []


@pytest.mark.parametrize(("choice", "reason", "sequence"), [
    (wire.Choice(content="a", finish_reason="stop"), "end_turn", None),
    (wire.Choice(content="a"), "end_turn", None),  # a service that named no reason
    (wire.Choice(content="a END", finish_reason="stop", stop_sequence="END"), "stop_sequence", "END"),
    (wire.Choice(content="a", finish_reason="length"), "max_tokens", None),
    (wire.Choice(content="a", finish_reason="length", stop_sequence="END"), "max_tokens", None),
    (wire.Choice(tool_calls=[wire.FunctionCall(id="t", name="f", arguments="{}")], finish_reason="tool_calls"),
     "tool_use", None),
    (wire.Choice(tool_calls=[wire.FunctionCall(id="t", name="f", arguments="{}")], finish_reason="stop"),
     "tool_use", None),  # an engine that calls it a stop: the client's tool loop keys on tool_use
    (wire.Choice(content="a", finish_reason="pause_turn"), "pause_turn", None),
    (wire.Choice(content="a", finish_reason="refusal"), "refusal", None),
    (wire.Choice(content="a", finish_reason="content_filter"), "refusal", None),
    (wire.Choice(refusal="I can't help with that.", finish_reason="stop"), "refusal", None),
])
def test_stop_reasons(choice: wire.Choice, reason: str, sequence: str | None) -> None:
    m = message(choice)
    assert (m["stop_reason"], m["stop_sequence"]) == (reason, sequence)


def test_a_refusals_text_is_a_text_block() -> None:
    assert message(wire.Choice(refusal="No."))["content"] == [{"type": "text", "text": "No."}]


@pytest.mark.parametrize(("counted", "expected"), [
    (wire.Usage(prompt_tokens=100, completion_tokens=7), (100, 0, 0, 7)),
    (wire.Usage(prompt_tokens=100, completion_tokens=7, cached_tokens=60), (40, 0, 60, 7)),
    (wire.Usage(prompt_tokens=100, completion_tokens=7, cache_write_tokens=30), (70, 30, 0, 7)),
    (wire.Usage(prompt_tokens=100, completion_tokens=7, cached_tokens=60, cache_write_tokens=30), (10, 30, 60, 7)),
    (wire.Usage(prompt_tokens=50, completion_tokens=0, cached_tokens=60, cache_write_tokens=30), (0, 30, 60, 0)),
])
def test_input_tokens_leave_out_cache_reads_and_writes_never_below_zero(counted: wire.Usage,
                                                                         expected: tuple[int, ...]) -> None:
    u = message(wire.Choice(content="a"), usage=counted)["usage"]
    assert (u["input_tokens"], u["cache_creation_input_tokens"], u["cache_read_input_tokens"],
            u["output_tokens"]) == expected


def test_server_tools_are_counted_only_when_the_service_counted_them() -> None:
    u = message(wire.Choice(content="a"), usage=wire.Usage(prompt_tokens=1, web_search_requests=2))["usage"]
    assert u["server_tool_use"] == {"web_search_requests": 2, "web_fetch_requests": 0}
    assert "server_tool_use" not in message(wire.Choice(content="a"), usage=wire.Usage(prompt_tokens=1))["usage"]


@pytest.mark.parametrize(("tier", "anthropic"), [(None, "standard"), ("default", "standard"), ("flex", "standard"),
                                                 ("priority", "priority"), ("batch", "batch")])
def test_service_tiers(tier: str | None, anthropic: str) -> None:
    assert message(wire.Choice(content="a"), tier=tier)["usage"]["service_tier"] == anthropic


def test_an_answer_without_usage_counts_zeros() -> None:
    u = message(wire.Choice(content="a"))["usage"]
    assert (u["input_tokens"], u["output_tokens"]) == (0, 0)


# --- errors ------------------------------------------------------------------------------------------


def answered(status: int, code: str | None = None, type_: str = "") -> UpstreamAnswered:
    return UpstreamAnswered(status, type_, code, "said the service", None, retry_after=5 if status == 429 else None)


ERRORS: list[tuple[errors.IngressError, str, int]] = [
    (errors.InvalidRequest("bad", param="messages"), "invalid_request_error", 400),
    (errors.PromptBlocked("pii.card", param="messages"), "invalid_request_error", 400),
    (errors.PayloadTooLarge("big"), "request_too_large", 413),
    (errors.NotFound("no such model"), "not_found_error", 404),
    (errors.RequestTimeout("slow body"), "invalid_request_error", 408),
    (errors.UnsupportedEncoding("br"), "invalid_request_error", 415),
    (errors.Unauthenticated("no key"), "authentication_error", 401),
    (errors.RateLimited("slow down", retry_after=3), "rate_limit_error", 429),
    (errors.QuotaExceeded("spent", retry_after=3600), "rate_limit_error", 429),
    (errors.Overloaded("full", retry_after=1), "overloaded_error", 529),
    (errors.ShuttingDown(), "overloaded_error", 529),
    (errors.LimitsUnavailable("store down"), "api_error", 503),
    (errors.IssuerUnavailable("sign-in down"), "api_error", 503),
    (errors.UpstreamUnavailable("reset"), "api_error", 502),
    (errors.UpstreamConnectFailed("refused"), "api_error", 502),
    (errors.UpstreamProtocolError("garbage"), "api_error", 502),
    (errors.UpstreamTimeout("silent"), "timeout_error", 504),
    (errors.IngressError("a bug"), "api_error", 500),
    (answered(400, "invalid_request"), "invalid_request_error", 400),
    (answered(401), "authentication_error", 401),
    (answered(403), "permission_error", 403),
    (answered(404, "model_not_found"), "not_found_error", 404),
    (answered(409), "invalid_request_error", 409),
    (answered(413), "request_too_large", 413),
    (answered(429, "rate_limit_exceeded"), "rate_limit_error", 429),
    (answered(500), "api_error", 500),
    (answered(502, "upstream_error"), "api_error", 502),
    (answered(503, "upstream_overloaded"), "overloaded_error", 529),  # a bridge's overloaded provider
    (answered(503), "overloaded_error", 529),
    (answered(529), "overloaded_error", 529),
    (answered(500, "overloaded"), "overloaded_error", 529),
    (answered(500, None, "overloaded_error"), "overloaded_error", 529),
    (answered(504, "upstream_timeout"), "timeout_error", 504),
    (answered(299), "api_error", 502),  # a status that is no error: the service broke
]


@pytest.mark.parametrize(("exc", "kind", "status"), ERRORS, ids=lambda v: type(v).__name__ if isinstance(
    v, Exception) else str(v))
def test_the_error_table(exc: errors.IngressError, kind: str, status: int) -> None:
    assert answers.error_kind(exc) == (kind, status)
    body = plain(answers.error_envelope(exc, request_id="req_1"))
    assert body == {"type": "error", "error": {"type": kind, "message": exc.message}, "request_id": "req_1"}
    if kind != "request_too_large":  # Anthropic documents it; the SDK's union of error objects lacks it
        ERROR.validate_python(body)


def test_retry_after_stays_the_callers_to_send() -> None:
    for exc in (errors.RateLimited("x", retry_after=7), errors.Overloaded("x"), answered(429)):
        assert exc.retry_after is not None  # the header the edge writes beside the envelope, as for OpenAI's
    assert "request_id" not in plain(answers.error_envelope(errors.Overloaded("x")))


def test_every_error_class_has_a_row() -> None:
    def subclasses(cls: type[errors.IngressError]) -> set[type[errors.IngressError]]:
        return {cls}.union(*(subclasses(s) for s in cls.__subclasses__()))

    covered = {type(exc) for exc, _, _ in ERRORS} | {errors.WriteTimeout}  # never sent: the client left
    assert subclasses(errors.IngressError) - {errors.UpstreamError} <= covered


# --- the stream, frame by frame ---------------------------------------------------------------------


def frames(*chunks: Chunk) -> list[bytes]:
    return [bytes(wire.write_chunk(msgspec.structs.replace(c, sequence=i))) for i, c in enumerate(chunks)]


def run(*chunks: Chunk, input_tokens: int = 9) -> list[dict[str, Any]]:
    t = MessagesStreamTranslator(id="msg_edge", model="claude-x", input_tokens=input_tokens)
    events = [e for f in frames(*chunks) for e in t.read_frame(f)]
    t.finish()
    out = [plain(e) for e in events]
    for e in out:
        EVENT.validate_python(e)
    return out


START = {"type": "message_start", "message": {
    "id": "msg_edge", "type": "message", "role": "assistant", "model": "claude-x", "content": [],
    "stop_reason": None, "stop_sequence": None,
    "usage": {"input_tokens": 9, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 0,
              "service_tier": "standard"}}}


def block(index: int, **content_block: Any) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": content_block}


def delta(index: int, **d: Any) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": d}


def stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


def end(reason: str, usage: dict[str, Any], sequence: str | None = None) -> list[dict[str, Any]]:
    return [{"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": sequence}, "usage": usage},
            {"type": "message_stop"}]


USAGE = wire.Usage(prompt_tokens=20, completion_tokens=5, cached_tokens=8, cache_write_tokens=2)
USAGE_OUT = {"input_tokens": 10, "cache_creation_input_tokens": 2, "cache_read_input_tokens": 8, "output_tokens": 5}


def test_a_text_stream() -> None:
    assert run(Chunk(sequence=0, role="assistant", content=""), Chunk(sequence=0, content="Hel"),
               Chunk(sequence=0, content="lo"), Chunk(sequence=0, finish_reason="stop", usage=USAGE, done=True)) == [
        START, block(0, type="text", text=""), delta(0, type="text_delta", text="Hel"),
        delta(0, type="text_delta", text="lo"), stop(0), *end("end_turn", USAGE_OUT)]


def test_thinking_signed_then_text_then_two_tool_calls() -> None:
    T = ToolCallDelta
    events = run(
        Chunk(sequence=0, reasoning="Weather"), Chunk(sequence=0, reasoning=" needed.", signature="sig=="),
        Chunk(sequence=0, content="Checking."),
        Chunk(sequence=0, tool_calls=[T(index=0, id="toolu_a", type="function", name="weather", arguments="")]),
        Chunk(sequence=0, tool_calls=[T(index=0, arguments='{"city":')]),
        Chunk(sequence=0, tool_calls=[T(index=0, arguments=' "Paris"}')]),
        Chunk(sequence=0, tool_calls=[T(index=1, id="toolu_b", name="time"), T(index=1, arguments="{}")]),
        Chunk(sequence=0, finish_reason="tool_calls", done=True))
    assert events == [
        START, block(0, type="thinking", thinking="", signature=""),
        delta(0, type="thinking_delta", thinking="Weather"), delta(0, type="thinking_delta", thinking=" needed."),
        delta(0, type="signature_delta", signature="sig=="), stop(0),
        block(1, type="text", text=""), delta(1, type="text_delta", text="Checking."), stop(1),
        block(2, type="tool_use", id="toolu_a", name="weather", input={}),
        delta(2, type="input_json_delta", partial_json='{"city":'),
        delta(2, type="input_json_delta", partial_json=' "Paris"}'), stop(2),
        block(3, type="tool_use", id="toolu_b", name="time", input={}),
        delta(3, type="input_json_delta", partial_json="{}"), stop(3),
        *end("tool_use", {"output_tokens": 0})]  # no usage came: the edge counts `output` apart


def test_a_signature_after_the_text_signs_a_thinking_block_of_its_own() -> None:
    events = run(Chunk(sequence=0, content="a"), Chunk(sequence=0, signature="s"), Chunk(sequence=0, done=True))
    assert events[1:7] == [block(0, type="text", text=""), delta(0, type="text_delta", text="a"), stop(0),
                           block(1, type="thinking", thinking="", signature=""),
                           delta(1, type="signature_delta", signature="s"), stop(1)]


def test_reasoning_after_a_signature_is_a_thinking_block_of_its_own() -> None:
    events = run(Chunk(sequence=0, reasoning="a", signature="s1"), Chunk(sequence=0, reasoning="b"),
                 Chunk(sequence=0, done=True))
    assert events[1:8] == [block(0, type="thinking", thinking="", signature=""),
                           delta(0, type="thinking_delta", thinking="a"),
                           delta(0, type="signature_delta", signature="s1"), stop(0),
                           block(1, type="thinking", thinking="", signature=""),
                           delta(1, type="thinking_delta", thinking="b"), stop(1)]


def test_redacted_thinking_blocks_start_and_stop_whole() -> None:
    events = run(Chunk(sequence=0, reasoning="x", redacted_thinking=["r1", "r2"], content="y"),
                 Chunk(sequence=0, done=True, finish_reason="stop", stop_sequence="END"))
    assert events[1:] == [
        block(0, type="thinking", thinking="", signature=""), delta(0, type="thinking_delta", thinking="x"), stop(0),
        block(1, type="redacted_thinking", data="r1"), stop(1), block(2, type="redacted_thinking", data="r2"), stop(2),
        block(3, type="text", text=""), delta(3, type="text_delta", text="y"), stop(3),
        *end("stop_sequence", {"output_tokens": 0}, "END")]


def test_a_tool_calls_id_and_name_in_pieces_start_its_block_whole() -> None:
    T = ToolCallDelta
    events = run(Chunk(sequence=0, tool_calls=[T(index=0, name="get_")]),
                 Chunk(sequence=0, tool_calls=[T(index=0, id="toolu_z", name="time")]),
                 Chunk(sequence=0, done=True))
    assert events[1:3] == [block(0, type="tool_use", id="toolu_z", name="get_time", input={}), stop(0)]


def test_the_usage_of_the_first_frame_is_message_starts() -> None:
    events = run(Chunk(sequence=0, content="a", usage=USAGE, service_tier="priority"), Chunk(sequence=0, done=True))
    assert events[0]["message"]["usage"] == {**USAGE_OUT, "service_tier": "priority"}
    assert events[-2]["usage"] == USAGE_OUT  # cumulative: it came before the end


def test_other_choices_are_not_rendered() -> None:
    events = run(Chunk(sequence=0, choice_index=1, content="other", finish_reason="length"),
                 Chunk(sequence=0, content="mine"), Chunk(sequence=0, choice_index=1, content="other"),
                 Chunk(sequence=0, choice_index=1, done=True))
    assert [e for e in events if e["type"] == "content_block_delta"] == [delta(0, type="text_delta", text="mine")]
    assert events[-2]["delta"]["stop_reason"] == "end_turn"


def test_an_empty_answer_is_a_start_and_an_end() -> None:
    assert run(Chunk(sequence=0, done=True, finish_reason="stop")) == [START, *end("end_turn", {"output_tokens": 0})]


def test_a_text_token_frame_is_read_in_place_into_the_same_events() -> None:
    chunks = [Chunk(sequence=0, content="Hel"), Chunk(sequence=1, content="lo"), Chunk(sequence=2, content="!"),
              Chunk(sequence=3, done=True)]
    data = frames(*chunks)
    assert all(content_delta(f) is not None for f in data[:3])  # no decode: the fast read takes them
    fast = MessagesStreamTranslator(id="m", model="c", input_tokens=1)
    slow = MessagesStreamTranslator(id="m", model="c", input_tokens=1)
    assert [plain(fast.read_frame(f)) for f in data] == [plain(slow.feed(decode_frame(f))) for f in data]
    assert fast.output == slow.output == ["Hel", "lo", "!"]


def test_output_holds_what_was_streamed_for_counting() -> None:
    t = MessagesStreamTranslator(id="m", model="c", input_tokens=1)
    for f in frames(Chunk(sequence=0, reasoning="r"), Chunk(sequence=0, content="t"),
                    Chunk(sequence=0, tool_calls=[ToolCallDelta(index=0, id="i", name="n", arguments="{}")]),
                    Chunk(sequence=0, usage=USAGE, done=True)):
        t.read_frame(f)
    assert (t.output, t.usage, t.done) == (["r", "t", "{}"], USAGE, True)


def test_the_model_the_service_named_is_kept_and_the_client_is_told_its_own() -> None:
    t = MessagesStreamTranslator(id="m", model="claude-x", input_tokens=1)
    events = [e for f in frames(Chunk(sequence=0, content="a"), Chunk(sequence=0, model="claude-x-20250929"),
                                Chunk(sequence=0, model="another", done=True)) for e in t.read_frame(f)]
    assert plain(events[0])["message"]["model"] == "claude-x"
    assert t.served_model == "claude-x-20250929"  # the first the service named, for the usage record


def test_an_error_frame_is_raised_with_its_status() -> None:
    t = MessagesStreamTranslator(id="m", model="c", input_tokens=1)
    t.read_frame(frames(Chunk(sequence=0, content="a"))[0])
    error = bytes(wire.write_error(wire.ErrorInfo(status=503, type="server_error", code="upstream_overloaded",
                                                  message="busy"), framed=True))
    with pytest.raises(UpstreamAnswered) as raised:
        t.read_frame(error)
    assert answers.error_kind(raised.value) == ("overloaded_error", 529)
    event = plain(error_event(raised.value))
    assert event == {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    ERROR.validate_python(event)


@pytest.mark.parametrize("sequences", [[1], [0, 0], [0, 2]])
def test_frames_out_of_order_are_a_protocol_error(sequences: list[int]) -> None:
    t = MessagesStreamTranslator(id="m", model="c", input_tokens=1)
    data = [bytes(wire.write_chunk(Chunk(sequence=s, content="a"))) for s in sequences]
    with pytest.raises(UpstreamProtocolError, match="skipped"):
        for f in data:
            t.read_frame(f)


def test_nothing_after_message_stop() -> None:
    t = MessagesStreamTranslator(id="m", model="c", input_tokens=1)
    assert plain(t.read_frame(frames(Chunk(sequence=0, done=True))[0]))[-1] == {"type": "message_stop"}
    for late in (Chunk(sequence=1, content="late"), Chunk(sequence=1, done=True)):
        with pytest.raises(UpstreamProtocolError, match="after the end"):
            t.read_frame(bytes(wire.write_chunk(late)))


def test_a_stream_without_its_final_frame_was_cut_short() -> None:
    t = MessagesStreamTranslator(id="m", model="c", input_tokens=1)
    t.read_frame(frames(Chunk(sequence=0, content="a"))[0])
    with pytest.raises(UpstreamProtocolError, match="before it was complete"):
        t.finish()


def test_a_tool_call_that_goes_on_after_another_began_is_a_protocol_error() -> None:
    T = ToolCallDelta
    t = MessagesStreamTranslator(id="m", model="c", input_tokens=1)
    data = frames(Chunk(sequence=0, tool_calls=[T(index=0, id="a", name="f", arguments="{")]),
                  Chunk(sequence=0, tool_calls=[T(index=1, id="b", name="g", arguments="{")]),
                  Chunk(sequence=0, tool_calls=[T(index=0, arguments="}")]))
    t.read_frame(data[0])
    t.read_frame(data[1])
    with pytest.raises(UpstreamProtocolError, match="tool call 0 went on"):
        t.read_frame(data[2])


def test_a_tool_named_after_its_input_began_is_a_protocol_error() -> None:
    T = ToolCallDelta
    t = MessagesStreamTranslator(id="m", model="c", input_tokens=1)
    data = frames(Chunk(sequence=0, tool_calls=[T(index=0, id="a", name="f", arguments="{")]),
                  Chunk(sequence=0, tool_calls=[T(index=0, name="oo")]))
    t.read_frame(data[0])
    with pytest.raises(UpstreamProtocolError, match="named its tool after"):
        t.read_frame(data[1])


def test_ping_and_the_events_own_types() -> None:
    assert plain(answers.Ping()) == {"type": "ping"}
    assert plain(error_event(errors.UpstreamTimeout("silent"), request_id="req_1")) == {
        "type": "error", "error": {"type": "timeout_error", "message": "silent"}, "request_id": "req_1"}
