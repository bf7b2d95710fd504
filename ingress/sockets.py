"""What the edge does to sockets beside aiohttp: its own clients' connections (the internal hop's, the Redis
store's), the writes of a chunked answer that go straight to a server connection's transport, and the
name its servers give in every answer."""

from __future__ import annotations

import asyncio
import select
import socket
from typing import TypeGuard

from aiohttp import hdrs, web

# The `Server` header of every answer the edge, a bridge or the demo service sends: the software, never its
# version (aiohttp's default says `Python/3.11 aiohttp/3.x`; nginx's `server_tokens off` and Envoy's
# `server_name` disclose none either).
SERVER = "ingress"


def watch(transport: asyncio.BaseTransport, poll: select.poll) -> None:
    """A client connection's socket: TCP_NODELAY on TCP (a request goes out whole, at once), and `poll`
    registered on it, to see what arrived since the loop last looked."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        poll.register(sock.fileno(), select.POLLIN)


def clear(transport: asyncio.Transport | None) -> TypeGuard[asyncio.Transport]:
    """Open, with nothing waiting in its buffer: a write goes straight to the socket."""
    return transport is not None and not transport.get_write_buffer_size() and not transport.is_closing()


def chunk(data: bytes) -> bytes:
    """`data` framed as one HTTP/1.1 chunk, as aiohttp frames a write of a chunked body."""
    return b"%x\r\n%s\r\n" % (len(data), data)


async def _name_server(request: web.Request, response: web.StreamResponse) -> None:
    response.headers[hdrs.SERVER] = SERVER


def name_server(app: web.Application) -> None:
    """Every answer `app` prepares names the server as SERVER (answers made outside an application,
    such as a connection's refusal of bad HTTP, set it themselves)."""
    app.on_response_prepare.append(_name_server)
