"""The edge middleware: what a request leaves behind once its answer is written."""

from __future__ import annotations

import gc
import io
import tracemalloc
from collections.abc import AsyncIterator, Callable, Iterator

import aiohttp
import pytest

from ingress.serve import gctune
from ingress.serve.app import create_app, serve_app
from ingress.settings import DEMO_MODEL, Settings

CHAT = "/v1/chat/completions"
MIB = 1024 * 1024
CAP = 4 * MIB  # the edge's body limit in these tests
SIZE = 3 * MIB  # every body below is at least this large; nothing this large may outlive its request


def padded(prefix: bytes, size: int = SIZE) -> bytes:
    """`prefix` then spaces, `size` bytes in all (JSON allows whitespace after a value, and between tokens)."""
    return prefix + b" " * (size - len(prefix))


def _valid(model: str) -> bytes:
    return padded(b'{"model":"%s","messages":[{"role":"user","content":"hi"}]}' % model.encode())


async def _chunks(size: int) -> AsyncIterator[bytes]:
    piece = b" " * (256 * 1024)
    yield b'{"model":"' + DEMO_MODEL.encode() + b'","messages":[]'
    for _ in range(size // len(piece)):
        yield piece


def _payload(body: bytes | AsyncIterator[bytes]) -> io.BytesIO | AsyncIterator[bytes]:
    return io.BytesIO(body) if isinstance(body, bytes) else body  # a stream: aiohttp warns of large bytes


REQUESTS: dict[str, tuple[Callable[[], bytes | AsyncIterator[bytes]], int]] = {
    "invalid JSON": (lambda: padded(b'{"model":"' + DEMO_MODEL.encode() + b'","messages":['), 400),
    "unknown model": (lambda: _valid("gpt-unknown"), 404),
    "invalid field": (lambda: padded(b'{"model":"' + DEMO_MODEL.encode() + b'","messages":[],"n":-1}'), 400),
    "chunked over the cap": (lambda: _chunks(CAP + MIB), 413),
    "answered": (lambda: _valid(DEMO_MODEL), 200),
}


@pytest.fixture
def production_gc() -> Iterator[None]:
    """The collector as a serving process tunes it (gctune), restored afterwards."""
    before = gc.get_threshold()
    gctune.tune_as_served(Settings())
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


@pytest.fixture
def no_collector() -> Iterator[None]:
    """No cyclic collection at all: what survives is held by references, not waiting for the collector."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _large_blocks() -> list[int]:
    """Sizes of the traced memory blocks still allocated that are as large as a request body."""
    snapshot = tracemalloc.take_snapshot()
    return sorted((trace.size for trace in snapshot.traces if trace.size >= SIZE), reverse=True)


async def _leftovers(kind: str) -> list[int]:
    make, status = REQUESTS[kind]
    # One connection: aiohttp keeps a connection's last request (and its body) until the next one
    # arrives, so a small request after the large ones is what lets the last of them go.
    connector = aiohttp.TCPConnector(limit=1)
    async with serve_app(create_app(Settings(max_body_bytes=CAP)), "127.0.0.1", 0) as url, \
            aiohttp.ClientSession(connector=connector) as session:
        tracemalloc.start()
        try:
            for _ in range(3):
                headers = {"Content-Type": "application/json"}
                async with session.post(url + CHAT, data=_payload(make()), headers=headers) as response:
                    assert response.status == status
                    if status >= 400:
                        assert (await response.json())["error"]["code"]
                    else:
                        await response.read()
            async with session.get(url + "/healthz") as response:
                assert response.status == 200
            return _large_blocks()
        finally:
            tracemalloc.stop()


@pytest.mark.parametrize("kind", list(REQUESTS))
@pytest.mark.usefixtures("production_gc")
async def test_no_body_outlives_its_request_with_production_gc(kind: str) -> None:
    assert await _leftovers(kind) == []


@pytest.mark.parametrize("kind", list(REQUESTS))
@pytest.mark.usefixtures("no_collector")
async def test_no_body_waits_for_the_cyclic_collector(kind: str) -> None:
    # A refusal's exception kept on the request's Exchange, with the frames its traceback holds (and
    # in them the body), is a reference cycle: only the collector frees it, and gctune makes that rare.
    assert await _leftovers(kind) == []
