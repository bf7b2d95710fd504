"""Fallback chains and splits (docs/routing.md), with scripted fakes behind a real edge on loopback.

Each route of a chain is a fake of its own, so a test sees which routes were tried, in which order, and
with which model name; the SDKs are the clients. Metrics are process-wide: tests read their differences.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

import aiohttp
import anthropic
import openai
import pytest
from aiohttp import web
from fakes import upstream as fu
from fakes.upstream import Call, FakeUpstream
from prometheus_client.parser import text_string_to_metric_families
from recording import recording_edge
from waiting import eventually

from ingress import wire
from ingress.cache.settings import RouteCache
from ingress.edge.appkeys import GATEWAY
from ingress.encoding.reading import decode_request
from ingress.exchange import Exchange
from ingress.routing.split import choose
from ingress.settings import Endpoint, ErrorClass, Group, Retry, Route, Settings, Share, Timeouts

TEXT = "Tell me a story about frames"
QUICK = Timeouts(connect=1.0, first_byte=5.0, idle=5.0)
SERVED_BY = "x-ingress-served-by"

RATE_LIMITED = wire.ErrorInfo(status=429, type="rate_limit_error", code="rate_limit_exceeded",
                              message="Rate limit reached for requests.")
OVERLOADED = wire.ErrorInfo(status=503, type="server_error", code="upstream_overloaded",
                            message="The model provider is overloaded.")
FAILED = wire.ErrorInfo(status=502, type="server_error", code="upstream_error", message="The model provider failed.")
# A prompt too long, in each dialect's words as its bridge relays them (ingress/bridges/failures.py).
TOO_LONG = {
    "openai": wire.ErrorInfo(status=400, type="invalid_request_error", code="context_length_exceeded", param="messages",
                             message="This model's maximum context length is 8192 tokens. However, your messages "
                                     "resulted in 9000 tokens. Please reduce the length of the messages."),
    "anthropic": wire.ErrorInfo(status=400, type="invalid_request_error",
                                message="prompt is too long: 208310 tokens > 200000 maximum"),
    "vllm": wire.ErrorInfo(status=400, type="BadRequestError",
                           message="This model's maximum context length is 4096 tokens. However, you requested "
                                   "5000 tokens (4000 in the messages, 1000 in the completion)."),
}
INVALID = wire.ErrorInfo(status=400, type="invalid_request_error", code="invalid_value", param="temperature",
                         message="Invalid value for temperature.")


class Chain:
    """An edge whose routes each send to a fake of their own."""

    def __init__(self, url: str, fakes: dict[str, FakeUpstream], exchanges: list[Exchange],
                 app: web.Application) -> None:
        self.url, self.fakes, self.exchanges, self.app = url, fakes, exchanges, app

    def following(self) -> int:
        """How many requests wait on (or tail) an identical miss in flight in the edge right now."""
        cache = self.app[GATEWAY].cache
        return sum(f.joining + f.tailing for f in cache.flights.values()) if cache is not None else 0

    def models_received(self) -> dict[str, list[str]]:
        return {name: [r.request.model for r in fake.received] for name, fake in self.fakes.items()}

    def last(self) -> Exchange:
        return [exchange for exchange in self.exchanges if exchange.api is not None][-1]


StartChain = Callable[..., Awaitable[Chain]]


@pytest.fixture
def start_chain(stack: AsyncExitStack) -> StartChain:
    async def start(routes: list[Route], *, retry: Retry | None = None, timeouts: Timeouts = QUICK) -> Chain:
        """One fake (and group) per route, named as the route's group."""
        fakes: dict[str, FakeUpstream] = {}
        for route in routes:
            if route.group not in fakes:
                fake = FakeUpstream()
                await stack.enter_async_context(fake.running())
                fakes[route.group] = fake
        groups = {name: Group(endpoints=[Endpoint(url=fake.url)]) for name, fake in fakes.items()}
        settings = Settings(groups=groups, routes=tuple(routes), timeouts=timeouts,
                            retry=retry or Retry(budget_ratio=1.0, budget_min_per_s=100.0))
        url, app, exchanges = await recording_edge(stack, settings)
        return Chain(url, fakes, exchanges, app)

    return start


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def _gpt(*, fallbacks: list[str], on: tuple[ErrorClass, ...], **config: Any) -> Route:
    return Route(model="gpt", group="primary", upstream_model="gpt-4o", fallbacks=fallbacks, fallback_on=on, **config)


