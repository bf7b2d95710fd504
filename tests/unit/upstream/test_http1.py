"""One upstream HTTP/1.1 connection and its response (ingress/upstream/http1.py), against loopback servers:
answers however written, connections that end early, cancellation, flow control, deadlines, and no
reference cycles left behind."""

from __future__ import annotations

import asyncio
import gc
import socket
import struct
import time

import httptools
import pytest
from raw_servers import (
    CHUNKED,
    INFORMATIONAL,
    OK,
    Handler,
    RawServer,
    StartServer,
    answering,
    new_pool,
    read_all,
    send,
    then_hang,
)
from waiting import eventually

from ingress.errors import UpstreamConnectFailed, UpstreamProtocolError, UpstreamUnavailable
from ingress.upstream.http1 import HIGH_WATER
from ingress.upstream.http1_decoder import HEAD_LIMIT, HEAD_TOO_LARGE
from ingress.upstream.pool import ConnectionPool

# --- requests and answers over loopback ----------------------------------------------------------


async def test_a_chunked_answer_written_a_byte_at_a_time(start_server: StartServer, pools: list[ConnectionPool],
) -> None:
    async def trickle(server: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        for i in range(len(CHUNKED)):
            writer.write(CHUNKED[i : i + 1])
            await writer.drain()
            await asyncio.sleep(0)
        await server.wait_for_hangup(reader)

    server = await start_server(trickle)
    response = await send(new_pool(pools, server.url))

    assert await read_all(response) == b"hello world"


async def test_informational_responses_are_skipped(start_server: StartServer, pools: list[ConnectionPool],
) -> None:
    server = await start_server(answering(INFORMATIONAL))
    response = await send(new_pool(pools, server.url))

    assert (response.status, response.headers) == (200, {"content-length": "11"})
    assert await read_all(response) == b"hello world"


async def test_a_body_ending_with_the_connection_is_read_whole(start_server: StartServer, pools: list[ConnectionPool],
) -> None:
    server = await start_server(answering(b"HTTP/1.1 200 OK\r\n\r\nuntil the end", close=True))
    pool = new_pool(pools, server.url)

    for _ in range(2):
        assert await read_all(await send(pool)) == b"until the end"
    assert server.connections == 2


# --- stale connections: expiry, the check before reuse, the one retry ---------------------------


async def test_an_answer_closed_before_its_end_closes_its_connection(
    start_server: StartServer, pools: list[ConnectionPool],
) -> None:
    server = await start_server(then_hang(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789"))
    pool = new_pool(pools, server.url)

    response = await send(pool)
    assert await response.read(1.0) == b"0123456789"
    response.close()

    await eventually(lambda: server.hangups == 1, "the server seeing the hang-up")


# --- failures -----------------------------------------------------------------------------------


def _reset(writer: asyncio.StreamWriter) -> None:
    """Abort with a TCP RST rather than a FIN."""
    writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def cut(*parts: bytes, reset: bool) -> Handler:
    async def handler(server: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        for part in parts:
            writer.write(part)
        await writer.drain()
        await asyncio.sleep(0.05)
        if reset:
            _reset(writer)

    return handler


@pytest.mark.parametrize("reset", [False, True], ids=["eof", "reset"])
async def test_a_connection_ending_before_the_head_is_unavailable(
    start_server: StartServer, pools: list[ConnectionPool], reset: bool,
) -> None:
    server = await start_server(cut(b"HTTP/1.1 200", reset=reset))

    with pytest.raises(UpstreamUnavailable, match="unavailable") as caught:
        await send(new_pool(pools, server.url))
    assert not isinstance(caught.value, UpstreamConnectFailed)  # the request was sent: not to be retried
    if reset:
        assert isinstance(caught.value.__cause__, ConnectionResetError)  # what the connection ended with


@pytest.mark.parametrize("reset", [False, True], ids=["eof", "reset"])
@pytest.mark.parametrize("head", [
    pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n", id="content-length"),
    pytest.param(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", id="chunked"),
])
async def test_a_connection_ending_mid_body_is_a_protocol_error(
    start_server: StartServer, pools: list[ConnectionPool], head: bytes, reset: bool,
) -> None:
    first = b"a\r\n0123456789\r\n" if b"chunked" in head else b"0123456789"
    server = await start_server(cut(head + first, reset=reset))
    response = await send(new_pool(pools, server.url))

    assert await response.read(1.0) == b"0123456789"  # what came before the break is read first
    with pytest.raises(UpstreamProtocolError, match="connection broke") as caught:
        await response.read(1.0)
    response.close()
    if reset:
        assert isinstance(caught.value.__cause__, ConnectionResetError)  # what the connection ended with


async def test_an_oversized_head_is_refused(start_server: StartServer, pools: list[ConnectionPool],
) -> None:
    big = b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * (HEAD_LIMIT + 1) + b"\r\nContent-Length: 0\r\n\r\n"
    server = await start_server(answering(big))

    with pytest.raises(UpstreamProtocolError, match=HEAD_TOO_LARGE):
        await send(new_pool(pools, server.url))


# --- cancellation, flow control, timeouts -------------------------------------------------------


@pytest.mark.parametrize("sent", [b"", b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n01234"], ids=["head", "body"])
async def test_cancelling_a_request_closes_its_connection_at_once(
    start_server: StartServer, pools: list[ConnectionPool], sent: bytes,
) -> None:
    server = await start_server(then_hang(sent))
    pool = new_pool(pools, server.url)

    async def exchange() -> None:
        await read_all(await send(pool, within=30.0))

    task = asyncio.ensure_future(exchange())
    await eventually(lambda: len(server.requests) == 1, "the request at the server")
    await asyncio.sleep(0.02)
    started = time.perf_counter()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    await eventually(lambda: server.hangups == 1, "the server seeing the hang-up", timeout=3.0)
    assert time.perf_counter() - started < 1.5  # at once, not within the request's 30 s


async def test_a_slow_reader_pauses_the_socket_rather_than_buffering(
    start_server: StartServer, pools: list[ConnectionPool],
) -> None:
    pattern = bytes(range(256)) * 4096  # 1 MiB
    copies = 32
    sent = asyncio.Event()

    async def large_then_small(server: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (copies * len(pattern)))
        for _ in range(copies):
            writer.write(pattern)
            await writer.drain()
        sent.set()
        await answering(OK)(server, reader, writer)

    server = await start_server(large_then_small)
    pool = new_pool(pools, server.url)
    response = await send(pool)
    await asyncio.sleep(0.3)  # a reader busy elsewhere

    assert response.decoder.buffered <= HIGH_WATER + (1 << 20)  # one socket read past the mark at most
    assert not sent.is_set()  # the server is held back: nobody buffers the whole body
    assert await read_all(response) == pattern * copies
    assert sent.is_set()
    assert await read_all(await send(pool)) == b"hello world"
    assert server.connections == 1  # read to its end after pausing: reused


def answering_after(*delays: float) -> Handler:
    """Answer the requests on a connection with OK, each after its delay."""

    async def handler(server: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for delay in delays:
            if await server.read_request(reader) is None:
                return
            await asyncio.sleep(delay)
            writer.write(OK)
        await server.wait_for_hangup(reader)

    return handler


async def test_an_earlier_deadline_on_a_kept_alive_connection_does_not_cut_a_later_one(
    start_server: StartServer, pools: list[ConnectionPool],
) -> None:
    server = await start_server(answering_after(0.0, 0.3))
    pool = new_pool(pools, server.url)

    assert await read_all(await send(pool, within=0.1)) == b"hello world"
    assert await read_all(await send(pool, within=2.0)) == b"hello world"  # waits past the first deadline
    assert server.connections == 1


async def test_a_later_deadline_on_a_kept_alive_connection_does_not_delay_an_earlier_one(
    start_server: StartServer, pools: list[ConnectionPool],
) -> None:
    server = await start_server(answering_after(0.0, 30.0))
    pool = new_pool(pools, server.url)
    assert await read_all(await send(pool, within=30.0)) == b"hello world"

    started = time.perf_counter()
    with pytest.raises(TimeoutError):
        await send(pool, within=0.2)

    assert 0.2 <= time.perf_counter() - started < 1.5  # its own deadline, not the earlier request's 30 s
    assert server.connections == 1


class _AnswerEveryRequest(asyncio.Protocol):
    """A server connection answering each request with OK, from a plain Protocol: no stream objects
    whose own cycles the test below would count."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.parser = httptools.HttpRequestParser(self)
        self.answers = 0

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_message_complete(self) -> None:
        self.answers += 1
        self.transport.write(CHUNKED if self.answers % 2 else OK)  # type: ignore[attr-defined]  # a TCP transport


async def test_exchanges_leave_no_reference_cycles_behind(pools: list[ConnectionPool],
) -> None:
    server = await asyncio.get_running_loop().create_server(_AnswerEveryRequest, "127.0.0.1", 0)
    try:
        pool = new_pool(pools, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        for _ in range(4):  # the connection and its parser, made once
            await read_all(await send(pool))
        gc.collect()
        gc.disable()
        try:
            for _ in range(100):
                assert await read_all(await send(pool)) == b"hello world"
            assert gc.collect() == 0  # everything an exchange made was freed as soon as it was done with
        finally:
            gc.enable()
    finally:
        server.close()
        await pools[0].close()
        await server.wait_closed()


class _AnswerThenEnd(_AnswerEveryRequest):
    """A server connection that ends after each request: closed after a whole answer, reset before the
    head, or reset mid-body (the soak's faults)."""

    ending = "close"

    def on_message_complete(self) -> None:
        transport = self.transport
        assert isinstance(transport, asyncio.Transport)
        if self.ending == "close":
            transport.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 11\r\n\r\nhello world")
            transport.close()
        elif self.ending == "reset":
            transport.abort()
        else:
            transport.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nhello")
            transport.abort()


@pytest.mark.parametrize("ending", ["close", "reset", "mid-body"])
async def test_connections_that_end_leave_no_reference_cycles_behind(pools: list[ConnectionPool], ending: str) -> None:
    """A closed connection, its parser, its timer, and the error its answer failed with are freed when it
    ends: left in cycles, they waited for a full collection, which gctune's thresholds make rare (the
    30-minute soak's worker grew by ~10 MiB of them before one ran)."""
    protocol = type("Ending", (_AnswerThenEnd,), {"ending": ending})
    server = await asyncio.get_running_loop().create_server(protocol, "127.0.0.1", 0)
    try:
        pool = new_pool(pools, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        gc.collect()
        gc.disable()
        try:
            for _ in range(20):
                try:
                    await read_all(await send(pool))
                except (UpstreamUnavailable, UpstreamProtocolError):
                    assert ending != "close"
                await asyncio.sleep(0.01)  # the connection's end seen by the loop
            gc.set_debug(gc.DEBUG_SAVEALL)
            gc.collect()
            left = [type(o).__qualname__ for o in gc.garbage if type(o).__module__.startswith("ingress")]
            assert left == []
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
    finally:
        server.close()
        await pools[0].close()
        await server.wait_closed()
