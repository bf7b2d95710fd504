"""Every request buffer the edge sends upstream passes the C++ Verifier and carries the whole request."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Literal

import aiohttp
import msgspec
import openai
import pytest
from recording import recording_demo

from ingress import wire
from ingress.anthropic.messages_codec import decode_messages
from ingress.anthropic.messages_to_chat import as_chat as messages_as_chat
from ingress.encoding.passport import RequestMeta, compute_passport
from ingress.encoding.reading import decode_request
from ingress.oai.codec import decode_chat_request
from ingress.oai.responses_codec import decode_responses_request
from ingress.oai.responses_to_chat import as_chat
from ingress.serve.app import create_app, serve_app
from ingress.settings import Endpoint, Group, Route, Settings

pytestmark = pytest.mark.cxx

CITY = {"type": "object", "properties": {"city": {"type": "string"}}}
TOOLS = [{"type": "function",
          "function": {"name": "get_weather", "description": "Weather by city", "parameters": CITY}}]
REQUESTS: list[dict[str, object]] = [
    {"messages": [{"role": "user", "content": "hello"}]},
    {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "héllo ✓ 🌍"}],
     "temperature": 0.3, "top_p": 0.9, "max_tokens": 7, "seed": -12, "stop": ["\n", "END"], "n": 2,
     "presence_penalty": -1.5, "frequency_penalty": 2.0, "logit_bias": {"50256": -100}, "user": "u-1",
     "metadata": {"team": "search"}, "response_format": {"type": "json_object"}},
    {"messages": [{"role": "user", "content": [{"type": "text", "text": "what is this?"},
                                               {"type": "image_url",
                                                "image_url": {"url": "https://x/y.png", "detail": "low"}}]}],
     "max_completion_tokens": 100},
    {"messages": [{"role": "user", "content": "call get_weather for Paris"}], "tools": TOOLS, "tool_choice": "auto",
     "parallel_tool_calls": False},
    {"messages": [{"role": "user", "content": "weather?"},
                  {"role": "assistant", "content": None, "tool_calls": [
                      {"id": "call_1", "type": "function",
                       "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
                  {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}],
     "tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
    {"messages": [{"role": "developer", "content": "json only"}, {"role": "user", "content": "x"}],
     "response_format": {"type": "json_schema", "json_schema": {"name": "out", "strict": True,
                                                               "schema": {"type": "object", "properties": {}}}}},
]


@pytest.fixture
async def recorded() -> AsyncIterator[tuple[str, list[bytes]]]:
    bodies: list[bytes] = []
    demo = recording_demo(bodies)
    async with (
        serve_app(demo, "127.0.0.1", 0) as upstream,
        serve_app(create_app(Settings(upstream=upstream)), "127.0.0.1", 0) as edge,
    ):
        yield edge, bodies


@pytest.mark.parametrize("stream", [False, True])
async def test_every_emitted_request_verifies_and_round_trips(recorded: tuple[str, list[bytes]], cxx_verifier: object,
                                                              stream: bool) -> None:
    edge, bodies = recorded
    client = openai.AsyncOpenAI(base_url=f"{edge}/v1", api_key="sk-test", max_retries=0)
    sent = []
    for extra in REQUESTS:
        body = {"model": "ingress-demo", **extra}
        if stream:
            body |= {"stream": True, "stream_options": {"include_usage": True}}
        sent.append(body)
        if stream:
            async for _ in await client.chat.completions.create(**body):  # type: ignore[call-overload]
                pass
        else:
            await client.chat.completions.create(**body)  # type: ignore[call-overload]
    await client.close()

    assert len(bodies) == len(REQUESTS)
    for body, buf in zip(sent, bodies, strict=True):
        assert cxx_verifier.verify("request", buf), body  # type: ignore[attr-defined]
        expected = decode_chat_request(msgspec.json.encode(body))
        assert msgspec.json.encode(decode_request(buf)) == msgspec.json.encode(expected)
        view = wire.read_request(buf)
        assert view.ModelName() == b"ingress-demo"
        assert view.Stream() is stream
        assert view.Passport().KeyId() is not None  # the SDK's key, hashed
        assert b"sk-test" not in buf


RESPONSES: list[dict[str, object]] = [
    {"input": "hello", "instructions": "be brief", "max_output_tokens": 9, "temperature": 0.2},
    {"input": [{"role": "user", "content": [{"type": "input_text", "text": "look"},
                                            {"type": "input_image", "image_url": "https://x/y.png"}]},
               {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
               {"type": "function_call_output", "call_id": "c1", "output": "sunny"}],
     "tools": [{"type": "function", "name": "get_weather", "parameters": CITY}], "tool_choice": "auto",
     "text": {"format": {"type": "json_schema", "name": "out", "schema": {"type": "object"}}},
     "include": ["message.output_text.logprobs"], "top_logprobs": 2, "reasoning": {"effort": "low"}},
]


@pytest.mark.parametrize("stream", [False, True])
async def test_every_emitted_responses_request_verifies_as_the_chat_request_it_amounts_to(
        recorded: tuple[str, list[bytes]], cxx_verifier: object, stream: bool) -> None:
    edge, bodies = recorded
    async with openai.AsyncOpenAI(base_url=f"{edge}/v1", api_key="sk-test", max_retries=0) as client:
        sent = []
        for extra in RESPONSES:
            body = {"model": "ingress-demo", "stream": stream, **extra}
            sent.append(body)
            if stream:
                async for _ in await client.responses.create(**body):  # type: ignore[call-overload]
                    pass
            else:
                await client.responses.create(**body)  # type: ignore[call-overload]
    assert len(bodies) == len(RESPONSES)
    for body, buf in zip(sent, bodies, strict=True):
        assert cxx_verifier.verify("request", buf), body  # type: ignore[attr-defined]
        expected = as_chat(decode_responses_request(msgspec.json.encode(body)))
        assert msgspec.json.encode(decode_request(buf)) == msgspec.json.encode(expected)
        assert wire.read_request(buf).Stream() is stream


MESSAGES: list[dict[str, object]] = [
    {"max_tokens": 32, "system": "be brief", "messages": [{"role": "user", "content": "hello"}], "temperature": 0.2},
    {"max_tokens": 64, "stop_sequences": ["END"], "metadata": {"user_id": "u-1"},
     "tools": [{"name": "get_weather", "description": "Weather by city", "input_schema": CITY}],
     "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
     "messages": [{"role": "user", "content": [
         {"type": "text", "text": "what is this?", "cache_control": {"type": "ephemeral"}},
         {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]},
         {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                            "input": {"city": "Paris"}}]},
         {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}]}]},
]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("stream", [False, True])
async def test_every_emitted_messages_request_verifies_as_the_chat_request_it_amounts_to(
        cxx_verifier: object, stream: bool, provider: Literal["openai", "anthropic"]) -> None:
    """Anthropic's Messages requests: their chat reading, and bound for Anthropic the request as sent too."""
    bodies: list[bytes] = []
    async with serve_app(recording_demo(bodies), "127.0.0.1", 0) as upstream:
        settings = Settings(groups={"demo": Group(endpoints=[Endpoint(url=upstream)])},
                            routes=(Route(group="demo", model="claude-sonnet-4-5", provider=provider),))
        async with serve_app(create_app(settings), "127.0.0.1", 0) as edge, aiohttp.ClientSession() as http:
            sent = []
            for extra in MESSAGES:
                body = {"model": "claude-sonnet-4-5", **extra, **({"stream": True} if stream else {})}
                sent.append(body)
                async with http.post(f"{edge}/v1/messages", data=msgspec.json.encode(body),
                                     headers={"x-api-key": "sk-test", "content-type": "application/json"}) as answer:
                    assert answer.status == 200, await answer.text()
                    await answer.read()
    assert len(bodies) == len(MESSAGES)
    for body, buf in zip(sent, bodies, strict=True):
        assert cxx_verifier.verify("request", buf), body  # type: ignore[attr-defined]
        request, _ = decode_messages(msgspec.json.encode(body))
        expected = messages_as_chat(request).request
        assert msgspec.json.encode(decode_request(buf)) == msgspec.json.encode(expected)
        view = wire.read_request(buf)
        assert view.Stream() is stream
        whole = view.AnthropicJson()  # bound for Anthropic, the request as sent, byte for byte
        assert whole == (msgspec.json.encode(body) if provider == "anthropic" else None)