def _named(name: str, model: str, **config: Any) -> Route:
    return Route(name=name, group=name, upstream_model=model, **config)


def _client(chain: Chain) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{chain.url}/v1", api_key="sk-test", max_retries=0)


async def _samples(http: aiohttp.ClientSession, url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    async with http.get(f"{url}/metrics") as response:
        text = await response.text()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _attempts(before: dict[Any, float], after: dict[Any, float]) -> dict[tuple[str, str], float]:
    """What ingress_route_attempts_total gained, by (route, outcome)."""
    gained = {}
    for (name, labels), value in after.items():
        if name == "ingress_route_attempts_total":
            route, outcome = dict(labels)["route"], dict(labels)["outcome"]
            if (delta := value - before.get((name, labels), 0.0)) > 0:
                gained[(route, outcome)] = delta
    return gained


def _filtered(*, stream: bool, apart: float = 0.0) -> fu.Behaviour:
    """An answer a content filter ended before any content: whole, or as a stream's first frames (each
    written `apart` seconds after the one before, or all in one write)."""

    async def run(call: Call) -> web.StreamResponse:
        model = call.received.request.model
        if not stream:
            choice = wire.Choice(index=0, content="", finish_reason="content_filter")
            body = wire.write_response(wire.Response(id=call.answer_id, model=model, created=fu.CREATED,
                                                     choices=[choice], usage=wire.Usage(prompt_tokens=5)))
            return web.Response(body=bytes(body), content_type=wire.CONTENT_TYPE)
        out = await call.open_stream()
        chunks = [wire.Chunk(sequence=0, id=call.answer_id, model=model, created=fu.CREATED, role="assistant",
                             content=""),
                  wire.Chunk(sequence=1, finish_reason="content_filter"),
                  wire.Chunk(sequence=2, usage=wire.Usage(prompt_tokens=5), done=True)]
        if not apart:
            await out.write(b"".join(bytes(wire.write_chunk(c)) for c in chunks))
        for chunk in chunks if apart else ():
            await out.write(bytes(wire.write_chunk(chunk)))
            await asyncio.sleep(apart)
        await out.write_eof()
        return out

    return run


# --- the chain, tried in order -------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_the_chain_is_tried_in_order_and_the_answer_names_who_served(
        start_chain: StartChain, http: aiohttp.ClientSession, stream: bool) -> None:
    chain = await start_chain([_gpt(fallbacks=["claude", "local"], on=("rate_limited", "5xx")),
                               _named("claude", "claude-sonnet-4-5"), _named("local", "llama-3.1-70b")])
    chain.fakes["primary"].play(fu.error_answer(RATE_LIMITED))
    chain.fakes["claude"].play(fu.error_answer(FAILED))
    before = await _samples(http, chain.url)

    async with _client(chain) as client:
        if stream:
            streamed = await client.chat.completions.with_raw_response.create(
                model="gpt", messages=[{"role": "user", "content": TEXT}], stream=True)
            chunks = [c async for c in streamed.parse()]
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            model, headers = chunks[0].model, streamed.headers
        else:
            whole = await client.chat.completions.with_raw_response.create(
                model="gpt", messages=[{"role": "user", "content": TEXT}])
            completion = whole.parse()
            text, model, headers = completion.choices[0].message.content or "", completion.model, whole.headers

    assert text == TEXT
    assert model == "llama-3.1-70b"  # the body names the model that served
    assert headers[SERVED_BY] == 'route="local", model="llama-3.1-70b"'
    assert chain.models_received() == {"primary": ["gpt-4o"], "claude": ["claude-sonnet-4-5"],
                                       "local": ["llama-3.1-70b"]}
    exchange = chain.last()
    assert exchange.attempts.fell_back == ["gpt:rate_limited", "claude:5xx"]
    assert exchange.attempts.count == 3 and exchange.routed.route == "gpt"
    after = await _samples(http, chain.url)
    assert _attempts(before, after) == {("gpt", "rate_limited"): 1, ("claude", "5xx"): 1, ("local", "ok"): 1}


