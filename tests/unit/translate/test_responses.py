"""A whole answer as a Responses object (ingress/translate/responses.py): its output items, status and usage."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from msgspec import UNSET
from responses_api import CODEX_LIKE, SEALER, call, check_well_formed, chunk, seal, tool

from ingress.oai.chat import AssistantMessage
from ingress.oai.responses_answers import (
    CustomToolCallOut,
    FunctionCallOut,
    IncompleteDetails,
    InputTokensDetails,
    MessageOut,
    OutputTextOut,
    OutputTokensDetails,
    ReasoningItemOut,
    UsageOut,
)
from ingress.oai.responses_to_chat import as_chat
from ingress.oai.sealing import Sealed
from ingress.translate.responses import translate_response_object
from ingress.translate.responses_events import ResponseEvents
from ingress.wire import types as wire_types

# --- a whole answer -------------------------------------------------------------------------------


def test_a_whole_answer_with_text_and_calls() -> None:
    calls = [wire_types.FunctionCall(id="c1", name="f", arguments="{}"),
             wire_types.FunctionCall(id="c2", name="g", arguments="raw", type="custom")]
    response = wire_types.Response(id="x", model="served", created=7,
                                   usage=wire_types.Usage(prompt_tokens=3, completion_tokens=2),
                                   choices=[wire_types.Choice(content="checking", finish_reason="tool_calls",
                                                              tool_calls=calls)])
    obj = translate_response_object(call(), response, request_id="r1")
    assert (obj.id, obj.model, obj.created_at, obj.status) == ("resp_r1", "served", 7, "completed")
    message, function, custom = obj.output
    assert isinstance(message, MessageOut) and message.content[0] == OutputTextOut(text="checking",
                                                                                          annotations=[])
    assert isinstance(function, FunctionCallOut) and function.call_id == "c1"
    assert isinstance(custom, CustomToolCallOut) and custom.input == "raw"
    assert obj.usage == UsageOut(input_tokens=3, input_tokens_details=InputTokensDetails(), output_tokens=2,
                                 output_tokens_details=OutputTokensDetails(), total_tokens=5)


def test_a_content_filter_makes_an_incomplete_answer() -> None:
    response = wire_types.Response(id="x", model="m", created=1,
                                   choices=[wire_types.Choice(content="", finish_reason="content_filter")])
    obj = translate_response_object(call(), response, request_id="r")
    assert obj.status == "incomplete" and obj.incomplete_details == IncompleteDetails(reason="content_filter")
    assert isinstance(obj.output[0], MessageOut) and obj.output[0].status == "incomplete"


@pytest.mark.parametrize(("finish", "status"), [("refusal", "incomplete"), ("pause_turn", "completed")])
def test_anthropics_finish_reasons_are_openais_nearest(finish: str, status: str) -> None:
    response = wire_types.Response(id="x", model="m", created=1,
                                   choices=[wire_types.Choice(content="", finish_reason=finish)])
    obj = translate_response_object(call(), response, request_id="r")
    assert obj.status == status
    assert obj.incomplete_details == (IncompleteDetails(reason="content_filter") if status == "incomplete" else None)


# --- the stream -----------------------------------------------------------------------------------


def test_usage_details_carry_cache_reads_writes_and_reasoning() -> None:
    usage = wire_types.Usage(prompt_tokens=10, completion_tokens=4, cached_tokens=6, cache_write_tokens=3,
                             reasoning_tokens=2)
    response = wire_types.Response(id="x", model="m", created=1, usage=usage, choices=[wire_types.Choice(content="a")])
    details = translate_response_object(call(), response, request_id="r").usage
    assert details == UsageOut(input_tokens=10, output_tokens=4, total_tokens=14,
                               input_tokens_details=InputTokensDetails(cached_tokens=6, cache_write_tokens=3),
                               output_tokens_details=OutputTokensDetails(reasoning_tokens=2))
    written = msgspec.json.decode(msgspec.json.encode(translate_response_object(call(), wire_types.Response(
        id="x", model="m", created=1, usage=wire_types.Usage(prompt_tokens=1), choices=[]), request_id="r")))
    # OpenAI's reference requires both, 0 when nothing was read or written
    assert written["usage"]["input_tokens_details"] == {"cached_tokens": 0, "cache_write_tokens": 0}


# --- what coding agents send ----------------------------------------------------------------------

NAMESPACE = {"type": "namespace", "name": "agents", "description": "sub-agents",
             "tools": [{"type": "function", "name": "spawn", "parameters": {"type": "object"}},
                       {"type": "custom", "name": "note"}]}


def test_a_namespaced_call_travels_flat_and_comes_back_namespaced() -> None:
    decoded = call(tools=[NAMESPACE], input=[
        {"role": "user", "content": "q"},
        {"type": "function_call", "call_id": "a", "name": "spawn", "namespace": "agents", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "a", "output": "A", "namespace": "agents", "name": "spawn"},
    ])
    chat_request = as_chat(decoded)
    assert [t.function.name if t.function is not None else t.custom.name  # type: ignore[union-attr]
            for t in chat_request.tools or ()] == ["agents__spawn", "agents__note"]
    assistant = chat_request.messages[1]
    assert isinstance(assistant, AssistantMessage) and assistant.tool_calls is not None
    assert assistant.tool_calls[0].function.name == "agents__spawn"  # type: ignore[union-attr]

    whole = wire_types.Response(id="x", model="m", created=1, choices=[wire_types.Choice(
        finish_reason="tool_calls", tool_calls=[
            wire_types.FunctionCall(id="c1", type="function", name="agents__spawn", arguments="{}"),
            wire_types.FunctionCall(id="c2", type="custom", name="agents__note", arguments="hi"),
            wire_types.FunctionCall(id="c3", type="function", name="plain", arguments="{}")])])
    output = translate_response_object(decoded, whole, request_id="r").output
    assert [(o.name, o.namespace) for o in output] == [  # type: ignore[union-attr]
        ("spawn", "agents"), ("note", "agents"), ("plain", UNSET)]

    events = ResponseEvents(decoded, request_id="r", created_at=5)
    streamed: list[Any] = [*events.opened(), *events.feed(chunk(tools=[tool(0, "{", id="c1", name="agents__sp")])),
                *events.feed(chunk(tools=[tool(0, "}", name="awn")])), *events.completed(None)]
    check_well_formed(streamed)
    done = [e.item for e in streamed if e.type == "response.output_item.done"]
    assert [(i.name, i.namespace, i.arguments) for i in done] == [("spawn", "agents", "{}")]
    assert msgspec.json.decode(msgspec.json.encode(done[0]))["namespace"] == "agents"


# --- reasoning and compaction, sealed --------------------------------------------------------------


def test_reasoning_is_an_item_before_the_answer_summarised_and_sealed_when_asked() -> None:
    whole = wire_types.Response(id="x", model="m", created=1, choices=[wire_types.Choice(
        content="4", reasoning="2 and 2 make 4", finish_reason="stop")])
    rs, message = translate_response_object(call(**CODEX_LIKE), whole, request_id="r", seal=seal).output
    assert isinstance(rs, ReasoningItemOut) and isinstance(message, MessageOut)
    assert [p.text for p in rs.summary] == [p.text for p in rs.content] == ["2 and 2 make 4"]
    assert isinstance(rs.encrypted_content, str)
    assert SEALER.open("reasoning", rs.encrypted_content, "p") == Sealed(text="2 and 2 make 4",
                                                                         provider="self_hosted", model="qwen3")
    plain, _ = translate_response_object(call(), whole, request_id="r", seal=seal).output
    assert isinstance(plain, ReasoningItemOut) and plain.summary == [] and plain.encrypted_content is UNSET
