"""Keys and limits at a real edge on loopback, the official openai SDK as the client: authentication,
the models a key may use, OpenAI's 429 contract (true Retry-After, x-should-retry), the x-ratelimit
headers on every answer (streams included), reservations reconciled from usage, concurrency slots."""

from __future__ import annotations

import asyncio
import json
import os
import time
from contextlib import AsyncExitStack
from typing import Any

import aiohttp
import msgspec
import openai
import pytest
from fakes.upstream import FakeUpstream, answer, slow_head
from logcapture import lines
from prometheus_client import REGISTRY
from recording import recording_edge
from redis_servers import Server
from waiting import eventually

from ingress import wire
from ingress.encoding.passport import RequestMeta, compute_passport
from ingress.encoding.requests import encode_request
from ingress.exchange import Exchange
from ingress.guardrails import Guardrails, Pii
from ingress.oai.chat import ChatCompletionRequest, UserMessage
from ingress.settings import Settings
from ingress.tenancy.keys import new_key
from ingress.tenancy.settings import Budget, Key, Limits, Redis, Tenancy, Tenant
from ingress.tenancy.stores import redis as redis_store
from ingress.tokens import count_cache, counter_for
from ingress.wire.decode import read_request

MODEL, HIDDEN = "ingress-demo", "hidden-model"
KEY, KEY_ID, KEY_HASH = new_key()
HELLO: list[Any] = [{"role": "user", "content": "Say hello to the edge"}]


NONE = Limits()


def settings(limits: Limits = NONE, tenant: Limits = NONE, upstream: str | None = None,
             store: Server | None = None) -> Settings:
    """One key of tenant acme; its limits in this process's memory, or in `store` (a real Redis or Valkey)."""
    shared = {} if store is None else {"backend": "redis", "redis": Redis(
        url=store.url, prefix="t" + os.urandom(5).hex(), deadline_ms=5000)}  # never the degraded fallback
    tenancy = Tenancy(keys=(Key(id=KEY_ID, tenant="acme", hash=KEY_HASH, models=(MODEL,), limits=limits),),
                      tenants={"acme": Tenant(limits=tenant)}, **shared)  # type: ignore[arg-type]
    if upstream is not None:
        return Settings(upstream=upstream, models=(MODEL, HIDDEN), tenancy=tenancy, workers=1)
    return Settings(models=(MODEL, HIDDEN), tenancy=tenancy, workers=1)  # one process: the whole of each limit


class Edge:
    def __init__(self, stack: AsyncExitStack, url: str, exchanges: list[Exchange]) -> None:
        self.stack, self.url, self.exchanges = stack, url, exchanges

    def client(self, key: str = KEY, **options: Any) -> openai.AsyncOpenAI:
        client = openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key=key, **options)
        self.stack.push_async_callback(client.close)
        return client

    def statuses(self) -> list[int]:
        return [429 if exchange.admitted.outcome == "limited" else 200 if exchange.error is None
                else exchange.error.status
                for exchange in self.exchanges]


async def edge(stack: AsyncExitStack, config: Settings) -> Edge:
    url, _, exchanges = await recording_edge(stack, config)
    return Edge(stack, url, exchanges)


