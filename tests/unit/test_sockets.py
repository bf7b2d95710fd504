"""ingress/sockets.py: a client connection's socket set for writes that go out whole, a chunk framed as
aiohttp frames it, a transport clear to write to at once, and the Server header every answer carries."""

from __future__ import annotations

import asyncio
import select
import socket
import time

from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from ingress.sockets import SERVER, chunk, clear, name_server, watch


def test_a_chunk_is_framed_with_its_length_in_hex() -> None:
    assert chunk(b"hello") == b"5\r\nhello\r\n"
    assert chunk(b"x" * 255) == b"ff\r\n" + b"x" * 255 + b"\r\n"
    assert chunk(b"") == b"0\r\n\r\n"  # the last chunk's frame


class _Protocol(asyncio.Protocol):
    pass


async def test_watch_sets_tcp_nodelay_and_registers_the_socket_for_polling() -> None:
    loop = asyncio.get_running_loop()
    with socket.create_server(("127.0.0.1", 0)) as listener:
        transport, _ = await loop.create_connection(_Protocol, *listener.getsockname())
        peer, _ = listener.accept()
    poll = select.poll()
    try:
        watch(transport, poll)
        sock = transport.get_extra_info("socket")
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        assert poll.poll(0) == []
        peer.sendall(b"bye")  # arrives while the loop does not run: the poll sees it, as the pool's check does
        time.sleep(0.05)
        assert [fd for fd, _ in poll.poll(0)] == [sock.fileno()]
        assert clear(transport)
        transport.close()
        assert not clear(transport) and not clear(None)
    finally:
        transport.close()
        peer.close()
        await asyncio.sleep(0)

    ours, theirs = socket.socketpair()
    unix, _ = await loop.create_connection(_Protocol, sock=ours)
    try:
        poll = select.poll()
        watch(unix, poll)  # no TCP_NODELAY on a unix socket: registered all the same
        theirs.sendall(b"x")
        assert [fd for fd, _ in poll.poll(1000)] == [ours.fileno()]
    finally:
        unix.close()
        theirs.close()
        await asyncio.sleep(0)


async def test_every_prepared_answer_names_the_server_without_a_version() -> None:
    app = web.Application()
    name_server(app)
    app.freeze()
    request = make_mocked_request("GET", "/", app=app)
    response = web.Response(text="ok")
    await response.prepare(request)
    assert response.headers["Server"] == SERVER == "ingress"
