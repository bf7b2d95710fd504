"""A decoded Responses request read as the chat request it amounts to (ingress/oai/responses_to_chat.py),
and sent whole to OpenAI but for what the edge sealed (as_sent)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from responses_api import CODEX_FIRST_TURN, CODEX_LIKE, SEALER, WEATHER_TOOL, call, check_well_formed, chunk, seal

from ingress.errors import InvalidRequest
from ingress.oai.chat import AssistantMessage, CustomGrammarFormat, SystemMessage, ToolMessage, UserMessage
from ingress.oai.responses import Item, MessageItem, OutputText
from ingress.oai.responses_answers import CompactionOut
from ingress.oai.responses_codec import decode_responses_request, decode_responses_request_forwarding
from ingress.oai.responses_to_chat import COMPACT, COMPACTED, as_chat, as_sent
from ingress.translate.responses import translate_response_object
from ingress.translate.responses_events import ResponseEvents
from ingress.wire import types as wire_types

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


# --- reasoning and compaction, sealed --------------------------------------------------------------


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


def test_a_conversation_goes_to_openai_as_its_items_never_as_its_id() -> None:
    """A conversation the edge keeps (even one without items yet) is unknown to OpenAI's own API."""
    body = msgspec.json.encode({"model": "m", "input": "two", "conversation": "conv_1"})
    empty = msgspec.structs.replace(decode_responses_request_forwarding(body, lambda m: False, [])[0],
                                    conversation="conv_1")
    doc = msgspec.json.decode(as_sent(empty, body)[0])
    assert "conversation" not in doc and doc["input"] == [{"role": "user", "content": "two"}]
    prior: list[Item] = [MessageItem(role="user", content="one", id="msg_a")]
    carried = msgspec.structs.replace(decode_responses_request_forwarding(body, lambda m: False, prior)[0],
                                      conversation="conv_1")
    doc = msgspec.json.decode(as_sent(carried, body)[0])
    assert "conversation" not in doc and [item["content"] for item in doc["input"]] == ["one", "two"]


def test_a_background_request_goes_whole_as_a_stream_the_edge_runs() -> None:
    body = msgspec.json.encode({"model": "m", "input": "hi", "background": True, "store": True})
    doc = msgspec.json.decode(as_sent(decode_responses_request(body), body)[0])
    assert doc == {"model": "m", "input": [{"role": "user", "content": "hi"}], "store": True, "stream": True}
