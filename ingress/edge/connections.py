"""Client connections: a header deadline, keep-alive, a cap per worker, and bad HTTP in OpenAI's shape.

aiohttp's server has no deadline for reading a request head (only its keep-alive timer, 3,630 s by
default) and answers a request its parser refuses in plain text that quotes the raw bytes. Each
connection here is an aiohttp `RequestHandler` that adds what is missing; the listener accepts only
while the worker holds fewer than `max_connections`, so the others wait in the listen backlog.
The body deadline is kept where the body is read (`edge.bodies.read_body`); a 408 closes its
connection here.
"""

from __future__ import annotations

import asyncio
import functools
import socket
from collections.abc import Awaitable, Callable
from http import HTTPStatus

import msgspec
from aiohttp import hdrs, web
from aiohttp.web_protocol import RequestHandler, _ErrInfo

from ingress import metrics
from ingress.edge.headers import request_id_of
from ingress.edge.middleware import error_response
from ingress.errors import IngressError, InvalidRequest, RequestTimeout
from ingress.log import get_logger
from ingress.settings import Client
from ingress.sockets import SERVER
from ingress.tasks import BackgroundTasks

log = get_logger("ingress.connections")
_json = msgspec.json.Encoder()


def _raw_response(error: IngressError) -> bytes:
    """A whole response written straight to the transport, when no request object exists."""
    body = _json.encode(error.body())
    return (f"HTTP/1.1 {error.status} {HTTPStatus(error.status).phrase}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\nServer: {SERVER}\r\n"
            f"x-request-id: {request_id_of(None)}\r\n\r\n"
            ).encode() + body


_HEAD_TIMEOUT = _raw_response(RequestTimeout("The request head was not received in time."))


class _Slot:
    """One connection's place under the cap, released once whatever ends it."""

    __slots__ = ("_semaphore",)

    def __init__(self, semaphore: asyncio.Semaphore) -> None:
        self._semaphore: asyncio.Semaphore | None = semaphore

    def release(self) -> None:
        if self._semaphore is not None:
            self._semaphore.release()
            self._semaphore = None


