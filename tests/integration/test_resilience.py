"""Resilience under faults: groups of endpoints, ejection, retries within a budget, fallback groups,
backpressure, heartbeats, timeouts and active health checks, with real servers on loopback.

Each edge here is built from a Settings with `groups` and `routes`, so the EndpointGroups are reachable from
the app (`app[GATEWAY].groups`) and the test can see what the edge decided, not only what it answered.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack, ExitStack
from dataclasses import dataclass
from typing import Any

import aiohttp
import openai
import pytest
from aiohttp import web
from fakes import upstream as fu
from fakes.upstream import CheckedUpstream, FakeUpstream
from recording import recording_edge
from waiting import eventually

from ingress import wire
from ingress.edge.appkeys import GATEWAY
from ingress.exchange import Exchange
from ingress.pipeline import Gateway
from ingress.routing.health import EndpointState
from ingress.settings import Ejection, Endpoint, Group, HealthCheck, Retry, Route, Settings, Timeouts

TEXT = "Tell me a story about frames"
QUICK = Timeouts(connect=1.0, first_byte=5.0, idle=5.0)  # ample on loopback; faults below are shorter or scripted
OVERLOADED_ERROR = wire.ErrorInfo(status=503, type="server_error", code="model_overloaded",
                                  message="The model is overloaded.")
RATE_LIMITED = wire.ErrorInfo(status=429, type="rate_limit_error", code="rate_limit_exceeded",
                              message="Rate limit reached for requests.")


@dataclass
class Edge:
    url: str
    gateway: Gateway
    exchanges: list[Exchange]  # every request's Exchange, in the order their responses started

    def states(self, group: str) -> dict[str, EndpointState]:
        return {s.url: s for s in self.gateway.groups[group].states}


StartEdge = Callable[[Settings], Awaitable[Edge]]
StartFake = Callable[..., Awaitable[FakeUpstream]]


@pytest.fixture
def start_edge(stack: AsyncExitStack) -> StartEdge:
    async def start(settings: Settings) -> Edge:
        url, app, exchanges = await recording_edge(stack, settings)
        return Edge(url, app[GATEWAY], exchanges)

    return start


@pytest.fixture
def start_fake(stack: AsyncExitStack) -> StartFake:
    async def start(default: fu.Behaviour | None = None, cls: type[FakeUpstream] = FakeUpstream) -> FakeUpstream:
        fake = cls(default)
        await stack.enter_async_context(fake.running())
        return fake

    return start


@pytest.fixture
def refusing() -> Iterator[Callable[[], str]]:
    """`refusing()`: a new loopback URL where connections are refused, until the test ends."""
    with ExitStack() as stack:
        yield lambda: stack.enter_context(fu.refusing_url())


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def _group(*urls: str, **config: Any) -> Group:
    return Group(endpoints=[Endpoint(url=u) for u in urls], **config)


def _settings(groups: dict[str, Group], routes: list[Route], **config: Any) -> Settings:
    config.setdefault("timeouts", QUICK)
    return Settings(groups=groups, routes=tuple(routes), **config)


def _chat(*, stream: bool, model: str = "chat", text: str = TEXT) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": text}], "stream": stream}


async def _post(http: aiohttp.ClientSession, edge: Edge, *, stream: bool, model: str = "chat",
                text: str = TEXT) -> tuple[aiohttp.ClientResponse, Any]:
    """The response and its body: JSON for a whole answer or an error, else the SSE `data:` payloads."""
    async with http.post(f"{edge.url}/v1/chat/completions", json=_chat(stream=stream, model=model, text=text)) as r:
        if r.headers["Content-Type"].startswith("text/event-stream"):
            return r, [line[6:].rstrip(b"\r\n").decode() async for line in r.content if line.startswith(b"data: ")]
        return r, await r.json()


def _streamed_text(events: list[str]) -> str:
    assert events[-1] == "[DONE]", events[-1]
    return "".join(json.loads(e)["choices"][0]["delta"].get("content") or "" for e in events[:-1])


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 0


async def _baseline() -> tuple[int, int]:
    await asyncio.sleep(0.1)  # let finished connections' tasks end
    return len(asyncio.all_tasks()), _open_fds()


async def _back_to(baseline: tuple[int, int], pooled: int) -> None:
    """Tasks and file descriptors are back to the baseline, give or take `pooled` kept-alive connections
    from the edge to its upstreams (each a socket at both ends and a server task at the far one)."""
    tasks, fds = baseline

    def settled() -> bool:
        return len(asyncio.all_tasks()) <= tasks + pooled and _open_fds() <= fds + 2 * pooled

    try:
        await eventually(settled, f"tasks and fds back to the baseline, {pooled} pooled connections apart")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; tasks {len(asyncio.all_tasks())} (baseline {tasks}), "
                             f"fds {_open_fds()} (baseline {fds})") from None


# --- many requests, an endpoint down: no client ever sees it ------------------------------------

WARM_UP = 50  # requests served first: 10 retries earned at the default ratio of 0.2


async def test_a_mixed_load_sees_no_errors_while_an_endpoint_refuses_connections(
    start_edge: StartEdge, start_fake: StartFake, refusing: Callable[[], str],
) -> None:
    main_fake, spare_fake, down = await start_fake(), await start_fake(), refusing()
    edge = await start_edge(_settings(
        {"main": _group(main_fake.url, down, ejection=Ejection(failures=2, base=30.0)),
         "spare": _group(spare_fake.url)},
        [Route(model="chat", aliases=["chat-latest"], group="main", fallback="spare"),
         Route(glob="*", group="spare")],
        retry=Retry(attempts=2, budget_ratio=0.2, budget_min_per_s=3.0),
    ))
    rng = random.Random(5)
    plan = [(rng.random() < 0.5, rng.choice(["chat", "chat", "chat-latest", "other-model"])) for _ in range(100)]
    limit = asyncio.Semaphore(10)
    answers: list[str] = []

    async with openai.AsyncOpenAI(base_url=f"{edge.url}/v1", api_key="sk-test", max_retries=0) as client:
        for i in range(WARM_UP):  # an edge that has served: the budget's share of requests earned
            await client.chat.completions.create(model="other-model", messages=[{"role": "user", "content": f"{i}"}])
    baseline = await _baseline()
    async with openai.AsyncOpenAI(base_url=f"{edge.url}/v1", api_key="sk-test", max_retries=0) as client:

        async def one(i: int, stream: bool, model: str) -> None:
            text = f"request {i} for {model}"
            async with limit:
                if stream:
                    chunks = await client.chat.completions.create(
                        model=model, stream=True, messages=[{"role": "user", "content": text}])
                    answer = "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])
                else:
                    completion = await client.chat.completions.create(
                        model=model, messages=[{"role": "user", "content": text}])
                    answer = completion.choices[0].message.content or ""
            assert answer == text
            answers.append(answer)

        await asyncio.gather(*(one(i, stream, model) for i, (stream, model) in enumerate(plan)))

    assert len(answers) == 100
    assert len(main_fake.received) + len(spare_fake.received) == WARM_UP + 100
    assert len(spare_fake.received) >= WARM_UP + sum(model == "other-model" for _, model in plan)
    down_state = edge.states("main")[down]
    assert down_state.ejections >= 1 and not down_state.healthy(time.monotonic())
    assert edge.states("main")[main_fake.url].healthy(time.monotonic())
    retried = sum(exchange.attempts.count - 1 for exchange in edge.exchanges)
    assert 1 <= retried <= 10  # two failures eject the refusing endpoint for 30 s: few retries needed
    assert all(exchange.failure is None for exchange in edge.exchanges)
    assert {(g.in_flight, g.waiting) for g in edge.gateway.groups.values()} == {(0, 0)}
    await _back_to(baseline, pooled=2 * 10)


# --- what is never retried ----------------------------------------------------------------------


async def test_a_stream_is_never_retried_once_it_started(
    http: aiohttp.ClientSession, start_edge: StartEdge, start_fake: StartFake,
) -> None:
    first, second, spare = await start_fake(), await start_fake(), await start_fake()
    edge = await start_edge(_settings(
        {"main": _group(first.url, second.url), "spare": _group(spare.url)},
        [Route(model="chat", group="main", fallback="spare")],
    ))
    for fake in (first, second):
        fake.play(fu.drop_mid_stream(frames=2), pace=0.05)

    response, events = await _post(http, edge, stream=True)

    assert response.status == 200
    assert "[DONE]" not in events
    assert json.loads(events[-1])["error"]["code"] == "upstream_protocol_error"
    assert json.loads(events[1])["choices"][0]["delta"]["content"] == "Tell"
    assert len(first.received) + len(second.received) + len(spare.received) == 1
    assert [exchange.attempts.count for exchange in edge.exchanges] == [1]


async def test_the_sdk_raises_when_a_started_stream_breaks_and_nothing_is_retried(
    start_edge: StartEdge, start_fake: StartFake,
) -> None:
    main, spare = await start_fake(), await start_fake()
    edge = await start_edge(_settings({"main": _group(main.url), "spare": _group(spare.url)},
                                      [Route(glob="*", group="main", fallback="spare")]))
    main.play(fu.drop_mid_stream(frames=3), pace=0.05)
    received = []

    async with openai.AsyncOpenAI(base_url=f"{edge.url}/v1", api_key="sk-test", max_retries=2) as client:
        stream = await client.chat.completions.create(model="any", stream=True,
                                                      messages=[{"role": "user", "content": TEXT}])
        with pytest.raises(openai.APIError) as caught:
            async for chunk in stream:
                received.append(chunk.choices[0].delta.content or "")

    assert caught.value.code == "upstream_protocol_error"
    assert "".join(received) == "Tell me"
    assert (len(main.received), len(spare.received)) == (1, 0)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_a_timeout_is_not_retried(
    http: aiohttp.ClientSession, start_edge: StartEdge, start_fake: StartFake, stream: bool,
) -> None:
    first, second, spare = await start_fake(fu.slow_head()), await start_fake(fu.slow_head()), await start_fake()
    edge = await start_edge(_settings(
        {"main": _group(first.url, second.url), "spare": _group(spare.url)},
        [Route(glob="*", group="main", fallback="spare")],
        timeouts=Timeouts(connect=1.0, first_byte=0.3, idle=5.0),
    ))

    response, body = await _post(http, edge, stream=stream)

    assert response.status == 504 and body["error"]["code"] == "upstream_timeout"
    assert len(first.received) + len(second.received) + len(spare.received) == 1


@pytest.mark.parametrize("fault", [
    pytest.param(fu.drop_mid_stream(frames=2), id="drop-mid-stream"),
    pytest.param(fu.stall_mid_stream(frames=2), id="stall-mid-stream"),
    pytest.param(fu.end_without_done(frames=2), id="end-without-done"),
])
async def test_a_stream_broken_mid_answer_counts_against_its_endpoint(
    http: aiohttp.ClientSession, start_edge: StartEdge, start_fake: StartFake, fault: fu.Behaviour,
) -> None:
    fake = await start_fake()
    edge = await start_edge(_settings({"main": _group(fake.url, ejection=Ejection(failures=1, base=30.0))},
                                      [Route(glob="*", group="main")],
                                      timeouts=Timeouts(connect=1.0, first_byte=5.0, idle=0.3)))
    fake.play(fault, pace=0.05)

    response, events = await _post(http, edge, stream=True)

    assert response.status == 200 and "[DONE]" not in events
    state = edge.states("main")[fake.url]
    await eventually(lambda: state.ejections == 1, "the endpoint ejected")
    assert not state.healthy(time.monotonic())


# --- retries stay within the budget -------------------------------------------------------------


async def test_the_retry_budget_stops_an_outage_from_multiplying_attempts(
    http: aiohttp.ClientSession, start_edge: StartEdge, refusing: Callable[[], str],
) -> None:
    ratio = 0.2
    edge = await start_edge(_settings(
        {"main": _group(refusing(), refusing(), refusing(), ejection=Ejection(failures=1000))},
        [Route(glob="*", group="main")],
        retry=Retry(attempts=2, budget_ratio=ratio, budget_min_per_s=0.0),
    ))
    limit = asyncio.Semaphore(10)

    async def one(i: int) -> int:
        async with limit:
            response, body = await _post(http, edge, stream=i % 2 == 0)
        assert body["error"]["code"] == "upstream_unavailable"
        return response.status

    statuses = await asyncio.gather(*(one(i) for i in range(100)))

    assert set(statuses) == {502}
    attempts = sum(exchange.attempts.count for exchange in edge.exchanges)
    assert 100 < attempts <= 100 * (1 + ratio)  # no minimum, so no reserve; without a budget: 300
    # retry.attempts=2: three endpoints at most
    assert {exchange.attempts.count for exchange in edge.exchanges} <= {1, 2, 3}


# --- fallback groups ----------------------------------------------------------------------------

# Falling back is a retry, within the budget: for tests of what falls back (not of the budget), one that
# earns 1,000 retries a second, given time to earn at least 20.
AMPLE = Retry(attempts=2, budget_min_per_s=1000.0)
AMPLE_ACCRUES = 0.02


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("fault", [
    pytest.param(fu.error_answer(OVERLOADED_ERROR), id="error-503"),
    pytest.param(fu.plain_status(500, "boom"), id="plain-500"),
    pytest.param(fu.drop_before_head(), id="drop-before-head"),
])
async def test_the_fallback_group_serves_when_the_group_fails_before_the_first_byte(
    http: aiohttp.ClientSession, start_edge: StartEdge, start_fake: StartFake, fault: fu.Behaviour, stream: bool,
) -> None:
    main, spare = await start_fake(fault), await start_fake()
    edge = await start_edge(_settings({"main": _group(main.url), "spare": _group(spare.url)},
                                      [Route(model="chat", group="main", fallback="spare")], retry=AMPLE))
    await asyncio.sleep(AMPLE_ACCRUES)

    response, body = await _post(http, edge, stream=stream)

    assert response.status == 200
    text = _streamed_text(body) if stream else body["choices"][0]["message"]["content"]
    assert text == TEXT
    assert (len(main.received), len(spare.received)) == (1, 1)
    assert edge.exchanges[0].attempts.upstream == spare.url


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_the_fallback_group_serves_when_every_endpoint_is_unreachable(
    http: aiohttp.ClientSession, start_edge: StartEdge, start_fake: StartFake, refusing: Callable[[], str],
    stream: bool,
) -> None:
    spare = await start_fake()
    edge = await start_edge(_settings({"main": _group(refusing(), refusing()), "spare": _group(spare.url)},
                                      [Route(model="chat", group="main", fallback="spare")], retry=AMPLE))
    await asyncio.sleep(AMPLE_ACCRUES)

    for _ in range(3):
        response, body = await _post(http, edge, stream=stream)
        assert response.status == 200
        assert (_streamed_text(body) if stream else body["choices"][0]["message"]["content"]) == TEXT

    assert len(spare.received) == 3
    assert edge.exchanges[0].attempts.count == 3  # both endpoints of the group, then the fallback


async def test_a_client_error_answer_does_not_fall_back(
    http: aiohttp.ClientSession, start_edge: StartEdge, start_fake: StartFake,
) -> None:
    main, spare = await start_fake(fu.error_answer(RATE_LIMITED)), await start_fake()
    edge = await start_edge(_settings({"main": _group(main.url), "spare": _group(spare.url)},
                                      [Route(model="chat", group="main", fallback="spare")]))

    response, body = await _post(http, edge, stream=False)

    assert (response.status, body["error"]["code"]) == (429, "rate_limit_exceeded")
    assert (len(main.received), len(spare.received)) == (1, 0)


# --- an upstream's Retry-After reaches the client -----------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("error", [RATE_LIMITED, OVERLOADED_ERROR], ids=["429", "503"])
async def test_an_error_answer_is_relayed_with_its_retry_after(
    http: aiohttp.ClientSession, start_edge: StartEdge, start_fake: StartFake, error: wire.ErrorInfo,
    stream: bool,
) -> None:
    fake = await start_fake(fu.error_answer_with_headers(error, {"Retry-After": "7"}))
    edge = await start_edge(_settings({"main": _group(fake.url)}, [Route(glob="*", group="main")]))

    response, body = await _post(http, edge, stream=stream)

    assert response.status == error.status
    assert response.headers["Retry-After"] == "7"
    assert body["error"]["code"] == error.code and body["error"]["message"] == error.message


async def test_an_unusable_retry_after_is_not_relayed(
    http: aiohttp.ClientSession, start_edge: StartEdge, start_fake: StartFake,
) -> None:
    fake = await start_fake()
    fake.play(fu.error_answer_with_headers(RATE_LIMITED, {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}),
              fu.error_answer_with_headers(RATE_LIMITED, {"Retry-After": "999999"}))
    edge = await start_edge(_settings({"main": _group(fake.url)}, [Route(glob="*", group="main")]))

    first, _ = await _post(http, edge, stream=False)
    second, _ = await _post(http, edge, stream=False)

    assert first.status == 429 and "Retry-After" not in first.headers
    assert second.headers["Retry-After"] == "3600"  # capped at an hour


# --- backpressure -------------------------------------------------------------------------------

SLOW_HEAD = 0.6  # how long the upstream holds each request


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_requests_beyond_the_limit_and_the_queue_are_refused_at_once(
    http: aiohttp.ClientSession, start_edge: StartEdge, start_fake: StartFake, stream: bool,
) -> None:
    fake = await start_fake(fu.slow_head(SLOW_HEAD))
    edge = await start_edge(_settings(
        {"main": _group(fake.url, max_in_flight=2, max_queue=2, queue_timeout=5.0)},
        [Route(glob="*", group="main")],
    ))
    pool = edge.gateway.groups["main"]
    await _post(http, edge, stream=stream)  # connections and lazily built state exist before the baseline
    baseline = await _baseline()

    async def one(client: aiohttp.ClientSession) -> tuple[int, float, aiohttp.ClientResponse, Any]:
        started = time.perf_counter()
        response, body = await _post(client, edge, stream=stream)
        return response.status, time.perf_counter() - started, response, body

    async with aiohttp.ClientSession() as burst:
        outcomes = await asyncio.gather(*(one(burst) for _ in range(7)))

    timings = sorted((status, round(elapsed, 3)) for status, elapsed, _, _ in outcomes)
    refused = [o for o in outcomes if o[0] == 503]
    served = [o for o in outcomes if o[0] == 200]
    assert (len(served), len(refused)) == (4, 3), timings  # two in flight, two queued
    # At once: every refusal came before any request was served, so before a slot was free (and before
    # the queue timeout, which is longer than a turn).
    assert max(o[1] for o in refused) < min(o[1] for o in served), timings
    for _, _, response, body in refused:
        assert response.headers["Retry-After"] == "1"
        assert body["error"]["code"] == "overloaded" and body["error"]["type"] == "server_error"
    # The queued two waited one turn: they ended a turn after the first two, not two turns. Judged against
    # each other, so a stall of the shared machine before the burst reached the edge shifts all alike.
    first, second, third, fourth = sorted(o[1] for o in served)
    assert first >= SLOW_HEAD and second - first < SLOW_HEAD / 2, timings
    assert third - second >= 0.8 * SLOW_HEAD and fourth - third < SLOW_HEAD / 2, timings
    assert fourth - first < 2 * SLOW_HEAD, timings
    assert (pool.in_flight, pool.waiting) == (0, 0)
    assert [s.in_flight for s in pool.states] == [0]
    await _back_to(baseline, pooled=2)


async def test_a_queued_request_gets_overloaded_after_the_queue_timeout(
    http: aiohttp.ClientSession, start_edge: StartEdge, start_fake: StartFake,
) -> None:
    fake = await start_fake(fu.slow_head(2.0))
    edge = await start_edge(_settings(
        {"main": _group(fake.url, max_in_flight=1, max_queue=5, queue_timeout=0.3)},
        [Route(glob="*", group="main")],
    ))
    holding = asyncio.ensure_future(_post(http, edge, stream=False))
    await eventually(lambda: fake.active == 1, "the holding request at the fake")

    started = time.perf_counter()
    response, body = await _post(http, edge, stream=True)

    assert time.perf_counter() - started >= 0.3
    assert not holding.done()  # refused at the queue timeout, not once the held slot was free
    assert (response.status, body["error"]["code"], response.headers["Retry-After"]) == (503, "overloaded", "1")
    assert (await holding)[0].status == 200


# --- heartbeats ---------------------------------------------------------------------------------

HEARTBEATING = Timeouts(connect=1.0, first_byte=5.0, idle=5.0, heartbeat=0.2)


async def _raw_sse(http: aiohttp.ClientSession, edge: Edge, model: str = "chat") -> tuple[int, list[bytes]]:
    async with http.post(f"{edge.url}/v1/chat/completions", json=_chat(stream=True, model=model)) as response:
        assert response.headers["Content-Type"] == "text/event-stream"
        return response.status, [line async for line in response.content if line.strip()]


@pytest.mark.parametrize("slow", [
    pytest.param(fu.slow_head(0.7), id="slow-head"),
    pytest.param(fu.slow_first_frame(0.7), id="slow-first-frame"),
])
async def test_a_stream_waiting_for_its_first_token_gets_heartbeats(
    http: aiohttp.ClientSession, start_edge: StartEdge, start_fake: StartFake, slow: fu.Behaviour,
) -> None:
    fake = await start_fake()
    edge = await start_edge(_settings({"main": _group(fake.url)}, [Route(glob="*", group="main")],
                                      timeouts=HEARTBEATING))
    fake.play(slow)

    status, lines = await _raw_sse(http, edge)

    assert status == 200
    pings = [i for i, line in enumerate(lines) if line == b": ping\n"]
    assert 2 <= len(pings) <= 4
    assert pings == list(range(len(pings)))  # all before the first event, none after
    data = [line[6:].rstrip(b"\n").decode() for line in lines[len(pings):]]
    assert all(line.startswith(b"data: ") for line in lines[len(pings):])
    assert _streamed_text(data) == TEXT


async def test_the_sdk_reads_a_stream_with_heartbeats(start_edge: StartEdge, start_fake: StartFake) -> None:
    fake = await start_fake()
    edge = await start_edge(_settings({"main": _group(fake.url)}, [Route(glob="*", group="main")],
                                      timeouts=HEARTBEATING))
    fake.play(fu.slow_head(0.5), fu.slow_first_frame(0.5))

    async with openai.AsyncOpenAI(base_url=f"{edge.url}/v1", api_key="sk-test", max_retries=0) as client:
        for _ in range(2):
            stream = await client.chat.completions.create(model="chat", stream=True,
                                                          messages=[{"role": "user", "content": TEXT}])
            assert "".join([c.choices[0].delta.content or "" async for c in stream if c.choices]) == TEXT


async def test_a_failure_after_heartbeats_is_sent_in_band(
    http: aiohttp.ClientSession, start_edge: StartEdge, start_fake: StartFake,
) -> None:
    fake = await start_fake()
    edge = await start_edge(_settings({"main": _group(fake.url)}, [Route(glob="*", group="main")],
                                      timeouts=HEARTBEATING))

    async def slow_then_rate_limited(call: fu.Call) -> web.StreamResponse:
        await asyncio.sleep(0.5)
        return await fu.error_answer_with_headers(RATE_LIMITED, {"Retry-After": "3"})(call)

    fake.play(slow_then_rate_limited)

    status, lines = await _raw_sse(http, edge)

    assert status == 200  # the head went out with the first heartbeat
    assert lines[0] == b": ping\n"
    assert json.loads(lines[-1][6:])["error"]["code"] == "rate_limit_exceeded"
    assert b"data: [DONE]\n" not in lines


async def test_a_whole_answer_gets_no_heartbeats(
    http: aiohttp.ClientSession, start_edge: StartEdge, start_fake: StartFake,
) -> None:
    fake = await start_fake(fu.slow_head(0.5))
    edge = await start_edge(_settings({"main": _group(fake.url)}, [Route(glob="*", group="main")],
                                      timeouts=HEARTBEATING))

    response, body = await _post(http, edge, stream=False)

    assert response.status == 200 and body["choices"][0]["message"]["content"] == TEXT


async def test_a_routes_heartbeat_applies_while_waiting_for_the_head(
    http: aiohttp.ClientSession, start_edge: StartEdge, start_fake: StartFake,
) -> None:
    fake = await start_fake(fu.slow_head(0.7))
    edge = await start_edge(_settings({"main": _group(fake.url)},
                                      [Route(glob="*", group="main", timeouts=HEARTBEATING)],
                                      timeouts=Timeouts(connect=1.0, first_byte=5.0, idle=5.0, heartbeat=15.0)))

    status, lines = await _raw_sse(http, edge)

    assert status == 200
    assert lines.count(b": ping\n") >= 2


# --- timeouts -----------------------------------------------------------------------------------


async def test_a_routes_idle_timeout_ends_a_stalled_stream_in_band(
    http: aiohttp.ClientSession, start_edge: StartEdge, start_fake: StartFake,
) -> None:
    fake = await start_fake()
    edge = await start_edge(_settings(
        {"main": _group(fake.url)},
        [Route(model="quick", group="main", timeouts=Timeouts(connect=1.0, first_byte=5.0, idle=0.3)),
         Route(glob="*", group="main")],
        timeouts=Timeouts(connect=1.0, first_byte=30.0, idle=30.0),
    ))
    fake.play(fu.stall_mid_stream(frames=2), pace=0.05)

    started = time.perf_counter()
    response, events = await _post(http, edge, stream=True, model="quick")

    assert 0.3 <= time.perf_counter() - started < 3.0  # the route's idle timeout, not the default's 30 s
    assert response.status == 200 and "[DONE]" not in events
    error = json.loads(events[-1])["error"]
    assert (error["code"], error["message"]) == (
        "upstream_timeout", "The model service did not send the next part of its answer in time.")
    await fake.wait_idle()
    assert fake.outcomes == ["cancelled"]


@pytest.mark.parametrize(("stream", "head"), [
    pytest.param(False, 3.0, id="whole-answer"),
    pytest.param(True, 2.0, id="stream"),  # its head would be a 200, and too late to say 504
])
async def test_a_total_timeout_bounds_the_wait_for_the_head(
    http: aiohttp.ClientSession, start_edge: StartEdge, start_fake: StartFake, stream: bool, head: float,
) -> None:
    fake = await start_fake(fu.slow_head(head))
    edge = await start_edge(_settings({"main": _group(fake.url)}, [Route(glob="*", group="main")],
                                      timeouts=Timeouts(connect=1.0, first_byte=10.0, idle=10.0, total=0.4)))

    started = time.perf_counter()
    response, body = await _post(http, edge, stream=stream)

    assert 0.4 <= time.perf_counter() - started < 3.0  # the total, not the head's delay or first_byte's 10 s
    assert (response.status, body["error"]["code"]) == (504, "upstream_timeout")
    await fake.wait_idle()
    assert fake.outcomes == ["cancelled"]


async def test_a_total_timeout_cuts_a_long_stream_in_band(
    http: aiohttp.ClientSession, start_edge: StartEdge, start_fake: StartFake,
) -> None:
    fake = await start_fake()
    edge = await start_edge(_settings({"main": _group(fake.url)}, [Route(glob="*", group="main")],
                                      timeouts=Timeouts(connect=1.0, first_byte=10.0, idle=10.0, total=0.5)))
    fake.play(fu.answer(), pace=0.15)  # each frame arrives well within the idle timeout

    started = time.perf_counter()
    response, events = await _post(http, edge, stream=True, text="one two three four five six seven eight nine")

    assert 0.5 <= time.perf_counter() - started < 3.0  # the total, not the idle or first-byte 10 s
    assert response.status == 200 and "[DONE]" not in events
    assert json.loads(events[-1])["error"]["code"] == "upstream_timeout"
    assert 2 <= len(events) - 1 <= 6  # what arrived in time was relayed
    await fake.wait_idle()
    assert fake.outcomes == ["cancelled"]


# --- active health checks -----------------------------------------------------------------------


async def test_active_health_checks_take_an_endpoint_out_and_back(
    http: aiohttp.ClientSession, start_edge: StartEdge, start_fake: StartFake,
) -> None:
    sick = await start_fake(cls=CheckedUpstream)
    well = await start_fake(cls=CheckedUpstream)
    assert isinstance(sick, CheckedUpstream) and isinstance(well, CheckedUpstream)
    edge = await start_edge(_settings(
        {"main": _group(sick.url, well.url, health_check=HealthCheck(path="/healthz", interval=0.05, timeout=0.5))},
        [Route(glob="*", group="main")],
    ))
    state = edge.states("main")[sick.url]
    await eventually(lambda: sick.health_checks >= 1 and well.health_checks >= 1, "a health check of each endpoint")

    sick.healthy = False
    await eventually(lambda: not state.active_healthy, "the sick endpoint marked unhealthy")
    before = len(sick.received)
    for i in range(20):
        response, _ = await _post(http, edge, stream=i % 2 == 0)
        assert response.status == 200
    assert len(sick.received) == before

    sick.healthy = True
    await eventually(lambda: state.active_healthy, "the endpoint healthy again")
    for i in range(20):
        response, _ = await _post(http, edge, stream=i % 2 == 0)
        assert response.status == 200
    assert len(sick.received) > before
    async with http.get(f"{edge.url}/healthz") as response:
        assert response.status == 200


async def test_an_unreachable_endpoint_fails_its_health_check(
    http: aiohttp.ClientSession, start_edge: StartEdge, start_fake: StartFake, refusing: Callable[[], str],
) -> None:
    well = await start_fake(cls=CheckedUpstream)
    down = refusing()
    edge = await start_edge(_settings(
        {"main": _group(down, well.url, health_check=HealthCheck(interval=0.05, timeout=0.2))},
        [Route(glob="*", group="main")],
        retry=Retry(attempts=0),
    ))

    await eventually(lambda: not edge.states("main")[down].active_healthy, "the down endpoint marked unhealthy")

    for _ in range(10):
        response, _ = await _post(http, edge, stream=False)
        assert response.status == 200
    assert all(exchange.attempts.upstream == well.url and exchange.attempts.count == 1 for exchange in edge.exchanges)
