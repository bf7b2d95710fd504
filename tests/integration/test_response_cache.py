"""The response cache end to end (ingress/cache, ingress/pipeline/cache.py): a real edge in front of the
scripted fake service, whose record of what it received is the call counter; the official `openai` and
`anthropic` SDKs as clients; real Redis and Valkey servers (tests/support/redis_servers.py) for the Redis backend.

A hit answers the same as the miss it came from, for answers of every shape and either way round (a whole
answer stored and streamed, a stream stored and answered whole); tenants and keys never see each other's
entries; only whole successful answers are stored; no-store, no-cache and non-deterministic requests; a
hit is charged to rpm but not to tokens; a stopped store is a miss.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import aiohttp
import anthropic
import msgspec
import openai
import pytest
from aiohttp import web
from fakes import upstream as fu
from fakes.upstream import FakeUpstream
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from metric_values import sample_value
from openai.types.chat import ChatCompletionMessageParam
from otlp_receiver import OtlpReceiver
from redis.asyncio import Redis
from redis_servers import Server
from waiting import eventually

from ingress import wire
from ingress.cache.settings import RouteCache
from ingress.edge.appkeys import GATEWAY
from ingress.serve.app import create_app, serve_app
from ingress.settings import Endpoint, Group, Route, Settings, Timeouts, Tracing
from ingress.tenancy.keys import new_key
from ingress.tenancy.settings import Key, Limits, Tenancy, Tenant
from ingress.tenancy.settings import Redis as RedisSettings

MODEL, OTHER = "gpt-4o", "llama-3.1-8b-instruct"
CLAUDE = "claude-sonnet-4-6"
TIMEOUTS = Timeouts(connect=1.0, first_byte=5.0, idle=5.0)
DETERMINISTIC = {"temperature": 0}
CACHE = "x-ingress-cache"
SERVED_BY = "x-ingress-served-by"
SERVED = f'route="{MODEL}", model="{MODEL}"'  # the route of MODEL, which sends the model asked for


DEFAULT_CACHE = RouteCache(ttl=600)


def config(url: str, cache: RouteCache | None = DEFAULT_CACHE, tenancy: Tenancy | None = None) -> Settings:
    return Settings(groups={"svc": Group(endpoints=[Endpoint(url=url)])}, timeouts=TIMEOUTS, tenancy=tenancy,
                    routes=(Route(model=MODEL, group="svc", cache=cache), Route(model=OTHER, group="svc"),
                            Route(model=CLAUDE, group="svc", cache=cache)))


def body(text: str, **fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": text}], **DETERMINISTIC, **fields}


async def post(http: aiohttp.ClientSession, url: str, payload: dict[str, Any], headers: dict[str, str] | None = None,
               path: str = "/v1/chat/completions") -> tuple[int, str | None, str]:
    async with http.post(url + path, json=payload, headers=headers or {}) as r:
        return r.status, r.headers.get(CACHE), await r.text()


# --- answers of every shape, whole and streamed ----------------------------------------------------------

PIECE = st.text(st.characters(codec="utf-8"), min_size=1, max_size=12)
PIECES = st.lists(PIECE, max_size=4)


@dataclass
class Answer:
    """What the service answers, as the parts it streams; the same answer whole."""

    reasoning: list[str]
    signature: str | None
    text: list[str]
    refusal: list[str]
    calls: list[tuple[str, str, list[str]]]  # id, name, the arguments' pieces
    logprobs: bool
    finish: str
    usage: wire.Usage

    def chunks(self, model: str) -> list[wire.Chunk]:
        out = [wire.Chunk(sequence=0, id="chatcmpl-service", model=model, created=1_700_000_000, role="assistant",
                          system_fingerprint="fp_1")]
        out += [wire.Chunk(sequence=0, reasoning=r) for r in self.reasoning]
        if self.signature is not None:
            out.append(wire.Chunk(sequence=0, signature=self.signature))
        out += [wire.Chunk(sequence=0, content=t, logprobs=[self._logprob(t)] if self.logprobs else None)
                for t in self.text]
        out += [wire.Chunk(sequence=0, refusal=t) for t in self.refusal]
        for n, (call_id, name, pieces) in enumerate(self.calls):
            out.append(wire.Chunk(sequence=0, tool_calls=[wire.ToolCallDelta(index=n, id=call_id, type="function",
                                                                             name=name)]))
            out += [wire.Chunk(sequence=0, tool_calls=[wire.ToolCallDelta(index=n, arguments=p)]) for p in pieces]
        out += [wire.Chunk(sequence=0, finish_reason=self.finish), wire.Chunk(sequence=0, usage=self.usage, done=True)]
        return [wire.Chunk(**{**{f: getattr(c, f) for f in c.__struct_fields__}, "sequence": i})
                for i, c in enumerate(out)]

    def response(self, model: str) -> wire.Response:
        text = "".join(self.text)
        choice = wire.Choice(
            content=text if text or not (self.calls or self.refusal) else None,
            refusal="".join(self.refusal) or None, reasoning="".join(self.reasoning) or None, signature=self.signature,
            tool_calls=[wire.FunctionCall(id=i, name=n, arguments="".join(p)) for i, n, p in self.calls],
            logprobs=[self._logprob(t) for t in self.text] if self.logprobs else None, finish_reason=self.finish)
        return wire.Response(id="chatcmpl-service", model=model, created=1_700_000_000, choices=[choice],
                             usage=self.usage, system_fingerprint="fp_1")

    @staticmethod
    def _logprob(token: str) -> wire.TokenLogprob:
        return wire.TokenLogprob(token=token, logprob=-0.5, top_logprobs=[wire.TopLogprob(token=token, logprob=-0.5)])


CALL = st.tuples(st.text("abc0123", min_size=1, max_size=6).map(lambda s: f"call_{s}"),
                 st.sampled_from(["get_weather", "lookup"]),
                 st.lists(st.sampled_from(['{"a":', " 1", "}"]), max_size=3))
answers = st.builds(
    Answer, reasoning=PIECES, signature=st.none() | st.just("sig=="), text=PIECES,
    refusal=st.lists(PIECE, max_size=1), calls=st.lists(CALL, max_size=2), logprobs=st.booleans(),
    finish=st.sampled_from(["stop", "length", "tool_calls", "content_filter"]),
    usage=st.builds(wire.Usage, prompt_tokens=st.integers(1, 500), completion_tokens=st.integers(1, 500),
                    reasoning_tokens=st.integers(0, 5)))
anthropic_answers = st.builds(
    Answer, reasoning=PIECES, signature=st.just("sig=="), text=st.lists(PIECE, min_size=1, max_size=4),
    refusal=st.just([]), calls=st.lists(CALL.map(lambda c: (c[0], c[1], ['{"a": 1}'])), max_size=2),
    logprobs=st.just(False), finish=st.sampled_from(["stop", "length", "tool_calls"]),
    usage=st.builds(wire.Usage, prompt_tokens=st.integers(1, 500), completion_tokens=st.integers(1, 500)))


def answering(answer: Answer) -> fu.Behaviour:
    """The answer in the shape the request asked for."""

    async def run(call: fu.Call) -> web.StreamResponse:
        model = call.received.request.model
        if not call.received.stream:
            return web.Response(body=bytes(wire.write_response(answer.response(model))), content_type=wire.CONTENT_TYPE)
        out = await call.open_stream()
        for chunk in answer.chunks(model):
            await call.send(out, wire.write_chunk(chunk))
        await out.write_eof()
        return out

    return run


class Servers:
    """The fake service and an edge in front of it, on one event loop in a background thread, for the
    blocking SDK clients a Hypothesis test drives."""

    def __init__(self, settings_for: Callable[[str], Settings]) -> None:
        self.fake = FakeUpstream()
        self._settings_for = settings_for
        self._ready = threading.Event()
        self._thread = threading.Thread(target=asyncio.run, args=(self._serve(),), name="cache-edge", daemon=True)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self.url = ""

    async def _serve(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        try:
            async with self.fake.running() as upstream, serve_app(create_app(self._settings_for(upstream)),
                                                                  "127.0.0.1", 0) as url:
                self.url = url
                self._ready.set()
                await self._stop.wait()
        finally:
            self._ready.set()

    def __enter__(self) -> Servers:
        self._thread.start()
        if not self._ready.wait(timeout=10) or not self.url:
            raise RuntimeError("the servers did not start")
        return self

    def __exit__(self, *exc_info: object) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=10)


@pytest.fixture(scope="module")
def servers() -> Iterator[Servers]:
    with Servers(config) as s:
        yield s


_prompts = itertools.count()
WAYS = [(False, False), (True, True), (False, True), (True, False)]  # (the miss streamed, the hit streamed)
SDK_SETTINGS = settings(max_examples=12, deadline=None, database=None,
                        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def chat_summary(message: dict[str, Any], finish: str | None, logprobs: Any, usage: Any) -> dict[str, Any]:
    return {"content": message.get("content") or "", "refusal": message.get("refusal"),
            "reasoning": message.get("reasoning_content"), "finish": finish,
            "calls": [(c["id"], c["function"]["name"], c["function"]["arguments"])
                      for c in message.get("tool_calls") or []],
            "logprobs": [(t["token"], t["logprob"]) for t in (logprobs or {}).get("content") or []] or None,
            "usage": usage}


def chat_whole(completion: openai.types.chat.ChatCompletion) -> dict[str, Any]:
    d = completion.model_dump()
    choice = d["choices"][0]
    return chat_summary(choice["message"], choice["finish_reason"], choice["logprobs"], d["usage"])


def chat_accumulated(chunks: list[openai.types.chat.ChatCompletionChunk]) -> dict[str, Any]:
    message: dict[str, Any] = {}
    calls: dict[int, dict[str, Any]] = {}
    finish, usage = None, None
    logprobs: list[dict[str, Any]] = []
    for chunk in (c.model_dump() for c in chunks):
        usage = chunk.get("usage") or usage
        for choice in chunk["choices"]:
            delta = choice["delta"]
            for field in ("content", "refusal", "reasoning_content"):
                if delta.get(field) is not None:
                    message[field] = message.get(field, "") + delta[field]
            for d in delta.get("tool_calls") or []:
                call = calls.setdefault(d["index"], {"id": None, "function": {"name": "", "arguments": ""}})
                call["id"] = call["id"] or d.get("id")
                call["function"]["name"] += (d.get("function") or {}).get("name") or ""
                call["function"]["arguments"] += (d.get("function") or {}).get("arguments") or ""
            finish = choice.get("finish_reason") or finish
            logprobs += (choice.get("logprobs") or {}).get("content") or []
    message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return chat_summary(message, finish, {"content": logprobs}, usage)


def ask_openai(client: openai.OpenAI, prompt: str, stream: bool) -> tuple[Any, str | None]:
    """The answer (the completion, or its chunks) and the x-ingress-cache header."""
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": prompt}]
    if not stream:
        raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=messages, temperature=0,
                                                               logprobs=True)
        return raw.parse(), raw.headers.get(CACHE)
    with client.chat.completions.with_streaming_response.create(
            model=MODEL, messages=messages, temperature=0, logprobs=True, stream=True,
            stream_options={"include_usage": True}) as streamed:
        return list(streamed.parse()), streamed.headers.get(CACHE)


@pytest.mark.parametrize(("miss_streamed", "hit_streamed"), WAYS)
@SDK_SETTINGS
@given(answer=answers)
def test_a_hit_answers_as_the_miss_did_through_the_openai_sdk(servers: Servers, answer: Answer, miss_streamed: bool,
                                                              hit_streamed: bool) -> None:
    prompt = f"prompt {next(_prompts)}"
    servers.fake.play(answering(answer))
    with openai.OpenAI(base_url=f"{servers.url}/v1", api_key="sk-test", max_retries=0) as client:
        calls = len(servers.fake.received)
        miss, miss_header = ask_openai(client, prompt, miss_streamed)
        hit, hit_header = ask_openai(client, prompt, hit_streamed)
    assert (miss_header, hit_header) == ("miss", "hit")
    assert len(servers.fake.received) == calls + 1  # the hit never reached the service
    if miss_streamed == hit_streamed:  # the same shape: the very same answer, chunk for chunk
        dump = [c.model_dump() for c in miss] if miss_streamed else miss.model_dump()
        assert dump == ([c.model_dump() for c in hit] if hit_streamed else hit.model_dump())
    summaries = [chat_accumulated(a) if streamed else chat_whole(a)
                 for a, streamed in ((miss, miss_streamed), (hit, hit_streamed))]
    assert summaries[0] == summaries[1]


def ask_anthropic(client: anthropic.Anthropic, prompt: str, stream: bool) -> tuple[dict[str, Any], str | None]:
    request: dict[str, Any] = {"model": CLAUDE, "max_tokens": 1000, "messages": [{"role": "user", "content": prompt}],
                               "extra_body": {"temperature": 0}}  # not in this SDK's signature
    if not stream:
        raw = client.messages.with_raw_response.create(**request)
        message = raw.parse()
        header = raw.headers.get(CACHE)
    else:
        with client.messages.stream(**request) as events:
            header = events.response.headers.get(CACHE)
            message = events.get_final_message()
    d = message.model_dump()
    del d["id"]  # the edge's for each request (msg_<request id>)
    d["usage"] = d["usage"]["output_tokens"]  # a stream's input count is the edge's until the service's comes
    return d, header


@pytest.mark.parametrize(("miss_streamed", "hit_streamed"), WAYS)
@SDK_SETTINGS
@given(answer=anthropic_answers)
def test_a_hit_answers_as_the_miss_did_through_the_anthropic_sdk(servers: Servers, answer: Answer,
                                                                 miss_streamed: bool, hit_streamed: bool) -> None:
    prompt = f"prompt {next(_prompts)}"
    servers.fake.play(answering(answer))
    with anthropic.Anthropic(base_url=servers.url, api_key="sk-ant-test", max_retries=0) as client:
        calls = len(servers.fake.received)
        miss, miss_header = ask_anthropic(client, prompt, miss_streamed)
        hit, hit_header = ask_anthropic(client, prompt, hit_streamed)
    assert (miss_header, hit_header) == ("miss", "hit")
    assert len(servers.fake.received) == calls + 1
    assert miss == hit


# --- what is cached, for whom, and what it costs -----------------------------------------------------------


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as s:
        yield s


async def edge_for(stack: AsyncExitStack, fake: FakeUpstream, **options: Any) -> str:
    return await stack.enter_async_context(serve_app(create_app(config(fake.url, **options)), "127.0.0.1", 0))


async def test_only_deterministic_requests_and_never_no_store(stack: AsyncExitStack, fake_upstream: FakeUpstream,
                                                              http: aiohttp.ClientSession) -> None:
    url = await edge_for(stack, fake_upstream)
    sampled = {"model": MODEL, "messages": [{"role": "user", "content": "sampled"}]}
    assert [(await post(http, url, sampled))[1] for _ in range(2)] == ["bypass", "bypass"]
    assert [(await post(http, url, body("seeded", seed=5, temperature=1)))[1] for _ in range(2)] == ["miss", "hit"]
    assert (await post(http, url, body("kept out"), {"Cache-Control": "no-store"}))[1] == "bypass"
    assert (await post(http, url, body("kept out")))[1] == "miss"  # no-store stored nothing
    assert (await post(http, url, body("kept out"), {"Cache-Control": "no-store"}))[1] == "bypass"  # nor read
    assert len(fake_upstream.received) == 6
    status, header, _ = await post(http, url, {**sampled, "model": OTHER})
    assert (status, header) == (200, None)  # a route without a cache says nothing of one


async def test_a_route_may_cache_sampled_requests_too(stack: AsyncExitStack, fake_upstream: FakeUpstream,
                                                       http: aiohttp.ClientSession) -> None:
    url = await edge_for(stack, fake_upstream, cache=RouteCache(nondeterministic=True))
    sampled = {"model": MODEL, "messages": [{"role": "user", "content": "sampled"}], "temperature": 0.9}
    assert [(await post(http, url, sampled))[1] for _ in range(2)] == ["miss", "hit"]
    assert (await post(http, url, sampled, {"Cache-Control": "no-store"}))[1] == "bypass"


async def test_no_cache_refreshes_the_entry(stack: AsyncExitStack, fake_upstream: FakeUpstream,
                                            http: aiohttp.ClientSession) -> None:
    url = await edge_for(stack, fake_upstream)
    fake_upstream.play(fu.answer("first answer"), fu.answer("second answer"))
    assert "first answer" in (await post(http, url, body("q")))[2]
    status, header, text = await post(http, url, body("q"), {"Cache-Control": "no-cache"})
    assert (status, header) == (200, "miss") and "second answer" in text  # not read: the service asked again
    status, header, text = await post(http, url, body("q"))
    assert header == "hit" and "second answer" in text  # and its new answer stored
    assert len(fake_upstream.received) == 2


async def test_failed_or_cut_answers_are_never_stored(stack: AsyncExitStack, fake_upstream: FakeUpstream,
                                                      http: aiohttp.ClientSession) -> None:
    url = await edge_for(stack, fake_upstream)
    error = wire.ErrorInfo(status=500, type="server_error", message="boom")
    fake_upstream.play(fu.error_answer(error), fu.drop_mid_stream(frames=2), fu.error_frame(error, after=2),
                       fu.end_without_done(frames=2))
    assert (await post(http, url, body("e")))[:2] == (500, "miss")
    for _ in range(3):  # each stream fails after it began: in-band, and nothing kept
        status, header, text = await post(http, url, body("s", stream=True))
        assert status == 200 and header == "miss" and "data: [DONE]" not in text
    assert (await post(http, url, body("e")))[1] == "miss"
    status, header, text = await post(http, url, body("s", stream=True))
    assert header == "miss" and text.rstrip().endswith("data: [DONE]")
    assert (await post(http, url, body("s", stream=True)))[1] == "hit"
    assert len(fake_upstream.received) == 6


async def test_a_client_that_leaves_mid_stream_stores_nothing(stack: AsyncExitStack, fake_upstream: FakeUpstream,
                                                              http: aiohttp.ClientSession) -> None:
    url = await edge_for(stack, fake_upstream)
    fake_upstream.play(fu.answer("one two three four five six"), pace=0.2)
    async with http.post(url + "/v1/chat/completions", json=body("leave", stream=True)) as r:
        await r.content.readline()  # the first event, then gone
    await fake_upstream.wait_idle()
    assert (await post(http, url, body("leave", stream=True)))[1] == "miss"


async def test_embeddings_are_cached_whatever_their_encoding(stack: AsyncExitStack, fake_upstream: FakeUpstream,
                                                            http: aiohttp.ClientSession) -> None:
    url = await edge_for(stack, fake_upstream)
    request = {"model": MODEL, "input": ["a", "b"]}
    first = await post(http, url, request, path="/v1/embeddings")
    again = await post(http, url, {**request, "encoding_format": "base64"}, path="/v1/embeddings")
    same = await post(http, url, request, path="/v1/embeddings")
    assert (first[1], again[1], same[1]) == ("miss", "hit", "hit")
    assert first[2] == same[2] and len(fake_upstream.embeddings_received) == 1


async def test_the_responses_api_shares_the_chat_requests_entry(stack: AsyncExitStack, fake_upstream: FakeUpstream,
                                                                http: aiohttp.ClientSession) -> None:
    url = await edge_for(stack, fake_upstream)
    request = {"model": MODEL, "input": "what the responses api asks", "temperature": 0}
    status, header, text = await post(http, url, request, path="/v1/responses")
    assert (status, header) == (200, "miss") and '"object":"response"' in text
    status, header, text = await post(http, url, {**request, "stream": True}, path="/v1/responses")
    assert (status, header) == (200, "hit") and "event: response.completed" in text
    assert len(fake_upstream.received) == 1


async def test_a_hit_is_traced_as_a_cache_span_and_no_attempt(stack: AsyncExitStack, fake_upstream: FakeUpstream,
                                                               http: aiohttp.ClientSession) -> None:
    receiver = OtlpReceiver()
    await stack.enter_async_context(receiver.running())
    settings = msgspec.structs.replace(config(fake_upstream.url), tracing=Tracing(
        endpoint=receiver.url, flush_interval=0.05, export_timeout=2.0))
    url = await stack.enter_async_context(serve_app(create_app(settings), "127.0.0.1", 0))
    assert [(await post(http, url, body("traced")))[1] for _ in range(2)] == ["miss", "hit"]
    spans = await receiver.wait_for(lambda spans: len([s for s in spans if s.kind == "server"]) == 2
                                    and len([s for s in spans if s.name == "settle"]) == 2, "two traces")
    for outcome in ("miss", "hit"):
        [cache] = [s for s in spans if s.name == "cache" and s.attributes["ingress.cache"] == outcome]
        names = {s.name for s in receiver.trace(cache.trace_id) if s.kind != "server"}
        assert names == ({"cache", "attempt", "settle"} if outcome == "miss" else {"cache", "settle"})


async def test_a_hit_says_the_route_and_model_that_made_its_entry(stack: AsyncExitStack,
                                                                    fake_upstream: FakeUpstream,
                                                                    http: aiohttp.ClientSession) -> None:
    """x-ingress-served-by on a hit, whole or streamed, names the route and model whose attempt made the stored
    answer (its entry records them), as the miss that stored it did; x-ingress-cache tells the two apart. (After
    a miss that fell back, that is the fallback's: tests/integration/test_fallback_chains.py.)"""
    settings = Settings(groups={"svc": Group(endpoints=[Endpoint(url=fake_upstream.url)])}, timeouts=TIMEOUTS,
                        routes=(Route(name="chat", model=MODEL, group="svc", upstream_model="gpt-4o-2024-08-06",
                                      cache=DEFAULT_CACHE),))
    url = await stack.enter_async_context(serve_app(create_app(settings), "127.0.0.1", 0))
    seen = []
    for stream in (False, False, True):  # the miss, then its whole answer as a hit, and streamed
        async with http.post(f"{url}/v1/chat/completions", json=body("who served", stream=stream)) as r:
            text = await r.text()
            seen.append((r.status, r.headers.get(CACHE), r.headers.get("x-ingress-served-by")))
        assert ("data: [DONE]" in text) if stream else ('"choices"' in text)
    served = 'route="chat", model="gpt-4o-2024-08-06"'
    assert seen == [(200, "miss", served), (200, "hit", served), (200, "hit", served)]
    assert len(fake_upstream.received) == 1  # the hits never reached the service


def tenancy(**limits: Limits) -> tuple[Tenancy, dict[str, str]]:
    """Keys a1, a2 of tenant acme and b1 of globex; their secrets by name."""
    keys, secrets = [], {}
    for name, tenant in (("a1", "acme"), ("a2", "acme"), ("b1", "globex")):
        secret, key_id, key_hash = new_key()
        keys.append(Key(id=key_id, tenant=tenant, hash=key_hash, limits=limits.get(name, Limits())))
        secrets[name] = secret
    return Tenancy(keys=tuple(keys), tenants={"acme": Tenant(), "globex": Tenant()}), secrets


@pytest.mark.parametrize(("scope", "expected"), [
    ("tenant", ["miss", "hit", "miss", "hit"]), ("key", ["miss", "miss", "miss", "hit"]),
    ("global", ["miss", "hit", "hit", "hit"])])
async def test_tenants_never_see_each_others_entries(stack: AsyncExitStack, fake_upstream: FakeUpstream,
                                                     http: aiohttp.ClientSession, scope: Any,
                                                     expected: list[str]) -> None:
    t, secrets = tenancy()
    url = await edge_for(stack, fake_upstream, cache=RouteCache(scope=scope), tenancy=t)
    seen = [(await post(http, url, body("shared question"), {"Authorization": f"Bearer {secrets[name]}"}))[1]
            for name in ("a1", "a2", "b1", "a1")]
    assert seen == expected


def settled(tenant: str) -> float:
    return sample_value("ingress_tokens_settled_total", {"tenant": tenant}) or 0.0


async def test_a_hit_counts_toward_rpm_but_charges_no_tokens(stack: AsyncExitStack, fake_upstream: FakeUpstream,
                                                              http: aiohttp.ClientSession) -> None:
    t, secrets = tenancy(a1=Limits(rpm=1), a2=Limits(tpm=10**6))
    url = await edge_for(stack, fake_upstream, tenancy=t)
    a1, a2 = ({"Authorization": f"Bearer {secrets[name]}"} for name in ("a1", "a2"))
    before = settled("acme")
    assert (await post(http, url, body("counted words here"), a1))[1] == "miss"
    charged = await eventually(lambda: settled("acme") - before, "the miss's tokens settled")
    assert (await post(http, url, body("counted words here"), a1))[0] == 429  # a hit is a request: rpm applies
    status, header, text = await post(http, url, body("counted words here"), a2)  # the tenant's entry
    assert (status, header) == (200, "hit") and '"prompt_tokens":3' in text  # the cached answer's usage
    assert (await post(http, url, body("counted words here", stream=True), a2))[1] == "hit"
    await asyncio.sleep(0.05)
    assert settled("acme") - before == charged  # the hits' tokens were not charged
    assert len(fake_upstream.received) == 1


# --- identical misses in flight: one call to the service -----------------------------------------------------


def coalesced() -> float:
    return sample_value("ingress_cache_coalesced_total", {"route": MODEL}) or 0.0


async def edge_with_flights(stack: AsyncExitStack, fake: FakeUpstream) -> tuple[str, Callable[[], int]]:
    """An edge, and how many requests wait on (or tail) an identical one in flight in it right now."""
    app = create_app(config(fake.url))
    url = await stack.enter_async_context(serve_app(app, "127.0.0.1", 0))

    def following() -> int:
        cache = app[GATEWAY].cache
        assert cache is not None
        return sum(f.joining + f.tailing for f in cache.flights.values())

    return url, following


def held(gate: asyncio.Event, behaviour: fu.Behaviour) -> fu.Behaviour:
    """`behaviour`, once `gate` opens."""

    async def run(call: fu.Call) -> web.StreamResponse:
        await gate.wait()
        return await behaviour(call)

    return run


def slowly(behaviour: fu.Behaviour, seconds: float = 0.4) -> fu.Behaviour:
    """`behaviour`, once `seconds` have passed: long enough for the identical requests to arrive meanwhile."""

    async def run(call: fu.Call) -> web.StreamResponse:
        await asyncio.sleep(seconds)
        return await behaviour(call)

    return run


async def test_identical_misses_in_flight_reach_the_service_once(stack: AsyncExitStack, fake_upstream: FakeUpstream,
                                                                 http: aiohttp.ClientSession) -> None:
    """An agent fleet, a retry storm, a dashboard refresh: the first identical request calls the service, the
    ones that arrive while it is answered wait for its answer, each served it in its own shape and dialect."""
    url, following = await edge_with_flights(stack, fake_upstream)
    gate = asyncio.Event()
    fake_upstream.play(held(gate, fu.answer()))
    prompt = "the same question from eight clients"
    before = coalesced()
    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0) as client:
        messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": prompt}]

        async def whole() -> tuple[str, str | None, str | None]:
            raw = await client.chat.completions.with_raw_response.create(model=MODEL, messages=messages, temperature=0)
            return raw.headers[CACHE], raw.headers.get(SERVED_BY), raw.parse().choices[0].message.content

        async def streamed() -> tuple[str, str | None, str | None]:
            raw = await client.chat.completions.with_raw_response.create(model=MODEL, messages=messages, temperature=0,
                                                                         stream=True)
            chunks = [c async for c in raw.parse()]
            return (raw.headers[CACHE], raw.headers.get(SERVED_BY),
                    "".join(c.choices[0].delta.content or "" for c in chunks if c.choices))

        async def responses() -> tuple[str, str | None, str | None]:
            raw = await client.responses.with_raw_response.create(model=MODEL, input=prompt, temperature=0)
            return raw.headers[CACHE], raw.headers.get(SERVED_BY), raw.parse().output_text

        leader = asyncio.create_task(whole())
        await eventually(lambda: len(fake_upstream.received) == 1 or None, "the first request at the service")
        arriving = asyncio.gather(*(way() for way in (whole, streamed, responses) * 2 + (streamed,)))
        await eventually(lambda: following() == 7 or None, "seven requests waiting on the first")
        gate.set()
        followers = await arriving
        first = await leader

    assert first == ("miss", SERVED, prompt)
    assert followers == [("hit", SERVED, prompt)] * 7  # each says what made the answer it waited for
    assert len(fake_upstream.received) == 1
    assert coalesced() - before == 7
    assert (await post(http, url, body(prompt)))[1] == "hit"  # and it was stored