class EdgeConnection(RequestHandler):
    """aiohttp's connection protocol with a header deadline and OpenAI-shaped refusals of bad HTTP."""

    __slots__ = ("_close_after", "_head_timeout", "_head_timer", "_slot")

    def __init__(self, manager: web.Server, *, loop: asyncio.AbstractEventLoop, client: Client, slot: _Slot) -> None:
        super().__init__(manager, loop=loop, keepalive_timeout=client.keepalive_timeout,
                         access_log=None,  # type: ignore[arg-type]  # None turns it off, as aiohttp's runners pass it
                         auto_decompress=False)  # edge.bodies decodes bodies, in OpenAI's shape
        self._head_timeout = client.header_timeout
        self._head_timer: asyncio.TimerHandle | None = None
        self._close_after = False  # close once the answer in progress is written
        self._slot = slot

    # --- the header deadline: from a request's first byte until its head is parsed ---------------

    def data_received(self, data: bytes) -> None:
        awaiting_head = not self._request_in_progress and not self._messages and (
            self._waiter is not None or self._request_count == 0)
        queued, current = len(self._messages), self._current_request
        super().data_received(data)
        if current is not None and len(self._messages) > queued and isinstance(self._messages[-1][0], _ErrInfo):
            # The body's framing broke mid-request (a bad chunk size): aiohttp queues an error answer
            # for after this request and leaves its body waiting for bytes that will never come.
            self._messages.pop()
            current.content.set_exception(web.RequestPayloadError("the request body's framing is broken"))
            self._close_after = True
            self.close()
        if self._messages or self._request_in_progress:
            self._stop_head_timer()
        elif awaiting_head and data and self._head_timer is None:
            self._head_timer = self._loop.call_later(self._head_timeout, self._head_expired)

    def _head_expired(self) -> None:
        self._head_timer = None
        if self._request_in_progress or self._messages or self.transport is None:
            return
        metrics.child(metrics.REJECTIONS, "header_timeout").inc()
        log.info("request head not received in time; closing", timeout_s=self._head_timeout)
        self.transport.write(_HEAD_TIMEOUT)
        self.force_close()  # the transport sends what it holds, then closes

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    async def _handle_request(self, request: web.BaseRequest, start_time: float | None,
                              request_handler: Callable[[web.BaseRequest], Awaitable[web.StreamResponse]],
                              ) -> tuple[web.StreamResponse, bool]:
        self._stop_head_timer()
        response, reset = await super()._handle_request(request, start_time, request_handler)
        if response.status == RequestTimeout.status or self._close_after:
            # The rest of the body is not coming (or cannot be framed): close now rather than linger
            # for it, once the answer is written.
            self.force_close()
        return response, reset

    def connection_lost(self, exc: BaseException | None) -> None:
        super().connection_lost(exc)
        self._stop_head_timer()
        self._slot.release()

    # --- a request aiohttp's parser refuses -------------------------------------------------------

    def handle_error(self, request: web.BaseRequest, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        """OpenAI's error shape, and a log line naming the exception's type: aiohttp's own answer and
        log line quote the raw request, keys and prompts included."""
        error: IngressError
        if status < 500:
            error = InvalidRequest("The request is not valid HTTP/1.1.", code="invalid_http", status=status)
            metrics.child(metrics.REJECTIONS, "invalid_http").inc()
        else:
            error = IngressError("The server had an error while processing your request.", status=status)
        log.info("bad http request", status=status, exc_type=type(exc).__name__ if exc is not None else None)
        if request.writer.output_size > 0:  # part of an answer went out: the connection is broken
            raise ConnectionError("Response is sent already, cannot send another response with the error message")
        response = error_response(error, request_id_of(None))
        response.headers[hdrs.SERVER] = SERVER  # no application prepares this answer: name_server never sees it
        response.force_close()
        return response


ACCEPT_BATCH = 64  # connections a worker takes from the backlog in one turn, when it is the only one


class EdgeSite(web.BaseSite):
    """A listening socket served by EdgeConnections, accepting only below the connection cap.

    A burst of new connections is taken in together: up to ACCEPT_BATCH in one turn of the loop, or, with
    several workers on one listener, ACCEPT_BATCH / (2 x workers) each (as HAProxy divides its maxaccept),
    so that the first worker to wake does not take a whole burst of keep-alive connections for itself."""

    __slots__ = ("_batch", "_client", "_sock", "_tasks")

    def __init__(self, runner: web.BaseRunner, sock: socket.socket, client: Client, workers: int = 1) -> None:
        super().__init__(runner)
        self._sock = sock
        self._client = client
        self._batch = ACCEPT_BATCH if workers <= 1 else max(ACCEPT_BATCH // (2 * workers), 1)
        self._tasks = BackgroundTasks()

    @property
    def name(self) -> str:
        where = self._sock.getsockname()
        return f"http://unix:{where}:" if self._sock.family == socket.AF_UNIX else f"http://{where[0]}:{where[1]}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None  # the runner is set up
        self._tasks.spawn(self._accept(server), "accept")

    async def stop(self) -> None:
        """No new connections; those open go on (the runner's cleanup closes them)."""
        await self._tasks.close()
        self._sock.close()
        self._runner._unreg_site(self)

    async def _accept(self, server: web.Server) -> None:
        """Wait for a connection, then take the others the backlog holds in the same turn (up to the batch,
        while there is room under the cap): accepted one a turn of the loop, 32 new connections to a busy
        worker took ~0.4 s to be taken in, and the last one's first request waited all of it."""
        loop = asyncio.get_running_loop()
        room = asyncio.Semaphore(self._client.max_connections)
        while True:
            await room.acquire()  # at the cap, connections wait in the backlog (for another worker, too)
            slot = _Slot(room)
            try:
                conn, _ = await loop.sock_accept(self._sock)
            except (asyncio.CancelledError, Exception) as exc:
                slot.release()
                if isinstance(exc, asyncio.CancelledError):
                    raise
                log.warning("accept failed", exc_type=type(exc).__name__)
                await asyncio.sleep(0.1)  # EMFILE and the like: let connections close first
                continue
            self._serve(loop, server, conn, slot)
            for _ in range(self._batch - 1):  # the backlog's others, in this same turn
                if room.locked():
                    break
                try:
                    conn, _ = self._sock.accept()
                except (BlockingIOError, InterruptedError):
                    break
                except OSError as exc:  # EMFILE and the like: the wait above deals with it next time
                    log.warning("accept failed", exc_type=type(exc).__name__)
                    break
                await room.acquire()  # not locked: it returns at once
                self._serve(loop, server, conn, _Slot(room))
            else:  # a whole batch: the loop's other work (and the other workers) before the next
                await asyncio.sleep(0)

    def _serve(self, loop: asyncio.AbstractEventLoop, server: web.Server, conn: socket.socket, slot: _Slot) -> None:
        """The accepted socket served by an EdgeConnection, made in a task of its own (not waited for here)."""
        conn.setblocking(False)

        async def serve() -> None:
            try:
                await loop.connect_accepted_socket(
                    functools.partial(EdgeConnection, server, loop=loop, client=self._client, slot=slot), conn)
            except (OSError, asyncio.CancelledError) as exc:  # cancelled: the site stopped meanwhile
                conn.close()
                slot.release()
                if isinstance(exc, asyncio.CancelledError):
                    raise

        self._tasks.spawn(serve(), "connection")


def listening_socket(host: str, port: int, unix: str | None = None, backlog: int = 1024) -> socket.socket:
    """A non-blocking listening socket on host:port (0: any free port), or on a Unix socket path."""
    if unix is not None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(unix)
        sock.listen(backlog)
    else:
        sock = socket.create_server((host, port), backlog=backlog)
    sock.setblocking(False)
    return sock
