"""The upstream client (ingress/upstream/client.py), against loopback servers: its limits and timeouts
(answer size, connect, first byte, idle), probes, and pumped bodies, each read consumed in the
connection's callback."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Callable

import pytest
from raw_servers import Handler, RawServer, StartServer, answering, then_hang
from waiting import eventually

from ingress.errors import UpstreamProtocolError, UpstreamTimeout
from ingress.settings import Timeouts
from ingress.upstream.client import UpstreamClient
from ingress.wire import identifiers

# --- failures -----------------------------------------------------------------------------------


@pytest.mark.parametrize("answer", [
    pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: 2000\r\n\r\n" + b"a" * 2000, id="announced"),
    pytest.param(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                 + (b"100\r\n" + b"a" * 256 + b"\r\n") * 8 + b"0\r\n\r\n", id="chunked"),
])
async def test_an_oversized_answer_is_refused(start_server: StartServer, answer: bytes) -> None:
    server = await start_server(answering(answer))
    client = UpstreamClient(server.url, Timeouts(), max_answer_bytes=1000)
    try:
        with pytest.raises(UpstreamProtocolError, match="too large") as caught:
            await client.complete(b"ping", {})
        assert caught.value.after_head
    finally:
        await client.close()


# --- cancellation, flow control, timeouts -------------------------------------------------------


async def test_no_head_within_first_byte_is_a_timeout(start_server: StartServer) -> None:
    server = await start_server(then_hang())
    client = UpstreamClient(server.url, Timeouts(connect=1.0, first_byte=0.2, idle=5.0), 1 << 20)
    started = time.perf_counter()
    try:
        with pytest.raises(UpstreamTimeout, match="did not answer in time"):
            await client.complete(b"ping", {})
    finally:
        await client.close()

    assert 0.2 <= time.perf_counter() - started < 1.8  # first_byte, not idle's 5 s
    await eventually(lambda: server.hangups == 1, "the server seeing the hang-up", timeout=3.0)


async def test_a_connection_not_made_within_connect_is_a_timeout() -> None:
    with socket.socket() as listener:  # a full accept queue: further connections wait for a SYN-ACK
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        waiting = [socket.socket() for _ in range(3)]
        for sock in waiting:
            sock.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                sock.connect(("127.0.0.1", port))
        client = UpstreamClient(f"http://127.0.0.1:{port}", Timeouts(connect=0.2, first_byte=2.0), 1 << 20)
        started = time.perf_counter()
        try:
            with pytest.raises(UpstreamTimeout, match="did not answer in time"):  # as aiohttp's connect timeout
                await client.complete(b"ping", {})
        finally:
            await client.close()
            for sock in waiting:
                sock.close()

    assert time.perf_counter() - started < 1.5  # connect's 0.2 s, not first_byte's 2 s


async def test_a_body_stalling_beyond_idle_is_a_timeout(start_server: StartServer) -> None:
    whole = then_hang(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n01234")
    stream = then_hang(b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n01234\r\n"
                       % identifiers.STREAM_CONTENT_TYPE.encode())
    timeouts = Timeouts(connect=1.0, first_byte=1.0, idle=0.2)

    server = await start_server(whole)
    client = UpstreamClient(server.url, timeouts, 1 << 20)
    with pytest.raises(UpstreamTimeout, match="did not finish its answer in time"):
        await client.complete(b"ping", {})
    await client.close()

    server = await start_server(stream)
    client = UpstreamClient(server.url, timeouts, 1 << 20)
    received = []
    with pytest.raises(UpstreamTimeout, match="did not send the next part of its answer in time"):
        async with client.stream(b"ping", {}) as reads:
            async for data in reads:
                received.append(data)
    await client.close()
    assert received == [b"01234"]
    await eventually(lambda: server.hangups == 1, "the server seeing the hang-up", timeout=3.0)


async def test_probes(start_server: StartServer) -> None:
    well = await start_server(answering(b"HTTP/1.1 204 No Content\r\n\r\n"))
    sick = await start_server(answering(b"HTTP/1.1 503 Unavailable\r\nContent-Length: 4\r\n\r\nsick"))
    silent = await start_server(then_hang())
    clients = [UpstreamClient(s.url, Timeouts(), 1 << 20) for s in (well, sick, silent)]
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        clients.append(UpstreamClient(f"http://127.0.0.1:{held.getsockname()[1]}", Timeouts(), 1 << 20))
        try:
            results = [await c.probe("/healthz", 0.2) for c in clients]
        finally:
            for c in clients:
                await c.close()

    assert results == [True, False, False, False]
    assert [r.path for r in well.requests] == ["/healthz"]


# --- pumped bodies: each read consumed in the connection's callback -------------------------------

STREAM_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n\r\n"
               % identifiers.STREAM_CONTENT_TYPE.encode())


def _paced(*pieces: bytes, pace: float = 0.02, end: bytes = b"0\r\n\r\n") -> Handler:
    """Read the request, write the stream's head, then each piece as its own HTTP chunk `pace` seconds
    apart, then `end` (default the last chunk; b"" to hang), then wait for the client to hang up."""

    async def handler(server: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(STREAM_HEAD)
        for piece in pieces:
            await asyncio.sleep(pace)
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
        if end:
            await asyncio.sleep(pace)
            writer.write(end)
        await server.wait_for_hangup(reader)

    return handler


def _keeping(consumed: list[bytes]) -> Callable[[bytes], object]:
    """A pump's consumer that keeps every read and never stops the pump."""
    return consumed.append


