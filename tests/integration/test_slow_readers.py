"""A client that stops reading its answer: backpressure holds the stream, then `client.write_timeout`
ends it, with its upstream call and its endpoint's slot; and nothing is left behind when it goes."""

from __future__ import annotations

import asyncio
import gc
import socket
import struct
from collections import Counter
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import msgspec
from aiohttp import web
from fakes.processes import EdgeProcess, free_port
from fakes.upstream import Call, FakeUpstream
from recording import recording_edge
from waiting import eventually

from ingress import wire
from ingress.edge.appkeys import GATEWAY
from ingress.errors import WriteTimeout
from ingress.exchange import Exchange
from ingress.settings import Client, Endpoint, Group, Route, Settings, Timeouts
from ingress.upstream.group import EndpointGroup

WORDS = "x" * 8192  # one frame's content: the stream fills any socket buffer within a few hundred frames


async def endless(call: Call) -> web.StreamResponse:
    """A stream that never ends, as fast as the edge takes it."""
    out = await call.open_stream()
    await call.send(out, wire.write_chunk(wire.Chunk(sequence=0, id=call.answer_id, model="chat", role="assistant")))
    sequence = 1
    while True:
        await call.send(out, wire.write_chunk(wire.Chunk(sequence=sequence, content=WORDS)))
        sequence += 1


async def _edge(stack: AsyncExitStack, fake: FakeUpstream, client: Client) -> tuple[str, EndpointGroup, list[Exchange]]:
    url, app, exchanges = await recording_edge(stack, Settings(
        groups={"main": Group(endpoints=[Endpoint(url=fake.url)])}, routes=(Route(model="chat", group="main"),),
        timeouts=Timeouts(connect=1.0, first_byte=5.0, idle=30.0), client=client))
    return url, app[GATEWAY].groups["main"], exchanges


async def _stop_reading(url: str, *, stream: bool = True, binary: bool = False) -> socket.socket:
    """Send a request on a socket with a tiny receive buffer, read the first bytes, then read no more."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, (host, int(port)))
    body = msgspec.json.encode({"model": "chat", "stream": stream, "messages": [{"role": "user", "content": "hi"}]})
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    await loop.sock_sendall(sock, head + body)
    first = await asyncio.wait_for(loop.sock_recv(sock, 64), 10.0)
    assert first.startswith(b"HTTP/1.1 200")
    return sock


async def _read_to_the_end(sock: socket.socket) -> bytes:
    """Drain what the edge had sent; b"" or a reset at the end (an aborted connection)."""
    loop, tail = asyncio.get_running_loop(), bytearray()
    try:
        while data := await asyncio.wait_for(loop.sock_recv(sock, 1 << 16), 10.0):
            tail += data
    except ConnectionResetError:
        pass
    return bytes(tail)


async def test_a_client_that_stops_reading_is_cut_off_after_the_write_timeout(stack: AsyncExitStack) -> None:
    fake = FakeUpstream(default=endless)
    await stack.enter_async_context(fake.running())
    url, group, exchanges = await _edge(stack, fake, Client(write_timeout=0.5))

    sock = await _stop_reading(url)
    try:
        # The edge gives up on the client: the upstream call ends and the endpoint's slot is free.
        await eventually(lambda: fake.outcomes == ["cancelled"], "the upstream call ended", timeout=15.0)
        await eventually(lambda: group.states[0].in_flight == 0, "the endpoint's slot released", timeout=5.0)
        assert isinstance(exchanges[0].error, WriteTimeout)
        tail = await _read_to_the_end(sock)
        assert not tail.endswith(b"data: [DONE]\n\n")  # cut off, never made to look complete
    finally:
        sock.close()


async def test_a_slow_reader_is_held_by_backpressure_not_cut_off(stack: AsyncExitStack) -> None:
    """Below the write timeout, a stalled reader is waited for: the upstream call goes on."""
    fake = FakeUpstream(default=endless)
    await stack.enter_async_context(fake.running())
    url, group, _ = await _edge(stack, fake, Client(write_timeout=60.0))

    sock = await _stop_reading(url)
    try:
        await eventually(lambda: fake.active == 1, "the upstream call running")
        await asyncio.sleep(1.0)  # well past the 0.5 s of the test above
        assert fake.outcomes == [] and fake.active == 1 and group.states[0].in_flight == 1
    finally:
        sock.close()
    await eventually(lambda: fake.outcomes == ["cancelled"], "the upstream call ended with the client")


async def test_a_stalled_reader_that_hangs_up_leaves_no_unretrieved_exception(stack: AsyncExitStack) -> None:
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    previous: Callable[..., Any] | None = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    stack.callback(loop.set_exception_handler, previous)
    fake = FakeUpstream(default=endless)
    await stack.enter_async_context(fake.running())
    url, group, _ = await _edge(stack, fake, Client(write_timeout=60.0))

    sock = await _stop_reading(url)
    await eventually(lambda: fake.active == 1, "the upstream call running")
    await asyncio.sleep(0.3)  # the edge's writes are waiting on the client now
    sock.close()

    await eventually(lambda: fake.outcomes == ["cancelled"], "the upstream call ended with the client")
    await eventually(lambda: group.states[0].in_flight == 0, "the endpoint's slot released")
    for _ in range(3):
        await asyncio.sleep(0.05)
    gc.collect()  # an unretrieved task exception is reported when its task is collected
    await asyncio.sleep(0)
    assert [c.get("message") for c in reported] == []


async def test_a_client_hanging_up_mid_stream_still_ends_its_exchange(stack: AsyncExitStack) -> None:
    """A hang-up mid-stream ends the upstream call, releases the endpoint's slot and records the end."""
    fake = FakeUpstream(default=endless)
    await stack.enter_async_context(fake.running())
    url, group, exchanges = await _edge(stack, fake, Client())

    sock = await _stop_reading(url)
    await eventually(lambda: fake.active == 1, "the upstream call running")
    sock.close()

    await eventually(lambda: group.states[0].in_flight == 0, "the endpoint's slot released")
    assert exchanges[0].answer.done is not None and exchanges[0].attempts.lease is None


