"""Traces from a real edge to a real OTLP/HTTP receiver on loopback (tests/support/otlp_receiver.py): one server span
a request, parented on the caller's traceparent, its children (admission, each attempt, settle), the hop
carrying the attempt's context in the passport and the header, and spans dropped, not requests slowed,
when the collector stalls. Clients are the official SDKs; the service is the scripted fake."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import pytest
from aiohttp import web
from fakes import upstream as fu
from fakes.processes import CHAT, EdgeProcess, free_port
from fakes.upstream import FakeUpstream
from openai.types.chat import ChatCompletionMessageParam
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes
from otlp_receiver import OtlpReceiver, Span
from waiting import eventually

from ingress import wire
from ingress.guardrails import Guardrails, Pii
from ingress.serve.app import serve_app
from ingress.settings import Bridge, Endpoint, Group, Retry, Route, Settings, Timeouts, Tracing
from ingress.tenancy.keys import new_key
from ingress.tenancy.settings import Key, Limits, Tenancy, Tenant

MODEL = "gpt-4o"
FAST = Timeouts(connect=1.0, first_byte=2.0, idle=2.0)
CALLER_TRACE, CALLER_SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
CALLER = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
KEY, KEY_ID, KEY_HASH = new_key()
HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello there"}]
GEN_AI = {v for k, v in vars(gen_ai_attributes).items() if k.startswith("GEN_AI_") and isinstance(v, str)}


@pytest.fixture
async def receiver() -> AsyncIterator[OtlpReceiver]:
    r = OtlpReceiver()
    async with r.running():
        yield r


def tracing(receiver: OtlpReceiver, **extra: Any) -> Tracing:
    return Tracing(**{"endpoint": receiver.url, "flush_interval": 0.05, "export_timeout": 2.0, **extra})


def edge_settings(receiver: OtlpReceiver, endpoints: list[str], *, trace: Tracing | None = None,
                  **extra: Any) -> Settings:
    return Settings(groups={"main": Group(endpoints=[Endpoint(url=u) for u in endpoints])},
                    routes=(Route(model=MODEL, group="main", provider="openai"),), timeouts=FAST,
                    tracing=trace or tracing(receiver), **extra)


_clients: list[openai.AsyncOpenAI] = []


def oai(url: str, **headers: str) -> openai.AsyncOpenAI:
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0, default_headers=headers)
    _clients.append(client)
    return client


@pytest.fixture(autouse=True)
async def close_clients() -> AsyncIterator[None]:
    yield
    while _clients:
        await _clients.pop().close()


def server_spans(spans: list[Span]) -> list[Span]:
    return [s for s in spans if s.kind == "server"]


def children(spans: list[Span], parent: Span) -> list[Span]:
    return sorted((s for s in spans if s.parent_id == parent.span_id), key=lambda s: s.start_ns)


async def one_trace(receiver: OtlpReceiver, names: set[str]) -> tuple[Span, list[Span]]:
    """The one request's server span, once it and every child named in `names` arrived."""
    spans = await receiver.wait_for(lambda spans: names <= {s.name for s in spans}
                                    and any(s.kind == "server" for s in spans), f"spans {sorted(names)}")
    [server] = server_spans(spans)
    return server, spans


def hop_traceparent(received: fu.Received) -> str:
    passport = wire.read_request(received.body).Passport()
    assert passport is not None
    return (passport.Traceparent() or b"").decode()


