"""A scripted fake of Google's Gemini API (`POST /v1beta/models/{model}:generateContent`,
`:streamGenerateContent?alt=sse`, `:countTokens`, `:batchEmbedContents`), answering with the fixtures of
tests/fixtures/gemini/: whole answers, event streams (in pieces that split events and lines anywhere), refusals,
a stream cut short; and embeddings, each request's vector `fake_embedding(its index, its outputDimensionality)`.

    fake = FakeGemini()
    fake.play(stream("tool_call"), refuse(429))
    async with fake.running() as url:            # the next two requests get these; then the text answer
        ...
    fake.received[0].body["contents"]            # what each request sent, as JSON, with its path and headers

The `google-genai` SDK reads every fixture the fake serves (tests/integration/test_gemini_bridge.py), so the
fixtures stay in Google's real shapes.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from multidict import CIMultiDict

from ingress.serve.app import serve_app

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "gemini"
COUNTED = 4321  # the fake's count of any prompt (`:countTokens`)
PIECE = 89  # a stream is written in pieces of this many bytes
EMBEDDING_SIZE = 4  # a vector's length when outputDimensionality is not asked
METHODS = ("generateContent", "streamGenerateContent", "countTokens", "batchEmbedContents")


def fake_embedding(index: int, dimensions: int | None) -> list[float]:
    """The fake's vector for a batch's request `index`: float32 values, exact in JSON."""
    return [(index + 1) / 2 ** (k + 1) for k in range(dimensions or EMBEDDING_SIZE)]


def fixture(name: str) -> bytes:
    """A fixture's bytes: `text.sse`, `tool_call.json`, `error_429.json`..."""
    return (FIXTURES / name).read_bytes()


@dataclass(frozen=True)
class Received:
    path: str
    query: dict[str, str]
    headers: CIMultiDict[str]
    body: dict[str, Any]

    @property
    def model(self) -> str:
        return self.path.rsplit("/", 1)[-1].rpartition(":")[0]

    @property
    def method(self) -> str:
        return self.path.rpartition(":")[2]


Behaviour = Callable[[web.Request], Awaitable[web.StreamResponse]]


def whole(name: str) -> Behaviour:
    """A 200 with the whole answer `<name>.json`."""

    async def run(request: web.Request) -> web.StreamResponse:
        return web.Response(body=fixture(f"{name}.json"), content_type="application/json")

    return run


def stream(name: str) -> Behaviour:
    """A 200 event stream of `<name>.sse`, in pieces; the connection ends where the file does."""

    async def run(request: web.Request) -> web.StreamResponse:
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        data = fixture(f"{name}.sse")
        for start in range(0, len(data), PIECE):
            await out.write(data[start:start + PIECE])
        await out.write_eof()
        return out

    return run


def refuse(status: int, name: str | None = None, *, retry_after: str | None = None) -> Behaviour:
    """Google's error answer `error_<name or status>.json`, with its status (and a Retry-After if given)."""

    async def run(request: web.Request) -> web.StreamResponse:
        headers = {"retry-after": retry_after} if retry_after is not None else None
        return web.Response(status=status, body=fixture(f"error_{name or status}.json"),
                            content_type="application/json", headers=headers)

    return run


class FakeGemini:
    def __init__(self) -> None:
        self.received: list[Received] = []
        self._script: deque[Behaviour] = deque()

    def play(self, *behaviours: Behaviour) -> None:
        self._script.extend(behaviours)

    async def _method(self, request: web.Request) -> web.StreamResponse:
        body = json.loads(await request.read())
        received = Received(request.path, dict(request.query), CIMultiDict(request.headers), body)
        self.received.append(received)
        if received.method not in METHODS:
            return web.json_response({"error": {"code": 404, "message": "Method not found.", "status": "NOT_FOUND"}},
                                     status=404)
        if self._script:
            return await self._script.popleft()(request)
        if received.method == "countTokens":
            return web.json_response({"totalTokens": COUNTED})
        if received.method == "batchEmbedContents":  # Google's answer names no usage
            return web.json_response({"embeddings": [{"values": fake_embedding(i, r.get("outputDimensionality"))}
                                                     for i, r in enumerate(body["requests"])]})
        return await (stream("text") if received.method == "streamGenerateContent" else whole("text"))(request)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1beta/models/{name}", self._method)
        return app

    @asynccontextmanager
    async def running(self) -> AsyncIterator[str]:
        async with serve_app(self.app(), "127.0.0.1", 0) as url:
            yield url
