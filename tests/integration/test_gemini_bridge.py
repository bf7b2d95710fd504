"""The whole way to a fake Gemini: the `openai`, `anthropic` and `google-genai` SDKs → the edge → a bridge with
the Gemini dialect (its own service, over FlatBuffers) → the fake's generateContent, and every answer back.
A Gemini client's request travels whole (Google's built-in tools, thought signatures as sent); a chat client's
tool call round-trips with its call's thought signature. Embeddings, from an OpenAI client or a Google one, go
to the fake's batchEmbedContents. Every buffer the edge sends passes the C++ Verifier."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anthropic
import openai
import pytest
from aiohttp import web
from fakes.gemini import COUNTED, FakeGemini, fake_embedding, fixture, refuse, stream, whole
from google import genai
from google.genai import types
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam

from ingress.bridges.dialect import Target
from ingress.bridges.gemini import DIALECT
from ingress.bridges.service import create_bridge_app
from ingress.serve.app import create_app, serve_app
from ingress.settings import Endpoint, Group, Route, Settings, Timeouts

pytestmark = [pytest.mark.cxx,
              pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession:DeprecationWarning")]

GENEROUS = Timeouts(connect=5.0, first_byte=20.0, idle=20.0)
MODEL = "gemini-2.5-flash"
CALL_SIGNATURE = "+vv8IGNhbGwgc2lnbmF0dXJlIP/vAAAAAAA="
THOUGHT_SIGNATURE = "+vv8/f7/++++IHRob3VnaHQtMSBzaWduYXR1cmX//g=="
WEATHER: ChatCompletionToolParam = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}


@dataclass
class Stack:
    gemini: FakeGemini
    edge: str


@pytest.fixture
async def stack(cxx_verifier: Any) -> AsyncIterator[Stack]:
    fake = FakeGemini()
    bodies: list[bytes] = []

    @web.middleware
    async def record(request: web.Request,
                     handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        bodies.append(await request.read())
        return await handler(request)

    async with fake.running() as provider:
        bridge = create_bridge_app(DIALECT, Target(url=provider, api_key="AIza-bridge-key"), GENEROUS)
        bridge.middlewares.append(record)
        async with serve_app(bridge, "127.0.0.1", 0) as bridge_url:
            settings = Settings(groups={"gemini": Group(endpoints=[Endpoint(url=bridge_url)])},
                                routes=(Route(group="gemini", glob="gemini-*", provider="gemini",
                                              count_tokens="provider"),), timeouts=GENEROUS)
            async with serve_app(create_app(settings), "127.0.0.1", 0) as edge:
                yield Stack(fake, edge)
    assert all(cxx_verifier.verify("embedding_request" if buf[4:8] == b"LGEQ" else "request", buf) for buf in bodies)


def _bytes(signature: str) -> bytes:
    return base64.urlsafe_b64decode(signature.replace("+", "-").replace("/", "_"))


def _genai(url: str) -> genai.Client:
    return genai.Client(api_key="client-key", http_options=types.HttpOptions(base_url=url))


def _openai(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="client-key", max_retries=0)


async def test_an_openai_client_served_by_gemini(stack: Stack) -> None:
    async with _openai(stack.edge) as client:
        answer = await client.chat.completions.create(model=MODEL, messages=[
            {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}])
    assert answer.choices[0].message.content == "Hello from Gemini." and answer.choices[0].finish_reason == "stop"
    assert answer.usage is not None and (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (12, 5)
    (sent,) = stack.gemini.received
    assert (sent.model, sent.method) == (MODEL, "generateContent")
    assert sent.headers["x-goog-api-key"] == "AIza-bridge-key"  # the bridge's; the client's stays at the edge
    assert sent.body == {"systemInstruction": {"parts": [{"text": "Be brief."}]},
                         "contents": [{"role": "user", "parts": [{"text": "Hello"}]}]}


async def test_a_tool_call_round_trips_with_its_thought_signature(stack: Stack) -> None:
    stack.gemini.play(stream("tool_call"), whole("text"))
    ask: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Weather in Paris?"}]
    async with _openai(stack.edge) as client:
        events = await client.chat.completions.create(model=MODEL, messages=ask, tools=[WEATHER], stream=True)
        calls: dict[int, dict[str, str]] = {}
        finish = None
        async for chunk in events:
            for choice in chunk.choices:
                finish = choice.finish_reason or finish
                for d in choice.delta.tool_calls or []:
                    call = calls.setdefault(d.index, {"id": "", "name": "", "arguments": ""})
                    call["id"] += d.id or ""
                    call["name"] += (d.function.name or "") if d.function else ""
                    call["arguments"] += (d.function.arguments or "") if d.function else ""
        assert finish == "tool_calls" and [c["name"] for c in calls.values()] == ["get_weather", "get_time"]
        turn: list[ChatCompletionMessageParam] = [*ask, {"role": "assistant", "tool_calls": [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in calls.values()]}]
        turn += [{"role": "tool", "tool_call_id": c["id"], "content": "sunny"} for c in calls.values()]
        await client.chat.completions.create(model=MODEL, messages=turn, tools=[WEATHER])
    first, second = stack.gemini.received
    assert first.method == "streamGenerateContent" and first.query == {"alt": "sse"}
    assert second.body["contents"][1] == {"role": "model", "parts": [
        {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": CALL_SIGNATURE},
        {"functionCall": {"name": "get_time", "args": {}}}]}
    assert second.body["contents"][2]["parts"] == [
        {"functionResponse": {"name": "get_weather", "response": {"output": "sunny"}}},
        {"functionResponse": {"name": "get_time", "response": {"output": "sunny"}}}]


async def test_an_anthropic_client_served_by_gemini_sees_the_thinking(stack: Stack) -> None:
    stack.gemini.play(whole("thinking"))
    async with anthropic.AsyncAnthropic(base_url=stack.edge, api_key="client-key", max_retries=0) as client:
        message = await client.messages.create(model=MODEL, max_tokens=2048,
                                               thinking={"type": "enabled", "budget_tokens": 1024},
                                               messages=[{"role": "user", "content": "Infinitely many primes?"}])
    kinds = [b.type for b in message.content]
    assert kinds == ["thinking", "text"] and message.stop_reason == "end_turn"
    assert message.content[0].signature == THOUGHT_SIGNATURE  # type: ignore[union-attr]
    assert stack.gemini.received[0].body["generationConfig"]["thinkingConfig"] == {"thinkingBudget": 1024,
                                                                                    "includeThoughts": True}


async def test_a_gemini_client_request_travels_whole_and_its_signature_round_trips(stack: Stack) -> None:
    """google-genai with Google's own search tool and thoughts: the request reaches Google as sent; the model
    turn it sends back next carries the thought signature on the part that had it."""
    stack.gemini.play(whole("thinking"), whole("text"))
    config = types.GenerateContentConfig(tools=[types.Tool(google_search=types.GoogleSearch())],
                                         thinking_config=types.ThinkingConfig(include_thoughts=True))
    client = _genai(stack.edge)
    first = await client.aio.models.generate_content(model=MODEL, contents="Infinitely many primes?", config=config)
    assert first.text == "Yes: there are infinitely many primes."
    assert first.usage_metadata is not None and first.usage_metadata.thoughts_token_count == 41
    assert first.candidates and first.candidates[0].content is not None
    turns = [types.Content(role="user", parts=[types.Part(text="Infinitely many primes?")]),
             first.candidates[0].content, types.Content(role="user", parts=[types.Part(text="And twin primes?")])]
    await client.aio.models.generate_content(model=MODEL, contents=turns, config=config)
    one, two = stack.gemini.received
    assert one.body["tools"] == [{"googleSearch": {}}]  # refused on any other route; sent on to Google
    parts = two.body["contents"][1]["parts"]
    # the SDK holds a signature as bytes and writes it back URL-safe, as proto JSON reads either alphabet
    assert [_bytes(p["thoughtSignature"]) for p in parts if p.get("thoughtSignature")] == [_bytes(THOUGHT_SIGNATURE)]


async def test_a_gemini_client_streams_and_counts_through_the_bridge(stack: Stack) -> None:
    stack.gemini.play(stream("text"))
    client = _genai(stack.edge)
    text = "".join([c.text or "" async for c in await client.aio.models.generate_content_stream(
        model=MODEL, contents="Hello")])
    assert text == "Hello from Gemini."
    counted = await client.aio.models.count_tokens(model=MODEL, contents="How many tokens is this?")
    assert counted.total_tokens == COUNTED
    streamed, count = stack.gemini.received
    assert streamed.method == "streamGenerateContent" and count.method == "countTokens"
    assert count.body == {"contents": [{"parts": [{"text": "How many tokens is this?"}], "role": "user"}]}


@pytest.mark.parametrize(("status", "name", "error", "edge_status"), [
    (400, "400", openai.BadRequestError, 400),
    (400, "400_key", openai.InternalServerError, 502),
    (429, "429", openai.RateLimitError, 429),
    (503, "503", openai.InternalServerError, 503),
])
async def test_googles_refusals(stack: Stack, status: int, name: str, error: type[openai.APIStatusError],
                                edge_status: int) -> None:
    stack.gemini.play(refuse(status, name))
    async with _openai(stack.edge) as client:
        with pytest.raises(error) as raised:
            await client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}])
    assert raised.value.status_code == edge_status
    if status == 429:
        assert raised.value.response.headers["retry-after"] == "37"


def test_the_sdk_reads_every_fixture_the_fake_serves() -> None:
    for name in ("text", "thinking", "tool_call"):
        types.GenerateContentResponse.model_validate_json(fixture(f"{name}.json"))
        for line in fixture(f"{name}.sse").split(b"\r\n\r\n"):
            if line:
                types.GenerateContentResponse.model_validate(json.loads(line.removeprefix(b"data: ")))


# --- embeddings ---------------------------------------------------------------------------------------

EMBEDDER = "gemini-embedding-001"


async def test_an_openai_clients_embeddings_are_googles_batch_embed_contents(stack: Stack) -> None:
    async with _openai(stack.edge) as client:
        made = await client.embeddings.create(model=EMBEDDER, input=["first text", "second"], dimensions=8,
                                              encoding_format="float")
    assert [d.embedding for d in made.data] == [fake_embedding(0, 8), fake_embedding(1, 8)]
    (sent,) = stack.gemini.received
    assert (sent.model, sent.method, sent.headers["x-goog-api-key"]) == (EMBEDDER, "batchEmbedContents",
                                                                        "AIza-bridge-key")
    assert sent.body == {"requests": [
        {"model": f"models/{EMBEDDER}", "content": {"parts": [{"text": text}]}, "outputDimensionality": 8}
        for text in ("first text", "second")]}
    async with _openai(stack.edge) as client:
        with pytest.raises(openai.BadRequestError) as ids:  # Google embeds text
            await client.embeddings.create(model=EMBEDDER, input=[[15339, 1917]])
    assert ids.value.body is not None and ids.value.body["param"] == "input[0]"  # type: ignore[index]
    assert len(stack.gemini.received) == 1  # refused by the bridge, before any call


async def test_a_google_clients_embeddings_reach_google_as_it_sent_them(stack: Stack) -> None:
    client = _genai(stack.edge)
    config = types.EmbedContentConfig(task_type="RETRIEVAL_DOCUMENT", title="Letters", output_dimensionality=2)
    result = await client.aio.models.embed_content(model=EMBEDDER, contents=["a", "b", "c"], config=config)
    assert [e.values for e in result.embeddings or []] == [fake_embedding(i, 2) for i in range(3)]
    (sent,) = stack.gemini.received
    assert sent.body == {"requests": [
        {"model": f"models/{EMBEDDER}", "content": {"parts": [{"text": text}], "role": "user"},
         "taskType": "RETRIEVAL_DOCUMENT", "title": "Letters", "outputDimensionality": 2}
        for text in "abc"]}  # what only Google's models read, carried to them