async def _first_word(stream: openai.AsyncStream[Any]) -> str:
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            return str(chunk.choices[0].delta.content)
    raise AssertionError("the stream ended before any content")


async def test_a_stream_that_waits_is_sent_the_leaders_frames_as_they_come(
        stack: AsyncExitStack, fake_upstream: FakeUpstream, http: aiohttp.ClientSession) -> None:
    """Followers that stream tail the leader's stream: their first token comes while the service is still
    generating (the gate closed), not once the whole answer is in."""
    url = await edge_for(stack, fake_upstream)
    gate = asyncio.Event()
    fake_upstream.play(fu.gated(gate))
    prompt = "tailed from the first word on"
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": prompt}]
    before = coalesced()
    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0) as client:
        streams = []
        for _ in range(3):  # the leader first, then two that find it in flight
            raw = await client.chat.completions.with_raw_response.create(model=MODEL, messages=messages,
                                                                         temperature=0, stream=True)
            stream = raw.parse()
            assert await asyncio.wait_for(_first_word(stream), 5) == "tailed"  # the gate is still closed
            streams.append((raw.headers[CACHE], stream))
            assert raw.headers.get(SERVED_BY) == SERVED  # a tail too says what makes the stream it reads
        responses = await client.responses.with_raw_response.create(model=MODEL, input=prompt, temperature=0,
                                                                     stream=True)
        events = responses.parse()
        first = await asyncio.wait_for(anext(e async for e in events if e.type == "response.output_text.delta"), 5)
        assert first.delta == "tailed"  # in another dialect, the gate still closed
        gate.set()
        texts = ["tailed" + "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
                 for _, stream in streams]
        texts.append("tailed" + "".join([e.delta async for e in events if e.type == "response.output_text.delta"]))

    assert [header for header, _ in streams] + [responses.headers[CACHE]] == ["miss", "hit", "hit", "hit"]
    assert texts == [prompt] * 4
    assert len(fake_upstream.received) == 1 and coalesced() - before == 3
    assert (await post(http, url, body(prompt)))[1] == "hit"  # and stored once whole