async def test_each_routes_buffer_passes_the_cxx_verifier(start_chain: StartChain, cxx_verifier: object) -> None:
    chain = await start_chain([_gpt(fallbacks=["claude"], on=("unavailable",)), _named("claude", "claude-sonnet-4-5")])
    chain.fakes["primary"].play(fu.error_answer(OVERLOADED))

    async with _client(chain) as client:
        await client.chat.completions.create(model="gpt", messages=[{"role": "user", "content": TEXT}],
                                             temperature=0.2, tools=[{"type": "function", "function": {"name": "f"}}])

    bodies = [fake.received[0].body for fake in chain.fakes.values()]
    for body in bodies:
        assert cxx_verifier.verify("request", body)  # type: ignore[attr-defined]
    first, second = (decode_request(b) for b in bodies)
    assert (first.model, second.model) == ("gpt-4o", "claude-sonnet-4-5")
    assert first.messages == second.messages and first.tools == second.tools and second.temperature == 0.2


async def test_text_completions_and_embeddings_move_along_the_chain_in_verified_buffers(
        start_chain: StartChain, cxx_verifier: object) -> None:
    chain = await start_chain([_gpt(fallbacks=["claude"], on=("unavailable",)), _named("claude", "claude-sonnet-4-5")])
    chain.fakes["primary"].play(fu.error_answer(OVERLOADED))
    chain.fakes["primary"].play_embed(fu.embed_error(OVERLOADED))

    async with _client(chain) as client:
        text = await client.completions.create(model="gpt", prompt=TEXT, max_tokens=8)
        vectors = await client.embeddings.with_raw_response.create(model="gpt", input=["one", "two"])

    assert text.choices[0].text == TEXT
    assert vectors.headers[SERVED_BY] == 'route="claude", model="claude-sonnet-4-5"'
    assert len(vectors.parse().data) == 2
    assert chain.models_received() == {"primary": ["gpt-4o"], "claude": ["claude-sonnet-4-5"]}
    for fake in chain.fakes.values():
        for received in fake.received:
            assert cxx_verifier.verify("request", received.body)  # type: ignore[attr-defined]
    [first], [second] = (fake.embeddings_received for fake in chain.fakes.values())
    assert (first.request.model_name, second.request.model_name) == ("gpt-4o", "claude-sonnet-4-5")
    for embedding in (first, second):
        assert cxx_verifier.verify("embedding_request", embedding.body)  # type: ignore[attr-defined]


async def test_an_edge_started_a_moment_ago_falls_back_with_the_default_budget(start_chain: StartChain) -> None:
    """Every replica of a rolling deploy starts this way: its first request meets a primary's 429, and the
    route's fallback serves it, as on an edge that has served for hours (the budget starts with its reserve)."""
    chain = await start_chain([_gpt(fallbacks=["claude"], on=("rate_limited",)), _named("claude", "claude-sonnet-4-5")],
                              retry=Retry())
    chain.fakes["primary"].play(fu.error_answer(RATE_LIMITED))

    async with _client(chain) as client:
        answer = await client.chat.completions.with_raw_response.create(
            model="gpt", messages=[{"role": "user", "content": TEXT}])

    assert answer.headers[SERVED_BY] == 'route="claude", model="claude-sonnet-4-5"'
    assert chain.models_received() == {"primary": ["gpt-4o"], "claude": ["claude-sonnet-4-5"]}
    assert chain.last().attempts.fell_back == ["gpt:rate_limited"]


async def test_a_class_the_route_does_not_list_ends_the_chain(start_chain: StartChain) -> None:
    chain = await start_chain([_gpt(fallbacks=["claude"], on=("rate_limited",)), _named("claude", "claude-sonnet-4-5")])
    chain.fakes["primary"].play(fu.error_answer(OVERLOADED))

    async with _client(chain) as client:
        with pytest.raises(openai.APIStatusError) as failed:
            await client.chat.completions.create(model="gpt", messages=[{"role": "user", "content": TEXT}])

    assert failed.value.status_code == 503
    assert SERVED_BY not in failed.value.response.headers
    assert chain.models_received()["claude"] == []


@pytest.mark.parametrize("stream", [False, True])
async def test_a_client_error_never_falls_back(start_chain: StartChain, stream: bool) -> None:
    every: tuple[ErrorClass, ...] = ("unavailable", "5xx", "timeout", "rate_limited", "context_length",
                                     "content_filter")
    chain = await start_chain([_gpt(fallbacks=["claude"], on=every), _named("claude", "claude-sonnet-4-5")])
    chain.fakes["primary"].play(fu.error_answer(INVALID))

    async with _client(chain) as client:
        with pytest.raises(openai.BadRequestError) as refused:
            await client.chat.completions.create(model="gpt", messages=[{"role": "user", "content": TEXT}],
                                                 stream=stream)

    assert refused.value.code == "invalid_value"
    assert chain.models_received()["claude"] == []


