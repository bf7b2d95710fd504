"""stream: send → frames → translate, as typed events; heartbeats while the service is silent.

One streamed token, from the service's socket to the client's, in one direction:

1. `upstream/http1.py` `Connection.data_received`: the bytes arrive; the chunked body is decoded and,
   while the stream's task waits in `Reads.pump`, handed at once to the pump's callback, `_Offer`, here.
2. `_Offer` feeds the read to the streaming core, `translate/body.py` `StreamBody.feed`: the frames it
   completes are cut (`wire/framing.py`) and each translated (`translate/stream.py`
   `StreamTranslator.read_frame`: a token's frame is read in place into a `Delta`).
3. The chunks go to `direct`, the edge's `Outlet` (`edge/writers.py`): once the response head is out
   and the client's socket buffer is empty, `SseWriter.render` (`edge/sse.py`) makes the event from the
   Delta's template and `sockets.chunk` frames it as one HTTP chunk, written to the client's transport.

Whatever `direct` declines (the head is not out yet, or the client is slow), a failure, and the end
come back to this stream's task instead, which yields them to the edge's `write_stream`: the same
rendering, written with backpressure. Without `direct` (the Responses API), every read takes that path.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable
from contextlib import AsyncExitStack, aclosing
from dataclasses import dataclass
from typing import Any, Final

from ingress import metrics, tasks
from ingress.anthropic import answers as anthropic_answers
from ingress.cache.entries import STREAM
from ingress.errors import (
    IngressError,
    UpstreamAnswered,
    UpstreamError,
)
from ingress.exchange import Answer, Exchange
from ingress.gemini.answers import GenerateContentResponse
from ingress.oai import chat_answers
from ingress.oai.completions import TextCompletion, TextCompletionRequest
from ingress.pipeline.cache import send_cached
from ingress.pipeline.gateway import Gateway
from ingress.pipeline.prepare import Completion, Prepared, counter
from ingress.routing.chain import FILTERED_FINISH
from ingress.translate.body import FrameTranslator, Read, StreamBody
from ingress.translate.stream import Delta, StreamTranslator
from ingress.translate.text import TextStreamTranslator
from ingress.upstream.client import Reads
from ingress.upstream.group import Lease
from ingress.wire.answer import decode_frame
from ingress.wire.framing import FrameDecoder, FrameError


class Signal:
    """An event with no data; compared by identity."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


OPENED: Final = Signal("OPENED")  # the service accepted the stream: the client's response may begin


HEARTBEAT: Final = Signal("HEARTBEAT")  # the service is still silent: keep the client's connection alive


DONE: Final = Signal("DONE")  # the stream is complete


@dataclass(frozen=True, slots=True)
class Failed:
    """The stream failed after its first event: the error goes to the client in-band, and it ends."""

    error: IngressError


# What a stream yields one by one: an OpenAI chat chunk (a token's as a Delta), a legacy completion's
# text chunk, one of Anthropic's Messages events, or one of Google's partial answers.
Chunk = chat_answers.ChatCompletionChunk | TextCompletion | Delta | anthropic_answers.Event | GenerateContentResponse


@dataclass(frozen=True, slots=True)
class Burst:
    """The chunks of frames that arrived in one read: the edge sends them in one write."""

    chunks: list[Chunk]


StreamEvent = Chunk | Burst | Signal | Failed


Direct = Callable[[StreamEvent], bool]
"""Where a read's chunks may go at once, from the upstream connection's callback: True when it took them
(the edge wrote them to its client), False to have them yielded instead (the edge then writes them with
its backpressure). Only chunks and Bursts are offered."""