async def test_no_key_or_a_wrong_key_is_openais_401(stack: AsyncExitStack) -> None:
    e = await edge(stack, settings())
    async with aiohttp.ClientSession() as http, \
            http.post(f"{e.url}/v1/chat/completions", json={"model": MODEL, "messages": HELLO}) as r:
        assert r.status == 401  # (the SDK will not send a request without a key)
        assert (await r.json())["error"] == {
            "message": "You didn't provide an API key. Provide it in the Authorization header "
                       "(Authorization: Bearer YOUR_KEY).",
            "type": "invalid_request_error", "param": None, "code": "invalid_api_key"}
    wrong = KEY[:-3] + "xyz"
    with pytest.raises(openai.AuthenticationError) as refused:
        await e.client(wrong).models.list()
    assert refused.value.code == "invalid_api_key" and wrong not in str(refused.value.body)
    async with aiohttp.ClientSession() as http:  # x-api-key, as Anthropic-style clients send it
        async with http.get(f"{e.url}/v1/models", headers={"x-api-key": KEY}) as r:
            assert r.status == 200
        async with http.get(f"{e.url}/healthz") as r:  # probes need no key
            assert r.status == 200
        # An Anthropic client without one is told where Anthropic's SDKs send it, in Anthropic's envelope.
        async with http.post(f"{e.url}/v1/messages", json={"model": MODEL, "max_tokens": 8, "messages": HELLO},
                             headers={"anthropic-version": "2023-06-01"}) as r:
            error = (await r.json())["error"]
            assert r.status == 401 and error["type"] == "authentication_error"
            assert "x-api-key: YOUR_KEY" in error["message"]


async def test_a_key_sees_and_calls_only_its_models(stack: AsyncExitStack) -> None:
    e = await edge(stack, settings())
    client = e.client()
    assert [m.id async for m in client.models.list()] == [MODEL]
    with pytest.raises(openai.NotFoundError) as hidden:
        await client.chat.completions.create(model=HIDDEN, messages=HELLO)
    with pytest.raises(openai.NotFoundError) as unknown:
        await client.chat.completions.create(model="no-such-model", messages=HELLO)
    assert hidden.value.code == unknown.value.code == "model_not_found"
    assert "does not exist or you do not have access to it" in hidden.value.message
    with pytest.raises(openai.NotFoundError):
        await client.models.retrieve(HIDDEN)
    assert (await client.chat.completions.create(model=MODEL, messages=HELLO)).choices[0].message.content


async def test_the_429_says_when_and_the_sdk_retries_then_succeeds(stack: AsyncExitStack) -> None:
    e = await edge(stack, settings(Limits(rpm=60)))
    client = e.client(max_retries=0)
    with pytest.raises(openai.RateLimitError) as limited:
        for _ in range(1000):  # 60 at once, and one a second after (more if this machine is slow)
            await client.chat.completions.create(model=MODEL, messages=HELLO)
    assert 60 <= len(e.exchanges) - 1 < 1000
    error, headers = limited.value, limited.value.response.headers
    assert error.code == "rate_limit_exceeded" and error.type == "requests"
    assert f"key '{KEY_ID}'" in error.message and "requests per minute: limit 60" in error.message
    wait_ms = int(headers["retry-after-ms"])
    assert 0 < wait_ms <= 1000 and int(headers["retry-after"]) == 1
    assert headers["x-ratelimit-limit-requests"] == "60" and headers["x-ratelimit-remaining-requests"] == "0"
    assert "x-should-retry" not in headers
    attempts = len(e.exchanges)
    started = time.monotonic()
    await e.client(max_retries=2).chat.completions.create(model=MODEL, messages=HELLO)  # the SDK's own retry
    assert e.statuses()[attempts:] in ([429, 200], [200])  # time may have refilled one already
    assert time.monotonic() - started < 10  # it waited about the Retry-After, not a backoff


async def test_what_can_never_fit_is_not_retried_by_the_sdk(stack: AsyncExitStack) -> None:
    e = await edge(stack, settings(Limits(tpm=1000)))
    with pytest.raises(openai.RateLimitError) as never:
        await e.client(max_retries=3).chat.completions.create(model=MODEL, messages=HELLO, max_tokens=5000)
    assert never.value.response.headers["x-should-retry"] == "false" and never.value.type == "tokens"
    assert "more than the limit allows at once" in never.value.message
    assert e.statuses() == [429]  # exactly one attempt


