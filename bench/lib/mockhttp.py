"""The zero-delay HTTP/1.1 mocks' common part: keep-alive requests with Content-Length bodies framed
from the bytes as they arrive, each handed to `answer`, and the server run on uvloop with its start-up
objects frozen. bridge.py, tenancy.py and peers.py each answer in their own way (fixed bytes made once)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable
from typing import cast


def response(ctype: bytes, body: bytes) -> bytes:
    """A whole 200 answer."""
    return b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s" % (ctype, len(body), body)


HEALTH = response(b"text/plain", b"ok")


class Requests(asyncio.Protocol):
    """A GET is answered `HEALTH`; every other request goes to `answer(head, body_start, body_end)`, where
    `head` is the lowered request head and the body is `self.buffer[body_start:body_end]`."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's TCPTransport is not a subclass
        self.buffer = bytearray()
        self.loop = asyncio.get_running_loop()

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        while (end := buffer.find(b"\r\n\r\n")) >= 0:
            head = bytes(buffer[:end]).lower()
            at = head.find(b"\r\ncontent-length:")
            length = 0
            if at >= 0:
                stop = head.find(b"\r\n", at + 2)
                length = int(head[at + 17:stop if stop >= 0 else len(head)])
            total = end + 4 + length
            if len(buffer) < total:
                return
            if head.startswith(b"get "):
                self.transport.write(HEALTH)
            else:
                self.answer(head, end + 4, total)
            del buffer[:total]

    def streamed(self, start: int, end: int) -> bool:
        """Whether the JSON body asks for a stream (a bytes search, no parsing)."""
        find = self.buffer.find
        return find(b'"stream":true', start, end) >= 0 or find(b'"stream": true', start, end) >= 0

    def answer(self, head: bytes, start: int, end: int) -> None:
        raise NotImplementedError


def serve(protocol: Callable[[], asyncio.Protocol], port: int, backlog: int = 1024) -> None:
    """Serve `protocol` on 127.0.0.1:`port` until killed."""
    import uvloop

    async def main() -> None:
        gc.freeze()
        server = await asyncio.get_running_loop().create_server(protocol, "127.0.0.1", port, backlog=backlog)
        async with server:
            await server.serve_forever()

    uvloop.run(main())
