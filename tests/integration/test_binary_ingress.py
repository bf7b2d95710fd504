"""Binary ingress: internal clients POST a FlatBuffers CompletionRequest and get the service's bytes back.

The edge verifies the buffer, routes on the model name read in place, forwards the exact bytes and
relays the answer unmodified; a failure mid-answer aborts the connection rather than ending it cleanly.
"""

from __future__ import annotations

import asyncio
import os
import struct
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import AsyncExitStack, suppress
from typing import Any

import aiohttp
import msgspec
import pytest
from fakes import upstream as fu
from fakes.upstream import FakeUpstream
from recording import recording_edge
from waiting import eventually

from ingress import wire
from ingress.edge.appkeys import GATEWAY
from ingress.encoding.passport import RequestMeta, compute_passport
from ingress.encoding.requests import encode_request
from ingress.errors import UpstreamTimeout
from ingress.oai.codec import decode_chat_request
from ingress.serve.app import create_app, serve_app
from ingress.settings import Ejection, Endpoint, Group, Retry, Route, Settings, Timeouts

TEXT = "Tell me a story about frames"
FLATBUFFERS = {"Content-Type": wire.CONTENT_TYPE}
QUICK = Timeouts(connect=1.0, first_byte=2.0, idle=0.5)

ANSWER = wire.write_response(wire.Response(
    id="chatcmpl-bin", model="chat", created=1_700_000_000,
    choices=[wire.Choice(content="a whole answer", finish_reason="stop")],
    usage=wire.Usage(prompt_tokens=6, completion_tokens=3)))
FRAMES = [
    wire.write_chunk(wire.Chunk(sequence=0, id="chatcmpl-bin", model="chat", created=1, role="assistant", content="")),
    wire.write_chunk(wire.Chunk(sequence=1, content="Once")),
    wire.write_chunk(wire.Chunk(sequence=2, content=" upon")),
    wire.write_chunk(wire.Chunk(sequence=3, finish_reason="stop")),
    wire.write_chunk(wire.Chunk(sequence=4, usage=wire.Usage(prompt_tokens=6, completion_tokens=2), done=True)),
]
RATE_LIMITED = wire.ErrorInfo(status=429, type="rate_limit_error", code="rate_limit_exceeded",
                              message="Rate limit reached for requests.")


def binary_request(*, stream: bool, model: str = "chat", text: str = TEXT, request_id: str = "bin-0001") -> bytes:
    """A CompletionRequest as an internal client builds it: the OpenAI request, a passport, FlatBuffers."""
    body = msgspec.json.encode({"model": model, "messages": [{"role": "user", "content": text}], "stream": stream})
    request = decode_chat_request(body)
    return bytes(encode_request(request, request_id, compute_passport(request, RequestMeta(tenant_id="team-a"))))


StartEdge = Callable[..., Awaitable[str]]


@pytest.fixture
async def fake(stack: AsyncExitStack) -> FakeUpstream:
    fake = FakeUpstream()
    await stack.enter_async_context(fake.running())
    return fake


@pytest.fixture
async def spare(stack: AsyncExitStack) -> FakeUpstream:
    spare = FakeUpstream()
    await stack.enter_async_context(spare.running())
    return spare


@pytest.fixture
async def edge(stack: AsyncExitStack, fake: FakeUpstream, spare: FakeUpstream) -> str:
    """The edge: model "chat" on `fake`, falling back to `spare`; no other model is served."""
    settings = Settings(
        groups={"main": Group(endpoints=[Endpoint(url=fake.url)]), "spare": Group(endpoints=[Endpoint(url=spare.url)])},
        routes=(Route(model="chat", group="main", fallback="spare"),),
        timeouts=QUICK,
        retry=Retry(budget_min_per_s=1000.0),  # falling back draws on the retry budget...
    )
    url: str = await stack.enter_async_context(serve_app(create_app(settings), "127.0.0.1", 0))
    await asyncio.sleep(0.02)  # ...and earns 20 here: more than any test below falls back
    return url


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def _post(http: aiohttp.ClientSession, edge: str, body: bytes,
                headers: dict[str, str] | None = None) -> tuple[aiohttp.ClientResponse, bytes]:
    async with http.post(f"{edge}/v1/chat/completions", data=body, headers={**FLATBUFFERS, **(headers or {})}) as r:
        return r, await r.read()


