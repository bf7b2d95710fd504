"""What a client sees when the internal service misbehaves, and that the edge cleans up after it.

Before the first byte a fault is an HTTP error in OpenAI's shape; after it, the SSE stream carries one
in-band `data: {"error": ...}` event and ends without `data: [DONE]`. Either way no internal address
reaches the client, the upstream call is cut when the edge gives up on it, and the next request is
served as usual.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import struct
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import openai
import pytest
from aiohttp import web
from fakes import upstream as fu
from fakes.upstream import FakeUpstream
from waiting import eventually

from ingress import wire
from ingress.settings import Settings, Timeouts

TEXT = "Tell me a story about frames"
WORDS = ["Tell", " me", " a", " story", " about", " frames"]
SLOW = Timeouts(connect=1.0, first_byte=30.0, idle=30.0)  # so only the client's hang-up can end a call
SETTLE = 0.05  # long enough for the edge to read what the fake has sent so far

StartEdge = Callable[[Settings], Awaitable[str]]  # the `start_edge` fixture

RATE_LIMITED = wire.ErrorInfo(status=429, type="rate_limit_error", code="rate_limit_exceeded",
                              message="Rate limit reached for requests.")
BAD_PARAM = wire.ErrorInfo(status=400, type="invalid_request_error", code="unsupported_parameter",
                           param="top_k", message="'top_k' is not supported by this model.")
BLANK_ERROR = wire.ErrorInfo(status=0, type="", message="")
OVERLOADED = wire.ErrorInfo(status=503, type="server_error", code="model_overloaded",
                            message="The model is overloaded.")
_SOME_ANSWER = wire.write_response(wire.Response(
    id="chatcmpl-cut", model="m", created=1, choices=[wire.Choice(content="hello world", finish_reason="stop")]))
_SOME_FRAME = wire.write_chunk(wire.Chunk(sequence=2, content=" more"))


def _overrun(buf: bytes | bytearray, text: bytes) -> bytes:
    """`buf` with the length of its string `text` pointing past the end of the buffer."""
    out = bytearray(buf)
    at = out.index(text)
    assert out[at - 4 : at] == struct.pack("<I", len(text))  # FlatBuffers strings are length-prefixed
    out[at - 4 : at] = struct.pack("<I", len(out))
    return bytes(out)


def _chat(*, stream: bool, text: str = TEXT) -> dict[str, Any]:
    return {"model": "any-model", "messages": [{"role": "user", "content": text}], "stream": stream}


async def _sse_data(response: aiohttp.ClientResponse) -> list[str]:
    """Every `data:` payload of an SSE body, read to its end."""
    events = []
    async for line in response.content:
        if line.startswith(b"data: "):
            events.append(line[len(b"data: "):].rstrip(b"\r\n").decode())
    return events


def _assert_error(body: Any, *, type_: str, code: str | None, fake: FakeUpstream) -> dict[str, Any]:
    """OpenAI's error shape, with no trace of where the internal service lives; returns the inner dict."""
    assert isinstance(body, dict) and set(body) == {"error"}
    error: dict[str, Any] = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["code"]) == (type_, code)
    assert isinstance(error["message"], str) and error["message"]
    _assert_no_address(error["message"], fake.port)
    return error


def _assert_no_address(message: str, port: int) -> None:
    assert "127.0.0.1" not in message and "localhost" not in message
    assert not re.search(rf"(?<!\d){port}(?!\d)", message), message


async def _assert_serves_normally(http: aiohttp.ClientSession, edge: str) -> None:
    """One whole and one streamed request, answered correctly."""
    async with http.post(f"{edge}/v1/chat/completions", json=_chat(stream=False, text="still here")) as response:
        assert response.status == 200
        assert (await response.json())["choices"][0]["message"]["content"] == "still here"
    async with http.post(f"{edge}/v1/chat/completions", json=_chat(stream=True, text="still here")) as response:
        events = await _sse_data(response)
    assert events[-1] == "[DONE]"
    assert "".join(json.loads(e)["choices"][0]["delta"].get("content", "") for e in events[:-1]) == "still here"