# --- context length ------------------------------------------------------------------------------


@pytest.mark.parametrize("dialect", sorted(TOO_LONG))
async def test_a_prompt_too_long_in_each_dialects_words_moves_to_the_long_context_route(
        start_chain: StartChain, dialect: str) -> None:
    chain = await start_chain([_gpt(fallbacks=["long"], on=("context_length",)), _named("long", "gemini-long")])
    chain.fakes["primary"].play(fu.error_answer(TOO_LONG[dialect]))

    async with _client(chain) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="gpt", messages=[{"role": "user", "content": TEXT}])

    assert (raw.parse()).choices[0].message.content == TEXT
    assert raw.headers[SERVED_BY] == 'route="long", model="gemini-long"'
    assert chain.last().attempts.fell_back == ["gpt:context_length"]


async def test_a_fallback_whose_context_is_too_short_is_skipped_up_front(
        start_chain: StartChain, http: aiohttp.ClientSession) -> None:
    chain = await start_chain([_gpt(fallbacks=["mid", "long"], on=("context_length",)),
                               _named("mid", "mid-8k", max_context=50),
                               _named("long", "long-1m", max_context=1_000_000)])
    chain.fakes["primary"].play(fu.error_answer(TOO_LONG["openai"]))
    before = await _samples(http, chain.url)
    prompt = " ".join(["frames"] * 200)  # some 200 tokens: above mid's 50

    async with _client(chain) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="gpt", messages=[{"role": "user", "content": prompt}])

    assert raw.headers[SERVED_BY] == 'route="long", model="long-1m"'
    assert chain.models_received() == {"primary": ["gpt-4o"], "mid": [], "long": ["long-1m"]}
    assert _attempts(before, await _samples(http, chain.url)) == {
        ("gpt", "context_length"): 1, ("mid", "skipped"): 1, ("long", "ok"): 1}


# --- content filter ------------------------------------------------------------------------------


@pytest.mark.parametrize(("stream", "apart"), [(False, 0.0), (True, 0.0), (True, 0.05)],
                         ids=["whole", "stream-in-one-read", "stream-frame-by-frame"])
async def test_an_answer_a_filter_ended_moves_on_before_the_client_sees_it(
        start_chain: StartChain, http: aiohttp.ClientSession, stream: bool, apart: float) -> None:
    chain = await start_chain([_gpt(fallbacks=["claude"], on=("content_filter",)),
                               _named("claude", "claude-sonnet-4-5")])
    chain.fakes["primary"].play(_filtered(stream=stream, apart=apart))

    body = {"model": "gpt", "messages": [{"role": "user", "content": TEXT}], "stream": stream}
    async with http.post(f"{chain.url}/v1/chat/completions", json=body) as response:
        text = await response.text()
        headers = response.headers

    assert response.status == 200
    assert "content_filter" not in text  # nothing of the filtered answer reached the client
    assert headers[SERVED_BY] == 'route="claude", model="claude-sonnet-4-5"'
    if stream:
        events = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
        assert "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"]) == TEXT
    else:
        assert json.loads(text)["choices"][0]["message"]["content"] == TEXT
    assert chain.last().attempts.fell_back == ["gpt:content_filter"]


async def test_a_stream_filtered_after_its_content_began_is_not_moved(
        start_chain: StartChain, http: aiohttp.ClientSession) -> None:
    chain = await start_chain([_gpt(fallbacks=["claude"], on=("content_filter",)),
                               _named("claude", "claude-sonnet-4-5")])

    async def filtered_late(call: Call) -> web.StreamResponse:
        out = await call.open_stream()
        chunks = [wire.Chunk(sequence=0, id=call.answer_id, model="gpt-4o", created=fu.CREATED, role="assistant",
                             content=""),
                  wire.Chunk(sequence=1, content="Once upon"),
                  wire.Chunk(sequence=2, finish_reason="content_filter"),
                  wire.Chunk(sequence=3, usage=wire.Usage(prompt_tokens=5, completion_tokens=2), done=True)]
        for chunk in chunks:
            await out.write(bytes(wire.write_chunk(chunk)))
            await asyncio.sleep(0.02)
        await out.write_eof()
        return out

    chain.fakes["primary"].play(filtered_late)
    body = {"model": "gpt", "messages": [{"role": "user", "content": TEXT}], "stream": True}
    async with http.post(f"{chain.url}/v1/chat/completions", json=body) as response:
        text = await response.text()

    assert "Once upon" in text and '"finish_reason":"content_filter"' in text
    assert response.headers[SERVED_BY] == 'route="gpt", model="gpt-4o"'
    assert chain.models_received()["claude"] == []