async def fast_small(call: Call) -> web.StreamResponse:
    """A stream of one-word deltas a millisecond apart, that never ends."""
    out = await call.open_stream()
    await call.send(out, wire.write_chunk(wire.Chunk(sequence=0, id=call.answer_id, model="chat", role="assistant")))
    sequence = 1
    while True:
        await asyncio.sleep(0.001)
        await call.send(out, wire.write_chunk(wire.Chunk(sequence=sequence, content="word ")))
        sequence += 1


async def _reset_after_first_bytes(url: str) -> None:
    """A streamed request whose client resets the connection once its answer has begun (RST, not FIN)."""
    sock = await _stop_reading(url)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


async def test_a_client_that_resets_mid_stream_is_logged_as_gone_never_as_a_server_error(
        stack: AsyncExitStack, tmp_path: Path) -> None:
    """A reset can reach the edge as a failed write before aiohttp cancels the handler (the reset and the
    stream's next event in one turn of the loop; the edge in a process of its own, as served): the client
    is gone either way, 499 `client_closed`, never a 500 `internal_error` with 'unhandled' in the log."""
    fake = FakeUpstream(default=fast_small)
    await stack.enter_async_context(fake.running())
    edge = EdgeProcess(tmp_path, "edge", free_port(), ["--upstream", fake.url, "--model", "chat"], 1, None)
    stack.callback(edge.kill)
    await edge.started()
    gate = asyncio.Semaphore(50)

    async def one() -> None:
        async with gate:
            await _reset_after_first_bytes(edge.url)

    await asyncio.gather(*(one() for _ in range(STREAMS)))
    await eventually(lambda: len(edge.events("request")) == STREAMS, "every stream logged", timeout=30.0)
    outcomes = Counter((e["status"], e["outcome"]) for e in edge.events("request"))
    assert outcomes == {(499, "client_closed"): STREAMS}
    assert not edge.events("unhandled")


STREAMS = 300
