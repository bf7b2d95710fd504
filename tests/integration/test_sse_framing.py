"""The SSE answer on the wire, byte for byte: whole events in every HTTP chunk (one, or those of frames
that arrived in one read), framed as aiohttp frames a write (`<size in hex>\\r\\n<events>\\r\\n`) whether
it went through aiohttp or straight to the transport, then the last chunk; the events those of the
answer, [DONE] last."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

import msgspec
from fakes.upstream import FakeUpstream, answer
from recording import recording_edge

from ingress.settings import Endpoint, Group, Route, Settings, Timeouts

TEXT = "one two three four five six seven eight nine ten"


async def _raw_stream(url: str) -> bytes:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    body = msgspec.json.encode({"model": "chat", "stream": True, "messages": [{"role": "user", "content": TEXT}]})
    writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (host.encode(), len(body), body))
    data = bytearray()
    while not data.endswith(b"\r\n0\r\n\r\n"):
        more = await asyncio.wait_for(reader.read(1 << 16), 10.0)
        assert more, bytes(data)
        data += more
    writer.close()
    return bytes(data)


async def test_chunks_hold_whole_events_framed_as_aiohttp_frames_them() -> None:
    async with AsyncExitStack() as stack:
        fake = FakeUpstream(default=answer(TEXT, stream=True))
        await stack.enter_async_context(fake.running())
        url, _, _ = await recording_edge(stack, Settings(
            groups={"main": Group(endpoints=[Endpoint(url=fake.url)])}, routes=(Route(model="chat", group="main"),),
            timeouts=Timeouts(connect=1.0, first_byte=5.0, idle=30.0)))
        raw = await _raw_stream(url)
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"\r\nTransfer-Encoding: chunked" in head
    events, at = [], 0
    while True:
        line = body.index(b"\r\n", at)
        size = body[at:line]
        assert size == b"%x" % int(size, 16), size  # lower-case hex, no extension, no padding
        n = int(size, 16)
        if n == 0:
            assert body[line:] == b"\r\n\r\n"
            break
        data = body[line + 2:line + 2 + n]
        assert body[line + 2 + n:line + 4 + n] == b"\r\n"
        assert data.startswith(b"data: ") and data.endswith(b"\n\n"), data  # whole events only
        events += [e + b"\n\n" for e in data.split(b"\n\n")[:-1]]
        at = line + 4 + n
    assert events[-1] == b"data: [DONE]\n\n"
    chunks = [msgspec.json.decode(e[6:]) for e in events[:-1]]
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]) == TEXT
    assert len(events) > 10  # the role, a chunk a word, the finish: most of them written straight to the transport
