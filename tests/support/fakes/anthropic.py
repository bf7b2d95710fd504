"""A scripted fake of Anthropic's Messages API (`POST /v1/messages`), answering with the recorded
fixtures of tests/fixtures/anthropic/: whole answers, event streams, refusals, and a stream cut short.

    fake = FakeAnthropic()
    fake.play(stream("tool_use"), refuse(429, retry_after="7"))
    async with fake.running() as url:            # the next two requests get these; then `whole("text")`
        ...
    fake.received[0].body["tools"]               # what each request sent, as JSON

The official `anthropic` SDK is this fake's conformance client (tests/integration/test_anthropic_fake.py):
it reads every fixture the fake serves, so the fixtures stay in Anthropic's real shapes.
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

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "anthropic"
COUNTED = 1234  # the fake's count of any prompt (POST /v1/messages/count_tokens)
PIECE = 97  # a stream is written in pieces of this many bytes, which split events and lines anywhere


def fixture(name: str) -> bytes:
    """A fixture's bytes: `text.sse`, `tool_use.json`, `error_529.json`..."""
    return (FIXTURES / name).read_bytes()


@dataclass(frozen=True)
class Received:
    headers: CIMultiDict[str]
    body: dict[str, Any]


Behaviour = Callable[[web.Request], Awaitable[web.StreamResponse]]


def whole(name: str) -> Behaviour:
    """A 200 with the whole answer `<name>.json`."""

    async def run(request: web.Request) -> web.StreamResponse:
        return web.Response(body=fixture(f"{name}.json"), content_type="application/json",
                            headers={"request-id": "req_fake"})

    return run


def stream(name: str) -> Behaviour:
    """A 200 event stream of `<name>.sse`, in pieces; for `cut`, the connection ends where the file does
    (before message_stop) as if the provider's side broke."""

    async def run(request: web.Request) -> web.StreamResponse:
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8",
                                          "Cache-Control": "no-cache", "request-id": "req_fake"})
        await out.prepare(request)
        data = fixture(f"{name}.sse")
        for start in range(0, len(data), PIECE):
            await out.write(data[start:start + PIECE])
        await out.write_eof()
        return out

    return run


def refuse(status: int, *, retry_after: str | None = None) -> Behaviour:
    """Anthropic's error answer `error_<status>.json`, with its status (and a Retry-After if given)."""

    async def run(request: web.Request) -> web.StreamResponse:
        headers = {"request-id": "req_fake", "x-should-retry": "true" if status in (429, 529) else "false"}
        if retry_after is not None:
            headers["retry-after"] = retry_after
        return web.Response(status=status, body=fixture(f"error_{status}.json"), content_type="application/json",
                            headers=headers)

    return run


class FakeAnthropic:
    def __init__(self) -> None:
        self.received: list[Received] = []
        self._script: deque[Behaviour] = deque()

    def play(self, *behaviours: Behaviour) -> None:
        self._script.extend(behaviours)

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body = json.loads(await request.read())
        self.received.append(Received(CIMultiDict(request.headers), body))
        if self._script:
            return await self._script.popleft()(request)
        return await (stream("text") if body.get("stream") else whole("text"))(request)

    async def _count_tokens(self, request: web.Request) -> web.StreamResponse:
        """Anthropic's count: COUNTED tokens, whatever the request; recorded as the messages are."""
        body = json.loads(await request.read())
        self.received.append(Received(CIMultiDict(request.headers), body))
        if self._script:
            return await self._script.popleft()(request)
        return web.json_response({"input_tokens": COUNTED})

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_post("/v1/messages/count_tokens", self._count_tokens)
        return app

    @asynccontextmanager
    async def running(self) -> AsyncIterator[str]:
        async with serve_app(self.app(), "127.0.0.1", 0) as url:
            yield url
