"""HTTP/1.1 to the internal services: requests out, responses framed by httptools (llhttp; the parsing,
without I/O, is `http1_decoder.ResponseDecoder`), idle connections kept per endpoint (pool.py).

It does only what the hop needs, for a fraction of the CPU aiohttp's ClientSession took per exchange
(answers of 1-16 KB: ~30 µs against ~135 µs whole, ~95 µs against ~215 µs streamed;
bench/upstream_client.py compares the two, bench/results/upstream_client.json holds the last run):

- `ConnectionPool` (pool.py) holds the connections to one endpoint and sends a request on one: its head
  and body written with one `writelines` (uvloop sends both with one writev, no copy of the body), then
  the response head awaited; 1xx responses are skipped.
- `Response.read()` gives the body as it arrives, delimited by Content-Length, chunked coding or the
  end of the connection. Past `HIGH_WATER` unread bytes, reading from the socket pauses until the
  reader has taken what is buffered.
- `Response.pump(consume, idle, deadline)` hands each read to `consume` in the connection's own
  `data_received`, until it returns something or the body ends: a stream's reads then cost no task
  wake-up each (the pipeline translates and writes them there).
- `Response.close()` ends the exchange. The connection goes back to the pool only if the whole response
  arrived, it was HTTP/1.1 and neither side asked to close; after an error, a timeout, a cancellation
  or a close before the end it is aborted, so a connection with unread body is never reused.

Errors are the edge's own: no connection could be made -> UpstreamConnectFailed (nothing was sent);
the connection ended before a response head -> UpstreamUnavailable; a malformed or oversized head, or
a body cut short -> UpstreamProtocolError. Timeouts raise TimeoutError, for the caller to name.
"""

from __future__ import annotations

import asyncio
import enum
import select
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar, cast

from ingress.errors import IngressError
from ingress.sockets import watch
from ingress.upstream.http1_decoder import ResponseDecoder

if TYPE_CHECKING:
    from ingress.upstream.pool import ConnectionPool

HIGH_WATER = 1 << 20  # unread body bytes at which reading from the socket pauses

R = TypeVar("R")


class State(enum.Enum):
    """Where a connection is in its life, as httpcore's HTTPConnectionState: NEW until its first request,
    ACTIVE while an exchange runs on it, IDLE in its pool's idle deque between exchanges, CLOSED once it
    is being closed or was lost (never used again)."""

    NEW = enum.auto()
    ACTIVE = enum.auto()
    IDLE = enum.auto()
    CLOSED = enum.auto()


class Response:
    """An answer as it arrives: `status` and `headers` (names lower-cased) once `ConnectionPool.request` returns
    it, the body through `read()`. `close()` ends the exchange; call it in every case."""

    def __init__(self, conn: Connection) -> None:
        self.decoder = conn.decoder  # this response's state until close()
        self.error: IngressError | None = None  # why the rest of the response will not come
        self.status = 0
        self.headers: dict[str, str] = {}
        self._conn: Connection | None = conn

    async def _receive_head(self, deadline: float) -> None:
        decoder, conn = self.decoder, self._conn
        assert conn is not None
        while not decoder.head_done:
            if self.error is not None:
                raise self.error
            await conn.wait(deadline)
        self.status, self.headers = decoder.status, decoder.headers

    async def read(self, timeout: float | None = None) -> bytes:
        """The body received and not read yet, waiting up to `timeout` seconds for some; b"" at its end.
        What arrived before a failure is read first; then the failure is raised."""
        conn, decoder = self._conn, self.decoder
        if conn is None:
            raise RuntimeError("read from a closed response")
        if not decoder.buffered and not decoder.done:
            deadline = None if timeout is None else conn.loop.time() + timeout
            while not decoder.buffered and not decoder.done:
                if self.error is not None:
                    raise self.error
                await conn.wait(deadline)
        if not decoder.buffered:
            return b""
        data = decoder.take()
        if conn.paused:
            conn.resume()
        return data

    async def pump(self, consume: Callable[[bytes], R | None], idle: float, deadline: float | None) -> R | None:
        """The body handed to `consume` as it arrives, in the connection's own callback (no task wakes
        for a read `consume` takes), until it returns something, which is returned, or the body ends
        (None). TimeoutError when nothing arrives for `idle` seconds, or at `deadline` (loop time). What
        arrived before a failure is consumed first; then the failure is raised. `consume` must not raise."""
        conn, decoder = self._conn, self.decoder
        if conn is None:
            raise RuntimeError("read from a closed response")
        while True:
            if decoder.buffered:
                got = consume(decoder.take())
                if conn.paused:
                    conn.resume()
                if got is not None:
                    return got
                continue
            if decoder.done:
                return None
            if self.error is not None:
                raise self.error
            conn.pumping(consume, idle, deadline)
            try:
                woke = await conn.wait(conn.next_deadline())  # what `consume` returned there, or None
            finally:
                conn.pumping(None)
            if woke is not None:
                return cast(R, woke)

    def close(self) -> None:
        """End the exchange: the connection is kept for another one only if this response came whole.
        Its error is let go: raised, it holds the frames that hold this response, a cycle otherwise."""
        conn, self._conn = self._conn, None
        self.error = None
        if conn is not None:
            conn.release()


