"""anthropic.messages_to_chat: a Messages request read as the chat request it amounts to. What has a neutral
meaning maps onto chat's fields; processing hints are named as not sent; features only Anthropic serves are
refused naming the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from ingress.anthropic.messages_codec import decode_messages
from ingress.anthropic.messages_to_chat import Read, as_chat
from ingress.errors import InvalidRequest
from ingress.oai import chat

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "anthropic"


def read(**fields: Any) -> Read:
    body = {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": [{"role": "user", "content": "Hi"}], **fields}
    request, _ = decode_messages(msgspec.json.encode(body), beta=True)
    return as_chat(request)


def as_json(request: chat.ChatCompletionRequest) -> dict[str, Any]:
    return msgspec.json.decode(msgspec.json.encode(request))  # type: ignore[no-any-return]  # a JSON object


def test_sampling_and_limits_map_to_their_chat_fields() -> None:
    got = as_json(read(temperature=0.5, top_p=0.9, stop_sequences=["END", "STOP"], stream=True,
                       metadata={"user_id": "u-1"}, service_tier="standard_only").request)
    assert got == {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 64,
                   "service_tier": "default", "stop": ["END", "STOP"], "stream": True,
                   "stream_options": {"include_usage": True}, "temperature": 0.5, "top_p": 0.9, "user": "u-1"}


def test_system_blocks_and_a_system_message_mid_conversation_become_system_messages_in_order() -> None:
    got = as_json(read(system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
                       messages=[{"role": "user", "content": "a"}, {"role": "system", "content": "Now in French."},
                                 {"role": "user", "content": "b"}]).request)
    assert got["messages"] == [
        {"role": "system", "content": [{"type": "text", "text": "Be brief.",
                                        "prompt_cache_breakpoint": {"mode": "explicit"}}]},
        {"role": "user", "content": "a"}, {"role": "system", "content": "Now in French."},
        {"role": "user", "content": "b"}]


def test_a_tool_turn_maps_to_tool_calls_and_tool_messages_before_the_rest_of_the_user_turn() -> None:
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "I should call it.", "signature": "sig"},
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": True,
             "content": [{"type": "text", "text": "timeout"}]},
            {"type": "text", "text": "And Rome?"}]},
    ]
    tools = [{"name": "weather", "description": "Current weather", "strict": True,
              "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    got = read(messages=messages, tools=tools, tool_choice={"type": "any", "disable_parallel_tool_use": True})
    body = as_json(got.request)
    assert body["messages"][1:] == [
        {"role": "assistant", "content": "Let me look.",
         "tool_calls": [{"id": "toolu_1", "function": {"name": "weather", "arguments": '{"city":"Paris"}'}}]},
        {"role": "tool", "content": "18C", "tool_call_id": "toolu_1"},
        {"role": "tool", "content": [{"type": "text", "text": "Error: "}, {"type": "text", "text": "timeout"}],
         "tool_call_id": "toolu_2"},
        {"role": "user", "content": [{"type": "text", "text": "And Rome?"}]}]
    assert body["tools"] == [{"function": {"name": "weather", "description": "Current weather", "strict": True,
                                           "parameters": tools[0]["input_schema"]}}]
    assert body["tool_choice"] == "required" and body["parallel_tool_calls"] is False
    assert got.dropped == ["thinking"]  # the earlier thinking and its signature: not sent off Anthropic


@pytest.mark.parametrize(("choice", "expected"), [
    ({"type": "auto"}, "auto"), ({"type": "none"}, "none"),
    ({"type": "tool", "name": "weather"}, {"function": {"name": "weather"}}),
])
def test_tool_choice(choice: dict[str, Any], expected: object) -> None:
    tools = [{"name": "weather", "input_schema": {"type": "object"}}]
    assert as_json(read(tools=tools, tool_choice=choice).request)["tool_choice"] == expected


def test_images_and_documents_become_user_parts() -> None:
    content = [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
        {"type": "document", "title": "Spec", "source": {"type": "base64", "media_type": "application/pdf",
                                                         "data": "JVBERi0="}},
        {"type": "document", "context": "From the wiki", "source": {"type": "text", "media_type": "text/plain",
                                                                    "data": "Plain words."}},
        {"type": "text", "text": "Summarise."},
    ]
    parts = as_json(read(messages=[{"role": "user", "content": content}]).request)["messages"][0]["content"]
    assert parts == [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
        {"type": "text", "text": "Spec"},
        {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERi0=", "filename": "Spec"}},
        {"type": "text", "text": "From the wiki"}, {"type": "text", "text": "Plain words."},
        {"type": "text", "text": "Summarise."}]


@pytest.mark.parametrize(("fields", "effort"), [
    ({"thinking": {"type": "enabled", "budget_tokens": 1024}, "max_tokens": 8000}, "low"),
    ({"thinking": {"type": "enabled", "budget_tokens": 8000}, "max_tokens": 9000}, "medium"),
    ({"thinking": {"type": "enabled", "budget_tokens": 20000}, "max_tokens": 32000}, "high"),
    ({"thinking": {"type": "adaptive"}, "output_config": {"effort": "max"}}, "xhigh"),
    ({"thinking": {"type": "adaptive"}}, None),
    ({"thinking": {"type": "disabled"}}, None),
])
def test_thinking_becomes_a_reasoning_effort(fields: dict[str, Any], effort: str | None) -> None:
    assert read(**fields).request.reasoning_effort == effort


def test_a_json_schema_output_format_is_the_chat_response_format() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    got = as_json(read(output_config={"format": {"type": "json_schema", "schema": schema}}).request)
    assert got["response_format"] == {"type": "json_schema",
                                      "json_schema": {"name": "output", "schema": schema, "strict": True}}


def test_processing_hints_are_named_not_sent() -> None:
    got = read(context_management={"edits": [{"type": "clear_thinking_20251015"}]},
               system=[{"type": "text", "text": "x", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
               thinking={"type": "adaptive", "display": "summarized"})
    assert got.dropped == ["context_management", "thinking.display", "cache_control.ttl"]
    assert "context_management" not in as_json(got.request)


@pytest.mark.parametrize(("fields", "param"), [
    ({"mcp_servers": [{"type": "url", "url": "https://mcp.example.com", "name": "x"}]}, "mcp_servers"),
    ({"container": "container_1"}, "container"),
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools.0.type"),
    ({"messages": [{"role": "user", "content": [
        {"type": "document", "citations": {"enabled": True},
         "source": {"type": "text", "media_type": "text/plain", "data": "x"}}]}]}, "messages.0.content.0.citations"),
    ({"messages": [{"role": "user", "content": [
        {"type": "search_result", "source": "s", "title": "t", "content": [{"type": "text", "text": "x"}]}]}]},
     "messages.0.content.0.type"),
    ({"messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "file", "file_id": "file_1"}}]}]}, "messages.0.content.0.source.type"),
])
def test_features_only_anthropic_serves_are_refused_naming_the_field(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        read(**fields)
    assert refused.value.param == param and refused.value.status == 400


def test_an_agent_clis_first_turn_is_served_off_anthropic() -> None:
    body = (FIXTURES / "agent_first_turn.json").read_bytes()
    request, _ = decode_messages(body, beta=True)
    got = as_chat(request)
    sent = as_json(got.request)
    original = json.loads(body)
    assert [t["function"]["name"] for t in sent["tools"]] == [t["name"] for t in original["tools"]]
    assert [m["role"] for m in sent["messages"]] == ["system", "user", "system", "user"]
    assert sent["user"] == original["metadata"]["user_id"] and sent["stream"] is True
    assert "context_management" in got.dropped