async def test_a_leader_whose_client_leaves_reads_on_for_its_followers(
        stack: AsyncExitStack, fake_upstream: FakeUpstream, http: aiohttp.ClientSession) -> None:
    url, following = await edge_with_flights(stack, fake_upstream)
    prompt = "the leader leaves after its first word"
    gate = asyncio.Event()
    fake_upstream.play(fu.gated(gate))
    followed = asyncio.Event()

    async def lead() -> None:
        async with http.post(url + "/v1/chat/completions", json=body(prompt, stream=True)) as r:
            await r.content.readline()  # the first event; then gone, once the followers wait
            await followed.wait()

    leader = asyncio.create_task(lead())
    await eventually(lambda: len(fake_upstream.received) == 1 or None, "the first request at the service")
    arriving = asyncio.gather(*(post(http, url, body(prompt, stream=i % 2 == 0)) for i in range(4)))
    await eventually(lambda: following() == 4 or None, "four requests waiting on the first")
    followed.set()
    await leader  # its client gone, the edge reads on
    gate.set()
    followers = await arriving

    assert [(status, header) for status, header, _ in followers] == [(200, "hit")] * 4
    assert all("word" in text for _, _, text in followers)
    assert len(fake_upstream.received) == 1
    assert (await post(http, url, body(prompt)))[1] == "hit"  # what it read on for them was stored