async def test_a_cache_affine_routes_requests_carry_the_prefix_chain_and_verify(cxx_verifier: object) -> None:
    """Behind a cache-affine group every request's passport carries its prefix hash chain: chat,
    Responses, Messages, legacy completions and embeddings alike, each through the C++ Verifier."""
    bodies: list[bytes] = []
    async with serve_app(recording_demo(bodies), "127.0.0.1", 0) as upstream:
        group = Group(endpoints=[Endpoint(url=upstream)], balance="cache_affine")
        settings = Settings(groups={"demo": group}, routes=(Route(group="demo", model="ingress-demo"),))
        async with (serve_app(create_app(settings), "127.0.0.1", 0) as edge,
                    openai.AsyncOpenAI(base_url=f"{edge}/v1", api_key="sk-test", max_retries=0) as client,
                    aiohttp.ClientSession() as http):
            for extra in REQUESTS:
                await client.chat.completions.create(model="ingress-demo", **extra)  # type: ignore[call-overload]
            await client.responses.create(model="ingress-demo", **RESPONSES[1])  # type: ignore[call-overload]
            async with http.post(f"{edge}/v1/messages", json={"model": "ingress-demo", **MESSAGES[1]},
                                 headers={"x-api-key": "sk-test"}) as answer:
                assert answer.status == 200, await answer.text()
            await client.completions.create(model="ingress-demo", prompt=["Once upon a time", "x" * 3000])
            await client.embeddings.create(model="ingress-demo", input=[[1, 2, 3], [4, 5]])
    assert len(bodies) == len(REQUESTS) + 4
    for buf in bodies[:-1]:
        assert cxx_verifier.verify("request", buf)  # type: ignore[attr-defined]
        passport = wire.read_request_data(buf).passport
        assert passport is not None and passport.prefix_blocks
        assert 0 <= passport.conversation_block < len(passport.prefix_blocks)
    for buf, extra in zip(bodies, REQUESTS, strict=False):  # a chat request's chain is its decoded request's
        read = wire.read_request_data(buf).passport
        assert read is not None
        decoded = decode_chat_request(msgspec.json.encode({"model": "ingress-demo", **extra}))
        assert read.prefix_blocks == compute_passport(decoded, RequestMeta(), blocks=True).prefix_blocks
    assert cxx_verifier.verify("embedding_request", bodies[-1])  # type: ignore[attr-defined]
    embedding = wire.read_embedding_request(bodies[-1]).passport
    assert embedding is not None and embedding.prefix_blocks
