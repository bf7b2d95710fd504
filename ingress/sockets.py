"""What the edge does to sockets beside aiohttp: its own clients' connections (the internal hop's, the Redis
store's), and the writes of a chunked answer that go straight to a server connection's transport."""

from __future__ import annotations

import asyncio
import select
import socket
from typing import TypeGuard


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
