"""A Responses request decoded and checked (ingress/oai/responses_codec.py): what the edge cannot do
refused by name, what only OpenAI's servers act on named in hints, hosted tools set apart."""

from __future__ import annotations

import json

import msgspec
import pytest
from bad_requests import Bad
from bad_responses import BAD_RESPONSES
from responses_api import CODEX_FIRST_TURN, call

from ingress.errors import InvalidRequest
from ingress.oai.responses import HostedTool, Item, MessageItem
from ingress.oai.responses_codec import decode_items, decode_responses_request, decode_responses_request_forwarding
from ingress.oai.responses_to_chat import as_chat


@pytest.mark.parametrize("bad", BAD_RESPONSES)
def test_bad_body_is_refused_naming_the_field(bad: Bad) -> None:
    with pytest.raises(InvalidRequest) as caught:
        as_chat(decode_responses_request(bad.body))
    assert (caught.value.param, caught.value.code) == (bad.param, bad.code)


@pytest.mark.parametrize("conversation", ["conv_1", {"id": "conv_1"}])
def test_a_conversation_is_refused_unless_the_edge_found_its_items(conversation: object) -> None:
    body = json.dumps({"model": "m", "input": "now", "conversation": conversation}).encode()
    with pytest.raises(InvalidRequest) as refused:  # an edge that keeps none (the HTTP path: ingress/state)
        decode_responses_request(body)
    assert (refused.value.param, refused.value.code) == ("conversation", "unsupported_parameter")
    earlier: list[Item] = [MessageItem(role="user", content="before", id="msg_1")]
    found, _ = decode_responses_request_forwarding(body, lambda _: False, earlier)
    assert found.carried == 1 and [getattr(i, "content", None) for i in found.items] == ["before", "now"]
    empty, _ = decode_responses_request_forwarding(body, lambda _: False, [])  # a conversation with no items yet
    assert empty.carried == 0 and len(empty.items) == 1


def test_items_on_their_own_are_decoded_and_refused_as_a_request_s() -> None:
    assert decode_items([msgspec.Raw(b'{"role": "user", "content": "x"}')], "items") == [
        MessageItem(role="user", content="x")]
    with pytest.raises(InvalidRequest) as refused:
        decode_items([msgspec.Raw(b'{"type": "item_reference", "id": "msg_1"}')], "items")
    assert refused.value.param == "items[0].type"


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
