"""The official `anthropic` SDK reads what the fake Anthropic (tests/support/fakes/anthropic.py) serves: its
whole answers, its event streams through `messages.stream()`'s accumulator, and its refusals as the
SDK's own error classes. The dialect's unit tests feed the same fixtures, so they are Anthropic's shapes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import anthropic
import pytest
from fakes.anthropic import FakeAnthropic, fixture, refuse, stream, whole

MODEL = "claude-sonnet-4-5"
ASK: list[anthropic.types.MessageParam] = [{"role": "user", "content": "Hello"}]


@pytest.fixture
async def fake() -> AsyncIterator[tuple[FakeAnthropic, anthropic.AsyncAnthropic]]:
    fake = FakeAnthropic()
    async with fake.running() as url:
        client = anthropic.AsyncAnthropic(base_url=url, api_key="sk-ant-test", max_retries=0)
        try:
            yield fake, client
        finally:
            await client.close()


async def test_a_whole_answer_with_its_cache_usage(fake: tuple[FakeAnthropic, anthropic.AsyncAnthropic]) -> None:
    server, client = fake
    message = await client.messages.create(model=MODEL, max_tokens=64, messages=ASK)
    assert [b.type for b in message.content] == ["text"]
    assert message.content[0].type == "text" and message.content[0].text == "Hi! My name is Claude."
    assert message.stop_reason == "end_turn"
    assert (message.usage.input_tokens, message.usage.cache_read_input_tokens,
            message.usage.cache_creation_input_tokens, message.usage.output_tokens) == (2095, 1800, 120, 12)
    assert server.received[0].body == {"model": MODEL, "max_tokens": 64, "messages": ASK}


async def test_a_whole_answer_with_tool_calls(fake: tuple[FakeAnthropic, anthropic.AsyncAnthropic]) -> None:
    server, client = fake
    server.play(whole("tool_use"))
    message = await client.messages.create(model=MODEL, max_tokens=64, messages=ASK)
    calls = [b for b in message.content if b.type == "tool_use"]
    assert [(c.name, c.input) for c in calls] == [
        ("get_weather", {"location": "San Francisco, CA", "unit": "celsius"}), ("get_time", {})]
    assert message.stop_reason == "tool_use"


async def test_a_whole_answer_with_thinking(fake: tuple[FakeAnthropic, anthropic.AsyncAnthropic]) -> None:
    server, client = fake
    server.play(whole("thinking"))
    message = await client.messages.create(model=MODEL, max_tokens=64, messages=ASK)
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert message.usage.output_tokens_details is not None
    assert message.usage.output_tokens_details.thinking_tokens == 280


async def test_the_text_stream_accumulates(fake: tuple[FakeAnthropic, anthropic.AsyncAnthropic]) -> None:
    _, client = fake
    async with client.messages.stream(model=MODEL, max_tokens=64, messages=ASK) as events:
        pieces = [text async for text in events.text_stream]
        final = await events.get_final_message()
    assert "".join(pieces) == "Hello! Nice to meet you é 🌍."
    assert final.content[0].type == "text" and final.content[0].text == "Hello! Nice to meet you é 🌍."
    assert (final.stop_reason, final.usage.input_tokens, final.usage.output_tokens) == ("end_turn", 25, 15)


async def test_the_tool_use_stream_accumulates(fake: tuple[FakeAnthropic, anthropic.AsyncAnthropic]) -> None:
    server, client = fake
    server.play(stream("tool_use"))
    async with client.messages.stream(model=MODEL, max_tokens=64, messages=ASK) as events:
        final = await events.get_final_message()
    assert [b.type for b in final.content] == ["text", "tool_use", "tool_use"]
    calls = [b for b in final.content if b.type == "tool_use"]
    assert [(c.id, c.name, c.input) for c in calls] == [
        ("toolu_01T1x1fJ34qAmk2tNTrN7Up6", "get_weather", {"location": "San Francisco, CA", "unit": "fahrenheit"}),
        ("toolu_01Hn4c5aVzMRYpR9Zc4kQ2uW", "get_time", {}),
    ]
    assert (final.stop_reason, final.usage.cache_read_input_tokens, final.usage.cache_creation_input_tokens) == (
        "tool_use", 300, 100)


async def test_the_thinking_stream_accumulates(fake: tuple[FakeAnthropic, anthropic.AsyncAnthropic]) -> None:
    server, client = fake
    server.play(stream("thinking"))
    async with client.messages.stream(model=MODEL, max_tokens=64, messages=ASK) as events:
        final = await events.get_final_message()
    thinking, text = final.content
    assert thinking.type == "thinking" and thinking.thinking.startswith("Let me solve this step by step")
    assert thinking.signature.startswith("EqQB")
    assert text.type == "text" and text.text == "27 * 453 = 12,231"
    # message_delta's counts are cumulative: the SDK takes them over message_start's
    assert (final.stop_reason, final.usage.output_tokens, final.usage.cache_read_input_tokens) == ("max_tokens", 310, 5)


async def test_a_cut_stream_has_no_ending(fake: tuple[FakeAnthropic, anthropic.AsyncAnthropic]) -> None:
    server, client = fake
    server.play(stream("cut"))
    async with client.messages.stream(model=MODEL, max_tokens=64, messages=ASK) as events:
        kinds = [event.type async for event in events]
    assert "message_stop" not in kinds and "message_delta" not in kinds
    assert kinds[0] == "message_start" and "text" in kinds


async def test_an_error_event_mid_stream_is_raised(fake: tuple[FakeAnthropic, anthropic.AsyncAnthropic]) -> None:
    server, client = fake
    server.play(stream("overloaded"))
    with pytest.raises(anthropic.APIStatusError) as raised:
        async with client.messages.stream(model=MODEL, max_tokens=64, messages=ASK) as events:
            async for _ in events:
                pass
    assert isinstance(raised.value.body, dict) and raised.value.body["error"]["type"] == "overloaded_error"


@pytest.mark.parametrize(("status", "error"), [
    (400, anthropic.BadRequestError), (401, anthropic.AuthenticationError), (429, anthropic.RateLimitError),
    (529, anthropic.OverloadedError),
])
async def test_refusals_are_the_sdks_errors(fake: tuple[FakeAnthropic, anthropic.AsyncAnthropic], status: int,
                                           error: type[anthropic.APIStatusError]) -> None:
    server, client = fake
    server.play(refuse(status, retry_after="7" if status == 429 else None))
    with pytest.raises(error) as raised:
        await client.messages.create(model=MODEL, max_tokens=64, messages=ASK)
    assert raised.value.status_code == status
    assert isinstance(raised.value.body, dict)
    assert raised.value.body["error"] == json.loads(fixture(f"error_{status}.json"))["error"]
    if status == 429:
        assert raised.value.response.headers["retry-after"] == "7"

