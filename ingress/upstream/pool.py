"""The connections to one endpoint: a request sent on an idle one or a new one, the idle ones kept per
endpoint, reused most recently used first, with no limit of their own (EndpointGroup limits requests).

`ConnectionPool(url, keepalive)` for `http://host:port`, `https://...` or `unix:/path`; `request()` writes the
head and the body with one `writelines` (uvloop sends both with one writev, no copy of the body) and returns
the response once its head has arrived (http1.py's `Response`).

Stale connections. Idle ones are kept for `keepalive` seconds, a setting of each endpoint (4 s by
default: common servers close idle connections after 5 s), and closed when it passes, whether or not
another request comes. One is reused only if it is open as far as the loop knows, and, once idle for
a quarter of its keepalive, as far as the kernel knows: just before the request is written, with no
await in between, one poll() of its socket tells whether anything, the peer's close included, has
arrived since its last answer. (Servers close idle connections after seconds, not milliseconds; a
connection back from its last answer more recently than that is not polled, as under load: the
syscall cost ~10% of a whole exchange's CPU here.) If writing to a reused connection fails at once
(the peer had reset it), nothing of the request was sent, and it goes out on a new connection
instead: that, as in Go's net/http transport, is the only retry, the one of a request that provably
never reached the server. A peer closing while the request is on its way cannot be told apart from a
service that took it and died: that ends in UpstreamUnavailable, and the request is never sent again.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import Mapping
from contextlib import suppress
from urllib.parse import urlsplit

from ingress.errors import UpstreamConnectFailed
from ingress.upstream.http1 import Connection, Response, State
from ingress.upstream.http1_decoder import UNAVAILABLE

KEEPALIVE = 4.0  # seconds an idle connection is kept for reuse, by default: below common servers' 5 s
POLL_AFTER = 0.25  # of the keepalive: a connection idle longer is polled before reuse


class ConnectionPool:
    """The connections to one endpoint; the idle ones kept for reuse, the most recently used first,
    for `keepalive` seconds."""

    def __init__(self, url: str, keepalive: float = KEEPALIVE) -> None:
        self._socket_path: str | None = None
        self._ssl: ssl.SSLContext | None = None
        if url.startswith("unix:"):
            self._socket_path, self._host, self._port, host = url[len("unix:"):], "localhost", 0, "localhost"
        else:
            parts = urlsplit(url)
            https = parts.scheme == "https"
            self._host, self._port, host = parts.hostname or "", parts.port or (443 if https else 80), parts.netloc
            self._ssl = ssl.create_default_context() if https else None
        self._host_line = f"Host: {host}\r\n"
        self._keepalive = keepalive
        self._poll_after = keepalive * POLL_AFTER
        self._idle: deque[Connection] = deque()  # the longest idle first: reused from the right, reaped from the left
        self._reaper: asyncio.TimerHandle | None = None  # due when the longest idle expires
        self._open: set[Connection] = set()
        self._closed = False

    async def request(self, method: str, path: str, headers: Mapping[str, str], body: bytes | bytearray | None,
                      connect_timeout: float, deadline: float) -> Response:
        """Send one request; return its response once the head has arrived, by `deadline` (loop time).
        A new connection is made within `connect_timeout` (and by the deadline). HEAD is refused: its
        answer announces a body that never comes, and reading it would wait for that body."""
        if method == "HEAD":
            raise ValueError("HEAD requests are not supported")
        head = self._head(method, path, headers, body)
        conn = self._reuse()
        if conn is not None:
            response = conn.send(head, body)
            if conn.transport.is_closing():  # the write failed at once, the peer having reset it: nothing was sent
                response.close()
                conn = None
        if conn is None:
            conn = await self._connect(connect_timeout, deadline)
            response = conn.send(head, body)
        try:
            await response._receive_head(deadline)
        except BaseException:
            response.close()
            raise
        return response

    def _head(self, method: str, path: str, headers: Mapping[str, str], body: bytes | bytearray | None) -> bytes:
        sent = "".join([path, *headers, *headers.values()])
        if "\r" in sent or "\n" in sent or "\0" in sent:  # three scans cost less than one regex search
            raise ValueError("a request header or the path holds a CR, LF or NUL")
        lines = [f"{method} {path} HTTP/1.1\r\n", self._host_line]
        for name, value in headers.items():
            lines.append(f"{name}: {value}\r\n")
        if body is not None:
            lines.append(f"Content-Length: {len(body)}\r\n")
        lines.append("\r\n")
        return "".join(lines).encode()

    def _reuse(self) -> Connection | None:
        idle = self._idle
        if not idle:
            return None
        now = idle[-1].loop.time()
        idle_after, poll_before = now - self._keepalive, now - self._poll_after
        while idle:
            conn = idle.pop()
            if conn.reusable(idle_after, poll_before):
                return conn
            conn.close()
        return None

    async def _connect(self, timeout: float, deadline: float) -> Connection:
        loop = asyncio.get_running_loop()
        async with asyncio.timeout_at(min(loop.time() + timeout, deadline)):
            try:
                if self._socket_path is not None:
                    _, conn = await loop.create_unix_connection(lambda: Connection(self), self._socket_path)
                else:
                    _, conn = await loop.create_connection(lambda: Connection(self), self._host, self._port,
                                                           ssl=self._ssl)
            except OSError as exc:  # refused, unreachable, no such socket or host (our timeout is raised below)
                raise UpstreamConnectFailed(UNAVAILABLE) from exc
        return conn

    def opened(self, conn: Connection) -> None:
        self._open.add(conn)

    def put(self, conn: Connection) -> None:
        if self._closed:
            conn.close()
            return
        conn.state, conn.idle_since = State.IDLE, conn.loop.time()
        self._idle.append(conn)
        if self._reaper is None:
            self._reaper = conn.loop.call_at(conn.idle_since + self._keepalive, self._reap)

    def _reap(self) -> None:
        """Close the connections idle for `keepalive` (the longest idle are first); wake up for the next."""
        self._reaper = None
        idle = self._idle
        if not idle:
            return
        loop = idle[0].loop
        idle_after = loop.time() - self._keepalive
        while idle and idle[0].idle_since <= idle_after:
            idle.popleft().close()
        if idle:
            self._reaper = loop.call_at(idle[0].idle_since + self._keepalive, self._reap)

    def lost(self, conn: Connection) -> None:
        self._open.discard(conn)
        if conn.state is State.IDLE:
            with suppress(ValueError):
                self._idle.remove(conn)

    async def close(self) -> None:
        """Close every connection; a request still running fails."""
        self._closed = True
        self._idle.clear()
        if self._reaper is not None:
            self._reaper.cancel()
            self._reaper = None
        for conn in list(self._open):
            conn.transport.abort()
        await asyncio.sleep(0)  # abort() has connection_lost called, and the socket closed, by the next turn
