"""The edge keeps its connections to an internal service alive: exchanges one after the other share
one connection, JSON or binary, whole or streamed; a connection the edge gave up on is never reused."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import msgspec
import pytest
from aiohttp import web
from fakes import upstream as fu
from fakes.upstream import FakeUpstream
from waiting import eventually

from ingress import wire
from ingress.encoding.passport import RequestMeta, compute_passport
from ingress.encoding.requests import encode_request
from ingress.oai.codec import decode_chat_request
from ingress.settings import Endpoint, Group, Route, Settings, Timeouts

TEXT = "Tell me a story about frames"
SLOW = Timeouts(connect=1.0, first_byte=30.0, idle=30.0)


def _chat(*, stream: bool) -> dict[str, Any]:
    return {"model": "any-model", "messages": [{"role": "user", "content": TEXT}], "stream": stream}


def _recording(connections: list[object], behaviour: fu.Behaviour) -> fu.Behaviour:
    """`behaviour`, noting the connection each request came on (transports kept, so never confused)."""

    async def run(call: fu.Call) -> web.StreamResponse:
        connections.append(call.http.transport)
        return await behaviour(call)

    return run


def _binary_request(*, stream: bool) -> bytes:
    request = decode_chat_request(msgspec.json.encode(_chat(stream=stream)))
    return bytes(encode_request(request, "keepalive-1", compute_passport(request, RequestMeta())))


async def test_exchanges_one_after_the_other_share_one_upstream_connection(
    http: aiohttp.ClientSession, edge: str, fake_upstream: FakeUpstream,
) -> None:
    connections: list[object] = []
    fake_upstream.default = _recording(connections, fu.answer())

    for stream in (False, True, False, True):
        async with http.post(f"{edge}/v1/chat/completions", json=_chat(stream=stream)) as response:
            assert response.status == 200
            body = await response.read()
            assert TEXT.split()[-1].encode() in body

    assert len(connections) == 4
    assert len({id(c) for c in connections}) == 1


async def test_binary_relays_one_after_the_other_share_one_upstream_connection(
    http: aiohttp.ClientSession, edge: str, fake_upstream: FakeUpstream,
) -> None:
    connections: list[object] = []
    fake_upstream.default = _recording(connections, fu.answer())

    for stream in (False, True, False, True):
        async with http.post(f"{edge}/v1/chat/completions", data=_binary_request(stream=stream),
                             headers={"Content-Type": wire.CONTENT_TYPE}) as response:
            assert response.status == 200
            assert response.headers["Content-Type"] == (wire.STREAM_CONTENT_TYPE if stream else wire.CONTENT_TYPE)
            await response.read()

    assert len(connections) == 4
    assert len({id(c) for c in connections}) == 1


async def test_an_error_answer_read_whole_leaves_its_connection_for_the_next(
    http: aiohttp.ClientSession, edge: str, fake_upstream: FakeUpstream,
) -> None:
    connections: list[object] = []
    busy = wire.ErrorInfo(status=429, type="rate_limit_error", code="rate_limit_exceeded", message="Slow down.")
    fake_upstream.play(_recording(connections, fu.error_answer(busy)))
    fake_upstream.default = _recording(connections, fu.answer())

    for status in (429, 200):
        async with http.post(f"{edge}/v1/chat/completions", json=_chat(stream=False)) as response:
            assert response.status == status
            await response.read()

    assert len({id(c) for c in connections}) == 1


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_a_connection_the_edge_gave_up_on_is_not_reused(
    start_edge: Callable[[Settings], Awaitable[str]], fake_upstream: FakeUpstream, stream: bool,
) -> None:
    edge = await start_edge(Settings(upstream=fake_upstream.url, timeouts=SLOW))
    connections: list[object] = []
    fake_upstream.play(_recording(connections, fu.stall_mid_stream(frames=2) if stream else fu.slow_head()))
    fake_upstream.default = _recording(connections, fu.answer())

    async with aiohttp.ClientSession() as http:
        request = asyncio.ensure_future(http.post(f"{edge}/v1/chat/completions", json=_chat(stream=stream)))
        await eventually(lambda: fake_upstream.active, "the request at the fake")
        await asyncio.sleep(0.05)
        if request.done():
            request.result().close()  # the client hangs up mid-stream
        else:
            request.cancel()  # the client hangs up before the answer
            await asyncio.gather(request, return_exceptions=True)
        await fake_upstream.wait_idle()
        assert fake_upstream.outcomes == ["cancelled"]

        for _ in range(2):
            async with http.post(f"{edge}/v1/chat/completions", json=_chat(stream=stream)) as response:
                assert response.status == 200
                await response.read()

    assert len(connections) == 3
    assert connections[1] is not connections[0] and connections[2] is connections[1]


async def test_a_connection_idle_past_its_endpoints_keepalive_is_closed_by_the_edge(
    start_edge: Callable[[Settings], Awaitable[str]], fake_upstream: FakeUpstream,
) -> None:
    # The service (aiohttp: 75 s) keeps idle connections longer than the endpoint's keepalive, as it
    # should be configured: the edge closes its own first, with no request to come, and the next
    # request goes out on a new connection.
    group = Group(endpoints=[Endpoint(url=fake_upstream.url, keepalive=0.2)])
    edge = await start_edge(Settings(groups={"g": group}, routes=(Route(glob="*", group="g"),), timeouts=SLOW))
    connections: list[Any] = []
    fake_upstream.default = _recording(connections, fu.answer())

    async with aiohttp.ClientSession() as http:
        for stream in (False, True):
            async with http.post(f"{edge}/v1/chat/completions", json=_chat(stream=stream)) as response:
                assert response.status == 200
                assert TEXT.split()[-1].encode() in await response.read()
            async with asyncio.timeout(3.0):
                while not connections[-1].is_closing():
                    await asyncio.sleep(0.02)

    assert len(connections) == 2 and connections[0] is not connections[1]