async def test_a_spent_budget_is_insufficient_quota_and_not_retried(stack: AsyncExitStack) -> None:
    e = await edge(stack, settings(tenant=Limits(budget=Budget(tokens=500))))
    client = e.client(max_retries=3)
    with pytest.raises(openai.RateLimitError) as spent:
        for _ in range(100):  # each reserves 406 tokens and is charged its usage (about ten)
            await client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=400)
    assert spent.value.code == "insufficient_quota" and spent.value.type == "insufficient_quota"
    assert spent.value.response.headers["x-should-retry"] == "false"
    assert "Budget exhausted for tenant 'acme': 500 tokens per month" in spent.value.message
    statuses = e.statuses()
    assert statuses[-1] == 429 and set(statuses[:-1]) == {200} and len(statuses) > 5  # one attempt, not four


async def _create(client: openai.AsyncOpenAI, endpoint: str, prompt: str, max_tokens: int | None = None) -> Any:
    """One request on `endpoint` with its own output bound, or none; the raw response."""
    if endpoint == "chat":
        bound: dict[str, Any] = {} if max_tokens is None else {"max_tokens": max_tokens}
        return await client.chat.completions.with_raw_response.create(
            model=MODEL, messages=[{"role": "user", "content": prompt}], **bound)
    if endpoint == "completions":
        bound = {} if max_tokens is None else {"max_tokens": max_tokens}
        return await client.completions.with_raw_response.create(model=MODEL, prompt=prompt, **bound)
    bound = {} if max_tokens is None else {"max_output_tokens": max_tokens}
    return await client.responses.with_raw_response.create(model=MODEL, input=prompt, **bound)


@pytest.mark.parametrize("endpoint", ["chat", "completions", "responses"])
async def test_a_request_without_max_tokens_fits_a_small_token_limit_and_only_its_own_bound_cannot(
        stack: AsyncExitStack, endpoint: str) -> None:
    """Issue 29, 4: under tpm = 100, a request that sets no output bound reserved the 4,096 default and was
    refused for good ("needs 4107 tokens"). Its default is now what the limit leaves beside its prompt;
    only a prompt, or a prompt and a bound of the request's own, too large for the limit is refused for good."""
    e = await edge(stack, settings(Limits(tpm=100)))
    client = e.client(max_retries=0)
    raw = await _create(client, endpoint, HELLO[0]["content"])
    assert raw.status_code == 200
    assert raw.headers["x-ratelimit-remaining-tokens"] == "0"  # the prompt and the rest of the limit, no more
    prompt = e.exchanges[-1].routed.prompt_tokens
    assert prompt is not None and prompt < 50
    with pytest.raises(openai.RateLimitError) as own:
        await _create(client, endpoint, HELLO[0]["content"], max_tokens=100)
    assert own.value.response.headers["x-should-retry"] == "false"
    assert f"this request needs {prompt + 100} tokens, more than the limit allows at once" in own.value.message
    with pytest.raises(openai.RateLimitError) as long:
        await _create(client, endpoint, "hello " * 200)
    assert long.value.response.headers["x-should-retry"] == "false"
    long_prompt = e.exchanges[-1].routed.prompt_tokens
    assert long_prompt is not None and long_prompt > 100
    assert f"this request needs {long_prompt} tokens" in long.value.message  # its prompt: no output reserved
    assert e.statuses() == [200, 429, 429]


async def _budget_edge(stack: AsyncExitStack, holds: int, store: Server | None = None,
                       upstream: str | None = None) -> Edge:
    """An edge whose key has a daily token budget that holds `holds` reservations of HELLO with max_tokens
    100 at once, never one more (50 tokens more, less than one); each such request uses about ten."""
    hello = ChatCompletionRequest(model=MODEL, messages=[UserMessage(content=HELLO[0]["content"])])
    reserved = counter_for(MODEL).chat(hello) + 100
    budget = Limits(budget=Budget(tokens=holds * reserved + 50, period="day"))
    return await edge(stack, settings(budget, upstream=upstream, store=store))