def _chunks(frames: Iterable[bytes]) -> list[wire.Chunk]:
    return [wire.decode_chunk(f[4:]) for f in frames]  # a frame keeps its 4-byte size prefix


def _error(body: bytes) -> dict[str, Any]:
    error: dict[str, Any] = msgspec.json.decode(body)["error"]
    return error


# --- the exact bytes, both ways -----------------------------------------------------------------


async def test_a_whole_answer_is_relayed_byte_for_byte(
    http: aiohttp.ClientSession, edge: str, fake: FakeUpstream,
) -> None:
    sent = binary_request(stream=False)
    fake.play(fu.raw_answer(ANSWER))

    response, body = await _post(http, edge, sent, {"x-request-id": "bin-0001"})

    assert response.status == 200
    assert response.headers["Content-Type"] == wire.CONTENT_TYPE
    assert response.headers["x-request-id"] == "bin-0001"
    assert body == ANSWER
    assert [r.body for r in fake.received] == [sent]
    assert fake.received[0].headers["Content-Type"] == wire.CONTENT_TYPE
    assert fake.received[0].request.model == "chat"


async def test_stream_frames_are_relayed_byte_for_byte(
    http: aiohttp.ClientSession, edge: str, fake: FakeUpstream,
) -> None:
    sent = binary_request(stream=True)
    fake.play(fu.raw_stream(b"".join(FRAMES)))

    response, body = await _post(http, edge, sent)

    assert response.status == 200
    assert response.headers["Content-Type"] == wire.STREAM_CONTENT_TYPE
    assert body == b"".join(FRAMES)
    assert [r.body for r in fake.received] == [sent]


async def test_frames_arriving_one_by_one_reach_the_client_as_they_come(
    http: aiohttp.ClientSession, edge: str, fake: FakeUpstream,
) -> None:
    sent = binary_request(stream=True)
    fake.play(fu.answer(), pace=0.05)
    decoder = wire.FrameDecoder(1 << 20)
    chunks: list[wire.Chunk] = []

    async with http.post(f"{edge}/v1/chat/completions", data=sent, headers=FLATBUFFERS) as response:
        async for data in response.content.iter_any():
            chunks.extend(_chunks(decoder.feed(data)))
    decoder.finish()

    assert "".join(c.content or "" for c in chunks) == TEXT
    assert chunks[-1].done and [c.sequence for c in chunks] == list(range(len(chunks)))
    assert [r.body for r in fake.received] == [sent]


async def test_the_fake_decodes_what_the_client_encoded(
    http: aiohttp.ClientSession, edge: str, fake: FakeUpstream,
) -> None:
    response, body = await _post(http, edge, binary_request(stream=False, request_id="bin-0002"))

    assert response.status == 200
    answer = wire.decode_response(body)
    assert answer.choices[0].content == TEXT and answer.id == "chatcmpl-bin-0002"
    assert fake.received[0].request_id == "bin-0002"
    passport = wire.read_request(fake.received[0].body).Passport()
    assert passport is not None and passport.TenantId() == b"team-a"


# --- refused before any service sees it ---------------------------------------------------------

_GOOD = binary_request(stream=False)


def _with_overrun_string(buf: bytes, text: bytes) -> bytes:
    out = bytearray(buf)
    at = out.index(text)
    out[at - 4 : at] = struct.pack("<I", len(out))  # the string's length now runs past the end
    return bytes(out)