async def test_a_chat_answer_is_one_server_span_under_the_callers_with_its_attempt_and_settle(
        start_edge: Any, fake_upstream: FakeUpstream, receiver: OtlpReceiver) -> None:
    url = await start_edge(edge_settings(receiver, [fake_upstream.url]))
    client = oai(url, traceparent=CALLER)
    answer = await client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=20, temperature=0.5,
                                                  top_p=0.9)
    server, spans = await one_trace(receiver, {"attempt", "settle"})

    assert (server.trace_id, server.parent_id, server.name) == (CALLER_TRACE, CALLER_SPAN, f"chat {MODEL}")
    a = server.attributes
    assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.provider.name"] == "openai"
    assert a["gen_ai.request.model"] == MODEL and a["http.route"] == "/v1/chat/completions"
    asked = (a["gen_ai.request.max_tokens"], a["gen_ai.request.temperature"], a["gen_ai.request.top_p"])
    assert asked == (20, 0.5, 0.9)
    assert a["gen_ai.usage.input_tokens"] == answer.usage.prompt_tokens  # type: ignore[union-attr]
    assert a["gen_ai.usage.output_tokens"] == answer.usage.completion_tokens  # type: ignore[union-attr]
    assert a["http.response.status_code"] == 200 and server.status == "unset"
    assert (a["gen_ai.response.id"], a["gen_ai.response.finish_reasons"]) == (answer.id, ["stop"])
    assert {s.trace_id for s in spans} == {CALLER_TRACE} and server.service == "ingress"

    attempt, settle = children(spans, server)
    assert (attempt.name, attempt.kind, settle.name) == ("attempt", "client", "settle")
    assert attempt.attributes["server.address"] == fake_upstream.url and attempt.attributes["ingress.attempt"] == 1
    assert server.start_ns <= attempt.start_ns <= attempt.end_ns <= settle.start_ns <= server.end_ns

    # The hop carries the attempt's context: in the passport, read in place, and in the header alike.
    [received] = fake_upstream.received
    expected = f"00-{CALLER_TRACE}-{attempt.span_id}-01"
    assert hop_traceparent(received) == expected == received.headers["traceparent"]


async def test_a_stream_names_its_first_token_and_usage(start_edge: Any, fake_upstream: FakeUpstream,
                                                        receiver: OtlpReceiver) -> None:
    url = await start_edge(edge_settings(receiver, [fake_upstream.url]))
    stream = await oai(url).chat.completions.create(model=MODEL, messages=HELLO, stream=True,
                                                    stream_options={"include_usage": True})
    chunks = [c async for c in stream]
    usage = [c.usage for c in chunks if c.usage is not None]
    server, spans = await one_trace(receiver, {"attempt", "settle"})
    a = server.attributes
    assert server.parent_id == "" and a["gen_ai.request.stream"] is True
    # The answer's id and why it ended, as the chunks told the client.
    finished = [c.finish_reason for chunk in chunks for c in chunk.choices if c.finish_reason]
    assert (a["gen_ai.response.id"], a["gen_ai.response.finish_reasons"]) == (chunks[0].id, finished) == (
        chunks[0].id, ["stop"])
    assert a["gen_ai.usage.output_tokens"] == usage[0].completion_tokens == 2
    assert "first_token" in server.events and 0 < a["gen_ai.response.time_to_first_chunk"] < 10
    # The usage record, as the access line has it: on the span's attributes, the rest as its `usage` event.
    record = server.event_attributes["usage"]
    assert record["outcome"] == "ok" and record["duration_ms"] > 0 and record["ttfb_ms"] > 0
    assert (a["ingress.api"], a["ingress.route"]) == ("chat", MODEL) and "completion_tokens" not in record
    assert a["gen_ai.response.model"] == MODEL
    [attempt, _] = children(spans, server)
    # A new trace: the edge's own ids, sampled, on the hop.
    assert hop_traceparent(fake_upstream.received[0]) == f"00-{server.trace_id}-{attempt.span_id}-01"


async def test_messages_and_embeddings_are_traced_as_their_operations(
        start_edge: Any, fake_upstream: FakeUpstream, receiver: OtlpReceiver) -> None:
    url = await start_edge(edge_settings(receiver, [fake_upstream.url]))
    async with anthropic.AsyncAnthropic(base_url=url, api_key=KEY, max_retries=0) as claude:
        await claude.messages.create(model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "hi there"}])
    await oai(url).embeddings.create(model=MODEL, input="hello")
    spans = await receiver.wait_for(lambda spans: len(server_spans(spans)) == 2, "two server spans")
    by_route = {s.attributes["http.route"]: s for s in server_spans(spans)}
    messages, embeddings = by_route["/v1/messages"], by_route["/v1/embeddings"]
    assert (messages.name, messages.attributes["ingress.api"]) == (f"chat {MODEL}", "messages")
    assert messages.attributes["gen_ai.request.max_tokens"] == 16
    assert (embeddings.name, embeddings.attributes["gen_ai.operation.name"]) == (f"embeddings {MODEL}", "embeddings")