async def stream(gateway: Gateway, prepared: Prepared[Completion], exchange: Exchange, direct: Direct | None = None,
                 translator: FrameTranslator[Any] | None = None) -> AsyncGenerator[StreamEvent, None]:
    """A streamed chat completion as events: OPENED and HEARTBEATs while the service is silent (one
    loop covers the wait for its response head and for its first frame), then one chat.completion.chunk
    at a time (or a Burst of those of one read), then DONE or Failed; chunks `direct` takes are not
    yielded. A failure before the first event raises instead, so that the edge can answer it with its
    status. The upstream stream is closed when the generator is. `translator`: another dialect's, in
    place of the request's own (chat or text chunks); its chunks come as these do."""
    head: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    yielded = False
    async with AsyncExitStack() as upstream:
        async with tasks.scoped(_open(gateway, prepared, exchange, upstream, head), "stream-open") as opening:
            waiting: set[asyncio.Future[object]] = {opening, head}  # type: ignore[arg-type]  # only awaited
            while opening in waiting:
                done, _ = await asyncio.wait(waiting, timeout=prepared.timeouts.heartbeat,
                                             return_when=asyncio.FIRST_COMPLETED)
                if not done:
                    yielded = True
                    yield HEARTBEAT
                if head in done:
                    waiting.discard(head)
                    yielded = True
                    yield OPENED
                if opening in done:
                    waiting.discard(opening)
            try:
                reads, data = opening.result()
            except IngressError as exc:
                if not yielded:
                    raise
                yield ended_in_band(exchange.answer, exc)
                return
        translator = translator or translator_for(gateway, prepared, exchange)
        # aclosing: the stream's usage is recorded however it ends
        async with aclosing(_translate(gateway, prepared, exchange, translator, reads, data, direct)) as events:
            async for event in events:
                yield event


async def _open(gateway: Gateway, prepared: Prepared[Completion], exchange: Exchange, upstream: AsyncExitStack,
                head: asyncio.Future[None]) -> tuple[Reads, bytes]:
    """Send; once the service's head has come, wait for the first read of its body (b"": it ended). On a
    route whose chain falls back on a content filter, the body is read until its first content (or its
    end, or PEEK_BYTES) before the head is announced: a stream a filter ended before any content moves on
    unseen."""
    peek = len(prepared.match.links) > 1 and "content_filter" in prepared.match.fallback_on
    max_frame = gateway.settings.max_frame_bytes

    async def attempt(lease: Lease, ready: Prepared[Completion]) -> tuple[AsyncExitStack, Reads, bytes | None, bool]:
        stack = AsyncExitStack()
        try:
            reads = await stack.enter_async_context(
                lease.client.stream(ready.encoded, ready.headers, ready.timeouts))
            if not peek:
                return stack, reads, None, False
            start, filtered = await _until_content(reads, max_frame)
            return stack, reads, start, filtered
        except BaseException:
            await stack.aclose()
            raise

    async def discard(opened: tuple[AsyncExitStack, Reads, bytes | None, bool]) -> None:
        await opened[0].aclose()

    stack, reads, start, _ = await send_cached(gateway, prepared, exchange, attempt, STREAM,
                                               reroute=prepared.rerouter(gateway, exchange),
                                               refused=(lambda opened: opened[3]) if peek else None, discard=discard)
    upstream.push_async_callback(stack.aclose)  # closed with the stream, whoever ends it
    head.set_result(None)
    return reads, start if start is not None else await anext(reads, b"")


PEEK_BYTES = 64 * 1024  # what a stream's start may hold back, waiting for its first content


async def _until_content(reads: Reads, max_frame: int) -> tuple[bytes, bool]:
    """A stream's reads up to its first content (text, a tool call, reasoning), its end or PEEK_BYTES, and
    whether a filter ended it before any content (finish content_filter or refusal)."""
    peek, held = StartPeek(max_frame), bytearray()
    while True:
        data = await anext(reads, b"")
        held += data
        verdict = peek.feed(data) if data else False
        if verdict is not None or len(held) >= PEEK_BYTES:
            return bytes(held), bool(verdict)


class StartPeek:
    """A stream's first frames, read as they come (sans-I/O): `feed` says True once a filter ended it
    before any content, False once content came first (or the frames cannot be read: the stream's own
    reading meets that), None while it cannot tell yet. The frames are read again, verified, by the
    stream's reading: this is only a look."""

    __slots__ = ("_frames",)

    def __init__(self, max_frame: int) -> None:
        self._frames = FrameDecoder(max_frame)

    def feed(self, data: bytes) -> bool | None:
        try:
            for frame in self._frames.feed(data):
                chunk = decode_frame(frame, verify_frame=True)
                if chunk.content or chunk.tool_calls or chunk.reasoning or chunk.refusal:
                    return False
                if chunk.finish_reason in FILTERED_FINISH:
                    return True
                if chunk.done or chunk.finish_reason is not None:
                    return False
        except (IngressError, FrameError):
            return False
        return None


