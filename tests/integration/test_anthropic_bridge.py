"""The whole way to a fake Anthropic: the `openai` SDK → the edge → a bridge with the Anthropic dialect
(its own service, over FlatBuffers) → the fake's Messages API, and every answer back."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import pytest
from fakes.anthropic import COUNTED, FakeAnthropic, refuse, stream, whole
from openai.types.chat import ChatCompletionMessageParam
from unit.anthropic.test_messages import EVERYTHING

from ingress.bridges.anthropic import DIALECT
from ingress.bridges.dialect import Target
from ingress.bridges.service import create_bridge_app
from ingress.serve.app import create_app, serve_app
from ingress.settings import Endpoint, Group, Route, Settings, Timeouts

GENEROUS = Timeouts(connect=5.0, first_byte=20.0, idle=20.0)
ASK: list[ChatCompletionMessageParam] = [{"role": "system", "content": "Be brief."},
                                         {"role": "user", "content": "Hello"}]


@dataclass
class Stack:
    anthropic: FakeAnthropic
    client: openai.AsyncOpenAI


@pytest.fixture
async def stack() -> AsyncIterator[Stack]:
    fake = FakeAnthropic()
    async with fake.running() as provider:
        bridge = create_bridge_app(DIALECT, Target(url=provider, api_key="sk-ant-test-key", max_tokens=256), GENEROUS)
        async with serve_app(bridge, "127.0.0.1", 0) as bridge_url, \
                serve_app(create_app(Settings(upstream=bridge_url, timeouts=GENEROUS)), "127.0.0.1", 0) as edge:
            client = openai.AsyncOpenAI(base_url=f"{edge}/v1", api_key="client-key", max_retries=0)
            try:
                yield Stack(fake, client)
            finally:
                await client.close()


async def test_an_answer_with_its_cached_tokens(stack: Stack) -> None:
    answer = await stack.client.chat.completions.create(model="claude-sonnet-4-5", messages=ASK)
    assert answer.choices[0].message.content == "Hi! My name is Claude."
    assert answer.choices[0].finish_reason == "stop"
    assert answer.usage is not None and answer.usage.prompt_tokens == 2095 + 1800 + 120
    assert answer.usage.prompt_tokens_details is not None and answer.usage.prompt_tokens_details.cached_tokens == 1800
    (sent,) = stack.anthropic.received
    assert sent.headers["x-api-key"] == "sk-ant-test-key" and sent.headers["anthropic-version"] == "2023-06-01"
    assert "client-key" not in json.dumps(dict(sent.headers))  # the client's key stays at the edge
    assert sent.body == {"model": "claude-sonnet-4-5", "max_tokens": 256,
                         "system": [{"type": "text", "text": "Be brief."}],
                         "messages": [{"role": "user", "content": [{"type": "text", "text": "Hello"}]}]}


async def test_a_streamed_answer_with_tool_calls(stack: Stack) -> None:
    stack.anthropic.play(stream("tool_use"))
    events = await stack.client.chat.completions.create(
        model="claude-sonnet-4-5", messages=ASK, stream=True, stream_options={"include_usage": True},
        tools=[{"type": "function", "function": {"name": "get_weather"}},
               {"type": "function", "function": {"name": "get_time"}}])
    text, finish, usage = "", None, None
    calls: dict[int, dict[str, str]] = {}
    async for chunk in events:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
            for d in choice.delta.tool_calls or []:
                call = calls.setdefault(d.index, {"id": "", "name": "", "arguments": ""})
                call["id"] = d.id or call["id"]
                if d.function is not None:
                    call["name"] += d.function.name or ""
                    call["arguments"] += d.function.arguments or ""
    assert text == "Okay, let's check the weather."
    assert [(c["id"], c["name"], json.loads(c["arguments"])) for _, c in sorted(calls.items())] == [
        ("toolu_01T1x1fJ34qAmk2tNTrN7Up6", "get_weather", {"location": "San Francisco, CA", "unit": "fahrenheit"}),
        ("toolu_01Hn4c5aVzMRYpR9Zc4kQ2uW", "get_time", {})]
    assert finish == "tool_calls"
    assert usage is not None and (usage.prompt_tokens, usage.completion_tokens) == (872, 89)
    assert stack.anthropic.received[0].body["stream"] is True


@pytest.mark.parametrize(("status", "error", "edge_status", "code"), [
    (400, openai.BadRequestError, 400, "invalid_request"),
    (401, openai.InternalServerError, 502, "upstream_auth_failed"),
    (429, openai.RateLimitError, 429, "rate_limit_exceeded"),
    (529, openai.InternalServerError, 503, "upstream_overloaded"),
])
async def test_the_providers_refusals(stack: Stack, status: int, error: type[openai.APIStatusError],
                                      edge_status: int, code: str) -> None:
    stack.anthropic.play(refuse(status, retry_after="7" if status in (429, 529) else None))
    with pytest.raises(error) as raised:
        await stack.client.chat.completions.create(model="claude-sonnet-4-5", messages=ASK)
    assert raised.value.status_code == edge_status
    assert raised.value.code == code
    if status in (429, 529):
        assert raised.value.response.headers["retry-after"] == "7"


async def test_an_overloaded_event_before_any_content_is_a_503_with_retry_after_as_a_529_is(stack: Stack) -> None:
    stack.anthropic.play(stream("overloaded_at_start"), refuse(529))
    for _ in range(2):  # the event in a 200 stream, then the HTTP 529 that named no wait
        with pytest.raises(openai.InternalServerError) as raised:
            await stack.client.chat.completions.create(model="claude-sonnet-4-5", messages=ASK, stream=True)
        assert (raised.value.status_code, raised.value.code) == (503, "upstream_overloaded")
        assert raised.value.response.headers["retry-after"] == "1"


async def test_a_stream_cut_by_the_provider_is_an_error_not_an_ending(stack: Stack) -> None:
    stack.anthropic.play(stream("cut"))
    events = await stack.client.chat.completions.create(model="claude-sonnet-4-5", messages=ASK, stream=True)
    text = ""
    with pytest.raises(openai.APIError):
        async for chunk in events:
            text += "".join(c.delta.content or "" for c in chunk.choices)
    assert text == "Hello there"


async def test_a_parameter_anthropic_cannot_honour_is_refused_before_any_call(stack: Stack) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        await stack.client.chat.completions.create(model="claude-sonnet-4-5", messages=ASK, seed=7)
    assert (raised.value.code, raised.value.param) == ("unsupported_parameter", "seed")
    assert stack.anthropic.received == []


async def test_embeddings_are_refused_clearly_as_anthropic_has_none(stack: Stack) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        await stack.client.embeddings.create(model="claude-sonnet-4-5", input="hello")
    assert raised.value.code == "unsupported_endpoint"
    assert "not served through the anthropic bridge (its API has none)" in raised.value.message
    assert stack.anthropic.received == []


# --- Anthropic's own API at the edge, to Anthropic: the request goes as the client sent it ------------


@dataclass
class MessagesStack:
    anthropic: FakeAnthropic
    edge: str


@pytest.fixture
async def messages_stack() -> AsyncIterator[MessagesStack]:
    """The edge with a route whose provider is Anthropic, in front of the bridge and the fake."""
    fake = FakeAnthropic()
    async with fake.running() as provider:
        bridge = create_bridge_app(DIALECT, Target(url=provider, api_key="sk-ant-test-key", max_tokens=256), GENEROUS)
        async with serve_app(bridge, "127.0.0.1", 0) as bridge_url:
            settings = Settings(groups={"anthropic": Group(endpoints=[Endpoint(url=bridge_url)])},
                                routes=(Route(group="anthropic", glob="claude-*", provider="anthropic",
                                              count_tokens="provider"),
                                        Route(group="anthropic", glob="edge-counted-*", provider="anthropic")),
                                timeouts=GENEROUS)
            async with serve_app(create_app(settings), "127.0.0.1", 0) as edge:
                yield MessagesStack(fake, edge)


BETAS = ["interleaved-thinking-2025-05-14", "context-management-2025-06-27", "fine-grained-tool-streaming-2025-05-14",
         "context-1m-2025-08-07", "token-efficient-tools-2025-02-19", "mcp-client-2025-04-04",
         "code-execution-2025-08-25", "files-api-2025-04-14"]


AGENT_FIRST_TURN = json.loads((Path(__file__).parents[1] / "fixtures" / "anthropic" / "agent_first_turn.json")
                              .read_text())


@pytest.mark.parametrize("request_sent", [EVERYTHING, AGENT_FIRST_TURN], ids=["every-field", "agent-first-turn"])
async def test_every_field_of_a_messages_request_reaches_anthropic_unchanged(messages_stack: MessagesStack,
                                                                             request_sent: dict[str, Any]) -> None:
    """Every field of the request type (server tools, MCP servers, citations, thinking with signatures,
    cache_control TTLs, context management...), and an agent CLI's first turn, sent through the edge and
    the bridge: Anthropic receives the very request, with the client's beta flags and version."""
    messages_stack.anthropic.play(whole("text"))
    sent = {**request_sent, "model": "claude-opus-4-6", "stream": False}
    async with aiohttp.ClientSession() as http, http.post(
            f"{messages_stack.edge}/v1/messages?beta=true", json=sent,
            headers={"x-api-key": "client-key", "anthropic-version": "2023-06-01",
                     "anthropic-beta": ",".join(BETAS)}) as answer:
        assert answer.status == 200, await answer.text()
        message = await answer.json()
    assert message["type"] == "message" and message["content"][0]["text"] == "Hi! My name is Claude."
    (received,) = messages_stack.anthropic.received
    assert received.body == sent
    assert received.headers["anthropic-beta"] == ",".join(BETAS)
    assert received.headers["anthropic-version"] == "2023-06-01"
    assert received.headers["x-api-key"] == "sk-ant-test-key"  # the bridge's key; the client's stays at the edge