async def test_gemini_calls_are_traced_as_generate_content_count_tokens_and_embeddings(
        start_edge: Any, fake_upstream: FakeUpstream, receiver: OtlpReceiver) -> None:
    url = await start_edge(edge_settings(receiver, [fake_upstream.url]))
    body = {"contents": [{"role": "user", "parts": [{"text": "hi there"}]}],
            "generationConfig": {"maxOutputTokens": 16}}
    async with aiohttp.ClientSession(headers={"x-goog-api-key": KEY}) as http:
        for method in ("generateContent", "streamGenerateContent?alt=sse", "countTokens"):
            async with http.post(f"{url}/v1beta/models/{MODEL}:{method}", json=body) as r:
                assert r.status == 200, await r.text()
                await r.read()
        embed = {"requests": [{"content": {"parts": [{"text": "hi there"}]}}]}
        async with http.post(f"{url}/v1beta/models/{MODEL}:batchEmbedContents", json=embed) as r:
            assert r.status == 200, await r.text()
    spans = await receiver.wait_for(lambda spans: len(server_spans(spans)) == 4, "four server spans")
    by_route = {s.attributes["http.route"]: s for s in server_spans(spans)}
    whole = by_route["/v1beta/models/{model}:generateContent"]
    streamed = by_route["/v1beta/models/{model}:streamGenerateContent"]
    counted = by_route["/v1beta/models/{model}:countTokens"]
    assert (whole.name, whole.attributes["ingress.api"]) == (f"generate_content {MODEL}", "gemini")
    assert whole.attributes["gen_ai.request.max_tokens"] == 16
    assert streamed.name == f"generate_content {MODEL}" and streamed.attributes["gen_ai.request.stream"] is True
    assert (counted.name, counted.attributes["ingress.api"]) == (f"count_tokens {MODEL}", "gemini_count_tokens")
    embedded = by_route["/v1beta/models/{model}:batchEmbedContents"]
    assert (embedded.name, embedded.attributes["ingress.api"]) == (f"embeddings {MODEL}", "gemini_embeddings")


async def test_a_fallback_is_an_attempt_of_its_own_and_the_hop_names_the_one_that_answered(
        start_edge: Any, fake_upstream: FakeUpstream, receiver: OtlpReceiver) -> None:
    with fu.refusing_url() as refusing:
        settings = Settings(groups={"main": Group(endpoints=[Endpoint(url=refusing)]),
                                    "spare": Group(endpoints=[Endpoint(url=fake_upstream.url)])},
                            routes=(Route(model=MODEL, group="main", fallback="spare"),), timeouts=FAST,
                            retry=Retry(budget_ratio=1.0, budget_min_per_s=1000.0), tracing=tracing(receiver))
        url = await start_edge(settings)
        await asyncio.sleep(0.05)  # the retry budget is earned over time (50 retries by now)
        await oai(url, traceparent=CALLER).chat.completions.create(model=MODEL, messages=HELLO)
        server, spans = await one_trace(receiver, {"attempt", "settle"})
    first, second, _settle = children(spans, server)
    assert (first.status, first.attributes["server.address"], first.attributes["ingress.group"]) == (
        "error", refusing, "main")
    assert first.attributes["error.type"] == "upstream_unavailable" and second.status == "unset"
    assert (second.attributes["server.address"], second.attributes["ingress.group"]) == (fake_upstream.url, "spare")
    assert (server.attributes["ingress.attempts"], second.attributes["ingress.attempt"]) == (2, 2)
    [received] = fake_upstream.received
    assert hop_traceparent(received) == f"00-{CALLER_TRACE}-{second.span_id}-01" == received.headers["traceparent"]


