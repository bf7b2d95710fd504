"""The Responses API, sans-I/O: a request decoded (ingress/oai/responses.py, responses_codec.py) and read as
the chat request it amounts to (ingress/oai/responses_to_chat.py), and chat chunks made into its events
(ingress/translate/responses.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from bad_requests import Bad
from bad_responses import BAD_RESPONSES
from hypothesis import given
from hypothesis import strategies as st
from msgspec import UNSET

from ingress.errors import InvalidRequest, UpstreamAnswered
from ingress.oai import chat_answers
from ingress.oai.chat import AssistantMessage, CustomGrammarFormat, SystemMessage, ToolMessage, UserMessage
from ingress.oai.responses import Call, HostedTool, Item, MessageItem, OutputText
from ingress.oai.responses_answers import (
    CompactionOut,
    CustomToolCallOut,
    ErrorOut,
    FunctionCallOut,
    IncompleteDetails,
    InputTokensDetails,
    MessageOut,
    OutputTextOut,
    OutputTokensDetails,
    ReasoningItemOut,
    RefusalOut,
    ResponseEvent,
    UsageOut,
)
from ingress.oai.responses_codec import decode_responses_request, decode_responses_request_forwarding
from ingress.oai.responses_to_chat import COMPACT, COMPACTED, as_chat, as_sent
from ingress.oai.sealing import Kind, Sealed, Sealer, new_key
from ingress.translate.responses import translate_response_object
from ingress.translate.responses_events import ResponseEvents
from ingress.wire import types as wire_types


def call(**fields: Any) -> Call:
    return decode_responses_request(msgspec.json.encode({"model": "m", "input": "hi", **fields}))


@pytest.mark.parametrize("bad", BAD_RESPONSES)
def test_bad_body_is_refused_naming_the_field(bad: Bad) -> None:
    with pytest.raises(InvalidRequest) as caught:
        as_chat(decode_responses_request(bad.body))
    assert (caught.value.param, caught.value.code) == (bad.param, bad.code)


# --- the request, as chat -------------------------------------------------------------------------


def test_calls_after_an_assistant_message_join_it_and_outputs_become_tool_messages() -> None:
    chat_request = as_chat(call(instructions="rules", input=[
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "let me look"},
        {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"},
        {"type": "custom_tool_call", "call_id": "b", "name": "g", "input": "free text"},
        {"type": "function_call_output", "call_id": "a", "output": "A"},
        {"type": "custom_tool_call_output", "call_id": "b", "output": "B"},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
    ]))
    system, user, assistant, out_a, out_b, second = chat_request.messages
    assert isinstance(system, SystemMessage) and system.content == "rules"
    assert isinstance(user, UserMessage) and user.content == "q"
    assert isinstance(assistant, AssistantMessage) and assistant.content == "let me look"
    assert [(c.id, c.type) for c in assistant.tool_calls or ()] == [("a", "function"), ("b", "custom")]
    assert isinstance(out_a, ToolMessage) and (out_a.tool_call_id, out_a.content) == ("a", "A")
    assert isinstance(out_b, ToolMessage) and out_b.tool_call_id == "b"
    assert isinstance(second, AssistantMessage) and second.content is None  # a call after tool output: a new turn
    assert [c.id for c in second.tool_calls or ()] == ["c"]


def test_an_earlier_answers_text_and_refusal_are_the_assistant_turn() -> None:
    [_, assistant] = as_chat(call(input=[
        {"role": "user", "content": "q"},
        {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed", "content": [
            {"type": "output_text", "text": "part one, ", "annotations": [{"type": "url_citation"}]},
            {"type": "output_text", "text": "part two"}, {"type": "refusal", "refusal": "no more"}]},
    ])).messages
    assert isinstance(assistant, AssistantMessage)
    assert (assistant.content, assistant.refusal) == ("part one, part two", "no more")


def test_logprobs_are_asked_by_include_or_by_top_logprobs() -> None:
    assert as_chat(call(include=["message.output_text.logprobs"])).logprobs is True
    assert as_chat(call(top_logprobs=3)).top_logprobs == 3
    assert as_chat(call(include=["reasoning.encrypted_content"])).logprobs is None


def test_a_stream_always_asks_the_service_for_usage() -> None:
    request = as_chat(call(stream=True))
    assert request.stream is True and request.stream_options is not None
    assert request.stream_options.include_usage is True
    assert as_chat(call()).stream_options is None


def test_allowed_tools_travel_in_the_chat_shape() -> None:
    tools = [{"type": "function", "name": "f"}, {"type": "custom", "name": "g"}]
    choice = as_chat(call(tools=tools, tool_choice={"type": "allowed_tools", "mode": "required", "tools": tools}))
    assert choice.tool_choice is not None and not isinstance(choice.tool_choice, str)
    assert choice.tool_choice.allowed_tools is not None
    assert [msgspec.json.decode(bytes(t)) for t in choice.tool_choice.allowed_tools.tools] == [
        {"type": "function", "function": {"name": "f"}}, {"type": "custom", "custom": {"name": "g"}}]


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


def chunk(content: str | None = None, *, refusal: str | None = None,
          tools: list[chat_answers.ToolCallDeltaOut] | None = None,
          finish: str | None = None) -> chat_answers.ChatCompletionChunk:
    delta = chat_answers.DeltaOut(content=content if content is not None else UNSET,
                                  refusal=refusal if refusal is not None else UNSET, tool_calls=tools or UNSET)
    choice = chat_answers.ChunkChoiceOut(index=0, delta=delta, finish_reason=finish)
    return chat_answers.ChatCompletionChunk(id="x", created=1, model="m", choices=[choice])


def tool(index: int, arguments: str, *, id: str | None = None,
         name: str | None = None) -> chat_answers.ToolCallDeltaOut:
    function = chat_answers.FunctionDeltaOut(name=name if name is not None else UNSET, arguments=arguments)
    return chat_answers.ToolCallDeltaOut(index=index, id=id if id is not None else UNSET,
                                         type="function" if id is not None else UNSET, function=function)


def run(chunks: list[chat_answers.ChatCompletionChunk], usage: wire_types.Usage | None = None) -> list[Any]:
    events = ResponseEvents(call(), request_id="r", created_at=5)
    out: list[Any] = events.opened()
    for c in chunks:
        out += events.feed(c)
    return out + events.completed(usage)


def check_well_formed(events: list[Any]) -> None:
    """What the SDK's accumulator insists on: numbered in order, an item added before its deltas and
    done after them, one lifecycle id, and the last event a whole response."""
    assert [e.sequence_number for e in events] == list(range(len(events)))
    open_items: set[int] = set()
    for e in events:
        if e.type == "response.output_item.added":
            assert e.output_index not in open_items
            open_items.add(e.output_index)
        elif e.type == "response.output_item.done":
            open_items.remove(e.output_index)
        elif hasattr(e, "output_index"):
            assert e.output_index in open_items, e
    assert not open_items
    assert {e.response.id for e in events if isinstance(e, ResponseEvent)} == {"resp_r"}


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

CODEX_FIRST_TURN = Path(__file__).resolve().parents[2] / "fixtures" / "codex" / "first_turn.json"


def test_codex_first_turn_is_served_and_what_only_openai_acts_on_is_named() -> None:
    body = CODEX_FIRST_TURN.read_bytes()  # Codex CLI 0.171's first request (-m gpt-4o), as it sent it
    decoded = decode_responses_request(body)
    assert decoded.hints == ["client_metadata", "input.internal_chat_message_metadata_passthrough"]
    assert decoded.hosted == [HostedTool("web_search", "tools[8]")]
    assert decoded.summary == "auto"
    chat_request = as_chat(decoded)
    names = [t.function.name for t in chat_request.tools or () if t.function is not None]
    assert names == ["exec_command", "write_stdin", "request_user_input", "view_image",
                     "multi_agent_v1__close_agent", "multi_agent_v1__resume_agent", "multi_agent_v1__send_input",
                     "multi_agent_v1__spawn_agent", "multi_agent_v1__wait_agent",
                     "get_goal", "create_goal", "update_goal"]
    assert decoded.namespaced["multi_agent_v1__spawn_agent"] == ("multi_agent_v1", "spawn_agent")
    assert chat_request.prompt_cache_key == json.loads(body)["prompt_cache_key"]
    assert [type(m).__name__ for m in chat_request.messages] == ["DeveloperMessage", "DeveloperMessage",
                                                                  "UserMessage", "UserMessage"]


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


def test_hints_name_what_only_openais_servers_act_on() -> None:
    decoded = call(client_metadata={"session_id": "s"}, reasoning={"effort": "low", "context": "all_turns"},
                   input=[{"type": "message", "role": "user", "content": "q",
                           "internal_chat_message_metadata_passthrough": {"turn_id": "t"}},
                          {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "s"}],
                           "encrypted_content": "gAAAA"}],
                   tools=[{"type": "web_search"}, {"type": "file_search", "vector_store_ids": ["v"]}])
    assert decoded.hints == ["client_metadata", "reasoning.context",
                             "input.internal_chat_message_metadata_passthrough", "input.reasoning"]
    assert decoded.hosted == [HostedTool("web_search", "tools[0]"), HostedTool("file_search", "tools[1]")]
    chat_request = as_chat(decoded)
    assert chat_request.tools is None and len(chat_request.messages) == 1
    assert call().hints == []


# --- reasoning and compaction, sealed --------------------------------------------------------------

SEALER = Sealer([("k1", new_key())])


def seal(kind: Kind, text: str, own: str | None = None) -> str:
    return SEALER.seal(kind, Sealed(text=text, provider="self_hosted", model="qwen3"))


def thinking(text: str) -> chat_answers.ChatCompletionChunk:
    delta = chat_answers.DeltaOut(reasoning_content=text)
    return chat_answers.ChatCompletionChunk(id="x", created=1, model="m",
                                            choices=[chat_answers.ChunkChoiceOut(index=0, delta=delta)])


CODEX_LIKE = {"reasoning": {"summary": "auto"}, "include": ["reasoning.encrypted_content"], "store": False}


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


def test_sealed_reasoning_goes_back_to_the_model_and_a_modified_one_is_refused() -> None:
    blob = seal("reasoning", "I should list the files")
    turn: list[dict[str, Any]] = [{"role": "user", "content": "q"},
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "s"}], "content": None,
             "encrypted_content": blob},
            {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "a.txt"}]
    chat_request = as_chat(call(input=turn), SEALER.open)
    assistant = chat_request.messages[1]
    assert isinstance(assistant, AssistantMessage) and assistant.reasoning_content == "I should list the files"
    assert call(input=turn).hints == []  # carried, so not named
    tampered = [*turn[:1], {**turn[1], "encrypted_content": blob[:-6] + "AAAAAA"}, *turn[2:]]
    with pytest.raises(InvalidRequest) as caught:
        as_chat(call(input=tampered), SEALER.open)
    assert caught.value.param == "input[1].encrypted_content"
    foreign = [*turn[:1], {**turn[1], "encrypted_content": "gAAAAABopenai"}, *turn[2:]]
    assert as_chat(call(input=foreign), SEALER.open).messages[1].reasoning_content is None  # type: ignore[union-attr]
    assert call(input=foreign).hints == ["input.reasoning"]


def test_a_compaction_is_asked_of_the_model_answered_sealed_and_read_back_in_place() -> None:
    asking = call(input=[{"role": "user", "content": "fix the bug"}, {"type": "compaction_trigger"}],
                  tools=[WEATHER_TOOL], **CODEX_LIKE)
    chat_request = as_chat(asking, SEALER.open)
    assert chat_request.tools is None and chat_request.messages[-1] == UserMessage(content=COMPACT)
    events = ResponseEvents(asking, request_id="r", created_at=5, seal=seal)
    out: list[Any] = [*events.opened(), *events.feed(chunk("the user wants ")), *events.feed(chunk("a fix")),
                      *events.completed(None)]
    check_well_formed(out)
    [item] = out[-1].response.output
    assert isinstance(item, CompactionOut) and [e.type for e in out][2:4] == ["response.output_item.added",
                                                                             "response.output_item.done"]
    whole = translate_response_object(asking, wire_types.Response(id="x", model="m", created=1, choices=[
        wire_types.Choice(content="the user wants a fix", finish_reason="stop")]), request_id="r", seal=seal)
    assert [type(o) for o in whole.output] == [CompactionOut]
    later = as_chat(call(input=[{"type": "compaction", "id": item.id, "encrypted_content": item.encrypted_content},
                                {"role": "user", "content": "go on"}]), SEALER.open)
    assert later.messages[0] == UserMessage(content=COMPACTED + "the user wants a fix")
    with pytest.raises(InvalidRequest) as caught:
        as_chat(call(input=[{"type": "compaction", "encrypted_content": "opaque"}]), SEALER.open)
    assert caught.value.param == "input[0].encrypted_content"
    with pytest.raises(InvalidRequest) as caught:
        call(input=[{"type": "compaction_trigger"}, {"role": "user", "content": "q"}])
    assert caught.value.param == "input[0].type"


WEATHER_TOOL = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}


def test_codex_default_models_first_turn_offers_its_tools_along_the_way() -> None:
    """Codex's own default model (no -m): its tools in an `additional_tools` item, a freeform `exec` tool
    with a Lark grammar (the Responses API's flat form), the effort in a `configuration_update` item."""
    body = (CODEX_FIRST_TURN.parent / "first_turn_default_model.json").read_bytes()
    decoded = decode_responses_request(body)
    assert decoded.hints == ["client_metadata", "reasoning.context",
                             "input.internal_chat_message_metadata_passthrough"]
    assert decoded.namespaced["functions__exec"] == ("functions", "exec")
    chat_request = as_chat(decoded)
    exec_tool = next(t for t in chat_request.tools or () if t.custom is not None)
    assert exec_tool.custom is not None and isinstance(exec_tool.custom.format, CustomGrammarFormat)
    assert exec_tool.custom.format.grammar.syntax == "lark"
    assert chat_request.reasoning_effort == "low"
    assert len(chat_request.tools or ()) == 12


def test_a_configuration_update_sets_the_effort_from_there_on() -> None:
    updated = call(reasoning={"effort": "high"}, input=[
        {"role": "user", "content": "q"}, {"type": "configuration_update", "reasoning": {"effort": "minimal"}}])
    assert as_chat(updated).reasoning_effort == "minimal"
    with pytest.raises(InvalidRequest) as caught:
        call(input=[{"role": "user", "content": "q"}, {"type": "additional_tools", "tools": [{"type": "nope"}]}])
    assert caught.value.param == "input[1].tools[0].type"


def test_sent_whole_to_openai_the_request_is_as_it_came_but_for_what_the_edge_sealed() -> None:
    """OpenAI cannot open what the edge sealed: a compaction goes as the summary it holds, the edge's own
    reasoning not at all; OpenAI's own sealed reasoning, and every other item and field, as they came."""
    body = msgspec.json.encode({"model": "m", "client_metadata": {"s": "1"}, "tools": [{"type": "web_search"}],
                                "input": [
        {"type": "compaction", "id": "cmp_1", "encrypted_content": seal("compaction", "the story so far")},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": seal("reasoning", "ours")},
        {"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": "gAAAA-openai"},
        {"role": "user", "content": "go on", "internal_chat_message_metadata_passthrough": {"t": 1}}]})
    sent, left_out = as_sent(decode_responses_request(body), body, SEALER.open)
    doc = msgspec.json.decode(sent)
    assert left_out and doc["client_metadata"] == {"s": "1"} and doc["tools"] == [{"type": "web_search"}]
    assert doc["input"] == [
        {"role": "user", "content": COMPACTED + "the story so far"},
        {"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": "gAAAA-openai"},
        {"role": "user", "content": "go on", "internal_chat_message_metadata_passthrough": {"t": 1}}]
    plain = msgspec.json.encode({"model": "m", "input": "hello"})
    assert as_sent(decode_responses_request(plain), plain) == (plain.decode(), False)


def test_a_continued_conversation_is_read_and_sent_whole() -> None:
    """The items of the response `previous_response_id` names come first, in the chat request and in what
    a route to OpenAI's own API is sent (which knows nothing of the edge's stored responses)."""
    prior: list[Item] = [MessageItem(role="user", content="one", id="msg_a"),
             MessageItem(role="assistant", content=[OutputText(text="uno", annotations=[])], id="msg_b")]
    body = msgspec.json.encode({"model": "m", "input": "two", "previous_response_id": "resp_1", "instructions": "New."})
    call = decode_responses_request_forwarding(body, lambda m: False, prior)[0]
    assert call.carried == 2 and len(call.items) == 3
    chat = as_chat(call)
    assert [(type(m).__name__, m.content) for m in chat.messages] == [
        ("SystemMessage", "New."), ("UserMessage", "one"), ("AssistantMessage", "uno"), ("UserMessage", "two")]
    sent, left_out = as_sent(call, body)
    doc = msgspec.json.decode(sent)
    assert not left_out and "previous_response_id" not in doc and doc["instructions"] == "New."
    assert [item.get("content") for item in doc["input"]] == [
        "one", [{"type": "output_text", "text": "uno", "annotations": []}], "two"]
    with pytest.raises(InvalidRequest) as refused:  # nothing carried in: the edge found no such response
        decode_responses_request_forwarding(body, lambda m: False)
    assert refused.value.param == "previous_response_id"