class Connection(asyncio.Protocol):
    """One connection: what it receives goes to the current response, whose reader waits here."""

    transport: asyncio.Transport

    def __init__(self, pool: ConnectionPool) -> None:
        self.pool = pool
        self.loop = asyncio.get_running_loop()
        self.decoder = ResponseDecoder()
        self.state = State.NEW
        self.response: Response | None = None  # the exchange in progress, while ACTIVE
        self.idle_since = 0.0
        self.paused = False
        self._poll = select.poll()  # its socket, to see what arrived since the loop last looked
        self._waiter: asyncio.Future[object] | None = None
        self._deadline: float | None = None  # the waiter's
        self._timer: asyncio.TimerHandle | None = None
        self._consume: Callable[[bytes], object] | None = None  # a pump's, while it waits
        self._idle = 0.0  # the pump's: its deadline moves to this long after each read
        self._total: float | None = None  # and never past this one

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        watch(transport, self._poll)
        self.pool.opened(self)

    def data_received(self, data: bytes) -> None:
        response = self.response
        if response is None:  # the server spoke out of turn: not to be trusted with a request
            self.transport.abort()
            return
        decoder = self.decoder
        try:
            decoder.feed(data)
        except IngressError as exc:
            response.error = exc
            self.transport.abort()
        consume, waiter = self._consume, self._waiter
        if consume is not None and decoder.buffered and waiter is not None and not waiter.done():
            got = consume(decoder.take())
            if got is not None:
                self._consume = None
                waiter.set_result(got)
                return
            if response.error is None and not decoder.done:
                self._deadline = self.next_deadline()  # the lazy timer, firing early, re-arms for it
                return
        if decoder.buffered > HIGH_WATER and not self.paused:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self.pool.lost(self)
        self.state = State.CLOSED
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None  # its callback is a method of this connection: a cycle, kept
        response = self.response
        if response is not None and response.error is None:
            try:
                self.decoder.finish()
            except IngressError as error:
                error.__cause__, error.__suppress_context__ = exc, True  # as `raise error from exc`
                response.error = error
        self.decoder.release()
        self._wake()

    def reusable(self, idle_after: float, poll_before: float) -> bool:
        """Idle since after `idle_after` (loop time) and open; if idle since before `poll_before`, also
        nothing received since its last answer, not even a close the loop has not seen yet (an idle
        socket that polls readable has one)."""
        since = self.idle_since
        if since <= idle_after or self.transport.is_closing():
            return False
        return since > poll_before or not self._poll.poll(0)

    def pumping(self, consume: Callable[[bytes], object] | None, idle: float = 0.0,
                total: float | None = None) -> None:
        """What `data_received` hands the body to while a pump waits (None: nothing, it is buffered)."""
        self._consume, self._idle, self._total = consume, idle, total

    def next_deadline(self) -> float:
        """A pump's deadline from now: `idle` seconds on, and not past its total."""
        deadline = self.loop.time() + self._idle
        return deadline if self._total is None or deadline < self._total else self._total

    async def wait(self, deadline: float | None) -> object:
        """Until more arrives or the connection ends (None), or a pump's `consume` returns something (that);
        TimeoutError at `deadline` (loop time).

        The timer is lazy: one per connection, left running when the wait ends, and moved only when
        it would fire too late. Firing early, it re-arms for the waiter of the moment; timers cost
        ~3 µs each to make and cancel, and most waits end long before their deadline."""
        waiter = self._waiter = self.loop.create_future()
        self._deadline = deadline
        if deadline is not None and (self._timer is None or self._timer.when() > deadline):
            if self._timer is not None:
                self._timer.cancel()
            self._timer = self.loop.call_at(deadline, self._expire)
        try:
            return await waiter
        finally:
            self._waiter = None

    def _expire(self) -> None:
        self._timer = None
        waiter, deadline = self._waiter, self._deadline
        if waiter is None or waiter.done() or deadline is None:
            return
        if deadline - self.loop.time() > 0.001:  # a later deadline (or a timer a little early)
            self._timer = self.loop.call_at(deadline, self._expire)
        else:
            waiter.set_exception(TimeoutError())

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def send(self, head: bytes, body: bytes | bytearray | None) -> Response:
        self.decoder.start()
        self.state = State.ACTIVE
        response = self.response = Response(self)
        if body:
            self.transport.writelines((head, body))
        else:
            self.transport.write(head)
        return response

    def resume(self) -> None:
        self.paused = False
        self.transport.resume_reading()

    def release(self) -> None:
        """The exchange ended: back to the pool if the response came whole and allows it, else closed."""
        self.response, decoder = None, self.decoder
        if not decoder.done:
            self.state = State.CLOSED
            self.transport.abort()  # at once: the peer learns its answer is no longer wanted
        elif not decoder.keep_alive or self.transport.is_closing():
            self.close()
        else:
            if self.paused:
                self.resume()
            self.pool.put(self)

    def close(self) -> None:
        self.state = State.CLOSED
        self.transport.close()