async def test_the_last_routes_filtered_answer_is_served_as_it_is(start_chain: StartChain) -> None:
    chain = await start_chain([_gpt(fallbacks=["claude"], on=("content_filter",)),
                               _named("claude", "claude-sonnet-4-5")])
    chain.fakes["primary"].play(_filtered(stream=False))
    chain.fakes["claude"].play(_filtered(stream=False))

    async with _client(chain) as client:
        completion = await client.chat.completions.create(model="gpt", messages=[{"role": "user", "content": TEXT}])

    assert completion.choices[0].finish_reason == "content_filter"
    assert completion.model == "claude-sonnet-4-5"


# --- timeouts, failures after the first byte, the budget -----------------------------------------


async def test_a_stall_before_the_head_falls_back_only_when_timeout_is_listed(start_chain: StartChain) -> None:
    quick = Timeouts(connect=1.0, first_byte=0.5, idle=5.0)
    chain = await start_chain([_gpt(fallbacks=["claude"], on=("timeout",)), _named("claude", "claude-sonnet-4-5"),
                               Route(model="strict", group="primary", fallbacks=["claude"], fallback_on=("5xx",))],
                              timeouts=quick)
    chain.fakes["primary"].play(fu.slow_head(None), fu.slow_head(None))

    async with _client(chain) as client:
        completion = await client.chat.completions.create(model="gpt", messages=[{"role": "user", "content": TEXT}])
        assert completion.model == "claude-sonnet-4-5"
        with pytest.raises(openai.APIStatusError) as timed_out:
            await client.chat.completions.create(model="strict", messages=[{"role": "user", "content": TEXT}])

    assert timed_out.value.status_code == 504
    assert chain.models_received()["claude"] == ["claude-sonnet-4-5"]


async def test_nothing_moves_once_the_stream_has_begun(start_chain: StartChain, http: aiohttp.ClientSession) -> None:
    chain = await start_chain([_gpt(fallbacks=["claude"], on=("unavailable", "5xx", "timeout")),
                               _named("claude", "claude-sonnet-4-5")])
    chain.fakes["primary"].play(fu.drop_mid_stream(frames=2), pace=0.05)

    body = {"model": "gpt", "messages": [{"role": "user", "content": TEXT}], "stream": True}
    async with http.post(f"{chain.url}/v1/chat/completions", json=body) as response:
        text = await response.text()

    assert response.status == 200 and "[DONE]" not in text
    assert response.headers[SERVED_BY] == 'route="gpt", model="gpt-4o"'
    assert chain.models_received()["claude"] == []


async def test_the_retry_budget_bounds_the_chain(start_chain: StartChain) -> None:
    chain = await start_chain([_gpt(fallbacks=["claude"], on=("rate_limited",)), _named("claude", "claude-sonnet-4-5")],
                              retry=Retry(budget_ratio=0.0, budget_min_per_s=0.0))
    chain.fakes["primary"].play(fu.error_answer(RATE_LIMITED))

    async with _client(chain) as client:
        with pytest.raises(openai.RateLimitError):
            await client.chat.completions.create(model="gpt", messages=[{"role": "user", "content": TEXT}])

    assert chain.models_received()["claude"] == []


async def test_the_group_fallback_still_serves_as_before(start_chain: StartChain) -> None:
    chain = await start_chain([Route(model="gpt", group="primary", fallback="spare"),
                               Route(name="spare-route", group="spare", upstream_model="unused")])
    chain.fakes["primary"].play(fu.error_answer(FAILED))

    async with _client(chain) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="gpt", messages=[{"role": "user", "content": TEXT}])

    assert raw.headers[SERVED_BY] == 'route="gpt", model="gpt"'
    assert chain.models_received() == {"primary": ["gpt"], "spare": ["gpt"]}