async def _translate(gateway: Gateway, prepared: Prepared[Completion], exchange: Exchange,
                     translator: FrameTranslator[Any],
                     reads: Reads, data: bytes, direct: Direct | None) -> AsyncGenerator[StreamEvent, None]:
    """The body from its first read on, through the streaming core (`StreamBody`): each read's chunks
    yielded, then DONE at the final frame, or Failed. With `direct`, each later read is fed to the core in
    the upstream connection's callback and its chunks offered there (`_Offer`); only what `direct`
    declines, a failure or the end come back to this generator."""
    answer = exchange.answer
    gaps = metrics.inter_chunk_gaps(exchange.routed.metric_model)
    body = StreamBody(translator, gateway.settings.max_frame_bytes, gaps.sent)
    offer = _Offer(body, direct) if direct is not None else None
    if data:
        answer.began()  # the body's first read: every later one comes after it
    read = _fed(body, data)
    try:
        while True:
            if read.chunks:
                yield _event(read.chunks)
            if (error := read.error) is not None:
                if not isinstance(error, IngressError):
                    raise error  # a bug met in the connection's callback (`_Offer`), raised in this task
                yield ended_in_band(exchange.answer, error)
                return
            if body.done:
                break
            try:
                read = await _next_read(body, reads, offer)
            except IngressError as exc:  # the connection broke, or the service went silent: its failure
                read = Read([], exc)
    finally:
        answer.usage, answer.served_model = translator.usage, translator.served_model or None
        if translator.usage is None and translator.output:  # accounting counts what was streamed
            served = exchange.attempts.served or prepared.match
            answer.output_tokens = counter(gateway, served).text("".join(translator.output))
        answer.done = time.perf_counter()
        if exchange.trace is not None:  # the answer's id and finish reasons (its text too, where the route opted in)
            exchange.trace.answered(translator.id, translator.finish_reasons,
                              ["".join(translator.output)] if exchange.trace.content else [])
    answer.upstream_ok = True
    yield DONE


def translator_for(gateway: Gateway, prepared: Prepared[Completion], exchange: Exchange) -> FrameTranslator[Chunk]:
    """The request's frames → chunks: chat chunks, or a legacy completion's text ones."""
    request, created, verify = prepared.request, int(time.time()), gateway.settings.verify_answers
    include_usage = bool(request.stream_options and request.stream_options.include_usage)
    if isinstance(request, TextCompletionRequest):
        return TextStreamTranslator(id=f"cmpl-{exchange.request_id}", model=request.model, created=created,
                                    include_usage=include_usage, verify=verify)
    return StreamTranslator(id=f"chatcmpl-{exchange.request_id}", model=request.model, created=created,
                            include_usage=include_usage, verify=verify, legacy_functions=request.legacy_functions)


async def _next_read(body: StreamBody[Chunk], reads: Reads, offer: _Offer | None) -> Read[Chunk]:
    """The body's next read through the core: fed in the upstream connection's callback (`offer`), which
    gives back only what it did not hand on, or fed here."""
    if offer is not None:
        return await reads.pump(offer) or body.end()
    return _fed(body, await anext(reads, b""))


def _fed(body: StreamBody[Chunk], data: bytes) -> Read[Chunk]:
    """One read through the core (b"": the body ended)."""
    return body.feed(data) if data else body.end()


class _Offer:
    """A read in the upstream connection's callback (`Reads.pump`): fed to the core, and its chunks offered
    to `direct`. None when `direct` took them (or there were none) and the stream goes on; otherwise the
    read, for the stream's task to finish: chunks `direct` declined, a failure, or the final frame."""

    __slots__ = ("_body", "_direct")

    def __init__(self, body: StreamBody[Chunk], direct: Direct) -> None:
        self._body, self._direct = body, direct

    def __call__(self, data: bytes) -> Read[Chunk] | None:
        try:
            read = _fed(self._body, data)
            if read.error is None and not self._body.done and (not read.chunks or self._direct(_event(read.chunks))):
                return None
            return read
        except Exception as exc:  # a bug must not raise in the connection's callback: the stream's task meets it
            return Read([], exc)


def _event(chunks: list[Chunk]) -> StreamEvent:
    return chunks[0] if len(chunks) == 1 else Burst(chunks)


def ended_in_band(answer: Answer, exc: IngressError) -> Failed:
    """The stream failed after it began: the failure on the answer's record, and the event that ends the
    client's stream with it."""
    answer.failure = exc
    # The service's own Error frame is an answer; a broken, unreadable or silent stream is its failure.
    answer.upstream_ok = isinstance(exc, UpstreamAnswered) or not isinstance(exc, UpstreamError)
    return Failed(exc)
