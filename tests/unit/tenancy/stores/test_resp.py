"""tenancy/stores/resp.py, the Redis client: its URLs; against a real Redis and Valkey (pipelining, NOSCRIPT,
AUTH and SELECT, TLS and a unix socket) and against a scripted fake server on loopback (replies byte by byte,
a connection lost with calls pending, a deadline missed, a NOSCRIPT that stays)."""

from __future__ import annotations

import asyncio
import contextlib
import re
import select
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import uvloop
from redis.asyncio import Redis as RedisPy
from redis_servers import Server, free_port, redis_binary
from waiting import eventually

from ingress.config import ConfigError, parse_config
from ingress.tenancy.stores.resp import UNREAD_GRACE, Address, Client, _Connection, address_of
from ingress.tenancy.stores.resp_codec import NoScriptError, ReplyError, Script, encode

# --- URLs -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("url", "address"), [
    ("redis://10.0.0.5:6379/0", Address(host="10.0.0.5")),
    ("redis://cache", Address(host="cache")),
    ("redis://:s%40cret@cache:7000/3", Address(host="cache", port=7000, password="s@cret", db=3)),
    ("redis://edge:pw@cache/0", Address(host="cache", username="edge", password="pw")),
    ("rediss://cache.example:6380", Address(host="cache.example", port=6380, tls=True)),
    ("redis://cache?db=2", Address(host="cache", db=2)),
    ("unix:///run/redis.sock?db=1", Address(path="/run/redis.sock", db=1)),
    ("unix://:pw@/run/redis.sock", Address(path="/run/redis.sock", password="pw")),
])
def test_the_urls_the_settings_allow(url: str, address: Address) -> None:
    assert address_of(url) == address


