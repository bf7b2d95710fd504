"""A small RESP2 client for the Redis store: one pipelined connection, the replies our script gives.

redis-py's asyncio client spent ~330 µs of CPU per admission here (bench/limits.py), most of it in its
connection pool, its command packing and its parser's coroutines, around a reply of a few integers. This
client does what the store needs and no more:

- `Client(url)` keeps one connection (an asyncio Protocol, as ingress/upstream/http1.py), made on the first
  call and again on the first call after it was lost. Calls are pipelined on it: each is written at once,
  and its reply is the next one to arrive (a deque of futures, in order). (Writing the calls of one turn of
  the loop together at its end was tried: on an edge at 32 connections a turn can take tens of ms, and
  calls held that long missed their 50 ms deadline, bench/tenancy.py.)
- A script is called by its sha (resp_codec.py's `Script`). A NOSCRIPT reply (a restarted or flushed
  server) sends SCRIPT LOAD and the same EVALSHA back to back, once.
- The bytes both ways are resp_codec.py's (sans-I/O): commands encoded, replies parsed (an error reply as a
  `ReplyError` value; a call whose reply is one raises it).
- Each call has a deadline (loop time): past it, the call raises TimeoutError, and nothing retries it. The
  connection it was on takes no more calls (a new one is made for the next) and closes once nothing on it
  waits. One lazy timer a connection, as http1.py's: most calls end long before their deadline. A reply
  that reached the socket by the deadline counts, though the loop was too busy to read it by then (the
  timer waits up to UNREAD_GRACE for the loop to read what sits in the socket).
- A lost connection fails every call still waiting on it at once, with ConnectionError.

URLs: redis://[[user]:password@]host[:port][/db], rediss:// (TLS, the system's CAs, the host name checked),
unix://[[user]:password@]/path[?db=N]. AUTH and SELECT are sent when a connection is made. `address_of`
refuses anything else (other query parameters included) by name, for config.py to refuse at start-up.
"""

from __future__ import annotations

import asyncio
import select
import ssl
from collections import deque
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import parse_qsl, unquote, urlsplit

from ingress import tasks
from ingress.sockets import watch
from ingress.tenancy.stores.resp_codec import Arg, NoScriptError, ProtocolError, ReplyError, ReplyParser, Script, encode

DEFAULT_PORT = 6379


@dataclass(frozen=True, slots=True)
class Address:
    host: str = ""
    port: int = DEFAULT_PORT
    path: str | None = None  # a unix socket
    tls: bool = False
    username: str | None = None
    password: str | None = None
    db: int = 0


def address_of(url: str) -> Address:
    """Where and how to connect; ValueError names what is not supported (never repeating the URL: it may
    hold a password)."""
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss", "unix"):
        raise ValueError(f"scheme {parts.scheme!r} is not supported (redis://, rediss:// or unix://)")
    if parts.fragment:
        raise ValueError("a URL fragment (#...) is not supported")
    db = 0
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name != "db":
            raise ValueError(f"the query parameter {name!r} is not supported (only db)")
        db = _db(value)
    username = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password is not None else None
    if parts.scheme == "unix":
        if not parts.path.startswith("/"):
            raise ValueError("a unix:// URL needs an absolute socket path (unix:///path/to/redis.sock)")
        return Address(path=unquote(parts.path), username=username, password=password, db=db)
    if not parts.hostname:
        raise ValueError("the URL names no host")
    try:
        port = parts.port or DEFAULT_PORT
    except ValueError:
        raise ValueError("the port is not a number from 0 to 65535") from None
    path = parts.path.strip("/")
    if path:
        if "db" in dict(parse_qsl(parts.query)):
            raise ValueError("the database is given twice (path and ?db=)")
        db = _db(path)
    return Address(host=parts.hostname, port=port, tls=parts.scheme == "rediss", username=username,
                   password=password, db=db)


def _db(value: str) -> int:
    if not value.isdigit() or int(value) > 1_000_000:
        raise ValueError("the database (the path, or ?db=) must be a number")
    return int(value)


# --- the connection ---------------------------------------------------------------------------------


UNREAD_GRACE = 0.064  # seconds a call past its deadline waits for the loop to read replies already in the socket


