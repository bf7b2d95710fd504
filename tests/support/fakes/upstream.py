"""A scripted internal service: answers by the FlatBuffers contract, or breaks it on purpose.

Each request gets a *behaviour*, an async function of a `Call` that writes (or fails to write) the
answer. `FakeUpstream.play(...)` queues behaviours for the next requests; after the queue runs out the
fake answers with its default, `answer()`. The fake records what it received and how every handler
ended, so a test can tell that an upstream call was cut when the edge gave up on it::

    fake.play(stall_mid_stream(frames=2))
    ...                                            # the edge times out and closes the connection
    await fake.wait_idle()
    assert fake.outcomes == ["cancelled"]

Embeddings (`POST wire.EMBED_PATH`) have their own script (`play_embed`) of `EmbedBehaviour`s, and
their own record (`embeddings_received`); their outcomes join the same `outcomes`.
"""

from __future__ import annotations

import asyncio
import re
import socket
import struct
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import NoReturn

from aiohttp import web
from multidict import CIMultiDict
from waiting import eventually

from ingress import wire
from ingress.encoding.reading import decode_request
from ingress.encoding.requests import message_text
from ingress.oai.chat import ChatCompletionRequest, UserMessage
from ingress.serve.app import serve_app

CREATED = 1_700_000_000
PREFIX = struct.Struct("<I")
_WORD = re.compile(r"\s*\S+")