@pytest.mark.parametrize(("url", "message"), [
    ("redis://cache/0?ssl_cert_reqs=none", "the query parameter 'ssl_cert_reqs' is not supported"),
    ("redis://cache/zero", "the database (the path, or ?db=) must be a number"),
    ("redis://cache/1?db=2", "the database is given twice"),
    ("unix://relative.sock", "a unix:// URL needs an absolute socket path"),
    ("redis://:secret@cache:99999", "the port is not a number"),
])
def test_what_the_client_cannot_do_is_refused_by_name_without_the_url(url: str, message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        address_of(url)
    config = f'[tenancy]\nbackend = "redis"\nredis = {{ url = "{url}" }}\n'
    with pytest.raises(ConfigError) as error:
        parse_config(config)
    assert "tenancy.redis.url: " + message in str(error.value) and "secret" not in str(error.value)


# --- against real servers ----------------------------------------------------------------------------


def _deadline(seconds: float = 5.0) -> float:
    return asyncio.get_running_loop().time() + seconds


async def test_pipelined_calls_each_get_their_own_reply(limit_server: Server) -> None:
    client = Client(limit_server.url, connect_timeout=5)
    key = f"resp:{time.monotonic_ns()}"
    try:
        calls = [client.call(encode("INCR", key), _deadline()) if i % 3 == 0 else
                 client.call(encode("ECHO", f"echo {i}"), _deadline()) if i % 3 == 1 else
                 client.call(encode("HGET", key, "f"), _deadline()) for i in range(300)]
        replies = await asyncio.gather(*calls, return_exceptions=True)
        assert replies[0::3] == list(range(1, 101))  # in the order sent, though all were in flight at once
        assert replies[1::3] == [f"echo {i}".encode() for i in range(1, 300, 3)]
        assert all(isinstance(r, ReplyError) and r.message.startswith("WRONGTYPE") for r in replies[2::3])
        assert await client.call(encode("GET", key + ":none"), _deadline()) is None
        assert await client.call(encode("PING"), _deadline()) == b"PONG"
    finally:
        await client.close()


async def test_a_flushed_script_is_loaded_again_and_the_call_answered(limit_server: Server) -> None:
    script = Script(f"return {{KEYS[1], ARGV[1], {time.time_ns()}}}")  # a script of this test's own
    client = Client(limit_server.url, connect_timeout=5)
    try:
        async with RedisPy.from_url(limit_server.url) as raw:
            await raw.script_flush()
            assert await raw.script_exists(script.sha) == [False]
            reply = await client.evalsha(script, ["k"], ["v"], _deadline())
            assert reply[:2] == [b"k", b"v"] and await raw.script_exists(script.sha) == [True]
            assert await client.evalsha(script, ["k2"], ["v2"], _deadline()) == [b"k2", b"v2", reply[2]]
    finally:
        await client.close()


async def test_auth_and_select_are_sent_on_connect(own_limit_server: Server) -> None:
    async with RedisPy.from_url(own_limit_server.url) as raw:
        await raw.acl_setuser("edge", enabled=True, passwords=["+pw"], keys=["*"], commands=["+@all"])
        await raw.config_set("requirepass", "top")
    host = f"127.0.0.1:{own_limit_server.port}"
    users = Client(f"redis://edge:pw@{host}/3", connect_timeout=5)
    default = Client(f"redis://:top@{host}?db=3", connect_timeout=5)
    wrong = Client(f"redis://:nope@{host}/0", connect_timeout=5)
    try:
        assert await users.call(encode("SET", "where", "db3"), _deadline()) == b"OK"
        assert await default.call(encode("GET", "where"), _deadline()) == b"db3"
        assert await users.call(encode("ACL", "WHOAMI"), _deadline()) == b"edge"
        with pytest.raises(ReplyError, match=r"WRONGPASS|invalid password"):
            await wrong.call(encode("PING"), _deadline())
    finally:
        for client in (users, default, wrong):
            await client.close()


# --- against a scripted fake server -------------------------------------------------------------------


class FakeRedis:
    """A loopback server that answers only when told: what each connection received, and its writer."""

    def __init__(self) -> None:
        self.connections: list[tuple[bytearray, asyncio.StreamWriter]] = []
        self.ended: list[bool] = []  # per connection: the client closed it
        self.server: asyncio.Server | None = None

    async def start(self) -> FakeRedis:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"redis://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received = bytearray()
        self.connections.append((received, writer))
        self.ended.append(False)
        try:
            while data := await reader.read(65536):
                received += data
        except ConnectionError:
            pass
        self.ended[[w for _, w in self.connections].index(writer)] = True

    async def received(self, n: int, commands: int) -> bytearray:
        """Connection n, once `commands` commands (arrays) have arrived on it."""
        def arrived() -> bool:
            return len(self.connections) > n and self.connections[n][0].count(b"*") >= commands
        await eventually(arrived, f"{commands} commands on connection {n}")
        return self.connections[n][0]

    async def close(self) -> None:
        for _, writer in self.connections:
            writer.close()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


@pytest.fixture
async def fake() -> AsyncIterator[FakeRedis]:
    server = await FakeRedis().start()
    yield server
    await server.close()


async def test_replies_split_byte_by_byte_reach_their_calls(fake: FakeRedis) -> None:
    client = Client(fake.url, connect_timeout=5)
    try:
        loop = asyncio.get_running_loop()
        calls = [loop.create_task(client.call(encode("ECHO", str(i)), _deadline())) for i in range(3)]
        await fake.received(0, 3)
        _, writer = fake.connections[0]
        replies = b"*3\r\n:1\r\n$5\r\nhe\r\nl\r\n*-1\r\n" + b"-ERR no\r\n" + b"$-1\r\n"
        for i in range(len(replies)):
            writer.write(replies[i:i + 1])
            await writer.drain()
            await asyncio.sleep(0)
        first, second, third = await asyncio.gather(*calls, return_exceptions=True)
        assert first == [1, b"he\r\nl", None]
        assert isinstance(second, ReplyError) and second.message == "ERR no"
        assert third is None
    finally:
        await client.close()


async def _on_a_second_connection(fake: FakeRedis, client: Client, command: bytes, reply: bytes) -> object:
    """`command` sent once the first connection is gone: it must go out on a second one, which answers `reply`."""
    call = asyncio.get_running_loop().create_task(client.call(command, _deadline()))
    await fake.received(1, 1)
    fake.connections[1][1].write(reply)
    return await call


async def test_a_lost_connection_fails_every_pending_call_at_once_and_the_next_call_reconnects(
        fake: FakeRedis) -> None:
    client = Client(fake.url, connect_timeout=5)
    try:
        loop = asyncio.get_running_loop()
        calls = [loop.create_task(client.call(encode("PING"), _deadline(60))) for _ in range(5)]
        await fake.received(0, 5)
        _, writer = fake.connections[0]
        writer.write(b"+PONG\r\n")  # the first is answered, then the server goes
        await writer.drain()
        writer.transport.abort()
        replies = await asyncio.gather(*calls, return_exceptions=True)
        assert replies[0] == b"PONG"
        assert all(type(r) is ConnectionError for r in replies[1:]), replies
        assert await _on_a_second_connection(fake, client, encode("PING"), b"+PONG\r\n") == b"PONG"
    finally:
        await client.close()


async def test_a_missed_deadline_raises_timeout_and_the_next_call_takes_a_new_connection(fake: FakeRedis) -> None:
    client = Client(fake.url, connect_timeout=5)
    try:
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await client.call(encode("ECHO", "late"), _deadline(0.2))
        assert time.monotonic() - started < 0.6
        await fake.received(0, 1)
        await eventually(lambda: fake.ended[0], "the connection of the missed call closed (nothing waits on it)")
        assert await _on_a_second_connection(fake, client, encode("ECHO", "now"), b"$3\r\nnow\r\n") == b"now"
    finally:
        await client.close()


async def test_a_script_still_missing_after_loading_is_an_error_not_a_loop(fake: FakeRedis) -> None:
    client, script = Client(fake.url, connect_timeout=5), Script("return 1")
    try:
        call = asyncio.get_running_loop().create_task(client.evalsha(script, [], [], _deadline()))
        received = await fake.received(0, 1)
        writer = fake.connections[0][1]
        writer.write(b"-NOSCRIPT No matching script.\r\n")
        await fake.received(0, 3)  # SCRIPT LOAD and the call again, together
        writer.write(b"$40\r\n" + script.sha.encode() + b"\r\n-NOSCRIPT No matching script.\r\n")
        with pytest.raises(NoScriptError):
            await call
        assert bytes(received) == script.command([], []) + script.load + script.command([], [])
    finally:
        await client.close()


class SlowPong:
    """A server in a thread of its own: every command is answered +PONG, `delay` seconds after it came."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"redis://127.0.0.1:{self.listener.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            conn, _ = self.listener.accept()
            with conn:
                while data := conn.recv(65536):
                    time.sleep(self.delay)
                    conn.sendall(b"+PONG\r\n" * data.count(b"*"))

    def close(self) -> None:
        self.listener.close()


def test_a_reply_that_arrived_by_the_deadline_counts_though_the_loop_was_busy_past_it() -> None:
    """uvloop runs due timers before it polls: a loop busy past a call's deadline (here one I/O callback
    taking 400 ms, as a long request's parsing would) once timed out a call whose reply had arrived 20 ms
    after it was sent."""
    server = SlowPong(delay=0.02)

    async def body() -> Any:
        loop = asyncio.get_running_loop()
        client = Client(server.url, connect_timeout=5)
        busy, wake = socket.socketpair()
        try:
            await client.call(encode("PING"), loop.time() + 5)  # connected

            def stall() -> None:
                busy.recv(1)
                time.sleep(0.4)

            loop.add_reader(busy.fileno(), stall)
            call = loop.create_task(client.call(encode("PING"), loop.time() + 0.2))
            loop.call_soon(lambda: loop.call_soon(wake.send, b"x"))  # just after the call is written
            return await call
        finally:
            loop.remove_reader(busy.fileno())
            busy.close()
            wake.close()
            await client.close()

    try:
        assert uvloop.run(body()) == b"PONG"
    finally:
        server.close()


class Unread:
    """A socket's poll that always finds bytes waiting: a loop that runs its timers and does not read."""

    def poll(self, timeout: float) -> list[tuple[int, int]]:
        return [(0, select.POLLIN)]


class Recorded:
    """The transport a connection writes to: what it was given, and whether it was aborted."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.aborted = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def abort(self) -> None:
        self.aborted = True


async def test_a_deadline_waits_for_the_loop_to_read_replies_in_the_socket_however_many_turns_but_not_forever(
) -> None:
    """On a loaded machine the loop can run a connection's timer several times before it reads what
    arrived (once, a reply that came 20 ms after its call waited 23 ms past the first look): each time the
    timer finds bytes unread, it puts itself off again, until data_received runs or UNREAD_GRACE passes."""
    loop = asyncio.get_running_loop()
    conn, transport = _Connection(loop), Recorded()
    conn.transport, conn._poll = transport, Unread()  # type: ignore[assignment]

    answered = conn.send(encode("PING"), loop.time())  # due at once; its reply is in the socket, unread
    await asyncio.sleep(0.02)  # the timer looks ~20 times, and the loop reads nothing
    assert not answered.done()
    conn.data_received(b"+PONG\r\n")
    assert answered.result() == b"PONG" and not conn.retired

    start = loop.time()
    unread = conn.send(encode("PING"), start)  # what waits in the socket is never read
    await asyncio.wait([unread], timeout=10)
    assert isinstance(unread.exception(), TimeoutError)
    assert loop.time() - start >= UNREAD_GRACE - 1e-9
    assert conn.retired and transport.aborted  # nothing waits on it any more
    assert transport.written == [encode("PING")] * 2


@contextlib.contextmanager
def redis_with(tmp_path: Path, *argv: str) -> Iterator[None]:
    """Debian's redis-server with these arguments, until the block ends (no TCP port unless given)."""
    proc = subprocess.Popen([str(redis_binary()), "--port", "0", "--save", "", "--appendonly", "no", "--dir",
                             str(tmp_path), *argv], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        yield
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def _answers(url: str) -> bytes | None:
    async def ping() -> bytes | None:
        client = Client(url, connect_timeout=2)
        try:
            reply: bytes = await client.call(encode("PING"), _deadline(2))
            return reply
        except OSError:
            return None  # not listening yet
        finally:
            await client.close()

    return await eventually(ping, f"a PONG from {url}", timeout=20)


@pytest.mark.redis
async def test_tls_with_the_host_name_checked_and_a_unix_socket(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(tmp_path / "key.pem"),
                    "-out", str(tmp_path / "cert.pem"), "-days", "1", "-subj", "/CN=localhost", "-addext",
                    "subjectAltName=DNS:localhost"], check=True, capture_output=True)
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "cert.pem"))  # the system's CAs, as OpenSSL finds them
    port, sock = free_port(), tmp_path / "redis.sock"
    with redis_with(tmp_path, "--tls-port", str(port), "--tls-cert-file", str(tmp_path / "cert.pem"),
                    "--tls-key-file", str(tmp_path / "key.pem"), "--tls-ca-cert-file", str(tmp_path / "cert.pem"),
                    "--tls-auth-clients", "no", "--unixsocket", str(sock)):
        assert await _answers(f"rediss://localhost:{port}/2") == b"PONG"
        assert await _answers(f"unix://{sock}?db=1") == b"PONG"
        wrong_name = Client(f"rediss://127.0.0.1:{port}", connect_timeout=2)  # the certificate names localhost
        try:
            with pytest.raises(ssl.SSLCertVerificationError):
                await wrong_name.call(encode("PING"), _deadline(2))
        finally:
            await wrong_name.close()