async def test_a_retry_in_the_group_is_an_attempt_of_its_own(start_edge: Any, fake_upstream: FakeUpstream,
                                                              receiver: OtlpReceiver) -> None:
    with fu.refusing_url() as refusing:
        # P2C draws by weight: the refusing endpoint is nearly always tried first, then the retry takes the other.
        settings = Settings(groups={"main": Group(endpoints=[Endpoint(url=refusing, weight=1000),
                                                             Endpoint(url=fake_upstream.url)])},
                            routes=(Route(model=MODEL, group="main"),), timeouts=FAST,
                            retry=Retry(budget_ratio=1.0, budget_min_per_s=1000.0), tracing=tracing(receiver))
        url = await start_edge(settings)
        await asyncio.sleep(0.05)  # the retry budget is earned over time
        retried: Span | None = None
        for sent in range(1, 6):  # until a request was first sent to the refusing endpoint
            await oai(url).chat.completions.create(model=MODEL, messages=HELLO)
            def ended(spans: list[Span], n: int = sent) -> bool:
                return sum(s.name == "settle" for s in spans) == n == len(server_spans(spans))

            spans = await receiver.wait_for(ended, f"{sent} requests' server and settle spans")
            retried = next((s for s in server_spans(spans) if s.attributes["ingress.attempts"] == 2), None)
            if retried is not None:
                break
    assert retried is not None
    first, second, _settle = children(spans, retried)
    assert (first.name, first.status, first.attributes["server.address"]) == ("attempt", "error", refusing)
    assert (second.status, second.attributes["server.address"]) == ("unset", fake_upstream.url)
    assert (first.attributes["ingress.group"], second.attributes["ingress.group"]) == ("main", "main")
    assert (first.attributes["ingress.attempt"], second.attributes["ingress.attempt"]) == (1, 2)
    assert hop_traceparent(fake_upstream.received[-1]) == f"00-{retried.trace_id}-{second.span_id}-01"


async def test_a_fallback_route_is_an_attempt_of_its_own_and_its_reencoded_hop_names_it(
        start_edge: Any, fake_upstream: FakeUpstream, receiver: OtlpReceiver) -> None:
    primary = FakeUpstream()
    async with primary.running():
        primary.play(fu.error_answer(wire.ErrorInfo(status=429, type="rate_limit_error", code="rate_limit_exceeded",
                                                    message="Rate limit reached.")))
        settings = Settings(groups={"main": Group(endpoints=[Endpoint(url=primary.url)]),
                                    "other": Group(endpoints=[Endpoint(url=fake_upstream.url)])},
                            routes=(Route(model=MODEL, group="main", fallbacks=["other"],
                                          fallback_on=("rate_limited",)),
                                    Route(name="other", group="other", upstream_model="other-model")),
                            timeouts=FAST, retry=Retry(budget_ratio=1.0, budget_min_per_s=1000.0),
                            tracing=tracing(receiver))
        url = await start_edge(settings)
        await oai(url, traceparent=CALLER).chat.completions.create(model=MODEL, messages=HELLO)
        server, spans = await one_trace(receiver, {"attempt", "settle"})
    first, second, _settle = children(spans, server)
    assert (first.status, first.attributes["ingress.route"], first.attributes["error.type"]) == (
        "error", MODEL, "rate_limit_exceeded")
    assert (second.status, second.attributes["ingress.route"], second.attributes["ingress.group"]) == (
        "unset", "other", "other")
    [received] = fake_upstream.received
    assert received.request.model == "other-model"
    assert hop_traceparent(received) == f"00-{CALLER_TRACE}-{second.span_id}-01" == received.headers["traceparent"]


