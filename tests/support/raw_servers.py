"""Small loopback servers that write raw bytes, for the upstream client's unit tests (tests/unit/upstream/):
the answers they write, handlers, the `start_server` and `pools` fixtures (tests/unit/upstream/conftest.py),
and a request sent through a pool and its answer read whole."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ingress.upstream.http1 import Response
from ingress.upstream.pool import KEEPALIVE, ConnectionPool

OK = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 11\r\n\r\nhello world"
CHUNKED = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
           b"5\r\nhello\r\n1;name=value\r\n \r\n5\r\nworld\r\n0\r\nTrailer-Field: x\r\n\r\n")
INFORMATIONAL = (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
                 b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world")


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


def new_pool(pools: list[ConnectionPool], url: str, keepalive: float = KEEPALIVE) -> ConnectionPool:
    pools.append(ConnectionPool(url, keepalive))
    return pools[-1]


async def send(pool: ConnectionPool, body: bytes | None = b"ping", within: float = 2.0) -> Response:
    deadline = asyncio.get_running_loop().time() + within
    return await pool.request("POST" if body is not None else "GET", "/v1/complete", {"x-request-id": "r-1"},
                              body, 1.0, deadline)


async def read_all(response: Response) -> bytes:
    parts = []
    try:
        while data := await response.read(2.0):
            parts.append(data)
    finally:
        response.close()
    return b"".join(parts)
