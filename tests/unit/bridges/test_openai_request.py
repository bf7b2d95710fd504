"""The engine request's body for an OpenAI-compatible engine (ingress/bridges/openai_request.py), built
through the dialect: the route's model, the target's key, usage always asked of a stream, engine extras,
the tool types the Structs omit."""

from __future__ import annotations

import msgspec

from ingress.bridges.dialect import Target
from unit.bridges.test_openai import DIALECT, HELLO, TARGET, chat_buffer, sent


def test_a_chat_request_goes_to_chat_completions_with_the_routes_model_and_the_targets_key() -> None:
    call = DIALECT.build(chat_buffer(HELLO, model_name="Qwen/Qwen3-8B"), TARGET)
    assert call.request.path == "/v1/chat/completions"
    assert call.request.stream is False
    assert call.request.headers["authorization"] == "Bearer sk-bridge-key"
    assert call.request.headers["content-type"] == "application/json"
    assert msgspec.json.decode(call.request.body) == {"model": "Qwen/Qwen3-8B",
                                                      "messages": [{"role": "user", "content": "hi"}]}


def test_no_key_no_authorization_even_from_the_targets_static_headers() -> None:
    target = Target(url="http://127.0.0.1:8000", headers={"Authorization": "Bearer leaked", "X-Org": "o"})
    headers = DIALECT.build(chat_buffer(HELLO), target).request.headers
    assert "authorization" not in headers
    assert headers["x-org"] == "o"


def test_a_stream_always_asks_for_usage_and_keeps_the_clients_stream_options() -> None:
    body = sent(chat_buffer({**HELLO, "stream": True}))
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    asked = sent(chat_buffer({**HELLO, "stream": True, "stream_options": {"include_obfuscation": False}}))
    assert asked["stream_options"] == {"include_obfuscation": False, "include_usage": True}


def test_engine_extras_merge_at_the_top_level_and_never_replace_an_openai_field() -> None:
    body = sent(chat_buffer({**HELLO, "temperature": 0.5, "stream": True},
                            extras={"top_k": 20, "chat_template_kwargs": {"enable_thinking": False},
                                    "model": "other", "temperature": 2, "stream_options": {"x": 1}, "seed": 9}))
    assert body["top_k"] == 20
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert body["model"] == "m"
    assert body["temperature"] == 0.5
    assert body["stream_options"] == {"include_usage": True}
    assert "seed" not in body  # an OpenAI field the client did not set is not the extras' either


def test_tool_types_the_structs_omit_are_sent_as_openai_requires() -> None:
    body = sent(chat_buffer({
        "model": "m",
        "messages": [{"role": "user", "content": "weather?"},
                     {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                                                           "function": {"name": "get", "arguments": "{}"}}]},
                     {"role": "tool", "tool_call_id": "c1", "content": "sunny"}],
        "tools": [{"type": "function", "function": {"name": "get", "parameters": {"type": "object"}}}],
        "tool_choice": {"type": "function", "function": {"name": "get"}},
    }))
    assert body["tools"] == [{"type": "function", "function": {"name": "get", "parameters": {"type": "object"}}}]
    assert body["messages"][1]["tool_calls"][0]["type"] == "function"
    assert body["tool_choice"] == {"type": "function", "function": {"name": "get"}}
