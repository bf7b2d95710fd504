"""The in-flight limit per worker ([overload]) on a real edge in front of a slow fake service: requests beyond
the limit wait, then get 503 (Anthropic's 529) with Retry-After in their API's shape; a stream holds no
place once its head is sent; nothing hangs, and every request ends once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import aiohttp
import pytest
from fakes import upstream as fu
from fakes.upstream import FakeUpstream
from recording import recording_edge
from waiting import eventually

from ingress.edge.appkeys import GATE
from ingress.edge.overload import Gate
from ingress.settings import Overload, Settings

MODEL = "slow-model"
HOLD = 1.5  # the fake's answer to a held request comes this late: longer than any wait below refuses after


@pytest.fixture
async def fake(stack: AsyncExitStack) -> AsyncIterator[FakeUpstream]:
    upstream = FakeUpstream(fu.slow_head(HOLD))
    await stack.enter_async_context(upstream.running())
    yield upstream


async def edge(stack: AsyncExitStack, fake: FakeUpstream, limit: int, max_wait_ms: float) -> tuple[str, Gate]:
    settings = Settings(upstream=fake.url, models=(MODEL,), start_pacing_ms=0,
                        overload=Overload(enabled=True, min_limit=limit, max_limit=limit, initial_limit=limit,
                                          max_wait_ms=max_wait_ms))
    url, app, _ = await recording_edge(stack, settings)
    return url, app[GATE]


def chat(stream: bool = False) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hello there"}], "stream": stream}


ASKS: dict[str, tuple[str, dict[str, Any], dict[str, str]]] = {
    "openai": ("/v1/chat/completions", chat(), {}),
    "anthropic": ("/v1/messages", {"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]},
                  {"anthropic-version": "2023-06-01"}),
    "gemini": (f"/v1beta/models/{MODEL}:generateContent", {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
               {}),
}


async def ask(http: aiohttp.ClientSession, url: str, api: str) -> tuple[int, dict[str, str], Any, float]:
    path, body, headers = ASKS[api]
    started = time.perf_counter()
    async with http.post(url + path, json=body, headers=headers) as r:
        return r.status, dict(r.headers), await r.json(), time.perf_counter() - started


async def test_requests_beyond_the_limit_wait_then_are_refused_in_their_api_s_shape(
    stack: AsyncExitStack, fake: FakeUpstream, http: aiohttp.ClientSession,
) -> None:
    url, gate = await edge(stack, fake, limit=2, max_wait_ms=300)
    held = [asyncio.ensure_future(ask(http, url, "openai")) for _ in range(2)]
    await eventually(lambda: fake.active == 2, "both held requests at the fake")

    refused = await asyncio.gather(*(ask(http, url, api) for api in ASKS))

    by_api = dict(zip(ASKS, refused, strict=True))
    for api, (_, headers, _, elapsed) in by_api.items():
        assert elapsed >= 0.3, (api, elapsed)  # they waited their max_wait_ms first
        assert headers["Retry-After"] == "1", api
        assert not any(h.done() for h in held)  # refused while the places were still held
    status, _, body, _ = by_api["openai"]
    assert status == 503 and body["error"]["code"] == "overloaded" and body["error"]["type"] == "server_error"
    status, _, body, _ = by_api["anthropic"]
    assert status == 529 and body["type"] == "error" and body["error"]["type"] == "overloaded_error"
    status, _, body, _ = by_api["gemini"]
    assert status == 503 and body["error"]["status"] == "UNAVAILABLE" and body["error"]["code"] == 503
    assert len(fake.received) == 2  # the refused never reached the service
    assert [s for s, *_ in await asyncio.gather(*held)] == [200, 200]
    assert (gate.in_flight, gate.waiting, gate.refused) == (0, 0, 3)
    async with http.get(url + "/metrics") as r:
        exposed = await r.text()
    assert "ingress_concurrency_refused_total 3.0" in exposed
    assert "ingress_concurrency_limit 2.0" in exposed


async def test_a_waiting_request_is_admitted_when_a_place_frees_and_every_request_ends_once(
    stack: AsyncExitStack, fake: FakeUpstream, http: aiohttp.ClientSession,
) -> None:
    """Twelve at once through two places, answers 0.2 s apart and a 2 s wait: the first ones are served, the
    ones that cannot get a place within the wait are refused, and every request ends in exactly one of them."""
    fake.default = fu.slow_head(0.2)
    url, gate = await edge(stack, fake, limit=2, max_wait_ms=2000)
    seen_at_fake: list[int] = []

    async def watch() -> None:
        while True:
            seen_at_fake.append(fake.active)
            await asyncio.sleep(0.01)

    watcher = asyncio.ensure_future(watch())
    outcomes = await asyncio.wait_for(asyncio.gather(*(ask(http, url, "openai") for _ in range(12))), 30)
    watcher.cancel()

    statuses = sorted(status for status, *_ in outcomes)
    assert set(statuses) <= {200, 503} and len(statuses) == 12
    served = statuses.count(200)
    assert served >= 4  # the first two at once, and at least the next two after a wait
    assert statuses.count(503) == 12 - served == gate.refused
    assert len(fake.received) == served and max(seen_at_fake) <= 2
    assert (gate.in_flight, gate.waiting) == (0, 0)


async def test_a_stream_gives_its_place_back_once_its_head_is_sent(
    stack: AsyncExitStack, fake: FakeUpstream, http: aiohttp.ClientSession,
) -> None:
    fake.play(fu.answer("a long streamed answer of many words", stream=True), pace=0.2)
    url, gate = await edge(stack, fake, limit=1, max_wait_ms=0)
    async with http.post(url + "/v1/chat/completions", json=chat(stream=True)) as streaming:
        assert streaming.status == 200
        await streaming.content.readline()  # the stream has begun; it runs for seconds more
        assert gate.in_flight == 0
        fake.default = fu.answer()
        status, _, body, _ = await ask(http, url, "openai")  # no wait allowed: refused unless a place is free
        assert status == 200, body
        assert not streaming.content.at_eof()
        rest = await streaming.read()
    assert rest.rstrip().endswith(b"data: [DONE]")
    assert (gate.in_flight, gate.waiting, gate.refused) == (0, 0, 0)