# --- Anthropic's Messages API ---------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_the_messages_api_falls_back_on_anthropics_rate_limit_and_prompt_too_long(
        start_chain: StartChain, cxx_verifier: object, stream: bool) -> None:
    chain = await start_chain([
        Route(model="claude", group="primary", provider="anthropic", upstream_model="claude-sonnet-4-5",
              fallbacks=["haiku", "gpt-long"], fallback_on=("rate_limited", "context_length")),
        _named("haiku", "claude-haiku-4-5", provider="anthropic"),
        _named("gpt-long", "gpt-4.1")])
    chain.fakes["primary"].play(fu.error_answer(RATE_LIMITED))
    chain.fakes["haiku"].play(fu.error_answer(TOO_LONG["anthropic"]))

    async with anthropic.AsyncAnthropic(base_url=chain.url, api_key="sk-ant-test", max_retries=0) as client:
        params: dict[str, Any] = {"model": "claude", "max_tokens": 64, "messages": [{"role": "user", "content": TEXT}],
                                  "extra_body": {"inference_geo": "us"}}  # a hint only Anthropic reads
        if stream:
            async with client.messages.with_streaming_response.create(**params, stream=True) as raw:
                headers = raw.headers
                text = "".join([json.loads(line[6:]).get("delta", {}).get("text", "")
                                async for line in raw.iter_lines() if line.startswith("data: ")])
        else:
            raw_whole = await client.messages.with_raw_response.create(**params)
            headers, message = raw_whole.headers, await raw_whole.parse()
            text = "".join(block.text for block in message.content if block.type == "text")

    assert text == TEXT
    assert headers[SERVED_BY] == 'route="gpt-long", model="gpt-4.1"'
    assert chain.models_received() == {"primary": ["claude-sonnet-4-5"], "haiku": ["claude-haiku-4-5"],
                                       "gpt-long": ["gpt-4.1"]}
    [haiku], [gpt] = chain.fakes["haiku"].received, chain.fakes["gpt-long"].received
    for received in (haiku, gpt):
        assert cxx_verifier.verify("request", received.body)  # type: ignore[attr-defined]
    assert wire.read_request(haiku.body).AnthropicJson()  # whole to Anthropic's bridge
    assert not wire.read_request(gpt.body).AnthropicJson()  # read as a chat request elsewhere
    assert chain.last().attempts.fell_back == ["claude:rate_limited", "haiku:context_length"]
    assert chain.last().routed.hints == ["inference_geo"]  # taken whole by Anthropic's routes, not by gpt-long


# --- splits --------------------------------------------------------------------------------------


async def test_a_split_is_sticky_by_user_and_named_in_the_header_the_metrics_and_the_line(
        start_chain: StartChain, http: aiohttp.ClientSession) -> None:
    chain = await start_chain([
        Route(model="gpt", group="primary", upstream_model="gpt-4o", split_by="user",
              split=[Share(route="gpt", weight=50), Share(route="canary", weight=50)]),
        _named("canary", "gpt-5")])
    before = await _samples(http, chain.url)

    async def variant(user: str) -> str:
        async with _client(chain) as client:
            raw = await client.chat.completions.with_raw_response.create(
                model="gpt", messages=[{"role": "user", "content": TEXT}], user=user)
        return raw.headers[SERVED_BY]

    users = [f"user-{i}" for i in range(24)]
    first = await asyncio.gather(*(variant(u) for u in users))
    again = await asyncio.gather(*(variant(u) for u in users))

    assert first == again  # each user stays on its variant
    assert set(first) == {'route="gpt", model="gpt-4o", variant="gpt"',
                          'route="canary", model="gpt-5", variant="canary"'}
    received = chain.models_received()
    assert len(received["primary"]) + len(received["canary"]) == 48
    assert {exchange.routed.variant for exchange in chain.exchanges if exchange.api} == {"gpt", "canary"}
    after = await _samples(http, chain.url)
    split = {dict(labels)["variant"]: value - before.get((name, labels), 0.0) for (name, labels), value in after.items()
             if name == "ingress_split_requests_total" and dict(labels)["route"] == "gpt"}
    assert split == {"gpt": len(received["primary"]), "canary": len(received["canary"])}