async def test_a_budget_held_by_unsettled_reservations_is_retried_not_spent(
        stack: AsyncExitStack, limit_server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 29, 5, as reported, on a real Redis and a real Valkey: settles are batched (BATCH_DELAY after
    a request ends; half a second here, so that back-to-back requests find them unsettled however slow
    this machine is). The budget holds two reservations; each request uses about ten tokens. Five
    requests back to back on one connection: the two reservations hold the rest, so the third to fifth
    are refused, but as a rate limit that says so, with a true Retry-After, not as a spent budget; the
    SDK's own retry then succeeds."""
    monkeypatch.setattr(redis_store, "BATCH_DELAY", 0.5)
    e = await _budget_edge(stack, 2, limit_server)
    client = e.client(max_retries=0)
    refusals: list[openai.RateLimitError] = []
    for _ in range(5):
        try:
            await client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=100)
        except openai.RateLimitError as exc:
            refusals.append(exc)
    assert e.statuses() == [200, 200, 429, 429, 429]
    for refused in refusals:
        headers = refused.response.headers
        assert refused.code == "rate_limit_exceeded" and refused.type == "tokens"
        assert "held by requests in flight" in refused.message and "Budget exhausted" not in refused.message
        assert headers["x-should-retry"] == "true"
        assert headers["retry-after"] == "1" and headers["retry-after-ms"] == "1000"
    attempts = len(e.exchanges)
    await e.client(max_retries=2).chat.completions.create(model=MODEL, messages=HELLO, max_tokens=100)
    assert e.statuses()[attempts:] == [429, 200]  # the SDK waited the Retry-After, and the settles had landed


async def test_a_budget_held_by_a_request_in_progress_is_retried_not_spent(stack: AsyncExitStack) -> None:
    """Issue 29, 5, in one process's memory, where settling is immediate: a stream in progress holds its
    reservation, and a request that what is spent leaves room for is told to retry; the SDK's own
    retry succeeds once the stream has ended."""
    fake = FakeUpstream()
    upstream = await stack.enter_async_context(fake.running())
    e = await _budget_edge(stack, 1, upstream=upstream)
    fake.play(answer("one two three four five six seven eight"), pace=0.3)
    client = e.client(max_retries=0)
    stream = await client.chat.completions.create(model=MODEL, messages=HELLO, stream=True, max_tokens=100)
    assert (await anext(aiter(stream))).choices
    with pytest.raises(openai.RateLimitError) as held:
        await client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=100)
    assert held.value.code == "rate_limit_exceeded" and "held by requests in flight" in held.value.message
    assert held.value.response.headers["x-should-retry"] == "true"
    retried = asyncio.ensure_future(e.client(max_retries=2).chat.completions.create(
        model=MODEL, messages=HELLO, max_tokens=100))
    await eventually(lambda: len(e.exchanges) == 3, "the SDK's first attempt refused")
    await stream.close()  # the stream ends: its reservation settles, and the budget has room again
    assert (await retried).choices
    assert e.statuses() == [200, 429, 429, 200]


async def test_every_answer_carries_the_headers_a_stream_in_its_head(stack: AsyncExitStack) -> None:
    e = await edge(stack, settings(Limits(rpm=100, tpm=10_000)))
    client = e.client()
    raw = await client.chat.completions.with_raw_response.create(model=MODEL, messages=HELLO, stream=True)
    head = raw.headers  # read before a byte of the body
    assert head["x-ratelimit-limit-requests"] == "100" and head["x-ratelimit-remaining-requests"] == "99"
    assert head["x-ratelimit-limit-tokens"] == "10000"
    assert int(head["x-ratelimit-remaining-tokens"]) < 10_000 and head["x-ratelimit-reset-tokens"].endswith("s")
    chunks = [c async for c in raw.parse()]
    assert chunks[-1].choices[0].finish_reason == "stop"
    for call in (client.completions.with_raw_response.create(model=MODEL, prompt="hi"),
                 client.embeddings.with_raw_response.create(model=MODEL, input="hi"),
                 client.responses.with_raw_response.create(model=MODEL, input="hi")):
        assert (await call).headers["x-ratelimit-remaining-requests"]