async def test_a_limit_refusal_has_its_admission_and_names_the_error(start_edge: Any, fake_upstream: FakeUpstream,
                                                                     receiver: OtlpReceiver) -> None:
    tenancy = Tenancy(keys=(Key(id=KEY_ID, tenant="acme", hash=KEY_HASH, models=(MODEL,), limits=Limits(rpm=1)),),
                      tenants={"acme": Tenant()})
    url = await start_edge(edge_settings(receiver, [fake_upstream.url], tenancy=tenancy, workers=1))
    client = oai(url)
    await client.chat.completions.create(model=MODEL, messages=HELLO)
    with pytest.raises(openai.RateLimitError):
        await client.chat.completions.create(model=MODEL, messages=HELLO)
    spans = await receiver.wait_for(lambda spans: len(server_spans(spans)) == 2, "two server spans")
    admitted, refused = sorted(server_spans(spans), key=lambda s: s.start_ns)
    assert [c.name for c in children(spans, admitted)] == ["admission", "attempt", "settle"]
    assert [c.name for c in children(spans, refused)] == ["admission", "settle"]
    assert children(spans, refused)[0].attributes["ingress.limit.outcome"] == "limited"
    # A refusal is the edge doing its job: named, not an error of the server.
    assert refused.attributes["error.type"] == "rate_limit_exceeded" and refused.status == "unset"
    assert refused.attributes["http.response.status_code"] == 429
    assert (refused.attributes["ingress.tenant"], refused.attributes["ingress.key_id"]) == ("acme", KEY_ID)


async def test_an_upstream_failure_and_a_client_gone_set_the_error_status(
        start_edge: Any, fake_upstream: FakeUpstream, receiver: OtlpReceiver, http: aiohttp.ClientSession) -> None:
    url = await start_edge(edge_settings(receiver, [fake_upstream.url]))
    fake_upstream.play(fu.plain_status(502, "bad gateway"))
    with pytest.raises(openai.APIStatusError):
        await oai(url).chat.completions.create(model=MODEL, messages=HELLO)
    fake_upstream.play(fu.stall_mid_stream(frames=2))
    body = {"model": MODEL, "messages": HELLO, "stream": True}
    async with http.post(f"{url}/v1/chat/completions", json=body) as response:
        await response.content.readline()  # the first event, then the client leaves
    spans = await receiver.wait_for(lambda spans: len(server_spans(spans)) == 2, "two server spans")
    failed, gone = sorted(server_spans(spans), key=lambda s: s.start_ns)
    assert failed.status == "error" and failed.attributes["http.response.status_code"] >= 500
    assert children(spans, failed)[0].status == "error"
    assert (gone.status, gone.attributes["error.type"]) == ("error", "client_closed")


async def test_attribute_names_are_the_conventions_own(start_edge: Any, fake_upstream: FakeUpstream,
                                                       receiver: OtlpReceiver) -> None:
    url = await start_edge(edge_settings(receiver, [fake_upstream.url]))
    await oai(url).chat.completions.create(model=MODEL, messages=HELLO, max_tokens=8)
    server, _ = await one_trace(receiver, {"attempt", "settle"})
    ours = {name for name in server.attributes if name.startswith("gen_ai.")}
    assert ours and ours <= GEN_AI, ours - GEN_AI


async def test_an_unsampled_request_makes_no_span_and_says_so_on_the_hop(
        start_edge: Any, fake_upstream: FakeUpstream, receiver: OtlpReceiver) -> None:
    url = await start_edge(edge_settings(receiver, [fake_upstream.url], trace=tracing(receiver, sample_ratio=0.0)))
    await oai(url).chat.completions.create(model=MODEL, messages=HELLO)
    caller_unsampled = f"00-{CALLER_TRACE}-{CALLER_SPAN}-00"
    await oai(url, traceparent=caller_unsampled).chat.completions.create(model=MODEL, messages=HELLO)
    await asyncio.sleep(0.3)  # six flush intervals
    assert receiver.spans == []
    new, followed = (hop_traceparent(r) for r in fake_upstream.received)
    assert int(new[-2:], 16) & 1 == 0 and followed.startswith(f"00-{CALLER_TRACE}-") and followed.endswith("-00")