async def test_a_pumped_body_is_consumed_in_the_callback_until_the_consumer_stops_it(
        start_server: StartServer) -> None:
    server = await start_server(_paced(b"one", b"two", b"stop", b"four", b"five"))
    client = UpstreamClient(server.url, Timeouts(connect=1.0, first_byte=2.0, idle=2.0), 1 << 20)
    consumed: list[tuple[bytes, bool]] = []

    def consume(data: bytes) -> str | None:
        consumed.append((data, asyncio.current_task() is None))
        return "stopped" if b"stop" in data else None

    async with client.stream(b"ping", {}) as reads:
        assert await reads.pump(consume) == "stopped"
        rest = [data async for data in reads]
        assert await reads.pump(consume) is None  # the body's end
    await client.close()

    assert [data for data, _ in consumed] == [b"one", b"two", b"stop"]
    assert all(in_callback for _, in_callback in consumed)  # no task woke for them
    assert b"".join(rest) == b"fourfive"


async def test_a_pump_consumes_what_was_buffered_before_it_first(start_server: StartServer) -> None:
    server = await start_server(then_hang(STREAM_HEAD + b"3\r\none\r\n3\r\ntwo\r\n0\r\n\r\n"))
    client = UpstreamClient(server.url, Timeouts(connect=1.0, first_byte=2.0, idle=2.0), 1 << 20)
    consumed: list[bytes] = []
    async with client.stream(b"ping", {}) as reads:
        await asyncio.sleep(0.05)  # everything has arrived
        assert await reads.pump(_keeping(consumed)) is None
    await client.close()
    assert b"".join(consumed) == b"onetwo"


async def test_a_pumps_idle_deadline_moves_with_each_read_and_a_stall_beyond_it_is_a_timeout(
        start_server: StartServer) -> None:
    # 8 reads 0.1 s apart, 0.8 s in all, under an idle timeout of 0.3 s; then nothing
    server = await start_server(_paced(*(b"%d" % i for i in range(8)), pace=0.1, end=b""))
    client = UpstreamClient(server.url, Timeouts(connect=1.0, first_byte=2.0, idle=0.3), 1 << 20)
    consumed: list[bytes] = []
    started = time.perf_counter()
    with pytest.raises(UpstreamTimeout, match="did not send the next part of its answer in time"):
        async with client.stream(b"ping", {}) as reads:
            await reads.pump(_keeping(consumed))
    await client.close()
    assert b"".join(consumed) == b"01234567"
    assert time.perf_counter() - started >= 0.8 + 0.3 - 0.05  # the stall's 0.3 s counted from the last read


async def test_what_arrived_before_a_pumped_bodys_failure_is_consumed_then_the_failure_raised(
        start_server: StartServer) -> None:
    async def cut(server: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(STREAM_HEAD + b"3\r\none\r\n")
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(b"3\r\ntwo\r\n5\r\nthr")  # then the connection ends inside a chunk

    server = await start_server(cut)
    client = UpstreamClient(server.url, Timeouts(connect=1.0, first_byte=2.0, idle=2.0), 1 << 20)
    consumed: list[bytes] = []
    with pytest.raises(UpstreamProtocolError):
        async with client.stream(b"ping", {}) as reads:
            await reads.pump(_keeping(consumed))
    await client.close()
    assert b"".join(consumed).startswith(b"onetwo")