@pytest.mark.parametrize("body", [
    pytest.param(_GOOD[: len(_GOOD) // 2], id="truncated"),
    pytest.param(b"definitely not a flatbuffer", id="garbage"),
    pytest.param(b"", id="empty"),
    pytest.param(ANSWER, id="a-response-buffer"),
    pytest.param(_with_overrun_string(_GOOD, TEXT.encode()), id="string-past-the-end"),
    pytest.param(_GOOD[:4] + b"XXXX" + _GOOD[8:], id="wrong-identifier"),
    pytest.param(bytes([0xFF] * 4) + _GOOD[4:], id="root-offset-out-of-range"),
])
async def test_a_corrupted_buffer_is_refused_and_never_forwarded(
    http: aiohttp.ClientSession, edge: str, fake: FakeUpstream, spare: FakeUpstream, body: bytes,
) -> None:
    response, answer = await _post(http, edge, body)

    assert response.status == 400
    assert response.headers["Content-Type"].startswith("application/json")
    error = _error(answer)
    assert (error["type"], error["code"]) == ("invalid_request_error", "invalid_flatbuffer")
    assert fake.received == [] and spare.received == []


async def test_an_unknown_model_is_not_found(
    http: aiohttp.ClientSession, edge: str, fake: FakeUpstream, spare: FakeUpstream,
) -> None:
    response, answer = await _post(http, edge, binary_request(stream=True, model="no-such-model"))

    assert response.status == 404
    assert _error(answer)["code"] == "model_not_found"
    assert fake.received == [] and spare.received == []


# --- answers other than a success ---------------------------------------------------------------


async def test_an_error_answer_is_relayed_unmodified(
    http: aiohttp.ClientSession, edge: str, fake: FakeUpstream, spare: FakeUpstream,
) -> None:
    fake.play(fu.error_answer(RATE_LIMITED))

    response, body = await _post(http, edge, binary_request(stream=False))

    assert response.status == 429
    assert response.headers["Content-Type"] == wire.CONTENT_TYPE
    assert body == wire.write_error(RATE_LIMITED)
    assert spare.received == []


async def test_an_error_answer_keeps_its_retry_after(
    http: aiohttp.ClientSession, edge: str, fake: FakeUpstream,
) -> None:
    fake.play(fu.error_answer_with_headers(RATE_LIMITED, {"Retry-After": "7"}))

    response, body = await _post(http, edge, binary_request(stream=False))

    assert (response.status, body) == (429, bytes(wire.write_error(RATE_LIMITED)))
    assert response.headers.get("Retry-After") == "7"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_a_server_error_before_the_answer_falls_back_with_the_same_bytes(
    http: aiohttp.ClientSession, edge: str, fake: FakeUpstream, spare: FakeUpstream, stream: bool,
) -> None:
    sent = binary_request(stream=stream)
    fake.play(fu.error_answer(wire.ErrorInfo(status=503, type="server_error", message="busy")))

    response, body = await _post(http, edge, sent)

    assert response.status == 200
    assert [r.body for r in fake.received] == [sent] and [r.body for r in spare.received] == [sent]
    if stream:
        chunks = _chunks(wire.FrameDecoder(1 << 20).feed(body))
        assert chunks[0].role == "assistant" and chunks[-1].done
        assert "".join(c.content or "" for c in chunks) == TEXT
    else:
        assert wire.decode_response(body).choices[0].content == TEXT


@pytest.mark.parametrize(("behaviour", "status", "code"), [
    pytest.param(fu.error_answer(wire.ErrorInfo(status=503, type="server_error", code="busy", message="busy")),
                 503, "busy", id="an-error-buffer"),
    pytest.param(fu.plain_status(500, "Internal Server Error"), 502, "upstream_protocol_error", id="a-bare-500"),
])
async def test_a_service_failure_reaches_a_binary_client_as_a_flatbuffers_error(
    http: aiohttp.ClientSession, edge: str, fake: FakeUpstream, spare: FakeUpstream, behaviour: fu.Behaviour,
    status: int, code: str,
) -> None:
    fake.play(behaviour)
    spare.play(behaviour)  # the fallback fails the same way

    response, body = await _post(http, edge, binary_request(stream=False))

    assert response.status == status
    assert response.headers["Content-Type"] == wire.CONTENT_TYPE
    error = wire.decode_error(body)
    assert (error.status, error.code) == (status, code)
    assert len(fake.received) == 1 and len(spare.received) == 1


@pytest.mark.parametrize(("timeouts", "stream"), [
    pytest.param(Timeouts(connect=1.0, first_byte=5.0, idle=0.3), True, id="idle-stream"),
    pytest.param(Timeouts(connect=1.0, first_byte=5.0, idle=0.3), False, id="idle-whole"),
    pytest.param(Timeouts(connect=1.0, first_byte=30.0, idle=30.0, total=0.5), True, id="total-stream"),
])
async def test_a_relay_that_stalls_ends_as_a_timeout_within_the_routes_deadlines(
    http: aiohttp.ClientSession, stack: AsyncExitStack, fake: FakeUpstream, timeouts: Timeouts, stream: bool,
) -> None:
    edge, _, exchanges = await recording_edge(stack, Settings(
        groups={"main": Group(endpoints=[Endpoint(url=fake.url)])}, routes=(Route(model="chat", group="main"),),
        timeouts=timeouts))
    fake.play(fu.stall_mid_stream(frames=2) if stream else fu.stall_mid_body())
    loop = asyncio.get_running_loop()
    started = loop.time()

    async with http.post(f"{edge}/v1/chat/completions", data=binary_request(stream=stream),
                         headers=FLATBUFFERS) as response:
        with pytest.raises(aiohttp.ClientPayloadError):
            await response.read()

    assert loop.time() - started < 10.0  # the idle or total deadline ended it, not the 30 s ones
    assert isinstance(exchanges[0].failure, UpstreamTimeout)


# --- a failure mid-answer aborts the connection -------------------------------------------------


@pytest.mark.parametrize(("behaviour", "stream"), [
    pytest.param(fu.drop_mid_stream(frames=2), True, id="drop-mid-stream"),
    pytest.param(fu.stall_mid_stream(frames=2), True, id="stall-mid-stream"),
    pytest.param(fu.drop_mid_body(after_bytes=16), False, id="drop-mid-body"),
])
async def test_a_failure_mid_answer_aborts_the_client_connection(
    http: aiohttp.ClientSession, edge: str, fake: FakeUpstream, spare: FakeUpstream, behaviour: fu.Behaviour,
    stream: bool,
) -> None:
    fake.play(behaviour, pace=0.05)
    received = bytearray()

    async with http.post(f"{edge}/v1/chat/completions", data=binary_request(stream=stream),
                         headers=FLATBUFFERS) as response:
        assert response.status == 200
        with pytest.raises(aiohttp.ClientPayloadError):
            async for data in response.content.iter_any():
                received += data

    if stream:
        assert [c.sequence for c in _chunks(wire.FrameDecoder(1 << 20).feed(bytes(received)))] == [0, 1]
    assert spare.received == []  # nothing is retried once the answer started
    await fake.wait_idle()
    async with http.post(f"{edge}/v1/chat/completions", data=binary_request(stream=stream),
                         headers=FLATBUFFERS) as response:
        assert response.status == 200
        await response.read()


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_a_service_breaking_mid_answer_counts_against_its_endpoint(
    http: aiohttp.ClientSession, stack: AsyncExitStack, fake: FakeUpstream, stream: bool,
) -> None:
    settings = Settings(groups={"main": Group(endpoints=[Endpoint(url=fake.url)], ejection=Ejection(failures=1))},
                        routes=(Route(model="chat", group="main"),), timeouts=QUICK)
    app = create_app(settings)
    edge = await stack.enter_async_context(serve_app(app, "127.0.0.1", 0))
    fake.play(fu.drop_mid_stream(frames=2) if stream else fu.drop_mid_body(), pace=0.05)

    async with http.post(f"{edge}/v1/chat/completions", data=binary_request(stream=stream),
                         headers=FLATBUFFERS) as response:
        with pytest.raises(aiohttp.ClientPayloadError):
            await response.read()

    state = app[GATEWAY].groups["main"].states[0]
    # The edge releases the endpoint just after aborting the connection.
    await eventually(lambda: state.ejections, "the endpoint ejected", timeout=3.0)


# --- nothing left behind ------------------------------------------------------------------------


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 0


async def test_relays_leave_no_tasks_or_sockets_behind(edge: str, fake: FakeUpstream) -> None:
    async def exchange(body: bytes) -> None:
        async with (
            aiohttp.ClientSession() as http,
            http.post(f"{edge}/v1/chat/completions", data=body, headers=FLATBUFFERS) as response,
        ):
            with suppress(aiohttp.ClientPayloadError):
                await response.read()

    await exchange(binary_request(stream=False))
    await asyncio.sleep(0.1)
    tasks, fds = len(asyncio.all_tasks()), _open_fds()

    for stream in (False, True):
        for behaviour in (fu.answer(), fu.drop_mid_stream(), fu.stall_mid_stream(), fu.drop_mid_body(),
                          fu.error_answer(RATE_LIMITED), fu.slow_head()):
            fake.play(behaviour)
            await exchange(binary_request(stream=stream))
        await exchange(b"garbage")
    await fake.wait_idle()

    await eventually(lambda: len(asyncio.all_tasks()) <= tasks and _open_fds() <= fds,
                     "tasks and fds back to the baseline")
    assert fake.outcomes.count("failed") == 0
