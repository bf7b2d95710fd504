"""http1: the upstream HTTP/1.1 client. Its decoder is fed every split of a set of responses; the pool
and its connections run against small loopback servers that write raw bytes."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import re
import socket
import ssl
import struct
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import httptools
import pytest
import uvloop
from waiting import eventually

from ingress.errors import UpstreamConnectFailed, UpstreamProtocolError, UpstreamTimeout, UpstreamUnavailable
from ingress.settings import Timeouts
from ingress.upstream.client import UpstreamClient
from ingress.upstream.http1 import HIGH_WATER, Response, State
from ingress.upstream.http1_decoder import HEAD_LIMIT, HEAD_TOO_LARGE, ResponseDecoder
from ingress.upstream.pool import KEEPALIVE, ConnectionPool
from ingress.wire import identifiers

# --- the decoder, without I/O -------------------------------------------------------------------

OK = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 11\r\n\r\nhello world"
CHUNKED = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
           b"5\r\nhello\r\n1;name=value\r\n \r\n5\r\nworld\r\n0\r\nTrailer-Field: x\r\n\r\n")
INFORMATIONAL = (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
                 b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world")


@dataclass
class Case:
    raw: bytes
    status: int
    headers: dict[str, str]
    body: bytes
    keep_alive: bool


CASES = {
    "content-length": Case(OK, 200, {"content-type": "text/plain", "content-length": "11"}, b"hello world", True),
    "chunked": Case(CHUNKED, 200, {"transfer-encoding": "chunked"}, b"hello world", True),
    "1xx-skipped": Case(INFORMATIONAL, 200, {"content-length": "11"}, b"hello world", True),
    "connection-close": Case(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nhi", 200,
                             {"connection": "close", "content-length": "2"}, b"hi", False),
    "http-1.0": Case(b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nhi", 200,
                     {"connection": "keep-alive", "content-length": "2"}, b"hi", False),
    "no-content": Case(b"HTTP/1.1 204 No Content\r\n\r\n", 204, {}, b"", True),
    "repeated-header": Case(b"HTTP/1.1 503 Busy\r\nVary: a\r\nVARY: b\r\nContent-Length: 0\r\n\r\n", 503,
                            {"vary": "a, b", "content-length": "0"}, b"", True),
}


def _decoded(pieces: list[bytes]) -> ResponseDecoder:
    decoder = ResponseDecoder()
    body = bytearray()
    for piece in pieces:
        decoder.feed(piece)
        if decoder.buffered:
            body += decoder.take()
    decoder.body.append(bytes(body))
    return decoder


def _check(decoder: ResponseDecoder, case: Case) -> None:
    assert (decoder.status, decoder.headers, decoder.done, decoder.keep_alive) == (
        case.status, case.headers, True, case.keep_alive)
    assert b"".join(decoder.body) == case.body


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_a_response_decodes_the_same_however_it_is_split(case: Case) -> None:
    _check(_decoded([case.raw]), case)
    _check(_decoded([case.raw[i : i + 1] for i in range(len(case.raw))]), case)
    for at in range(1, len(case.raw)):
        _check(_decoded([case.raw[:at], case.raw[at:]]), case)


def test_a_body_delimited_by_the_end_of_the_connection() -> None:
    decoder = ResponseDecoder()
    decoder.feed(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nhello ")
    decoder.feed(b"world")
    assert not decoder.done
    decoder.finish()
    assert decoder.done and not decoder.keep_alive
    assert decoder.take() == b"hello world"


@pytest.mark.parametrize(("raw", "error", "message"), [
    pytest.param(b"", UpstreamUnavailable, "unavailable", id="nothing"),
    pytest.param(OK[:20], UpstreamUnavailable, "unavailable", id="half-a-head"),
    pytest.param(OK[:-3], UpstreamProtocolError, "connection broke", id="short-body"),
    pytest.param(CHUNKED[:-5], UpstreamProtocolError, "connection broke", id="no-last-chunk"),
])
def test_a_response_cut_short_by_the_end_of_the_connection(raw: bytes, error: type[Exception], message: str) -> None:
    decoder = ResponseDecoder()
    decoder.feed(raw)
    with pytest.raises(error, match=message):
        decoder.finish()


@pytest.mark.parametrize("raw", [
    pytest.param(b"SMTP ready\r\n\r\n", id="not-http"),
    pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nhi", id="two-lengths"),
    pytest.param(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", id="bad-chunk-size"),
    pytest.param(b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: x\r\n\r\n", id="upgrade"),
])
def test_a_malformed_response_is_a_protocol_error(raw: bytes) -> None:
    with pytest.raises(UpstreamProtocolError, match="malformed"):
        ResponseDecoder().feed(raw)


def test_an_oversized_head_is_a_protocol_error_whether_it_ends_or_not() -> None:
    big = b"X-Big: " + b"a" * HEAD_LIMIT + b"\r\n"
    with pytest.raises(UpstreamProtocolError, match="over 64 KiB"):
        ResponseDecoder().feed(b"HTTP/1.1 200 OK\r\n" + big + b"Content-Length: 0\r\n\r\n")
    decoder = ResponseDecoder()
    decoder.feed(b"HTTP/1.1 200 OK\r\n")
    with pytest.raises(UpstreamProtocolError, match="over 64 KiB"):
        for _ in range(HEAD_LIMIT // 1000 + 1):
            decoder.feed(b"X-Many: " + b"a" * 990 + b"\r\n")


def test_one_decoder_reads_kept_alive_responses_back_to_back() -> None:
    decoder = ResponseDecoder()
    for case in (CASES["chunked"], CASES["repeated-header"], CASES["content-length"]):
        decoder.start()
        decoder.feed(case.raw)
        assert (decoder.status, decoder.headers, decoder.done, decoder.keep_alive) == (
            case.status, case.headers, True, True)
        assert b"".join(decoder.body) == case.body


def test_bytes_after_the_response_keep_it_but_not_its_connection() -> None:
    decoder = ResponseDecoder()
    decoder.feed(OK + b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nno")
    assert (decoder.done, decoder.keep_alive, decoder.take()) == (True, False, b"hello world")
    decoder = ResponseDecoder()
    decoder.feed(OK)
    decoder.feed(b"junk")
    assert (decoder.done, decoder.keep_alive) == (True, False)


# --- loopback servers ---------------------------------------------------------------------------


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


Handler = Callable[["RawServer", asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@dataclass
class RawServer:
    """A loopback server: each connection goes to `handler`; connections and requests are recorded, and
    `hangups` counts connections whose peer went away while the handler waited (see `wait_for_hangup`)."""

    handler: Handler
    url: str = ""
    connections: int = 0
    hangups: int = 0
    requests: list[Request] = field(default_factory=list)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        try:
            await self.handler(self, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def read_request(self, reader: asyncio.StreamReader) -> Request | None:
        """The next request on a connection; None at its end."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return None
        first, *lines = head.decode().split("\r\n")
        method, path, _ = first.split(" ")
        headers = dict(line.split(": ", 1) for line in lines if line)
        body = await reader.readexactly(int(headers.get("Content-Length", "0")))
        self.requests.append(Request(method, path, headers, body))
        return self.requests[-1]

    async def wait_for_hangup(self, reader: asyncio.StreamReader) -> None:
        try:
            while await reader.read(65536):
                pass
        except ConnectionError:
            pass
        self.hangups += 1