async def test_a_leader_that_fails_frees_its_followers_to_call_on_their_own(
        stack: AsyncExitStack, fake_upstream: FakeUpstream, http: aiohttp.ClientSession) -> None:
    """A failure is never shared: the followers of a leader whose answer failed before it began each get
    an answer of their own."""
    url = await edge_for(stack, fake_upstream)
    prompt = "a leader that ends with an error"
    fake_upstream.play(slowly(fu.error_answer(wire.ErrorInfo(status=500, type="server_error", message="boom"))))
    before = coalesced()

    async def lead() -> int:
        async with http.post(url + "/v1/chat/completions", json=body(prompt, stream=True)) as r:
            await r.read()
            return r.status

    leader = asyncio.create_task(lead())
    await eventually(lambda: len(fake_upstream.received) == 1 or None, "the first request at the service")
    followers = await asyncio.gather(*(post(http, url, body(prompt, stream=i % 2 == 0)) for i in range(4)))

    assert await leader == 500
    assert [(status, header) for status, header, _ in followers] == [(200, "miss")] * 4
    assert all("error" in text for _, _, text in followers)  # each its own answer: the echo of its prompt
    assert len(fake_upstream.received) == 5 and coalesced() == before


async def test_a_stream_that_breaks_after_its_followers_began_breaks_theirs(
        stack: AsyncExitStack, fake_upstream: FakeUpstream, http: aiohttp.ClientSession) -> None:
    """As their own would: the stream ends with an in-band error, never a truncation that looks whole, and
    nothing is stored."""
    url = await edge_for(stack, fake_upstream)
    gate = asyncio.Event()
    fake_upstream.play(fu.gated(gate, then="drop"))
    prompt = "a stream that breaks midway"

    async def one() -> tuple[str | None, list[str]]:
        async with http.post(url + "/v1/chat/completions", json=body(prompt, stream=True)) as r:
            lines = [(await r.content.readline()).decode()]
            while '"content":"a"' not in lines[-1] and lines[-1]:  # the frames before the gate
                lines.append((await r.content.readline()).decode())
            started.append(1)
            return r.headers.get(CACHE), lines + [line.decode() async for line in r.content]

    started: list[int] = []
    streams = asyncio.gather(*(one() for _ in range(3)))
    await eventually(lambda: len(started) == 3 or None, "every stream began")
    gate.set()

    ended = await streams
    assert sorted(header or "" for header, _ in ended) == ["hit", "hit", "miss"]
    for _, lines in ended:
        assert any('"error"' in line for line in lines) and "data: [DONE]\n" not in lines
    assert len(fake_upstream.received) == 1
    fake_upstream.play(fu.answer())
    assert (await post(http, url, body(prompt)))[1] == "miss"  # nothing was stored