@pytest.mark.parametrize("split_by", ["key", "header"])
async def test_a_canary_keeps_each_key_or_header_value_on_one_variant(
        start_chain: StartChain, http: aiohttp.ClientSession, split_by: str) -> None:
    extra: dict[str, Any] = {"split_header": "x-team"} if split_by == "header" else {}
    chain = await start_chain([
        Route(model="gpt", group="primary", upstream_model="gpt-4o", split_by=split_by,  # type: ignore[arg-type]
              split=[Share(route="gpt", weight=3), Share(route="canary", weight=1)], **extra),
        _named("canary", "gpt-5")])

    async def served(who: str) -> str:
        headers = {"x-team": who} if split_by == "header" else {"Authorization": f"Bearer sk-{who}"}
        body = {"model": "gpt", "messages": [{"role": "user", "content": TEXT}]}
        async with http.post(f"{chain.url}/v1/chat/completions", json=body, headers=headers) as response:
            assert response.status == 200
            return response.headers[SERVED_BY]

    who = [f"team-{i}" for i in range(32)]
    first = [await served(w) for w in who]

    assert [await served(w) for w in who] == first
    assert {value.rsplit('variant="', 1)[1] for value in first} == {'gpt"', 'canary"'}


def _key_on(variant: str, shares: tuple[tuple[str, int], ...]) -> str:
    """An API key that a split by key puts on `variant`."""
    return next(key for key in (f"sk-{i}" for i in range(1000)) if choose(f"key:{key}".encode(), shares) == variant)


@pytest.mark.parametrize("stream", [False, True])
async def test_each_variant_of_a_split_keeps_its_own_cache_entries(
        start_chain: StartChain, stream: bool) -> None:
    """A canary is never answered from the stable variant's entries, nor the reverse, though both send the
    same model name: the key is the route that serves, not the one asked for."""
    shares = (("abc", 50), ("abc-next", 50))
    chain = await start_chain([
        Route(name="abc", model="abc", group="a", upstream_model="gpt-4o", cache=RouteCache(ttl=600),
              split=[Share(route=name, weight=weight) for name, weight in shares]),
        Route(name="abc-next", group="c", upstream_model="gpt-4o", cache=RouteCache(ttl=600))])

    async def ask(variant: str) -> tuple[str, str]:
        async with openai.AsyncOpenAI(base_url=f"{chain.url}/v1", api_key=_key_on(variant, shares),
                                      max_retries=0) as client:
            raw = await client.chat.completions.with_raw_response.create(
                model="abc", messages=[{"role": "user", "content": TEXT}], temperature=0, stream=stream)
            answer = raw.parse()
            if isinstance(answer, openai.AsyncStream):
                assert "".join([c.choices[0].delta.content or "" async for c in answer if c.choices]) == TEXT
            else:
                assert answer.choices[0].message.content == TEXT
        await asyncio.sleep(0.05)  # a stream is stored in a later turn of the edge's loop, once it has ended
        return raw.headers["x-ingress-cache"], raw.headers.get(SERVED_BY, "")

    assert await ask("abc") == ("miss", 'route="abc", model="gpt-4o", variant="abc"')
    assert await ask("abc-next") == ("miss", 'route="abc-next", model="gpt-4o", variant="abc-next"')
    assert (await ask("abc"))[0] == (await ask("abc-next"))[0] == "hit"
    assert chain.models_received() == {"a": ["gpt-4o"], "c": ["gpt-4o"]}


# --- a chain behind the route's response cache ---------------------------------------------------


