"""What the edge's own clients (the internal hop's, the Redis store's) do to a socket they have connected."""

from __future__ import annotations

import asyncio
import select
import socket


def watch(transport: asyncio.BaseTransport, poll: select.poll) -> None:
    """A client connection's socket: TCP_NODELAY on TCP (a request goes out whole, at once), and `poll`
    registered on it, to see what arrived since the loop last looked."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        poll.register(sock.fileno(), select.POLLIN)