# --- before the first byte: an HTTP error -------------------------------------------------------

BEFORE_FIRST_BYTE = [
    pytest.param(fu.slow_head(), 504, "server_error", "upstream_timeout", "did not answer in time", id="slow-head"),
    pytest.param(fu.drop_before_head(), 502, "server_error", "upstream_unavailable", "unavailable",
                 id="drop-before-head"),
    pytest.param(fu.error_answer(RATE_LIMITED), 429, "rate_limit_error", "rate_limit_exceeded",
                 "Rate limit reached for requests.", id="error-429"),
    pytest.param(fu.error_answer(BAD_PARAM), 400, "invalid_request_error", "unsupported_parameter",
                 "'top_k' is not supported", id="error-400"),
    pytest.param(fu.error_answer(BLANK_ERROR, http_status=503), 502, "server_error", None,
                 "The model service returned an error.", id="error-without-status"),
    pytest.param(fu.plain_status(500, "Traceback: worker at 10.1.2.3:9000 died"), 502, "server_error",
                 "upstream_protocol_error", "failed with status 500", id="plain-500"),
]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize(("behaviour", "status", "type_", "code", "message"), BEFORE_FIRST_BYTE)
async def test_a_fault_before_the_first_byte_is_an_http_error(
    http: aiohttp.ClientSession, edge: str, fake_upstream: FakeUpstream, behaviour: fu.Behaviour, status: int,
    type_: str, code: str | None, message: str, stream: bool,
) -> None:
    fake_upstream.play(behaviour)

    async with http.post(f"{edge}/v1/chat/completions", json=_chat(stream=stream),
                         headers={"x-request-id": "fault-0001"}) as response:
        body = await response.json()

    assert response.status == status
    assert response.headers["Content-Type"].startswith("application/json")
    assert response.headers["x-request-id"] == "fault-0001"
    error = _assert_error(body, type_=type_, code=code, fake=fake_upstream)
    assert message in error["message"]
    assert "10.1.2.3" not in error["message"]  # a service's own text is not relayed
    assert error["param"] == ("top_k" if code == "unsupported_parameter" else None)
    await fake_upstream.wait_idle()
    await _assert_serves_normally(http, edge)