class _Connection(asyncio.Protocol):
    """One connection: the calls waiting for their replies, oldest first, each with its deadline."""

    transport: asyncio.Transport

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.parser = ReplyParser()
        self.waiting: deque[tuple[asyncio.Future[Any], float]] = deque()
        self.retired = False  # a call on it missed its deadline: no more calls go on it
        self.closed = False
        self._timer: asyncio.TimerHandle | None = None
        self._poll = select.poll()  # its socket: whether replies wait there, unread, at a deadline
        self._unread_since: float | None = None  # when the timer first found replies unread, and put itself off

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        watch(transport, self._poll)

    def data_received(self, data: bytes) -> None:
        self._unread_since = None
        try:
            replies = self.parser.feed(data)
        except ProtocolError as exc:
            self._fail(exc)
            self.transport.abort()
            return
        waiting = self.waiting
        for reply in replies:
            if not waiting:  # a reply nobody asked for: not to be trusted
                self._fail(ProtocolError("a reply to no call"))
                self.transport.abort()
                return
            future, _ = waiting.popleft()
            if not future.done():  # else its caller left, or its deadline passed
                future.set_result(reply)
        if self.retired and not self._awaited():
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        error = ConnectionError("the connection to Redis was lost")
        error.__cause__ = exc
        self._fail(error)

    def send(self, data: bytes, deadline: float) -> asyncio.Future[Any]:
        future = self.loop.create_future()
        self.waiting.append((future, deadline))
        if self._timer is None or self._timer.when() > deadline:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = self.loop.call_at(deadline, self._expire)
        self.transport.write(data)  # at once: held to the end of a busy turn of the loop, it would miss deadlines
        return future

    def _expire(self) -> None:
        """Every call past its deadline raises TimeoutError; the timer is set again for the next deadline."""
        self._timer = None
        now, due = self.loop.time(), None
        due_by = now + 0.0005  # a deadline this close is due: the loop's clock counts whole milliseconds
        if self._late(due_by) and self._poll.poll(0):
            # Replies arrived and the loop has not read them: uvloop runs due timers before it polls again,
            # so a loop busy past a deadline would time out calls answered in time. Put off until the loop
            # has read them (data_received), a millisecond at a time: a loaded machine can take several of
            # its turns to read them. For UNREAD_GRACE at most, lest a socket that never reads hold calls.
            if self._unread_since is None:
                self._unread_since = now
            if now - self._unread_since < UNREAD_GRACE:
                self._timer = self.loop.call_at(now + 0.001, self._expire)
                return
        self._unread_since = None
        for future, deadline in self.waiting:
            if future.done():
                continue
            if deadline <= due_by:
                future.set_exception(TimeoutError())
                self.retired = True
            elif due is None or deadline < due:
                due = deadline
        if due is not None:
            self._timer = self.loop.call_at(due, self._expire)
        elif self.retired:
            self.transport.abort()  # nothing waits on it any more

    def _late(self, due_by: float) -> bool:
        return any(not future.done() and deadline <= due_by for future, deadline in self.waiting)

    def _awaited(self) -> bool:
        return any(not future.done() for future, _ in self.waiting)

    def _fail(self, error: Exception) -> None:
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waiting, self.waiting = self.waiting, deque()
        for future, _ in waiting:
            if not future.done():
                future.set_exception(error)


class Client:
    """Calls to one server over one pipelined connection, made when needed."""

    def __init__(self, url: str, connect_timeout: float) -> None:
        self.address = address_of(url)
        self.connect_timeout = connect_timeout
        self._ssl = ssl.create_default_context() if self.address.tls else None
        self._conn: _Connection | None = None
        self._connecting: asyncio.Task[_Connection] | None = None
        self._closed = False

    async def call(self, command: bytes, deadline: float) -> Any:
        """The reply to an encoded command, by `deadline` (loop time); an error reply is raised."""
        conn = self._conn
        if conn is None or conn.closed or conn.retired:
            conn = await self._connection(deadline)
        reply = await conn.send(command, deadline)
        if isinstance(reply, ReplyError):
            raise reply
        return reply

    async def evalsha(self, script: Script, keys: Sequence[Arg], args: Sequence[Arg], deadline: float) -> Any:
        """The script's reply; on NOSCRIPT, SCRIPT LOAD and the call again, sent together, once."""
        command = script.command(keys, args)
        conn = self._conn
        if conn is None or conn.closed or conn.retired:
            conn = await self._connection(deadline)
        reply = await conn.send(command, deadline)
        if not isinstance(reply, ReplyError):
            return reply
        if not isinstance(reply, NoScriptError):
            raise reply
        conn = await self._connection(deadline)
        loaded, again = conn.send(script.load, deadline), conn.send(command, deadline)
        loaded.add_done_callback(_retrieve)  # if `again` fails, so did the load: told once
        reply = await again
        for answer in (loaded.result(), reply):  # the load was answered first: its error is the one to tell
            if isinstance(answer, ReplyError):
                raise answer
        return reply

    async def close(self) -> None:
        self._closed = True
        if self._connecting is not None:
            self._connecting.cancel()
            with suppress(asyncio.CancelledError, Exception):
                await self._connecting
        if self._conn is not None and not self._conn.closed:
            self._conn.transport.abort()
            self._conn = None
        await asyncio.sleep(0)  # abort() has connection_lost called, and the socket closed, by the next turn

    async def _connection(self, deadline: float) -> _Connection:
        conn = self._conn
        if conn is not None and not conn.closed and not conn.retired:
            return conn
        if self._closed:
            raise ConnectionError("the client is closed")
        if self._connecting is None:  # one attempt at a time, shared by the calls that wait for it
            self._connecting = tasks.shared(self._connect(), "redis-connect")
            self._connecting.add_done_callback(self._attempted)
        async with asyncio.timeout_at(deadline):
            return await asyncio.shield(self._connecting)

    def _attempted(self, task: asyncio.Task[_Connection]) -> None:
        """The next call after a failed attempt tries again (not told this one's old failure)."""
        if self._connecting is task:
            self._connecting = None
        _retrieve(task)

    async def _connect(self) -> _Connection:
        """A new connection, authenticated and on its database, within the connect timeout."""
        loop, address = asyncio.get_running_loop(), self.address
        async with asyncio.timeout(self.connect_timeout):
            if address.path is not None:
                _, conn = await loop.create_unix_connection(lambda: _Connection(loop), address.path)
            else:
                _, conn = await loop.create_connection(lambda: _Connection(loop), address.host, address.port,
                                                       ssl=self._ssl)
            try:
                setup: list[asyncio.Future[Any]] = []
                deadline = loop.time() + self.connect_timeout
                if address.password is not None:
                    credentials = (address.password,) if address.username is None else (
                        address.username, address.password)
                    setup.append(conn.send(encode("AUTH", *credentials), deadline))
                if address.db:
                    setup.append(conn.send(encode("SELECT", address.db), deadline))
                for reply in await asyncio.gather(*setup):
                    if isinstance(reply, ReplyError):
                        raise reply
            except BaseException:
                conn.transport.abort()
                raise
        if self._closed:
            conn.transport.abort()
            raise ConnectionError("the client is closed")
        self._conn = conn
        return conn


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Its exception counted as seen: another caller was told the same failure."""
    if not future.cancelled():
        future.exception()