def _content(body: str, stream: bool) -> str:
    """A chat answer's text: its message's, or its streamed deltas' joined."""
    if not stream:
        return str(json.loads(body)["choices"][0]["message"]["content"])
    events = [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: {")]
    return "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])


async def _twice(http: aiohttp.ClientSession, chain: Chain, stream: bool) -> list[tuple[int, str, str, str]]:
    """The same deterministic request sent twice: each answer's status, cache and served-by headers, and text."""
    body = {"model": "gpt", "messages": [{"role": "user", "content": TEXT}], "temperature": 0, "stream": stream}
    answers = []
    for _ in range(2):
        async with http.post(f"{chain.url}/v1/chat/completions", json=body) as response:
            text = _content(await response.text(), stream)
            answers.append((response.status, response.headers.get("x-ingress-cache", ""),
                            response.headers.get(SERVED_BY, ""), text))
        await asyncio.sleep(0.05)  # a stream is stored in a later turn of the edge's loop, once it has ended
    return answers


@pytest.mark.parametrize("stream", [False, True])
async def test_a_cached_route_keeps_what_its_chain_served_and_a_hit_sends_nothing(
        start_chain: StartChain, http: aiohttp.ClientSession, stream: bool) -> None:
    chain = await start_chain([_gpt(fallbacks=["claude"], on=("rate_limited",), cache=RouteCache(ttl=600)),
                               _named("claude", "claude-sonnet-4-5")])
    chain.fakes["primary"].play(fu.error_answer(RATE_LIMITED))

    miss, hit = await _twice(http, chain, stream)

    # The entry is kept under the request's route (gpt), but claude made the answer: its entry says so, and a
    # hit names claude and its model, as the miss did, never gpt's.
    assert miss == (200, "miss", 'route="claude", model="claude-sonnet-4-5"', TEXT)
    assert hit == (200, "hit", 'route="claude", model="claude-sonnet-4-5"', TEXT)
    assert chain.models_received() == {"primary": ["gpt-4o"], "claude": ["claude-sonnet-4-5"]}


async def test_the_requests_that_wait_on_a_miss_that_fell_back_name_the_fallback(
        start_chain: StartChain, http: aiohttp.ClientSession) -> None:
    """Identical requests that come while a miss's fallback is answering are answered with its answer (a
    stream tails its frames, a whole request waits for its entry), and name the route and model that made it."""
    chain = await start_chain([_gpt(fallbacks=["claude"], on=("rate_limited",), cache=RouteCache(ttl=600)),
                               _named("claude", "claude-sonnet-4-5")])
    chain.fakes["primary"].play(fu.error_answer(RATE_LIMITED))
    gate = asyncio.Event()
    chain.fakes["claude"].play(fu.gated(gate))
    body = {"model": "gpt", "messages": [{"role": "user", "content": TEXT}], "temperature": 0}

    async def ask(stream: bool) -> tuple[str, str, str]:
        async with http.post(f"{chain.url}/v1/chat/completions", json={**body, "stream": stream}) as response:
            text = _content(await response.text(), stream)
            return response.headers.get("x-ingress-cache", ""), response.headers.get(SERVED_BY, ""), text

    leader = asyncio.create_task(ask(True))
    await eventually(lambda: len(chain.fakes["claude"].received) == 1 or None, "the fallback answering")
    followers = asyncio.gather(ask(True), ask(False))
    await eventually(lambda: chain.following() == 2 or None, "a stream tailing the first, a request waiting on it")
    gate.set()

    claude = 'route="claude", model="claude-sonnet-4-5"'
    assert await leader == ("miss", claude, TEXT)
    assert list(await followers) == [("hit", claude, TEXT)] * 2
    assert chain.models_received() == {"primary": ["gpt-4o"], "claude": ["claude-sonnet-4-5"]}


async def test_what_a_chain_served_after_a_content_filter_is_kept_and_a_held_back_answer_never_is(
        start_chain: StartChain, http: aiohttp.ClientSession) -> None:
    chain = await start_chain([_gpt(fallbacks=["claude"], on=("content_filter", "5xx"), cache=RouteCache(ttl=600)),
                               _named("claude", "claude-sonnet-4-5")])
    chain.fakes["primary"].play(_filtered(stream=False))
    miss, hit = await _twice(http, chain, stream=False)
    assert miss == (200, "miss", 'route="claude", model="claude-sonnet-4-5"', TEXT)
    assert hit == (200, "hit", 'route="claude", model="claude-sonnet-4-5"', TEXT)  # what the chain served

    # The filtered answer held back and served because the next route failed: the last attempt recorded
    # was that failure, and nothing is kept.
    body = {"model": "gpt", "messages": [{"role": "user", "content": "another"}], "temperature": 0}
    for _ in range(2):
        chain.fakes["primary"].play(_filtered(stream=False))
        chain.fakes["claude"].play(fu.error_answer(FAILED))
        async with http.post(f"{chain.url}/v1/chat/completions", json=body) as response:
            answer = await response.json()
            assert (response.status, response.headers["x-ingress-cache"]) == (200, "miss")
            assert answer["choices"][0]["finish_reason"] == "content_filter"
    assert chain.models_received() == {"primary": ["gpt-4o"] * 3, "claude": ["claude-sonnet-4-5"] * 3}
