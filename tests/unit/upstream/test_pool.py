"""The connections to one endpoint (ingress/upstream/pool.py), against loopback servers: the request's head,
reuse and keep-alive, stale connections and the one retry, what is refused before anything is sent, and
how a connection is made (refused, unknown host, unix socket, TLS)."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import uvloop
from raw_servers import CHUNKED, OK, Handler, RawServer, StartServer, answering, new_pool, read_all, send
from waiting import eventually

from ingress.errors import UpstreamConnectFailed, UpstreamUnavailable
from ingress.upstream.http1 import State
from ingress.upstream.pool import KEEPALIVE, ConnectionPool
from unit.upstream.test_http1_decoder import CASES

# --- requests and answers over loopback ----------------------------------------------------------


async def test_a_request_goes_out_as_written_and_its_answer_comes_back(
    start_server: StartServer, pools: list[ConnectionPool],
) -> None:
    server = await start_server(answering(OK))
    pool = new_pool(pools, server.url)
    body = bytearray(b"\x00\x01 flatbuffers " * 2000)

    response = await pool.request("POST", "/v1/complete", {"Content-Type": "application/x-flatbuffers",
                                                           "traceparent": "00-ab-cd-01"}, body, 1.0,
                                  asyncio.get_running_loop().time() + 2.0)

    assert (response.status, response.headers["content-type"]) == (200, "text/plain")
    assert await read_all(response) == b"hello world"
    [request] = server.requests
    assert (request.method, request.path, request.body) == ("POST", "/v1/complete", bytes(body))
    assert request.headers == {"Host": server.url.removeprefix("http://"), "Content-Type": "application/x-flatbuffers",
                               "traceparent": "00-ab-cd-01", "Content-Length": str(len(body))}


# --- keep-alive -----------------------------------------------------------------------------------


async def test_answers_read_to_their_end_leave_the_connection_for_the_next_request(
    start_server: StartServer, pools: list[ConnectionPool],
) -> None:
    server = await start_server(answering(OK, CHUNKED, b"HTTP/1.1 204 No Content\r\n\r\n"))
    pool = new_pool(pools, server.url)

    answers = [await read_all(await send(pool)) for _ in range(4)]
    await read_all(await send(pool, body=None))

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
    pool = new_pool(pools, server.url)

    for _ in range(2):
        await read_all(await send(pool))

    assert server.connections == 2


async def test_a_pooled_connection_its_peer_closed_is_not_reused(start_server: StartServer, pools: list[ConnectionPool],
) -> None:
    server = await start_server(answering(OK, close=True))  # no Connection: close, yet it closes
    pool = new_pool(pools, server.url)

    assert await read_all(await send(pool)) == b"hello world"
    await asyncio.sleep(0.05)  # the peer's close arrives while the connection is idle
    assert await read_all(await send(pool)) == b"hello world"

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
    pool = new_pool(pools, server.url, keepalive=0.2)

    assert await read_all(await send(pool)) == b"hello world"
    await eventually(lambda: server.hangups == 1, "the pool closed the idle connection")  # no request to come
    assert await read_all(await send(pool)) == b"hello world"

    assert server.connections == 2


async def test_idle_connections_past_their_keepalive_are_closed_while_another_is_in_use(
    start_server: StartServer, pools: list[ConnectionPool],
) -> None:
    # Reused most recently used first, the other connection is never taken again: it is closed all
    # the same when its keepalive passes.
    server = await start_server(closing_idle_after(30.0))
    pool = new_pool(pools, server.url, keepalive=0.3)
    first, second = await asyncio.gather(send(pool), send(pool))
    for response in (first, second):
        assert await read_all(response) == b"hello world"
    assert server.connections == 2

    async with asyncio.timeout(5.0):
        while server.hangups == 0:
            assert await read_all(await send(pool)) == b"hello world"
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
            assert await read_all(await send(pool)) == b"hello world"
            between(server, pool)
            assert await read_all(await send(pool)) == b"hello world"
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
    pool = new_pool(pools, server.url)
    assert await read_all(await send(pool)) == b"hello world"

    with pytest.raises(UpstreamUnavailable) as caught:
        await send(pool)

    assert not isinstance(caught.value, UpstreamConnectFailed)  # the request was sent: not to be retried
    assert (server.connections, len(server.requests)) == (1, 2)


async def test_head_is_refused_before_anything_is_sent(start_server: StartServer, pools: list[ConnectionPool],
) -> None:
    server = await start_server(answering(b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n"))  # as for a HEAD
    pool = new_pool(pools, server.url)

    with pytest.raises(ValueError, match="HEAD"):
        await pool.request("HEAD", "/healthz", {}, None, 1.0, asyncio.get_running_loop().time() + 2.0)

    assert server.connections == 0


async def test_a_connection_is_active_for_an_exchange_idle_between_them_and_closed_when_cut_short(
    start_server: StartServer, pools: list[ConnectionPool],
) -> None:
    server = await start_server(answering(OK, b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789"))
    pool = new_pool(pools, server.url)

    response = await send(pool)
    [conn] = pool._open
    states = [conn.state]
    assert await read_all(response) == b"hello world"
    states.append(conn.state)
    assert list(pool._idle) == [conn]
    response = await send(pool)
    states.append(conn.state)
    assert not pool._idle
    response.close()  # before its end
    states.append(conn.state)

    assert states == [State.ACTIVE, State.IDLE, State.ACTIVE, State.CLOSED]
    await eventually(lambda: not pool._open, "the connection lost")


async def test_closing_the_pool_closes_its_idle_connections(start_server: StartServer) -> None:
    async def answer_then_wait(server: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(OK)
        await server.wait_for_hangup(reader)

    server = await start_server(answer_then_wait)
    pool = ConnectionPool(server.url)
    await read_all(await send(pool))

    await pool.close()

    await eventually(lambda: server.hangups == 1, "the server seeing the hang-up")


# --- failures -----------------------------------------------------------------------------------


async def test_a_refused_connection_is_a_connect_failure(pools: list[ConnectionPool],
) -> None:
    with socket.socket() as held:  # bound, never listening: connections are refused
        held.bind(("127.0.0.1", 0))
        with pytest.raises(UpstreamConnectFailed, match=r"The model service is unavailable\."):
            await send(new_pool(pools, f"http://127.0.0.1:{held.getsockname()[1]}"))


async def test_an_unknown_host_is_a_connect_failure(pools: list[ConnectionPool],
) -> None:
    with pytest.raises(UpstreamConnectFailed):
        await send(new_pool(pools, "http://no-such-host.invalid:80"))


async def test_a_unix_socket_endpoint(start_server: StartServer, pools: list[ConnectionPool], tmp_path: Path) -> None:
    server = await start_server(answering(OK), unix=True)
    pool = new_pool(pools, server.url)

    for _ in range(2):
        assert await read_all(await send(pool)) == b"hello world"

    assert server.connections == 1
    assert server.requests[0].headers["Host"] == "localhost"
    with pytest.raises(UpstreamConnectFailed):
        await send(new_pool(pools, f"unix:{tmp_path / 'absent.sock'}"))


async def test_a_header_or_path_with_cr_lf_or_nul_is_never_sent(start_server: StartServer, pools: list[ConnectionPool],
) -> None:
    server = await start_server(answering(OK))
    pool = new_pool(pools, server.url)
    deadline = asyncio.get_running_loop().time() + 1.0
    for path, headers in [("/", {"x-request-id": "a\r\nX-Evil: 1"}), ("/", {"x\nname": "v"}),
                          ("/", {"tracestate": "a\0b"}), ("/ HTTP/1.1\r\nX-Evil: 1\r\n", {})]:
        with pytest.raises(ValueError, match="CR, LF or NUL"):
            await pool.request("POST", path, headers, b"", 1.0, deadline)
    assert server.connections == 0


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

    pool = new_pool(pools, server.url)
    for _ in range(2):
        assert await read_all(await send(pool)) == b"hello world"
    assert server.connections == 1