async def test_a_reservation_is_reconciled_from_the_usage(stack: AsyncExitStack) -> None:
    e = await edge(stack, settings(Limits(tpm=10_000)))
    client = e.client()
    first = await client.chat.completions.with_raw_response.create(model=MODEL, messages=HELLO, max_tokens=5000)
    reserved_left = int(first.headers["x-ratelimit-remaining-tokens"])
    usage = first.parse().usage
    assert usage is not None and reserved_left <= 10_000 - 5000
    after = await client.chat.completions.with_raw_response.create(model=MODEL, messages=HELLO, max_tokens=1)
    # The first request's unused 5000-odd tokens came back: only its usage and this small reservation
    # (its prompt's estimate and 1) remain, less what time refilled.
    left = int(after.headers["x-ratelimit-remaining-tokens"])
    assert left >= 10_000 - usage.total_tokens - 100, left


async def test_a_cancelled_stream_frees_its_concurrency_slot(stack: AsyncExitStack) -> None:
    fake = FakeUpstream()
    upstream = await stack.enter_async_context(fake.running())
    e = await edge(stack, settings(Limits(concurrency=1), upstream=upstream))
    fake.play(answer("one two three four five six"), pace=0.5)
    client = e.client(max_retries=0)
    stream = await client.chat.completions.create(model=MODEL, messages=HELLO, stream=True)
    first = await anext(aiter(stream))
    assert first.choices
    with pytest.raises(openai.RateLimitError) as busy:
        await client.chat.completions.create(model=MODEL, messages=HELLO)
    assert "in progress" in busy.value.message and busy.value.type == "requests"
    await stream.close()  # the client goes away mid-stream

    async def freed() -> bool:
        try:
            await client.chat.completions.create(model=MODEL, messages=HELLO)
        except openai.RateLimitError:
            return False
        return True

    await eventually(freed, "the slot freed", timeout=10)


async def test_internal_services_see_the_keys_public_id_and_tenant_never_the_key(stack: AsyncExitStack) -> None:
    fake = FakeUpstream()
    upstream = await stack.enter_async_context(fake.running())
    e = await edge(stack, settings(upstream=upstream))
    await e.client().chat.completions.create(model=MODEL, messages=HELLO)
    (received,) = fake.received
    passport = read_request(received.body).Passport()
    assert passport is not None
    assert passport.KeyId() == KEY_ID.encode() and passport.TenantId() == b"acme"
    assert KEY.encode() not in received.body and "authorization" not in received.headers


async def test_the_access_line_and_metrics_name_the_tenant_key_and_outcome(stack: AsyncExitStack,
                                                                          log_stream: Any) -> None:
    e = await edge(stack, settings(Limits(rpm=1)))
    client = e.client(max_retries=0)
    await client.chat.completions.create(model=MODEL, messages=HELLO)
    with pytest.raises(openai.RateLimitError):
        await client.chat.completions.create(model=MODEL, messages=HELLO)
    access = [line for line in lines(log_stream) if line.get("path") == "/v1/chat/completions"]
    assert [(a["tenant"], a["key_id"], a["limit"], a["status"]) for a in access] == [
        ("acme", KEY_ID, "admitted", 200), ("acme", KEY_ID, "limited", 429)]
    assert KEY not in log_stream.getvalue()
    async with aiohttp.ClientSession() as http, http.get(f"{e.url}/metrics") as r:
        text = await r.text()
    assert 'ingress_limited_total{kind="requests",scope="key",tenant="acme"}' in text
    assert KEY not in text and KEY_HASH not in text


async def test_an_open_edge_stays_open_without_tenancy(stack: AsyncExitStack) -> None:
    url, _, exchanges = await recording_edge(stack, Settings())
    client = Edge(stack, url, exchanges).client("anything")
    raw = await client.chat.completions.with_raw_response.create(model=MODEL, messages=HELLO)
    assert "x-ratelimit-limit-requests" not in raw.headers
    assert json.loads(raw.text)["choices"]