Behaviour = Callable[["Call"], Awaitable[web.StreamResponse]]
EmbedBehaviour = Callable[[web.Request, "ReceivedEmbedding"], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Received:
    """One request as the fake read it: the HTTP headers, the raw buffer and its decoded form."""

    headers: CIMultiDict[str]
    body: bytes
    request: ChatCompletionRequest
    request_id: str

    @property
    def stream(self) -> bool:
        return bool(self.request.stream)

    @property
    def user_text(self) -> str:
        """The last user message's text; for a text completion (no messages), its first text prompt."""
        users = [m for m in self.request.messages if isinstance(m, UserMessage)]
        if not users:
            return (wire.read_request(self.body).UserPrompt() or b"").decode()
        return message_text(users[-1])


@dataclass(frozen=True)
class ReceivedEmbedding:
    """One embeddings request as the fake read it."""

    headers: CIMultiDict[str]
    body: bytes
    request: wire.EmbeddingRequestData


class Call:
    """One request being answered: what a behaviour needs to write its answer, or to break it."""

    def __init__(self, http: web.Request, received: Received, pace: float = 0.0) -> None:
        self.http = http
        self.received = received
        self.pace = pace
        self.dropped = False

    @property
    def answer_id(self) -> str:
        return f"chatcmpl-{self.received.request_id}"

    def chunks(self, text: str | None = None) -> list[wire.Chunk]:
        """A complete streamed answer of `text` (default: the last user message), one word a frame."""
        words = _WORD.findall(self.received.user_text if text is None else text)
        head = wire.Chunk(sequence=0, id=self.answer_id, model=self.received.request.model, created=CREATED,
                          role="assistant", content="")
        body = [wire.Chunk(sequence=i + 1, content=w) for i, w in enumerate(words)]
        finish = wire.Chunk(sequence=len(words) + 1, finish_reason="stop")
        usage = wire.Usage(prompt_tokens=len(_WORD.findall(self.received.user_text)), completion_tokens=len(words))
        last = wire.Chunk(sequence=len(words) + 2, usage=usage, done=True)
        return [head, *body, finish, last]

    def frames(self, text: str | None = None) -> list[bytes]:
        return [bytes(wire.write_chunk(c)) for c in self.chunks(text)]

    def response(self, text: str | None = None) -> bytes:
        """A complete non-streamed answer of `text` (default: the last user message)."""
        content = self.received.user_text if text is None else text
        words = len(_WORD.findall(content))
        usage = wire.Usage(prompt_tokens=len(_WORD.findall(self.received.user_text)), completion_tokens=words)
        choice = wire.Choice(index=0, content=content, finish_reason="stop")
        return bytes(wire.write_response(wire.Response(id=self.answer_id, model=self.received.request.model,
                                                       created=CREATED, choices=[choice], usage=usage)))

    async def open_stream(self) -> web.StreamResponse:
        """Send the head of a streamed answer (HTTP 200, frames content type)."""
        stream = web.StreamResponse(headers={"Content-Type": wire.STREAM_CONTENT_TYPE})
        await stream.prepare(self.http)
        return stream

    async def open_body(self, length: int) -> web.StreamResponse:
        """Send the head of a non-streamed answer that promises `length` bytes."""
        body = web.StreamResponse(headers={"Content-Type": wire.CONTENT_TYPE})
        body.content_length = length
        await body.prepare(self.http)
        return body

    async def send(self, out: web.StreamResponse, data: bytes | bytearray) -> None:
        """Write part of a body; with a `pace`, pause after it so the edge reads each write on its own."""
        await out.write(data)
        if self.pace:
            await asyncio.sleep(self.pace)

    async def hang(self) -> NoReturn:
        """Wait until the handler is cancelled: the peer hung up, or the fake is shutting down."""
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def drop(self) -> NoReturn:
        """Abort the TCP connection mid-answer, as a crashing service would."""
        self.dropped = True
        assert self.http.transport is not None
        self.http.transport.close()
        await self.hang()  # losing the connection cancels this handler


class FakeUpstream:
    """An internal service on loopback whose next answers are scripted by the test."""

    def __init__(self, default: Behaviour | None = None) -> None:
        self.default = default or answer()
        self.received: list[Received] = []
        self.outcomes: list[str] = []  # per finished handler: answered, cancelled, dropped or failed
        self.url = ""
        self._script: deque[tuple[Behaviour, float]] = deque()
        self._handlers: set[asyncio.Task[object]] = set()
        self.embeddings_received: list[ReceivedEmbedding] = []
        self._embed_script: deque[EmbedBehaviour] = deque()

    def play(self, *behaviours: Behaviour, pace: float = 0.0) -> None:
        """Answer the next requests with these behaviours, in order; then with the default.

        `pace`: seconds to pause after each streamed write, so that the edge reads every write on its
        own and what it relays before a fault does not depend on how the bytes were split.
        """
        self._script.extend((b, pace) for b in behaviours)

    def play_embed(self, *behaviours: EmbedBehaviour) -> None:
        """Answer the next embeddings requests with these behaviours, in order; then with `vectors()`."""
        self._embed_script.extend(behaviours)

    @property
    def active(self) -> int:
        """Handlers still running."""
        return len(self._handlers)

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    async def wait_idle(self, timeout: float = 2.0) -> None:
        """Until no handler runs; fails the test if one is still running after `timeout` seconds."""
        await eventually(lambda: not self._handlers, "no fake handler running", timeout=timeout, interval=0.01)

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        received = Received(headers=CIMultiDict(request.headers), body=body, request=decode_request(body),
                            request_id=(wire.read_request(body).RequestId() or b"").decode())
        self.received.append(received)
        behaviour, pace = self._script.popleft() if self._script else (self.default, 0.0)
        call = Call(request, received, pace)
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            response = await behaviour(call)
        except asyncio.CancelledError:
            self.outcomes.append("dropped" if call.dropped else "cancelled")
            raise
        except BaseException:
            self.outcomes.append("failed")
            raise
        finally:
            self._handlers.discard(task)
        self.outcomes.append("answered")
        return response

    async def _embed(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        received = ReceivedEmbedding(CIMultiDict(request.headers), body, wire.read_embedding_request(body))
        self.embeddings_received.append(received)
        behaviour = self._embed_script.popleft() if self._embed_script else vectors()
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            response = await behaviour(request, received)
        except asyncio.CancelledError:
            self.outcomes.append("cancelled")
            raise
        finally:
            self._handlers.discard(task)
        self.outcomes.append("answered")
        return response

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post(wire.COMPLETE_PATH, self._complete)
        app.router.add_post(wire.EMBED_PATH, self._embed)
        return app

    @asynccontextmanager
    async def running(self) -> AsyncIterator[str]:
        """Serve on a free loopback port; yields the base URL. Hung handlers are cancelled on exit."""
        async with serve_app(self.app(), "127.0.0.1", 0) as url:
            self.url = url
            try:
                yield url
            finally:
                for task in self._handlers:
                    task.cancel()
                await asyncio.gather(*self._handlers, return_exceptions=True)


@contextmanager
def refusing_url() -> Iterator[str]:
    """A loopback URL where connections are refused: the port is held by a socket that never listens."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


# --- behaviours: by the contract ------------------------------------------------------------------


def answer(text: str | None = None, *, stream: bool | None = None) -> Behaviour:
    """A correct answer of `text` (default: echo the last user message), whole or as frames.

    `stream=False` answers with a whole buffer even when the request asked for a stream.
    """

    async def run(call: Call) -> web.StreamResponse:
        if not (call.received.stream if stream is None else stream):
            return web.Response(body=call.response(text), content_type=wire.CONTENT_TYPE)
        out = await call.open_stream()
        for frame in call.frames(text):
            await call.send(out, frame)
        await out.write_eof()
        return out

    return run


def error_answer(error: wire.ErrorInfo, *, http_status: int | None = None) -> Behaviour:
    """An Error buffer instead of an answer, with HTTP status `error.status` unless given."""

    async def run(call: Call) -> web.StreamResponse:
        return web.Response(status=http_status or error.status, body=wire.write_error(error),
                            content_type=wire.CONTENT_TYPE)

    return run


# --- behaviours: before the first byte ------------------------------------------------------------


def slow_head(seconds: float | None = None) -> Behaviour:
    """Wait before sending anything (`None`: until the peer gives up), then answer correctly."""

    async def run(call: Call) -> web.StreamResponse:
        if seconds is None:
            await call.hang()
        await asyncio.sleep(seconds)
        return await answer()(call)

    return run


def drop_before_head() -> Behaviour:
    """Read the request, then abort the connection without a word."""

    async def run(call: Call) -> web.StreamResponse:
        await call.drop()

    return run


def plain_status(status: int, text: str) -> Behaviour:
    """An answer outside the contract: a bare HTTP status with a text body, as a crashed proxy sends."""

    async def run(call: Call) -> web.StreamResponse:
        return web.Response(status=status, text=text)

    return run


def raw_answer(body: bytes | bytearray, *, content_type: str = wire.CONTENT_TYPE, status: int = 200) -> Behaviour:
    """Exactly these bytes as a whole answer."""

    async def run(call: Call) -> web.StreamResponse:
        return web.Response(status=status, body=body, content_type=content_type)

    return run


# --- behaviours: a whole answer cut in the middle -------------------------------------------------


def stall_mid_body(after_bytes: int = 8) -> Behaviour:
    """Promise a whole answer, send its first bytes, then go silent."""

    async def run(call: Call) -> web.StreamResponse:
        whole = call.response()
        out = await call.open_body(len(whole))
        await call.send(out, whole[:after_bytes])
        await call.hang()

    return run


def drop_mid_body(after_bytes: int = 8) -> Behaviour:
    """Promise a whole answer, send its first bytes, then abort the connection."""

    async def run(call: Call) -> web.StreamResponse:
        whole = call.response()
        out = await call.open_body(len(whole))
        await call.send(out, whole[:after_bytes])
        await call.drop()

    return run


# --- behaviours: a stream that breaks after the first byte ----------------------------------------


def stall_mid_stream(frames: int = 2) -> Behaviour:
    """Send the first `frames` frames of a correct stream, then go silent."""

    async def run(call: Call) -> web.StreamResponse:
        out = await call.open_stream()
        for frame in call.frames()[:frames]:
            await call.send(out, frame)
        await call.hang()

    return run


def drop_mid_stream(frames: int = 2) -> Behaviour:
    """Send the first `frames` frames of a correct stream, then abort the connection."""

    async def run(call: Call) -> web.StreamResponse:
        out = await call.open_stream()
        for frame in call.frames()[:frames]:
            await call.send(out, frame)
        await call.drop()

    return run


def gated(gate: asyncio.Event, *, then: str = "answer") -> Behaviour:
    """A stream's first two frames (its role, its first word), then nothing until `gate` opens; then the
    rest (`then` "answer"), or the connection dropped ("drop")."""

    async def run(call: Call) -> web.StreamResponse:
        out = await call.open_stream()
        frames = call.frames()
        for frame in frames[:2]:
            await call.send(out, frame)
        await gate.wait()
        if then == "drop":
            await call.drop()
        for frame in frames[2:]:
            await call.send(out, frame)
        await out.write_eof()
        return out

    return run


def raw_stream(tail: bytes | bytearray, *, after: int = 0) -> Behaviour:
    """Send the first `after` frames of a correct stream, then `tail`, then end the body cleanly."""

    async def run(call: Call) -> web.StreamResponse:
        out = await call.open_stream()
        for frame in call.frames()[:after]:
            await call.send(out, frame)
        if tail:
            await call.send(out, tail)
        await out.write_eof()
        return out

    return run


def end_without_done(frames: int = 2) -> Behaviour:
    """Send the first `frames` frames of a correct stream and end the body cleanly: no done frame."""
    return raw_stream(b"", after=frames)


def error_frame(error: wire.ErrorInfo, *, after: int = 2) -> Behaviour:
    """Send the first `after` frames of a correct stream, then an Error frame, and end the body."""
    return raw_stream(bytes(wire.write_error(error, framed=True)), after=after)


def skip_sequence(at: int = 2) -> Behaviour:
    """A correct stream except that the frame with sequence number `at` is never sent."""

    async def run(call: Call) -> web.StreamResponse:
        out = await call.open_stream()
        for chunk in call.chunks():
            if chunk.sequence != at:
                await call.send(out, bytes(wire.write_chunk(chunk)))
        await out.write_eof()
        return out

    return run


def size_prefix(size: int) -> bytes:
    """A frame's 4-byte little-endian size prefix, to build malformed streams by hand."""
    return PREFIX.pack(size)


# --- embeddings behaviours ------------------------------------------------------------------------


def fake_vector(index: int, dimensions: int | None) -> list[float]:
    """The fake's vector for input `index`: exact float32 values, [index, 0.5, -0.25, 0, 0, ...]."""
    return ([float(index), 0.5, -0.25] + [0.0] * max((dimensions or 3) - 3, 0))[: dimensions or 3]


def vectors(*, count: int | None = None, model: str = "fake-embedder",
            usage: wire.Usage | None = None) -> EmbedBehaviour:
    """A correct answer: `fake_vector(i, dimensions)` for each input (or for `count` inputs, to break
    the contract), usage one token per input unless given."""

    async def run(http: web.Request, received: ReceivedEmbedding) -> web.StreamResponse:
        inputs = len(received.request.inputs or ()) if count is None else count
        answer = wire.Embeddings(model=model, vectors=[fake_vector(i, received.request.dimensions)
                                                       for i in range(inputs)],
                                 usage=usage or wire.Usage(prompt_tokens=inputs, total_tokens=inputs))
        return web.Response(body=wire.write_embeddings(answer), content_type=wire.CONTENT_TYPE)

    return run


def embed_error(error: wire.ErrorInfo) -> EmbedBehaviour:
    """An Error buffer with HTTP status `error.status`."""

    async def run(http: web.Request, received: ReceivedEmbedding) -> web.StreamResponse:
        return web.Response(status=error.status, body=wire.write_error(error), content_type=wire.CONTENT_TYPE)

    return run


def embed_raw(body: bytes | bytearray, *, status: int = 200, content_type: str = wire.CONTENT_TYPE) -> EmbedBehaviour:
    """Exactly these bytes as the answer."""

    async def run(http: web.Request, received: ReceivedEmbedding) -> web.StreamResponse:
        return web.Response(status=status, body=body, content_type=content_type)

    return run


def embed_hang() -> EmbedBehaviour:
    """Read the request, then say nothing until the peer gives up."""

    async def run(http: web.Request, received: ReceivedEmbedding) -> web.StreamResponse:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    return run


def embed_drop() -> EmbedBehaviour:
    """Read the request, then abort the connection without a word."""

    async def run(http: web.Request, received: ReceivedEmbedding) -> web.StreamResponse:
        assert http.transport is not None
        http.transport.close()
        await asyncio.Event().wait()  # losing the connection cancels this handler
        raise AssertionError("unreachable")

    return run


# --- additions: headers on error answers, a slow first frame, health checks, Unix sockets ---------


def error_answer_with_headers(error: wire.ErrorInfo, headers: dict[str, str]) -> Behaviour:
    """An Error buffer with HTTP status `error.status` and these extra response headers (e.g. Retry-After)."""

    async def run(call: Call) -> web.StreamResponse:
        return web.Response(status=error.status, body=wire.write_error(error), content_type=wire.CONTENT_TYPE,
                            headers=headers)

    return run


def slow_first_frame(seconds: float) -> Behaviour:
    """Send the head of a stream at once, then nothing for `seconds`, then every frame of a correct stream."""

    async def run(call: Call) -> web.StreamResponse:
        out = await call.open_stream()
        await asyncio.sleep(seconds)
        for frame in call.frames():
            await call.send(out, frame)
        await out.write_eof()
        return out

    return run


class CheckedUpstream(FakeUpstream):
    """A fake that also answers active health checks: `GET /healthz` is 200 while `healthy`, else 503."""

    def __init__(self, default: Behaviour | None = None) -> None:
        super().__init__(default)
        self.healthy = True
        self.health_checks = 0

    async def _healthz(self, request: web.Request) -> web.Response:
        self.health_checks += 1
        return web.Response(status=200 if self.healthy else 503, text="ok" if self.healthy else "unhealthy")

    def app(self) -> web.Application:
        app = super().app()
        app.router.add_get("/healthz", self._healthz)
        return app


@asynccontextmanager
async def running_unix(fake: FakeUpstream, path: str) -> AsyncIterator[str]:
    """Serve `fake` on a Unix socket at `path`; yields its endpoint URL (`unix:/path`)."""
    async with serve_app(fake.app(), "", 0, unix=path) as url:
        fake.url = url
        try:
            yield url
        finally:
            for task in fake._handlers:
                task.cancel()
            await asyncio.gather(*fake._handlers, return_exceptions=True)
