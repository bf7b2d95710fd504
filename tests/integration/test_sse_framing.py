"""The SSE answer on the wire, byte for byte: whole events in every HTTP chunk (one, or those of frames
that arrived in one read), framed as aiohttp frames a write (`<size in hex>\\r\\n<events>\\r\\n`) whether
it went through aiohttp or straight to the transport, then the last chunk; the events those of the
answer, [DONE] last."""

from __future__ import annotations

import asyncio
import re
from contextlib import AsyncExitStack

import msgspec
import pytest
from fakes.upstream import FakeUpstream, answer
from recording import recording_edge

from ingress import pipeline
from ingress.edge import writers
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


async def _edge_stream(pace: float = 0.0) -> bytes:
    """The raw answer to one stream, from an edge in front of the fake; with `pace`, the fake pauses
    after each frame so that the edge reads every frame on its own."""
    async with AsyncExitStack() as stack:
        fake = FakeUpstream(default=answer(TEXT, stream=True))
        if pace:
            fake.play(answer(TEXT, stream=True), pace=pace)
        await stack.enter_async_context(fake.running())
        url, _, _ = await recording_edge(stack, Settings(
            groups={"main": Group(endpoints=[Endpoint(url=fake.url)])}, routes=(Route(model="chat", group="main"),),
            timeouts=Timeouts(connect=1.0, first_byte=5.0, idle=30.0)))
        return await _raw_stream(url)


def _events(raw: bytes) -> list[bytes]:
    """The SSE events of a raw chunked answer, checking its framing: whole events in every chunk."""
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
    return events


def _text(events: list[bytes]) -> str:
    chunks = [msgspec.json.decode(e[6:]) for e in events[:-1]]
    return "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])


async def test_chunks_hold_whole_events_framed_as_aiohttp_frames_them() -> None:
    events = _events(await _edge_stream())
    assert _text(events) == TEXT
    assert len(events) > 10  # the role, a chunk a word, the finish: most of them written straight to the transport


async def test_frames_read_one_at_a_time_are_written_from_the_connections_callback_as_the_task_writes_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    taken: list[bool] = []
    offer = writers.Outlet.__call__

    def spied(self: writers.Outlet, event: pipeline.StreamEvent) -> bool:
        took = offer(self, event)
        taken.append(took and asyncio.current_task() is None)
        return took

    monkeypatch.setattr(writers.Outlet, "__call__", spied)
    paced = _events(await _edge_stream(pace=0.005))
    assert _text(paced) == TEXT
    assert sum(taken) >= len(TEXT.split()) - 2  # the words' chunks, all but the first few, from the callback
    monkeypatch.setattr(writers.Outlet, "__call__", lambda self, event: False)  # every chunk by the task
    by_task = _events(await _edge_stream(pace=0.005))
    assert [_ids_apart(e) for e in paced] == [_ids_apart(e) for e in by_task]


def _ids_apart(event: bytes) -> bytes:
    """An event with its request's own id and time taken out: what two streams of one answer share."""
    return re.sub(rb'"(id|created)":("[^"]*"|\d+)', b"", event)