def answering(*answers: bytes, close: bool = False) -> Handler:
    """Answer each request on a connection with the next of `answers`, the last one repeated; with
    `close`, close the connection after each answer."""

    async def handler(server: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        n = 0
        while await server.read_request(reader) is not None:
            writer.write(answers[min(n, len(answers) - 1)])
            await writer.drain()
            n += 1
            if close:
                return

    return handler


def then_hang(*parts: bytes) -> Handler:
    """Read the request, write `parts`, then wait for the client to hang up."""

    async def handler(server: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        for part in parts:
            writer.write(part)
        await server.wait_for_hangup(reader)

    return handler


StartServer = Callable[..., Awaitable[RawServer]]


@pytest.fixture
async def start_server(tmp_path: Path) -> AsyncIterator[StartServer]:
    """`await start_server(handler, unix=False, tls=None)`: a RawServer running until the test ends."""
    servers: list[tuple[asyncio.Server, RawServer]] = []

    async def start(handler: Handler, *, unix: bool = False, tls: ssl.SSLContext | None = None) -> RawServer:
        raw = RawServer(handler)
        if unix:
            path = str(tmp_path / "service.sock")
            server = await asyncio.start_unix_server(raw.serve, path)
            raw.url = f"unix:{path}"
        else:
            server = await asyncio.start_server(raw.serve, "127.0.0.1", 0, ssl=tls)
            port = server.sockets[0].getsockname()[1]
            raw.url = f"{'https' if tls else 'http'}://{'localhost' if tls else '127.0.0.1'}:{port}"
        servers.append((server, raw))
        return raw

    yield start
    for server, raw in servers:
        server.close()
        for task in raw.tasks:
            task.cancel()
        await asyncio.gather(*raw.tasks, return_exceptions=True)
        await server.wait_closed()


@pytest.fixture
async def pools() -> AsyncIterator[list[ConnectionPool]]:
    """Pools to close when the test ends."""
    made: list[ConnectionPool] = []
    yield made
    for pool in made:
        await pool.close()


def _pool(pools: list[ConnectionPool], url: str, keepalive: float = KEEPALIVE) -> ConnectionPool:
    pools.append(ConnectionPool(url, keepalive))
    return pools[-1]


async def _request(pool: ConnectionPool, body: bytes | None = b"ping", within: float = 2.0) -> Response:
    deadline = asyncio.get_running_loop().time() + within
    return await pool.request("POST" if body is not None else "GET", "/v1/complete", {"x-request-id": "r-1"},
                              body, 1.0, deadline)


async def _read_all(response: Response) -> bytes:
    parts = []
    try:
        while data := await response.read(2.0):
            parts.append(data)
    finally:
        response.close()
    return b"".join(parts)


# --- requests and answers over loopback ----------------------------------------------------------


async def test_a_request_goes_out_as_written_and_its_answer_comes_back(
    start_server: StartServer, pools: list[ConnectionPool],
) -> None:
    server = await start_server(answering(OK))
    pool = _pool(pools, server.url)
    body = bytearray(b"\x00\x01 flatbuffers " * 2000)

    response = await pool.request("POST", "/v1/complete", {"Content-Type": "application/x-flatbuffers",
                                                           "traceparent": "00-ab-cd-01"}, body, 1.0,
                                  asyncio.get_running_loop().time() + 2.0)

    assert (response.status, response.headers["content-type"]) == (200, "text/plain")
    assert await _read_all(response) == b"hello world"
    [request] = server.requests
    assert (request.method, request.path, request.body) == ("POST", "/v1/complete", bytes(body))
    assert request.headers == {"Host": server.url.removeprefix("http://"), "Content-Type": "application/x-flatbuffers",
                               "traceparent": "00-ab-cd-01", "Content-Length": str(len(body))}


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
    response = await _request(_pool(pools, server.url))

    assert await _read_all(response) == b"hello world"


async def test_informational_responses_are_skipped(start_server: StartServer, pools: list[ConnectionPool],
) -> None:
    server = await start_server(answering(INFORMATIONAL))
    response = await _request(_pool(pools, server.url))

    assert (response.status, response.headers) == (200, {"content-length": "11"})
    assert await _read_all(response) == b"hello world"


async def test_a_body_ending_with_the_connection_is_read_whole(start_server: StartServer, pools: list[ConnectionPool],
) -> None:
    server = await start_server(answering(b"HTTP/1.1 200 OK\r\n\r\nuntil the end", close=True))
    pool = _pool(pools, server.url)

    for _ in range(2):
        assert await _read_all(await _request(pool)) == b"until the end"
    assert server.connections == 2


# --- keep-alive -----------------------------------------------------------------------------------


async def test_answers_read_to_their_end_leave_the_connection_for_the_next_request(
    start_server: StartServer, pools: list[ConnectionPool],
) -> None:
    server = await start_server(answering(OK, CHUNKED, b"HTTP/1.1 204 No Content\r\n\r\n"))
    pool = _pool(pools, server.url)

    answers = [await _read_all(await _request(pool)) for _ in range(4)]
    await _read_all(await _request(pool, body=None))

    assert answers == [b"hello world", b"hello world", b"", b""]
    assert server.connections == 1
    assert [r.method for r in server.requests] == ["POST"] * 4 + ["GET"]
    assert "Content-Length" not in server.requests[-1].headers


@pytest.mark.parametrize("answer", [
    pytest.param(CASES["connection-close"].raw, id="connection-close"),
    pytest.param(CASES["http-1.0"].raw, id="http-1.0"),
    pytest.param(OK + b"HTTP/1.1 200 OK\r\n", id="bytes-after-the-answer"),
])
async def test_a_connection_that_may_not_carry_another_request_is_not_reused(
    start_server: StartServer, pools: list[ConnectionPool], answer: bytes,
) -> None:
    server = await start_server(answering(answer))
    pool = _pool(pools, server.url)

    for _ in range(2):
        await _read_all(await _request(pool))

    assert server.connections == 2


async def test_a_pooled_connection_its_peer_closed_is_not_reused(start_server: StartServer, pools: list[ConnectionPool],
) -> None:
    server = await start_server(answering(OK, close=True))  # no Connection: close, yet it closes
    pool = _pool(pools, server.url)

    assert await _read_all(await _request(pool)) == b"hello world"
    await asyncio.sleep(0.05)  # the peer's close arrives while the connection is idle
    assert await _read_all(await _request(pool)) == b"hello world"

    assert server.connections == 2


# --- stale connections: expiry, the check before reuse, the one retry ---------------------------


def closing_idle_after(seconds: float) -> Handler:
    """Answer each request with OK; close a connection idle for `seconds`, as servers do (5 s is
    common). `hangups` counts the connections the client closed first."""

    async def handler(server: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                async with asyncio.timeout(seconds):
                    request = await server.read_request(reader)
            except TimeoutError:
                return  # the server's own expiry: not a hang-up
            if request is None:
                server.hangups += 1
                return
            writer.write(OK)

    return handler


async def test_an_idle_connection_is_closed_at_its_keepalive_before_the_server_closes_it(
    start_server: StartServer, pools: list[ConnectionPool],
) -> None:
    server = await start_server(closing_idle_after(3.0))
    pool = _pool(pools, server.url, keepalive=0.2)

    assert await _read_all(await _request(pool)) == b"hello world"
    await eventually(lambda: server.hangups == 1, "the pool closed the idle connection")  # no request to come
    assert await _read_all(await _request(pool)) == b"hello world"

    assert server.connections == 2


async def test_idle_connections_past_their_keepalive_are_closed_while_another_is_in_use(
    start_server: StartServer, pools: list[ConnectionPool],
) -> None:
    # Reused most recently used first, the other connection is never taken again: it is closed all
    # the same when its keepalive passes.
    server = await start_server(closing_idle_after(30.0))
    pool = _pool(pools, server.url, keepalive=0.3)
    first, second = await asyncio.gather(_request(pool), _request(pool))
    for response in (first, second):
        assert await _read_all(response) == b"hello world"
    assert server.connections == 2

    async with asyncio.timeout(5.0):
        while server.hangups == 0:
            assert await _read_all(await _request(pool)) == b"hello world"
            await asyncio.sleep(0.02)


class ThreadServer:
    """A loopback server on threads of its own, with blocking sockets: what it does happens while the
    test's event loop is not running, so a close it makes can reach the client's socket before that
    loop has seen it. The n-th connection runs the n-th script, on a thread of its own;
    `requests[n]` counts the requests it read."""

    def __init__(self, *scripts: Callable[[ThreadServer, socket.socket], None]) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(10.0)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self.requests: list[int] = []
        self.go, self.closed = threading.Event(), threading.Event()
        self._scripts = scripts
        self._index: dict[socket.socket, int] = {}  # each connection's place in `requests`
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        with self._listener:
            for script in self._scripts:
                try:
                    conn, _ = self._listener.accept()
                except TimeoutError:
                    return
                self.requests.append(0)
                thread = threading.Thread(target=self._serve, args=(script, conn, len(self.requests) - 1),
                                          daemon=True)
                self._threads.append(thread)
                thread.start()

    def _serve(self, script: Callable[[ThreadServer, socket.socket], None], conn: socket.socket, n: int) -> None:
        with conn:
            conn.settimeout(10.0)
            self._index[conn] = n
            script(self, conn)

    def read_request(self, conn: socket.socket) -> bool:
        """One request (head and Content-Length body); False at the end of the connection."""
        data = b""
        while b"\r\n\r\n" not in data:
            piece = conn.recv(65536)
            if not piece:
                return False
            data += piece
        head, _, body = data.partition(b"\r\n\r\n")
        length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
        while length and len(body) < int(length[1]):
            body += conn.recv(65536)
        self.requests[self._index[conn]] += 1
        return True

    def join(self) -> None:
        for thread in list(self._threads):
            thread.join(10.0)
            assert not thread.is_alive()


def _answer_then_close_on_go(server: ThreadServer, conn: socket.socket) -> None:
    server.read_request(conn)
    conn.sendall(OK)
    server.go.wait(10.0)
    conn.close()
    server.closed.set()


def _answer_then_hold(server: ThreadServer, conn: socket.socket) -> None:
    """Answer, then neither read nor close until told to."""
    server.read_request(conn)
    conn.sendall(OK)
    server.go.wait(10.0)


def _answer_all(server: ThreadServer, conn: socket.socket) -> None:
    while server.read_request(conn):
        conn.sendall(OK)


LOOPS = [pytest.param(asyncio.new_event_loop, id="asyncio"), pytest.param(uvloop.new_event_loop, id="uvloop")]


def _two_exchanges(new_loop: Callable[[], asyncio.AbstractEventLoop],
                   first: Callable[[ThreadServer, socket.socket], None],
                   between: Callable[[ThreadServer, ConnectionPool], None], keepalive: float = KEEPALIVE) -> list[int]:
    """Two exchanges through one pool on a loop from `new_loop`, against a ThreadServer whose first
    connection runs `first` and any other answers all; `between` runs, blocking the loop, after the first
    exchange has pooled its connection. The requests each connection carried."""
    server = ThreadServer(first, _answer_all)

    async def exchanges() -> None:
        pool = ConnectionPool(server.url, keepalive)
        try:
            assert await _read_all(await _request(pool)) == b"hello world"
            between(server, pool)
            assert await _read_all(await _request(pool)) == b"hello world"
        finally:
            server.go.set()
            await pool.close()

    with asyncio.Runner(loop_factory=new_loop) as runner:
        runner.run(exchanges())
    server.join()
    return server.requests


@pytest.mark.parametrize("new_loop", LOOPS)
def test_a_pooled_connection_closed_before_the_loop_saw_it_never_carries_the_request(
    new_loop: Callable[[], asyncio.AbstractEventLoop],
) -> None:
    def close_unseen(server: ThreadServer, pool: ConnectionPool) -> None:
        server.go.set()
        assert server.closed.wait(5.0)  # blocking: the loop does not run, so it has not seen the close
        time.sleep(0.6)  # idle long enough to be polled (once idle for 0.5 s), and not to expire

    # the second request went out on a new connection, and only there
    assert _two_exchanges(new_loop, _answer_then_close_on_go, close_unseen, keepalive=2.0) == [1, 1]


@pytest.mark.parametrize("new_loop", LOOPS)
def test_a_request_whose_write_fails_at_once_goes_out_on_a_new_connection(
    new_loop: Callable[[], asyncio.AbstractEventLoop],
) -> None:
    def shut_for_writing(server: ThreadServer, pool: ConnectionPool) -> None:
        # This end of the pooled connection shut for writing: the check before reuse sees nothing,
        # and the write fails at once. It stands in for a reset arriving between that check and
        # the write, which no test can time; either way nothing of the request was sent.
        [conn] = pool._idle
        with socket.socket(fileno=os.dup(conn.transport.get_extra_info("socket").fileno())) as sock:
            sock.shutdown(socket.SHUT_WR)

    assert _two_exchanges(new_loop, _answer_then_hold, shut_for_writing) == [1, 1]


async def test_a_request_the_service_may_have_taken_is_never_sent_again(
    start_server: StartServer, pools: list[ConnectionPool],
) -> None:
    async def answer_then_die_on_the_next(server: RawServer, reader: asyncio.StreamReader,
                                          writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(OK)
        await server.read_request(reader)  # took the second request, and died with it

    server = await start_server(answer_then_die_on_the_next)
    pool = _pool(pools, server.url)
    assert await _read_all(await _request(pool)) == b"hello world"

    with pytest.raises(UpstreamUnavailable) as caught:
        await _request(pool)

    assert not isinstance(caught.value, UpstreamConnectFailed)  # the request was sent: not to be retried
    assert (server.connections, len(server.requests)) == (1, 2)


async def test_head_is_refused_before_anything_is_sent(start_server: StartServer, pools: list[ConnectionPool],
) -> None:
    server = await start_server(answering(b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n"))  # as for a HEAD
    pool = _pool(pools, server.url)

    with pytest.raises(ValueError, match="HEAD"):
        await pool.request("HEAD", "/healthz", {}, None, 1.0, asyncio.get_running_loop().time() + 2.0)

    assert server.connections == 0


async def test_a_connection_is_active_for_an_exchange_idle_between_them_and_closed_when_cut_short(
    start_server: StartServer, pools: list[ConnectionPool],
) -> None:
    server = await start_server(answering(OK, b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789"))
    pool = _pool(pools, server.url)

    response = await _request(pool)
    [conn] = pool._open
    states = [conn.state]
    assert await _read_all(response) == b"hello world"
    states.append(conn.state)
    assert list(pool._idle) == [conn]
    response = await _request(pool)
    states.append(conn.state)
    assert not pool._idle
    response.close()  # before its end
    states.append(conn.state)

    assert states == [State.ACTIVE, State.IDLE, State.ACTIVE, State.CLOSED]
    await eventually(lambda: not pool._open, "the connection lost")


async def test_an_answer_closed_before_its_end_closes_its_connection(
    start_server: StartServer, pools: list[ConnectionPool],
) -> None:
    server = await start_server(then_hang(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789"))
    pool = _pool(pools, server.url)

    response = await _request(pool)
    assert await response.read(1.0) == b"0123456789"
    response.close()

    await eventually(lambda: server.hangups == 1, "the server seeing the hang-up")


async def test_closing_the_pool_closes_its_idle_connections(start_server: StartServer) -> None:
    async def answer_then_wait(server: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(OK)
        await server.wait_for_hangup(reader)

    server = await start_server(answer_then_wait)
    pool = ConnectionPool(server.url)
    await _read_all(await _request(pool))

    await pool.close()

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
        await _request(_pool(pools, server.url))
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
    response = await _request(_pool(pools, server.url))

    assert await response.read(1.0) == b"0123456789"  # what came before the break is read first
    with pytest.raises(UpstreamProtocolError, match="connection broke") as caught:
        await response.read(1.0)
    response.close()
    if reset:
        assert isinstance(caught.value.__cause__, ConnectionResetError)  # what the connection ended with


async def test_a_refused_connection_is_a_connect_failure(pools: list[ConnectionPool],
) -> None:
    with socket.socket() as held:  # bound, never listening: connections are refused
        held.bind(("127.0.0.1", 0))
        with pytest.raises(UpstreamConnectFailed, match=r"The model service is unavailable\."):
            await _request(_pool(pools, f"http://127.0.0.1:{held.getsockname()[1]}"))


async def test_an_unknown_host_is_a_connect_failure(pools: list[ConnectionPool],
) -> None:
    with pytest.raises(UpstreamConnectFailed):
        await _request(_pool(pools, "http://no-such-host.invalid:80"))


async def test_a_unix_socket_endpoint(start_server: StartServer, pools: list[ConnectionPool], tmp_path: Path) -> None:
    server = await start_server(answering(OK), unix=True)
    pool = _pool(pools, server.url)

    for _ in range(2):
        assert await _read_all(await _request(pool)) == b"hello world"

    assert server.connections == 1
    assert server.requests[0].headers["Host"] == "localhost"
    with pytest.raises(UpstreamConnectFailed):
        await _request(_pool(pools, f"unix:{tmp_path / 'absent.sock'}"))


async def test_an_oversized_head_is_refused(start_server: StartServer, pools: list[ConnectionPool],
) -> None:
    big = b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * (HEAD_LIMIT + 1) + b"\r\nContent-Length: 0\r\n\r\n"
    server = await start_server(answering(big))

    with pytest.raises(UpstreamProtocolError, match=HEAD_TOO_LARGE):
        await _request(_pool(pools, server.url))


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


async def test_a_header_or_path_with_cr_lf_or_nul_is_never_sent(start_server: StartServer, pools: list[ConnectionPool],
) -> None:
    server = await start_server(answering(OK))
    pool = _pool(pools, server.url)
    deadline = asyncio.get_running_loop().time() + 1.0
    for path, headers in [("/", {"x-request-id": "a\r\nX-Evil: 1"}), ("/", {"x\nname": "v"}),
                          ("/", {"tracestate": "a\0b"}), ("/ HTTP/1.1\r\nX-Evil: 1\r\n", {})]:
        with pytest.raises(ValueError, match="CR, LF or NUL"):
            await pool.request("POST", path, headers, b"", 1.0, deadline)
    assert server.connections == 0


# --- cancellation, flow control, timeouts -------------------------------------------------------


@pytest.mark.parametrize("sent", [b"", b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n01234"], ids=["head", "body"])
async def test_cancelling_a_request_closes_its_connection_at_once(
    start_server: StartServer, pools: list[ConnectionPool], sent: bytes,
) -> None:
    server = await start_server(then_hang(sent))
    pool = _pool(pools, server.url)

    async def exchange() -> None:
        await _read_all(await _request(pool, within=30.0))

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
    pool = _pool(pools, server.url)
    response = await _request(pool)
    await asyncio.sleep(0.3)  # a reader busy elsewhere

    assert response.decoder.buffered <= HIGH_WATER + (1 << 20)  # one socket read past the mark at most
    assert not sent.is_set()  # the server is held back: nobody buffers the whole body
    assert await _read_all(response) == pattern * copies
    assert sent.is_set()
    assert await _read_all(await _request(pool)) == b"hello world"
    assert server.connections == 1  # read to its end after pausing: reused


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
    pool = _pool(pools, server.url)

    assert await _read_all(await _request(pool, within=0.1)) == b"hello world"
    assert await _read_all(await _request(pool, within=2.0)) == b"hello world"  # waits past the first deadline
    assert server.connections == 1


async def test_a_later_deadline_on_a_kept_alive_connection_does_not_delay_an_earlier_one(
    start_server: StartServer, pools: list[ConnectionPool],
) -> None:
    server = await start_server(answering_after(0.0, 30.0))
    pool = _pool(pools, server.url)
    assert await _read_all(await _request(pool, within=30.0)) == b"hello world"

    started = time.perf_counter()
    with pytest.raises(TimeoutError):
        await _request(pool, within=0.2)

    assert 0.2 <= time.perf_counter() - started < 1.5  # its own deadline, not the earlier request's 30 s
    assert server.connections == 1


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
        pool = _pool(pools, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        for _ in range(4):  # the connection and its parser, made once
            await _read_all(await _request(pool))
        gc.collect()
        gc.disable()
        try:
            for _ in range(100):
                assert await _read_all(await _request(pool)) == b"hello world"
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
        pool = _pool(pools, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        gc.collect()
        gc.disable()
        try:
            for _ in range(20):
                try:
                    await _read_all(await _request(pool))
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


# --- TLS ------------------------------------------------------------------------------------------


async def test_an_https_endpoint(start_server: StartServer, pools: list[ConnectionPool], tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    try:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                        "/CN=localhost", "-addext", "subjectAltName=DNS:localhost", "-keyout", str(key),
                        "-out", str(cert)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("no openssl to make a certificate with")
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)
    server = await start_server(answering(OK), tls=tls)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the client's default context trusts this certificate

    pool = _pool(pools, server.url)
    for _ in range(2):
        assert await _read_all(await _request(pool)) == b"hello world"
    assert server.connections == 1


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