async def test_only_a_key_whose_limits_charge_the_prompt_has_it_counted_exactly(stack: AsyncExitStack) -> None:
    """gpt-4o's prompt is counted with o200k only for the key with a tpm limit; the key with an rpm limit
    alone (and the open edge) get the estimate, in the passport and the reservation, and no tokenizer runs."""
    rpm_key, rpm_id, rpm_hash = new_key()
    tenancy = Tenancy(keys=(Key(id=KEY_ID, tenant="acme", hash=KEY_HASH, limits=Limits(tpm=10**9)),
                            Key(id=rpm_id, tenant="acme", hash=rpm_hash, limits=Limits(rpm=10**6))))
    e = await edge(stack, Settings(models=("gpt-4o",), tenancy=tenancy, workers=1))
    cache = count_cache("o200k")

    def messages(n: int) -> list[Any]:
        return [{"role": "user", "content": f"{n} {time.time_ns()}: how far is the river from the city? " * 4}]

    for key, exact in ((rpm_key, False), (KEY, True)):
        sent = messages(0)
        misses = cache.misses
        await e.client(key).chat.completions.create(model="gpt-4o", messages=sent, max_tokens=5)
        request = ChatCompletionRequest(model="gpt-4o", messages=[UserMessage(content=sent[0]["content"])])
        assert e.exchanges[-1].routed.prompt_tokens == counter_for("gpt-4o").chat(request, exact=exact)
        assert cache.misses == misses + exact  # the tokenizer ran for the tpm key alone
    url, _, exchanges = await recording_edge(stack, Settings(models=("gpt-4o",)))
    sent = messages(1)
    misses = cache.misses
    await Edge(stack, url, exchanges).client("anything").chat.completions.create(model="gpt-4o", messages=sent)
    request = ChatCompletionRequest(model="gpt-4o", messages=[UserMessage(content=sent[0]["content"])])
    assert exchanges[-1].routed.prompt_tokens == counter_for("gpt-4o").chat(request, exact=False)
    assert cache.misses == misses


@pytest.mark.parametrize("n", [8, 32])
async def test_concurrent_bursts_do_not_overshoot_the_token_limit(stack: AsyncExitStack, n: int) -> None:
    fake = FakeUpstream(default=slow_head(1.0))  # nothing settles (and refunds) while the burst arrives
    upstream = await stack.enter_async_context(fake.running())
    e = await edge(stack, settings(Limits(tpm=2000), upstream=upstream))
    client = e.client(max_retries=0)

    async def one() -> bool:
        try:
            await client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=300)
        except openai.RateLimitError:
            return False
        return True

    admitted = sum(await asyncio.gather(*(one() for _ in range(n))))
    hello = ChatCompletionRequest(model=MODEL, messages=[UserMessage(content=HELLO[0]["content"])])
    prompt = counter_for(MODEL).chat(hello)
    assert admitted == 2000 // (300 + prompt)  # each reserves its prompt's count and its max_tokens


async def test_a_flatbuffers_client_presents_a_key_and_is_held_to_the_same_limits(stack: AsyncExitStack) -> None:
    fake = FakeUpstream()
    upstream = await stack.enter_async_context(fake.running())
    e = await edge(stack, settings(Limits(rpm=2, tpm=10_000), upstream=upstream))
    request = ChatCompletionRequest(model=MODEL, messages=[UserMessage(content="hi")], max_tokens=100)
    body = bytes(encode_request(request, "bin-1", compute_passport(request, RequestMeta())))
    key = {"Authorization": f"Bearer {KEY}", "Content-Type": wire.CONTENT_TYPE}
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{e.url}/v1/chat/completions", data=body,
                             headers={"Content-Type": wire.CONTENT_TYPE}) as r:
            assert r.status == 401 and (await r.json())["error"]["code"] == "invalid_api_key"
        for _ in range(2):
            async with http.post(f"{e.url}/v1/chat/completions", data=body, headers=key) as r:
                assert r.status == 200 and r.headers["Content-Type"] == wire.CONTENT_TYPE
                assert r.headers["x-ratelimit-limit-requests"] == "2"
                await r.read()
        async with http.post(f"{e.url}/v1/chat/completions", data=body, headers=key) as r:
            assert r.status == 429 and r.headers["Retry-After"]
    assert len(fake.received) == 2 and fake.received[0].body == body  # still forwarded byte for byte
    assert fake.received[0].headers["x-ingress-tenant"] == "acme"  # who was admitted, beside the client's passport
    assert fake.received[0].headers["x-ingress-key-id"] == KEY_ID