# --- the Redis backend, on real Redis and Valkey servers -----------------------------------------------------


async def redis_edge(stack: AsyncExitStack, fake: FakeUpstream, server: Server,
                     deadline_ms: int = 2000) -> tuple[str, dict[str, str]]:
    """An edge whose tenancy (and so whose cache) is on `server`; the keys' secrets by name."""
    t, secrets = tenancy()
    t = Tenancy(backend="redis", redis=RedisSettings(url=server.url, prefix="rc-test", deadline_ms=deadline_ms),
                keys=t.keys, tenants=t.tenants)
    settings = config(fake.url, cache=RouteCache(ttl=120, backend="redis"), tenancy=t)
    return await stack.enter_async_context(serve_app(create_app(settings), "127.0.0.1", 0)), secrets


@pytest.mark.redis
async def test_the_redis_backend_stores_with_a_ttl_and_serves_either_shape(
        stack: AsyncExitStack, fake_upstream: FakeUpstream, http: aiohttp.ClientSession,
        limit_server: Server) -> None:
    url, secrets = await redis_edge(stack, fake_upstream, limit_server)
    redis = Redis.from_url(limit_server.url)
    stack.push_async_callback(redis.aclose)
    a1, b1 = ({"Authorization": f"Bearer {secrets[name]}"} for name in ("a1", "b1"))
    question = body(f"on {limit_server.kind} {next(_prompts)}", stream=True)
    before: set[Any] = set(await redis.keys("rc-test:rc:*"))
    status, header, streamed = await post(http, url, question, a1)
    assert (status, header) == (200, "miss")
    new = await eventually(lambda: _new_keys(redis, before), "the stream stored in the background")
    assert len(new) == 1
    ttl = await redis.pttl(new[0])
    assert 0 < ttl <= 120_000  # every entry expires
    status, header, again = await post(http, url, question, a1)
    assert (status, header) == (200, "hit") and again == streamed
    status, header, whole = await post(http, url, {**question, "stream": False}, a1)
    assert (status, header) == (200, "hit") and '"object":"chat.completion"' in whole
    assert (await post(http, url, question, b1))[1] == "miss"  # another tenant: its own entry
    assert len(fake_upstream.received) == 2