async def test_a_stalled_collector_costs_requests_nothing_and_its_spans_are_dropped_and_counted(
        start_edge: Any, fake_upstream: FakeUpstream, receiver: OtlpReceiver, http: aiohttp.ClientSession) -> None:
    receiver.stall = 30.0  # longer than the export timeout: every export fails
    # Each export waits out its 2 s timeout, taking at most a batch of 4 from a queue of 8 each time.
    trace = tracing(receiver, max_queue=8, max_batch=4, export_timeout=2.0)
    url = await start_edge(edge_settings(receiver, [fake_upstream.url], trace=trace))
    client = oai(url)
    before = await dropped_spans(http, url)
    started = time.perf_counter()
    for _ in range(40):  # 120 spans: server, attempt, settle each
        await client.chat.completions.create(model=MODEL, messages=HELLO)
    elapsed = time.perf_counter() - started
    assert elapsed < 20, elapsed  # 40 requests on loopback; a request that waited for an export: 2 s or more
    dropped = await dropped_spans(http, url) - before
    assert dropped >= 120 - 8 - 4 * (1 + elapsed / 2)  # all but the queue and a batch each timeout let through
    assert receiver.exports >= 1


async def test_a_collector_that_is_down_costs_requests_nothing_and_its_spans_are_counted_as_failed_exports(
        start_edge: Any, fake_upstream: FakeUpstream, receiver: OtlpReceiver, http: aiohttp.ClientSession) -> None:
    with fu.refusing_url() as down:
        trace = Tracing(endpoint=f"{down}/v1/traces", flush_interval=0.05, export_timeout=0.5)
        url = await start_edge(edge_settings(receiver, [fake_upstream.url], trace=trace))
        before = await dropped_spans(http, url, "export_failed")
        for _ in range(10):
            await oai(url).chat.completions.create(model=MODEL, messages=HELLO)

        async def counted() -> bool:
            return await dropped_spans(http, url, "export_failed") > before

        await eventually(counted, "failed exports counted")
    assert receiver.spans == []


async def dropped_spans(http: aiohttp.ClientSession, url: str, reason: str = "") -> float:
    """ingress_trace_spans_dropped_total, of one reason or all (the registry is the process's: compare two
    reads)."""
    async with http.get(f"{url}/metrics") as response:
        text = await response.text()
    prefix = "ingress_trace_spans_dropped_total{" + (f'reason="{reason}"' if reason else "")
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix))


async def test_tracing_needs_its_headers_variables(tmp_path: Any) -> None:
    from ingress.config import ConfigError, load_config

    path = tmp_path / "edge.toml"
    path.write_text('[tracing]\nendpoint = "http://127.0.0.1:4318/v1/traces"\n'
                    'headers_env = { authorization = "INGRESS_TEST_UNSET_VARIABLE" }\n')
    os.environ.pop("INGRESS_TEST_UNSET_VARIABLE", None)
    with pytest.raises(ConfigError, match="INGRESS_TEST_UNSET_VARIABLE"):
        load_config(path)


# --- through a bridge -------------------------------------------------------------------------------