GUARDED = Guardrails(blocked_terms=("project zeus",), pii=Pii(email="redact", card="block"), scope="all",
                     messages="all")


async def test_a_tenants_guardrails_block_before_admission_and_redact_what_they_should(stack: AsyncExitStack) -> None:
    fake = FakeUpstream()
    upstream = await stack.enter_async_context(fake.running())
    config = settings(Limits(rpm=100), upstream=upstream)
    assert config.tenancy is not None
    tenant = msgspec.structs.replace(config.tenancy.tenants["acme"], guardrails=GUARDED)
    config = msgspec.structs.replace(config, tenancy=msgspec.structs.replace(config.tenancy, tenants={"acme": tenant}))
    e = await edge(stack, config)
    client = e.client(max_retries=0)
    with pytest.raises(openai.BadRequestError) as blocked:
        await client.chat.completions.create(model=MODEL, messages=[
            {"role": "user", "content": "Tell me about Project  Zeus please"}])
    assert blocked.value.code == "prompt_blocked" and blocked.value.param == "messages"
    assert "blocked_terms" in blocked.value.message and "zeus" not in blocked.value.message.lower()
    with pytest.raises(openai.BadRequestError) as card:
        await client.responses.create(model=MODEL, input="pay with 4111 1111 1111 1111")
    assert card.value.param == "input" and "pii.card" in card.value.message and "4111" not in card.value.message
    raw = await client.chat.completions.with_raw_response.create(model=MODEL, messages=[
        {"role": "user", "content": "mail ada@example.com today"}])
    assert raw.headers["x-ratelimit-remaining-requests"] == "99"  # the blocked ones consumed nothing
    await client.completions.create(model=MODEL, prompt="from bob@example.org")
    await client.embeddings.create(model=MODEL, input=["cc eve@example.net", "plain"])
    assert [r.user_text for r in fake.received] == ["mail [REDACTED:email] today", "from [REDACTED:email]"]
    (embedded,) = fake.embeddings_received
    assert [i.text for i in embedded.request.inputs or []] == ["cc [REDACTED:email]", "plain"]


def _settled() -> float:
    return REGISTRY.get_sample_value("ingress_tokens_settled_total", {"tenant": "acme"}) or 0.0


async def test_a_stream_the_client_left_is_charged_its_prompt_and_what_was_streamed(stack: AsyncExitStack) -> None:
    fake = FakeUpstream()
    upstream = await stack.enter_async_context(fake.running())
    e = await edge(stack, settings(Limits(tpm=100_000), upstream=upstream))
    text = " ".join(f"word{i}" for i in range(40))
    fake.play(answer(text), pace=0.05)  # its usage would come only with the last frame
    before = _settled()
    stream = await e.client().chat.completions.create(model=MODEL, messages=HELLO, stream=True, max_tokens=5000)
    seen = ""
    async for chunk in stream:
        seen += chunk.choices[0].delta.content or "" if chunk.choices else ""
        if len(seen.split()) >= 5:
            break
    await stream.close()
    await eventually(lambda: _settled() > before, "the stream settled")
    charged = _settled() - before
    prompt = e.exchanges[-1].routed.prompt_tokens
    assert prompt is not None and e.exchanges[-1].answer.usage is None
    counter = counter_for(MODEL)
    assert prompt + counter.text(seen) <= charged <= prompt + counter.text(text)  # not the 5000 reserved