@pytest.mark.redis
async def test_an_entry_stored_before_entries_named_their_producer_is_served_naming_none(
        stack: AsyncExitStack, fake_upstream: FakeUpstream, http: aiohttp.ClientSession,
        limit_server: Server) -> None:
    """A shared store outlives an upgrade: its entries of the first format (tag, digest, answer: no route and
    model) are still valid answers and served as hits, with no x-ingress-served-by rather than a guess."""
    url, secrets = await redis_edge(stack, fake_upstream, limit_server)
    redis = Redis.from_url(limit_server.url)
    stack.push_async_callback(redis.aclose)
    a1 = {"Authorization": f"Bearer {secrets['a1']}"}
    question = body(f"stored before on {limit_server.kind} {next(_prompts)}")
    before: set[Any] = set(await redis.keys("rc-test:rc:*"))

    async def ask(payload: dict[str, Any]) -> tuple[int, str | None, str | None, str]:
        async with http.post(url + "/v1/chat/completions", json=payload, headers=a1) as r:
            return r.status, r.headers.get(CACHE), r.headers.get(SERVED_BY), await r.text()

    status, header, served, text = await ask(question)
    assert (status, header, served) == (200, "miss", SERVED)
    [key] = await eventually(lambda: _new_keys(redis, before), "the answer stored in the background")
    value = await redis.get(key)
    assert isinstance(value, bytes) and value[:1] == b"w"  # a whole answer, with its producer
    at = 1 + 16  # past the tag and the digest: the route's and the model's lengths and bytes, then the answer
    route_len = int.from_bytes(value[at:at + 2], "big")
    model_len = int.from_bytes(value[at + 2 + route_len:at + 4 + route_len], "big")
    route, model = value[at + 2:at + 2 + route_len], value[at + 4 + route_len:at + 4 + route_len + model_len]
    assert (route, model) == (MODEL.encode(), MODEL.encode())
    answer = value[at + 4 + route_len + model_len:]
    await redis.set(key, b"W" + hashlib.blake2b(answer, digest_size=16).digest() + answer, px=60_000)  # as before

    assert await ask(question) == (200, "hit", None, text)
    status, header, served, streamed = await ask({**question, "stream": True})
    assert (status, header, served) == (200, "hit", None) and "data: [DONE]" in streamed
    await redis.set(key, b"V" + value[1:], px=60_000)  # a format not known: a miss, answered by the service
    assert (await ask(question))[:3] == (200, "miss", SERVED)
    assert len(fake_upstream.received) == 2