async def test_thinking_round_trips_over_two_turns_with_its_signature(messages_stack: MessagesStack) -> None:
    """The anthropic SDK through the edge: a thinking answer, sent back in the next turn with its
    signature, reaches Anthropic as the client sent it; cache_control with a 1h TTL kept."""
    messages_stack.anthropic.play(whole("thinking"), whole("text"))
    async with anthropic.AsyncAnthropic(base_url=messages_stack.edge, api_key="client-key", max_retries=0) as client:
        first = await client.messages.create(
            model="claude-sonnet-4-5", max_tokens=2048, thinking={"type": "enabled", "budget_tokens": 1024},
            system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
            messages=[{"role": "user", "content": "Are there infinitely many primes?"}])
        thinking = [b for b in first.content if b.type == "thinking"]
        assert thinking and thinking[0].signature
        earlier: Any = [b.model_dump(exclude_none=True) for b in first.content]  # the answer's blocks, as sent back
        turns: list[anthropic.types.MessageParam] = [
            {"role": "user", "content": "Are there infinitely many primes?"},
            {"role": "assistant", "content": earlier},
            {"role": "user", "content": "And twin primes?"}]
        await client.messages.create(model="claude-sonnet-4-5", max_tokens=2048, messages=turns,
                                     thinking={"type": "enabled", "budget_tokens": 1024})
    second = messages_stack.anthropic.received[1].body
    assert second["messages"][1]["content"][0] == {"type": "thinking", "thinking": thinking[0].thinking,
                                                   "signature": thinking[0].signature}
    assert messages_stack.anthropic.received[0].body["system"][0]["cache_control"] == {"type": "ephemeral",
                                                                                       "ttl": "1h"}


async def test_count_tokens_asks_anthropic_where_the_route_says_so(messages_stack: MessagesStack) -> None:
    """count_tokens = "provider": Anthropic's own count, of the request as the client sent it; elsewhere
    the edge's tokenizer, and Anthropic is not asked."""
    ask: list[anthropic.types.MessageParam] = [{"role": "user", "content": "How many tokens is this?"}]
    tools: list[anthropic.types.ToolParam] = [{"name": "get_weather", "input_schema": {"type": "object"}}]
    async with anthropic.AsyncAnthropic(base_url=messages_stack.edge, api_key="client-key", max_retries=0) as client:
        counted = await client.messages.count_tokens(model="claude-sonnet-4-5", messages=ask, tools=tools,
                                                     system="Be brief.")
        assert counted.input_tokens == COUNTED
        (sent,) = messages_stack.anthropic.received
        assert sent.body == {"model": "claude-sonnet-4-5", "messages": ask, "tools": tools, "system": "Be brief."}
        assert sent.headers["x-api-key"] == "sk-ant-test-key"
        by_edge = await client.messages.count_tokens(model="edge-counted-1", messages=ask)
        assert 0 < by_edge.input_tokens != COUNTED and len(messages_stack.anthropic.received) == 1
