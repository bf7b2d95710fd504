"""Chat chunks made into the Responses API's stream events (ingress/translate/responses_events.py)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from responses_api import CODEX_LIKE, call, check_well_formed, chunk, seal, thinking, tool

from ingress.errors import UpstreamAnswered
from ingress.oai import chat_answers
from ingress.oai.responses_answers import (
    ErrorOut,
    IncompleteDetails,
    MessageOut,
    OutputTextOut,
    ReasoningItemOut,
    RefusalOut,
)
from ingress.translate.responses_events import ResponseEvents
from ingress.wire import types as wire_types

# --- the stream -----------------------------------------------------------------------------------


def run(chunks: list[chat_answers.ChatCompletionChunk], usage: wire_types.Usage | None = None) -> list[Any]:
    events = ResponseEvents(call(), request_id="r", created_at=5)
    out: list[Any] = events.opened()
    for c in chunks:
        out += events.feed(c)
    return out + events.completed(usage)


@given(st.lists(st.text(min_size=1, max_size=5), min_size=1, max_size=8))
def test_any_split_of_the_text_gives_the_same_final_response(pieces: list[str]) -> None:
    events = run([chunk(p) for p in pieces] + [chunk(finish="stop")])
    check_well_formed(events)
    final = events[-1]
    assert final.type == "response.completed"
    [message] = final.response.output
    assert message.content[0].text == "".join(pieces) and message.status == "completed"
    assert [e.delta for e in events if e.type == "response.output_text.delta"] == pieces
    added = next(e for e in events if e.type == "response.output_item.added")
    assert added.item.status == "in_progress" and added.item.content == []  # the event's own copy, as it was


@given(st.lists(st.text(min_size=1, max_size=4), min_size=1, max_size=6), st.integers(min_value=1, max_value=3))
def test_text_then_calls_with_split_arguments(pieces: list[str], calls: int) -> None:
    chunks = [chunk("thinking ")]
    for i in range(calls):
        chunks.append(chunk(tools=[tool(i, "", id=f"call_{i}", name=f"f{i}")]))
        chunks += [chunk(tools=[tool(i, p)]) for p in pieces]
    events = run([*chunks, chunk(finish="tool_calls")])
    check_well_formed(events)
    output = events[-1].response.output
    assert isinstance(output[0], MessageOut)
    assert [(o.call_id, o.name, o.arguments, o.status) for o in output[1:]] == [
        (f"call_{i}", f"f{i}", "".join(pieces), "completed") for i in range(calls)]
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert [e.arguments for e in done] == ["".join(pieces)] * calls


def test_a_refusal_is_its_own_part_of_the_message() -> None:
    events = run([chunk("I "), chunk(refusal="can't "), chunk(refusal="do that")])
    check_well_formed(events)
    [message] = events[-1].response.output
    assert message.content == [OutputTextOut(text="I ", annotations=[]), RefusalOut(refusal="can't do that")]
    assert [e.refusal for e in events if e.type == "response.refusal.done"] == ["can't do that"]


def test_an_empty_answer_is_one_empty_message_and_usage_ends_it() -> None:
    events = run([chunk(finish="stop")], usage=wire_types.Usage(prompt_tokens=4, completion_tokens=0))
    check_well_formed(events)
    [message] = events[-1].response.output
    assert message.content == [OutputTextOut(text="", annotations=[])]
    assert events[-1].response.usage.input_tokens == 4


def test_a_cut_answer_ends_incomplete() -> None:
    events = run([chunk("a b"), chunk(finish="length")])
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.incomplete_details == IncompleteDetails(reason="max_output_tokens")
    assert events[-1].response.output[0].status == "incomplete"


def test_a_failure_ends_with_error_then_failed_once() -> None:
    events = ResponseEvents(call(), request_id="r", created_at=5)
    seen: list[Any] = events.opened() + events.feed(chunk("partial"))
    failure = UpstreamAnswered(500, "server_error", "engine", "it broke", None)
    seen += events.failed(failure)
    assert [e.type for e in seen[-2:]] == ["error", "response.failed"]
    error, failed = seen[-2:]
    assert (error.code, error.message, error.sequence_number) == ("engine", "it broke", len(seen) - 2)
    assert failed.response.status == "failed" and failed.response.error == ErrorOut(code="engine",
                                                                                    message="it broke")
    assert failed.response.output[0].content[0].text == "partial"
    assert events.failed(failure) == []  # a second failure (the edge's, after the service's) adds nothing


@pytest.mark.parametrize("field", ["instructions", "max_output_tokens", "temperature", "top_p", "user"])
def test_the_request_settings_are_echoed(field: str) -> None:
    values = {"instructions": "x", "max_output_tokens": 5, "temperature": 0.5, "top_p": 0.5, "user": "u"}
    events = ResponseEvents(call(**{field: values[field]}), request_id="r", created_at=5)
    assert getattr(events.opened()[0].response, field) == values[field]  # type: ignore[union-attr]


def test_a_failure_before_the_service_opened_the_stream_still_begins_with_created() -> None:
    events = ResponseEvents(call(), request_id="r", created_at=5)  # only heartbeats were sent so far
    seen = events.failed(UpstreamAnswered(503, "server_error", None, "no capacity", None))
    assert [e.type for e in seen] == ["response.created", "response.in_progress", "error", "response.failed"]
    assert [e.sequence_number for e in seen] == [0, 1, 2, 3]
    assert seen[2].code == "server_error"  # type: ignore[union-attr]  # no code given: the type stands for it


# --- reasoning and compaction, sealed --------------------------------------------------------------


@pytest.mark.parametrize("fields", [CODEX_LIKE, {}], ids=["summary", "content"])
def test_streamed_reasoning_then_a_call_is_well_formed_and_ends_sealed(fields: dict[str, Any]) -> None:
    events = ResponseEvents(call(**fields), request_id="r", created_at=5, seal=seal)
    out: list[Any] = [*events.opened(), *events.feed(thinking("2 and ")), *events.feed(thinking("2")),
                      *events.feed(chunk(tools=[tool(0, "{}", id="c1", name="f")])),
                      *events.feed(chunk(finish="tool_calls")), *events.completed(None)]
    check_well_formed(out)
    kinds = [e.type for e in out]
    family = "reasoning_summary_text" if fields else "reasoning_text"
    opening = ["response.output_item.added", *(["response.reasoning_summary_part.added"] if fields else []),
               f"response.{family}.delta", f"response.{family}.delta"]
    assert kinds[2:2 + len(opening)] == opening
    assert f"response.{family}.done" in kinds
    rs = next(e.item for e in out if e.type == "response.output_item.done")
    assert isinstance(rs, ReasoningItemOut) and [p.text for p in rs.content] == ["2 and 2"]
    assert isinstance(rs.encrypted_content, str) == bool(fields)
    assert [type(o).__name__ for o in out[-1].response.output] == ["ReasoningItemOut", "FunctionCallOut"]