async def _new_keys(redis: Redis, before: set[Any]) -> list[Any]:
    return [k for k in await redis.keys("rc-test:rc:*") if k not in before]


@pytest.mark.redis
async def test_a_stopped_store_is_a_miss_and_the_request_succeeds(
        stack: AsyncExitStack, fake_upstream: FakeUpstream, http: aiohttp.ClientSession,
        own_limit_server: Server) -> None:
    url, secrets = await redis_edge(stack, fake_upstream, own_limit_server)
    headers = {"Authorization": f"Bearer {secrets['a1']}"}
    assert (await post(http, url, body("before"), headers))[1] == "miss"
    await eventually(lambda: _stored_count() > 0, "stored")
    assert (await post(http, url, body("before"), headers))[1] == "hit"
    own_limit_server.stop()
    for text in ("before", "after", "before"):  # the tenancy's degraded policy admits; the cache misses
        started = asyncio.get_running_loop().time()
        status, header, _ = await post(http, url, body(text), headers)
        assert (status, header) == (200, "miss")
        assert asyncio.get_running_loop().time() - started < 3.0
    errors = sample_value("ingress_response_cache_errors_total", {"backend": "redis", "call": "get"})
    assert errors and errors > 0


def _stored_count() -> float:
    return sample_value("ingress_response_cache_stores_total", {"backend": "redis"}) or 0.0


@pytest.mark.redis
async def test_a_frozen_store_costs_a_request_at_most_its_deadline(
        stack: AsyncExitStack, fake_upstream: FakeUpstream, http: aiohttp.ClientSession,
        own_limit_server: Server) -> None:
    url, secrets = await redis_edge(stack, fake_upstream, own_limit_server, deadline_ms=200)
    headers = {"Authorization": f"Bearer {secrets['a1']}"}
    assert (await post(http, url, body("before the freeze"), headers))[1] == "miss"
    own_limit_server.freeze()  # connections accepted, nothing answered
    try:
        for n in range(5):  # the cache's deadline is [cache] timeout_ms (50 ms); then its breaker opens
            started = asyncio.get_running_loop().time()
            status, header, _ = await post(http, url, body(f"frozen {n}"), headers)
            assert (status, header) == (200, "miss")
            assert asyncio.get_running_loop().time() - started < 1.5  # the tenancy's 200 ms and the cache's 50
    finally:
        own_limit_server.thaw()