ENGINE_ANSWER = {"id": "chatcmpl-e", "object": "chat.completion", "created": 1741571000, "model": "served-model",
                 "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "Hi."}}],
                 "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}}


class Engine:
    """An OpenAI-compatible engine that records each request's headers: whole answers, or a 429."""

    def __init__(self) -> None:
        self.headers: list[dict[str, str]] = []
        self.refuse = False

    async def handle(self, request: web.Request) -> web.Response:
        self.headers.append(dict(request.headers))
        await request.read()
        if self.refuse:
            error = {"message": "slow down", "type": "requests", "code": "rate_limit_exceeded"}
            return web.json_response({"error": error}, status=429, headers={"x-request-id": "req_engine_2"})
        return web.json_response(ENGINE_ANSWER, headers={"x-request-id": "req_engine_1"})


async def test_an_in_process_bridge_continues_the_trace_from_the_passport_and_sends_it_to_the_engine(
        start_edge: Any, receiver: OtlpReceiver) -> None:
    engine = Engine()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", engine.handle)
    async with serve_app(app, "127.0.0.1", 0) as engine_url:
        bridge = Bridge(dialect="openai", target=f"{engine_url}/v1", timeouts=FAST)
        url = await start_edge(Settings(groups={"engine": Group(endpoints=[Endpoint(bridge=bridge)])},
                                        routes=(Route(model=MODEL, upstream_model="Qwen/Qwen3-8B", group="engine"),),
                                        timeouts=FAST, tracing=tracing(receiver)))
        client = oai(url, traceparent=CALLER)
        await client.chat.completions.create(model=MODEL, messages=HELLO)
        engine.refuse = True
        with pytest.raises(openai.RateLimitError):
            await client.chat.completions.create(model=MODEL, messages=HELLO)
        spans = await receiver.wait_for(
            lambda spans: len([s for s in spans if s.name.startswith("chat Qwen")]) == 2 == len(server_spans(spans)),
            "two bridge spans and two server spans")
    servers = sorted(server_spans(spans), key=lambda s: s.start_ns)
    assert len(servers) == 2 and {s.trace_id for s in spans} == {CALLER_TRACE}
    for server, engine_headers in zip(servers, engine.headers, strict=True):
        attempt = children(spans, server)[0]
        [bridged] = children(spans, attempt)  # the bridge's span is the attempt's child: read from the passport
        assert (bridged.name, bridged.kind) == ("chat Qwen/Qwen3-8B", "client")
        assert bridged.attributes["server.address"] == f"{engine_url}/v1"
        assert bridged.attributes["gen_ai.provider.name"] == "openai"
        # The engine is asked with the bridge span's context, so its own spans join the same trace.
        assert engine_headers["traceparent"] == f"00-{CALLER_TRACE}-{bridged.span_id}-01"
    ok, refused = (children(spans, children(spans, s)[0])[0] for s in servers)
    assert (ok.status, ok.attributes["http.response.status_code"]) == ("unset", 200)
    assert ok.attributes["ingress.provider.request_id"] == "req_engine_1"
    assert (refused.status, refused.attributes["http.response.status_code"]) == ("error", 429)
    assert refused.attributes["ingress.provider.request_id"] == "req_engine_2"


async def test_a_bridged_embeddings_call_is_its_own_operation(start_edge: Any, receiver: OtlpReceiver) -> None:
    engine = Engine()

    async def embed(request: web.Request) -> web.Response:
        engine.headers.append(dict(request.headers))
        await request.read()
        return web.json_response({"object": "list", "model": "bge-m3", "usage": {"prompt_tokens": 1, "total_tokens": 1},
                                  "data": [{"object": "embedding", "index": 0, "embedding": [0.5, 0.25]}]})

    app = web.Application()
    app.router.add_post("/v1/embeddings", embed)
    async with serve_app(app, "127.0.0.1", 0) as engine_url:
        bridge = Bridge(dialect="openai", target=f"{engine_url}/v1", timeouts=FAST)
        url = await start_edge(Settings(groups={"engine": Group(endpoints=[Endpoint(bridge=bridge)])},
                                        routes=(Route(model=MODEL, upstream_model="BAAI/bge-m3", group="engine"),),
                                        timeouts=FAST, tracing=tracing(receiver)))
        await oai(url, traceparent=CALLER).embeddings.create(model=MODEL, input="hello")
        spans = await receiver.wait_for(
            lambda spans: len(server_spans(spans)) == 1 and any(s.name == "embeddings BAAI/bge-m3" for s in spans),
            "the edge's and the bridge's spans")
    [server] = server_spans(spans)
    [bridged] = children(spans, children(spans, server)[0])
    assert (bridged.name, bridged.kind) == ("embeddings BAAI/bge-m3", "client")
    assert bridged.attributes["gen_ai.operation.name"] == "embeddings"
    assert bridged.attributes["http.response.status_code"] == 200
    assert engine.headers[0]["traceparent"] == f"00-{CALLER_TRACE}-{bridged.span_id}-01"


async def test_a_python_service_starts_its_span_from_the_request_buffer(fake_upstream: FakeUpstream,
                                                                         start_edge: Any,
                                                                         receiver: OtlpReceiver) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    url = await start_edge(edge_settings(receiver, [fake_upstream.url]))
    await oai(url, traceparent=CALLER).chat.completions.create(model=MODEL, messages=HELLO)
    server, spans = await one_trace(receiver, {"attempt", "settle"})
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    span = wire.start_span(provider.get_tracer("service"), fake_upstream.received[0].body, "generate")
    span.end()
    [ours] = exported.get_finished_spans()
    attempt = children(spans, server)[0]
    assert ours.parent is not None and (f"{ours.parent.trace_id:032x}", f"{ours.parent.span_id:016x}") == (
        CALLER_TRACE, attempt.span_id)
    assert wire.trace_context(fake_upstream.received[0].body) == (f"00-{CALLER_TRACE}-{attempt.span_id}-01", None)


async def test_a_drain_sends_the_spans_still_queued_and_a_stream_it_ended_is_one_failed_span(
        tmp_path: Path, fake_upstream: FakeUpstream, receiver: OtlpReceiver) -> None:
    """A real `ingress serve` process stopped with SIGTERM: the stream that outlived the drain's deadline
    is one server span with the error status, and it reached the collector although the batch interval
    (a minute) never came: the drain flushed it."""
    fake_upstream.play(fu.stall_mid_stream(frames=3))
    config = tmp_path / "edge.toml"
    config.write_text(f'[drain]\ndelay = 0.2\ndeadline = 0.5\n\n[tracing]\nendpoint = "{receiver.url}"\n'
                      "flush_interval = 60.0\n")
    edge = EdgeProcess(tmp_path, "edge", free_port(), ["--config", str(config), "--upstream", fake_upstream.url], 1,
                       None)
    try:
        await edge.started()
        body = {"model": MODEL, "messages": HELLO, "stream": True}
        async with aiohttp.ClientSession() as http, http.post(edge.url + CHAT, json=body) as response:
            await response.content.readline()
            edge.terminate()
            rest = (await response.read()).decode()
        assert "shutting_down" in rest and "[DONE]" not in rest
        assert await edge.exit_code(timeout=15) == 0
    finally:
        edge.kill()
    [server] = server_spans(await receiver.wait_for(lambda spans: bool(server_spans(spans)), "the server span"))
    assert (server.status, server.attributes["error.type"]) == ("error", "shutting_down")
    assert [c.name for c in children(receiver.spans, server)] == ["attempt", "settle"]


async def test_a_route_may_put_the_redacted_prompt_and_the_answer_on_its_spans(
        start_edge: Any, fake_upstream: FakeUpstream, receiver: OtlpReceiver) -> None:
    guarded = Key(id=KEY_ID, tenant="acme", hash=KEY_HASH, models=("*",),
                  guardrails=Guardrails(pii=Pii(email="redact")))
    url = await start_edge(Settings(
        groups={"main": Group(endpoints=[Endpoint(url=fake_upstream.url)])},
        routes=(Route(model=MODEL, group="main", trace_content=True), Route(model="plain", group="main")),
        timeouts=FAST, tracing=tracing(receiver), workers=1,
        tenancy=Tenancy(keys=(guarded,), tenants={"acme": Tenant()})))
    asked: list[ChatCompletionMessageParam] = [{"role": "system", "content": "Be brief."},
                                               {"role": "user", "content": "mail ann@example.com now"}]
    client = oai(url)
    await client.chat.completions.create(model=MODEL, messages=asked)
    stream = await client.chat.completions.create(model=MODEL, messages=asked, stream=True)
    async for _ in stream:
        pass
    await client.chat.completions.create(model="plain", messages=asked)
    spans = await receiver.wait_for(lambda spans: len(server_spans(spans)) == 3, "three server spans")
    whole, streamed, plain = sorted(server_spans(spans), key=lambda s: s.start_ns)
    sent = fake_upstream.received[0].user_text
    assert "ann@example.com" not in sent  # redacted before it was sent: the span shows what was sent
    for span in (whole, streamed):
        assert json.loads(span.attributes["gen_ai.input.messages"]) == [
            {"role": "system", "parts": [{"type": "text", "content": "Be brief."}]},
            {"role": "user", "parts": [{"type": "text", "content": sent}]}]
    for span in (whole, streamed):
        assert json.loads(span.attributes["gen_ai.output.messages"]) == [
            {"role": "assistant", "parts": [{"type": "text", "content": sent}], "finish_reason": "stop"}]
    assert not {"gen_ai.input.messages", "gen_ai.output.messages"} & set(plain.attributes)
    assert all("ann@example.com" not in str(s.attributes) for s in spans)