WHOLE_ANSWER_FAULTS = [
    pytest.param(fu.raw_answer(b"definitely not a flatbuffer"), 502, "upstream_protocol_error", "unreadable",
                 id="garbage"),
    pytest.param(fu.raw_answer(b""), 502, "upstream_protocol_error", "unreadable", id="empty"),
    pytest.param(fu.raw_answer(_SOME_ANSWER[: len(_SOME_ANSWER) // 2]), 502, "upstream_protocol_error",
                 "unreadable", id="truncated-buffer"),
    pytest.param(fu.raw_answer(_SOME_FRAME), 502, "upstream_protocol_error", "unreadable", id="a-stream-frame"),
    pytest.param(fu.raw_answer(wire.write_error(RATE_LIMITED), status=200), 429, "rate_limit_exceeded",
                 "Rate limit reached", id="error-with-http-200"),
    pytest.param(fu.drop_mid_body(), 502, "upstream_protocol_error", "connection broke", id="drop-mid-body"),
    pytest.param(fu.stall_mid_body(), 504, "upstream_timeout", "did not finish its answer in time",
                 id="stall-mid-body"),
]


@pytest.mark.parametrize(("behaviour", "status", "code", "message"), WHOLE_ANSWER_FAULTS)
async def test_a_broken_whole_answer_is_an_http_error(
    http: aiohttp.ClientSession, edge: str, fake_upstream: FakeUpstream, behaviour: fu.Behaviour, status: int,
    code: str, message: str,
) -> None:
    fake_upstream.play(behaviour)

    async with http.post(f"{edge}/v1/chat/completions", json=_chat(stream=False)) as response:
        body = await response.json()

    assert response.status == status
    error = _assert_error(body, type_="rate_limit_error" if status == 429 else "server_error", code=code,
                          fake=fake_upstream)
    assert message in error["message"]
    await fake_upstream.wait_idle()
    await _assert_serves_normally(http, edge)


async def test_a_whole_answer_to_a_stream_request_is_a_protocol_error(
    http: aiohttp.ClientSession, edge: str, fake_upstream: FakeUpstream,
) -> None:
    fake_upstream.play(fu.answer(stream=False))

    async with http.post(f"{edge}/v1/chat/completions", json=_chat(stream=True)) as response:
        body = await response.json()

    assert response.status == 502
    error = _assert_error(body, type_="server_error", code="upstream_protocol_error", fake=fake_upstream)
    assert "did not answer with a stream" in error["message"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_a_refused_connection_is_upstream_unavailable(
    http: aiohttp.ClientSession, start_edge: StartEdge, stream: bool,
) -> None:
    with fu.refusing_url() as url:
        edge = await start_edge(Settings(upstream=url))
        async with http.post(f"{edge}/v1/chat/completions", json=_chat(stream=stream)) as response:
            body = await response.json()

    assert response.status == 502
    assert response.headers["x-request-id"]
    assert body == {"error": {"message": "The model service is unavailable.", "type": "server_error",
                              "param": None, "code": "upstream_unavailable"}}
    _assert_no_address(body["error"]["message"], int(url.rsplit(":", 1)[1]))


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_the_first_byte_timeout_is_short_and_cuts_the_upstream_call(
    http: aiohttp.ClientSession, start_edge: StartEdge, fake_upstream: FakeUpstream, stream: bool,
) -> None:
    edge = await start_edge(Settings(upstream=fake_upstream.url, timeouts=Timeouts(first_byte=0.3, idle=30.0)))
    fake_upstream.play(fu.slow_head())

    started = time.perf_counter()
    async with http.post(f"{edge}/v1/chat/completions", json=_chat(stream=stream)) as response:
        body = await response.json()
    elapsed = time.perf_counter() - started

    assert response.status == 504
    assert body["error"]["code"] == "upstream_timeout"
    assert 0.3 <= elapsed < 2.0
    await fake_upstream.wait_idle()
    assert fake_upstream.outcomes == ["cancelled"]


# --- after the first byte: an in-band error event, and no [DONE] --------------------------------

MID_STREAM = [
    pytest.param(fu.stall_mid_stream(frames=2), "upstream_timeout",
                 "did not send the next part of its answer in time", id="stall"),
    pytest.param(fu.drop_mid_stream(frames=2), "upstream_protocol_error", "connection broke", id="drop"),
    pytest.param(fu.end_without_done(frames=2), "upstream_protocol_error", "ended before it was complete",
                 id="no-done-frame"),
    pytest.param(fu.raw_stream(b"not a frame at all", after=2), "upstream_protocol_error", "malformed stream",
                 id="garbage"),
    pytest.param(fu.raw_stream(_SOME_FRAME[:-3], after=2), "upstream_protocol_error",
                 "stream ended inside a frame", id="truncated-frame"),
    pytest.param(fu.raw_stream(fu.size_prefix(0xFFFFFFFF) + bytes(16), after=2), "upstream_protocol_error",
                 "frame size 4294967295 is outside", id="prefix-0xffffffff"),
    pytest.param(fu.raw_stream(fu.size_prefix(0x80000000) + bytes(16), after=2), "upstream_protocol_error",
                 "frame size 2147483648 is outside", id="prefix-int32-min"),
    pytest.param(fu.raw_stream(fu.size_prefix(0) + bytes(16), after=2), "upstream_protocol_error",
                 "frame size 0 is outside", id="prefix-zero"),
    pytest.param(fu.raw_stream(wire.frame(bytes(16)), after=2), "upstream_protocol_error",
                 "unreadable stream frame", id="unreadable-frame"),
    pytest.param(fu.raw_stream(wire.write_response(wire.Response(id="x", model="m", created=1, choices=[])),
                               after=2), "upstream_protocol_error", "malformed stream|unreadable stream frame",
                 id="unframed-buffer"),  # which of the two depends on the bytes the prefix is read from
    pytest.param(fu.skip_sequence(at=2), "upstream_protocol_error", r"skipped frames \(expected 2, got 3\)",
                 id="skipped-sequence"),
]


@pytest.mark.parametrize(("behaviour", "code", "message"), MID_STREAM)  # message: a regular expression
async def test_a_stream_broken_after_the_first_byte_ends_with_an_error_event(
    http: aiohttp.ClientSession, edge: str, fake_upstream: FakeUpstream, behaviour: fu.Behaviour, code: str,
    message: str,
) -> None:
    fake_upstream.play(behaviour, pace=SETTLE)

    async with http.post(f"{edge}/v1/chat/completions", json=_chat(stream=True),
                         headers={"x-request-id": "fault-0002"}) as response:
        assert response.status == 200
        assert response.headers["Content-Type"] == "text/event-stream"
        assert response.headers["x-request-id"] == "fault-0002"
        events = await _sse_data(response)

    assert "[DONE]" not in events
    *chunks, last = [json.loads(e) for e in events]
    error = _assert_error(last, type_="server_error", code=code, fake=fake_upstream)
    assert re.search(message, error["message"]), error["message"]
    # What the service sent before it broke was relayed: the role and the first word.
    assert [c["id"] for c in chunks] == ["chatcmpl-fault-0002"] * 2
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[1]["choices"][0]["delta"] == {"content": WORDS[0]}
    await fake_upstream.wait_idle()
    await _assert_serves_normally(http, edge)


async def test_an_error_frame_mid_stream_is_relayed_in_band(
    http: aiohttp.ClientSession, edge: str, fake_upstream: FakeUpstream,
) -> None:
    fake_upstream.play(fu.error_frame(OVERLOADED, after=3))

    async with http.post(f"{edge}/v1/chat/completions", json=_chat(stream=True)) as response:
        assert response.status == 200
        events = await _sse_data(response)

    assert "[DONE]" not in events
    *chunks, last = [json.loads(e) for e in events]
    assert last == {"error": {"message": "The model is overloaded.", "type": "server_error", "param": None,
                              "code": "model_overloaded"}}
    assert "".join(c["choices"][0]["delta"]["content"] for c in chunks) == "".join(WORDS[:2])


async def test_good_frames_read_together_with_a_bad_prefix_are_still_relayed(
    http: aiohttp.ClientSession, edge: str, fake_upstream: FakeUpstream,
) -> None:
    async def good_frames_and_a_bad_prefix_in_one_write(call: fu.Call) -> Any:
        out = await call.open_stream()
        await out.write(b"".join(call.frames()[:2]) + fu.size_prefix(0xFFFFFFFF) + bytes(16))
        await out.write_eof()
        return out

    fake_upstream.play(good_frames_and_a_bad_prefix_in_one_write)

    async with http.post(f"{edge}/v1/chat/completions", json=_chat(stream=True)) as response:
        events = [json.loads(e) for e in await _sse_data(response)]

    assert events[-1]["error"]["code"] == "upstream_protocol_error"
    assert [e["choices"][0]["delta"].get("content") for e in events[:-1]] == ["", WORDS[0]]


async def test_a_bad_prefix_read_with_good_frames_fails_the_stream_at_once(
    start_edge: StartEdge, fake_upstream: FakeUpstream,
) -> None:
    # The service then says nothing more and keeps the connection open: the error must come from the
    # read that held the bad prefix, not from the idle timeout (30 s here) as upstream_timeout.
    edge = await start_edge(Settings(upstream=fake_upstream.url, timeouts=SLOW))

    async def good_frames_and_a_bad_prefix_then_silence(call: fu.Call) -> Any:
        out = await call.open_stream()
        await out.write(b"".join(call.frames()[:2]) + fu.size_prefix(3))
        await call.hang()

    fake_upstream.play(good_frames_and_a_bad_prefix_then_silence)
    received: list[str] = []

    async with asyncio.timeout(10.0), openai.AsyncOpenAI(base_url=f"{edge}/v1", api_key="sk-test",
                                                          max_retries=0) as client:
        stream = await client.chat.completions.create(model="any-model", stream=True,
                                                      messages=[{"role": "user", "content": TEXT}])
        with pytest.raises(openai.APIError) as caught:
            async for chunk in stream:
                received.append(chunk.choices[0].delta.content or "")

    assert not isinstance(caught.value, openai.APIStatusError)  # in-band
    assert caught.value.code == "upstream_protocol_error", caught.value.message
    assert "frame size 3 is outside" in caught.value.message
    assert received == ["", WORDS[0]]
    await fake_upstream.wait_idle()
    assert fake_upstream.outcomes == ["cancelled"]  # the edge gave up on the call at once


async def test_a_stream_that_stalls_after_its_done_frame_completes_at_once(
    http: aiohttp.ClientSession, start_edge: StartEdge, fake_upstream: FakeUpstream,
) -> None:
    edge = await start_edge(Settings(upstream=fake_upstream.url, timeouts=SLOW))
    fake_upstream.play(fu.stall_mid_stream(frames=len(WORDS) + 3))  # every frame, then silence

    async with asyncio.timeout(2.0):
        async with http.post(f"{edge}/v1/chat/completions", json=_chat(stream=True)) as response:
            events = await _sse_data(response)

    assert events[-1] == "[DONE]"
    assert "".join(json.loads(e)["choices"][0]["delta"].get("content", "") for e in events[:-1]) == TEXT
    await fake_upstream.wait_idle()
    assert fake_upstream.outcomes == ["cancelled"]


async def _frames_then_more(call: fu.Call) -> web.StreamResponse:
    """A complete stream, then one more frame after the done frame: in one write, or paced apart."""
    out = await call.open_stream()
    frames = call.frames()
    extra = wire.write_chunk(wire.Chunk(sequence=len(frames), content=" and more"))
    if call.pace:
        await call.send(out, b"".join(frames))
        await call.send(out, extra)
    else:
        await call.send(out, b"".join(frames) + extra)
    await out.write_eof()
    return out


async def test_data_after_the_done_frame_gets_the_same_answer_however_it_is_read(
    http: aiohttp.ClientSession, edge: str, fake_upstream: FakeUpstream,
) -> None:
    endings = []
    for pace in (0.0, SETTLE):
        fake_upstream.play(_frames_then_more, pace=pace)
        async with http.post(f"{edge}/v1/chat/completions", json=_chat(stream=True)) as response:
            endings.append((await _sse_data(response))[-1])

    assert endings[0] == endings[1]


async def test_a_string_running_past_the_end_of_the_answer_is_a_protocol_error(
    http: aiohttp.ClientSession, edge: str, fake_upstream: FakeUpstream,
) -> None:
    fake_upstream.play(fu.raw_answer(_overrun(_SOME_ANSWER, b"hello world")))

    async with http.post(f"{edge}/v1/chat/completions", json=_chat(stream=False)) as response:
        body = await response.json()

    assert (response.status, body.get("error", {}).get("code")) == (502, "upstream_protocol_error"), body


async def test_answers_and_frames_over_the_size_limits_are_refused(
    http: aiohttp.ClientSession, start_edge: StartEdge, fake_upstream: FakeUpstream,
) -> None:
    edge = await start_edge(Settings(upstream=fake_upstream.url, max_answer_bytes=1024, max_frame_bytes=256))
    long_text = "word " * 400

    fake_upstream.play(fu.answer(long_text))
    async with http.post(f"{edge}/v1/chat/completions", json=_chat(stream=False)) as response:
        body = await response.json()
    assert response.status == 502
    assert body["error"]["code"] == "upstream_protocol_error"
    assert "too large" in body["error"]["message"]

    fake_upstream.play(fu.answer(long_text.replace(" ", "-")))  # one word: one frame over 256 bytes
    async with http.post(f"{edge}/v1/chat/completions", json=_chat(stream=True)) as response:
        events = await _sse_data(response)
    assert "[DONE]" not in events
    error = json.loads(events[-1])["error"]
    assert error["code"] == "upstream_protocol_error"
    assert re.search(r"frame size \d+ is outside 8\.\.256", error["message"])


@pytest.mark.parametrize(("behaviour", "code"), [
    pytest.param(fu.stall_mid_stream(frames=2), "upstream_timeout", id="stall"),
    pytest.param(fu.error_frame(OVERLOADED, after=2), "model_overloaded", id="error-frame"),
    pytest.param(fu.skip_sequence(at=2), "upstream_protocol_error", id="skipped-sequence"),
    pytest.param(fu.raw_stream(fu.size_prefix(0xFFFFFFFF), after=2), "upstream_protocol_error", id="bad-prefix"),
])
async def test_the_async_sdk_raises_on_an_in_band_error(
    edge: str, fake_upstream: FakeUpstream, behaviour: fu.Behaviour, code: str,
) -> None:
    fake_upstream.play(behaviour, pace=SETTLE)
    received: list[str] = []

    async with openai.AsyncOpenAI(base_url=f"{edge}/v1", api_key="sk-test", max_retries=0) as client:
        stream = await client.chat.completions.create(model="any-model", stream=True,
                                                      messages=[{"role": "user", "content": TEXT}])
        with pytest.raises(openai.APIError) as caught:
            async for chunk in stream:
                received.append(chunk.choices[0].delta.content or "")

    assert not isinstance(caught.value, openai.APIStatusError)  # in-band: the status line said 200
    assert caught.value.code == code
    assert isinstance(caught.value.body, dict) and caught.value.body["code"] == code
    _assert_no_address(caught.value.message, fake_upstream.port)
    assert "".join(received) == WORDS[0]


async def test_the_blocking_sdk_raises_on_an_in_band_error(edge: str, fake_upstream: FakeUpstream) -> None:
    fake_upstream.play(fu.drop_mid_stream(frames=2), pace=SETTLE)

    def consume() -> openai.APIError:
        with openai.OpenAI(base_url=f"{edge}/v1", api_key="sk-test", max_retries=0) as client:
            stream = client.chat.completions.create(model="any-model", stream=True,
                                                    messages=[{"role": "user", "content": TEXT}])
            with pytest.raises(openai.APIError) as caught:
                for _ in stream:
                    pass
            return caught.value

    error = await asyncio.to_thread(consume)

    assert error.code == "upstream_protocol_error"


@pytest.mark.parametrize(("behaviour", "status", "error_class"), [
    pytest.param(fu.slow_head(), 504, openai.InternalServerError, id="timeout"),
    pytest.param(fu.plain_status(500, "boom"), 502, openai.InternalServerError, id="plain-500"),
    pytest.param(fu.error_answer(RATE_LIMITED), 429, openai.RateLimitError, id="rate-limited"),
    pytest.param(fu.error_answer(BAD_PARAM), 400, openai.BadRequestError, id="bad-param"),
])
async def test_the_sdk_raises_status_errors_before_the_first_byte(
    edge: str, fake_upstream: FakeUpstream, behaviour: fu.Behaviour, status: int, error_class: type[Exception],
) -> None:
    fake_upstream.play(behaviour)

    async with openai.AsyncOpenAI(base_url=f"{edge}/v1", api_key="sk-test", max_retries=0) as client:
        with pytest.raises(openai.APIStatusError) as caught:
            await client.chat.completions.create(model="any-model", stream=True,
                                                 messages=[{"role": "user", "content": TEXT}])

    assert isinstance(caught.value, error_class)
    assert caught.value.status_code == status
    assert caught.value.response.headers["x-request-id"]
    assert len(fake_upstream.received) == 1  # max_retries=0: one attempt, one upstream call


# --- a client that hangs up ---------------------------------------------------------------------


async def test_a_client_hanging_up_mid_stream_cancels_the_upstream_call(
    start_edge: StartEdge, fake_upstream: FakeUpstream,
) -> None:
    edge = await start_edge(Settings(upstream=fake_upstream.url, timeouts=SLOW))
    fake_upstream.play(fu.stall_mid_stream(frames=2))

    async with aiohttp.ClientSession() as http:
        response = await http.post(f"{edge}/v1/chat/completions", json=_chat(stream=True))
        first = await response.content.readline()
        assert first.startswith(b"data: ")
        response.close()  # drops the connection

    await fake_upstream.wait_idle(timeout=1.0)
    assert fake_upstream.outcomes == ["cancelled"]
    async with aiohttp.ClientSession() as http:
        await _assert_serves_normally(http, edge)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_a_client_hanging_up_before_the_answer_cancels_the_upstream_call(
    start_edge: StartEdge, fake_upstream: FakeUpstream, stream: bool,
) -> None:
    edge = await start_edge(Settings(upstream=fake_upstream.url, timeouts=SLOW))
    fake_upstream.play(fu.slow_head())

    async with aiohttp.ClientSession() as http:
        request = asyncio.ensure_future(http.post(f"{edge}/v1/chat/completions", json=_chat(stream=stream)))
        await eventually(lambda: fake_upstream.active == 1, "the request at the fake")
        request.cancel()
        with pytest.raises(asyncio.CancelledError):
            await request

    await fake_upstream.wait_idle(timeout=1.0)
    assert fake_upstream.outcomes == ["cancelled"]
    async with aiohttp.ClientSession() as http:
        await _assert_serves_normally(http, edge)


@pytest.mark.parametrize("behaviour", [
    pytest.param(fu.stall_mid_stream(frames=2), id="stall-mid-stream"),
    pytest.param(fu.stall_mid_body(), id="stall-mid-body"),
])
async def test_a_stalled_answer_the_edge_gives_up_on_is_cut_upstream(
    http: aiohttp.ClientSession, edge: str, fake_upstream: FakeUpstream, behaviour: fu.Behaviour,
) -> None:
    fake_upstream.play(behaviour, behaviour)

    for stream in (False, True):
        async with http.post(f"{edge}/v1/chat/completions", json=_chat(stream=stream)) as response:
            await response.read()

    await fake_upstream.wait_idle()
    assert fake_upstream.outcomes == ["cancelled", "cancelled"]


# --- no leaks -----------------------------------------------------------------------------------


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 0


async def _exchange(edge: str, *, stream: bool) -> None:
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{edge}/v1/chat/completions", json=_chat(stream=stream)) as response,
    ):
        await response.read()


async def test_faults_leave_no_tasks_or_sockets_behind(edge: str, fake_upstream: FakeUpstream) -> None:
    await _exchange(edge, stream=False)
    await asyncio.sleep(0.2)  # let the closed client connection's server task finish
    tasks, fds = len(asyncio.all_tasks()), _open_fds()

    for stream in (False, True):
        for fault in [*BEFORE_FIRST_BYTE, *WHOLE_ANSWER_FAULTS, *MID_STREAM]:
            behaviour = fault.values[0]  # every table above starts with the behaviour
            assert callable(behaviour)
            fake_upstream.play(behaviour)
            await _exchange(edge, stream=stream)
    async with aiohttp.ClientSession() as http:
        fake_upstream.play(fu.stall_mid_stream())
        response = await http.post(f"{edge}/v1/chat/completions", json=_chat(stream=True))
        await response.content.readline()
        response.close()
        await _assert_serves_normally(http, edge)
    await fake_upstream.wait_idle()

    await eventually(lambda: len(asyncio.all_tasks()) <= tasks and _open_fds() <= fds,
                     "tasks and fds back to the baseline")
    assert fake_upstream.outcomes.count("failed") == 0
