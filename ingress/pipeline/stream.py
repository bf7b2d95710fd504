"""stream: send → frames → translate, as typed events; heartbeats while the service is silent."""

from __future__ import annotations

import asyncio
import time
from bisect import bisect_left
from collections.abc import AsyncGenerator, Callable
from contextlib import AsyncExitStack, aclosing
from dataclasses import dataclass
from typing import Final

from prometheus_client import Histogram

from ingress import metrics, tasks
from ingress.errors import (
    IngressError,
    UpstreamAnswered,
    UpstreamError,
    UpstreamProtocolError,
)
from ingress.exchange import Exchange
from ingress.oai import chat_answers, responses_answers
from ingress.oai.completions import TextCompletion, TextCompletionRequest
from ingress.pipeline.gateway import Gateway
from ingress.pipeline.prepare import Completion, Prepared, counter
from ingress.pipeline.send import send
from ingress.translate.responses import ResponseEvents
from ingress.translate.stream import Delta, StreamTranslator
from ingress.translate.text import TextStreamTranslator
from ingress.upstream.client import Reads
from ingress.upstream.group import Lease
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


@dataclass(frozen=True, slots=True)
class Burst:
    """The chunks of frames that arrived in one read: the edge sends them in one write."""

    chunks: list[chat_answers.ChatCompletionChunk | TextCompletion | Delta]


StreamEvent = chat_answers.ChatCompletionChunk | Delta | TextCompletion | Burst | Signal | Failed


Direct = Callable[[StreamEvent], bool]
"""Where a read's chunks may go at once, from the upstream connection's callback: True when it took them
(the edge wrote them to its client), False to have them yielded instead (the edge then writes them with
its backpressure). Only chunks and Bursts are offered."""


ResponsesStreamEvent = responses_answers.StreamEvent | Signal | Failed


async def stream(gw: Gateway, prepared: Prepared[Completion], ex: Exchange,
                 direct: Direct | None = None) -> AsyncGenerator[StreamEvent, None]:
    """A streamed chat completion as events: OPENED and HEARTBEATs while the service is silent (one
    loop covers the wait for its response head and for its first frame), then one chat.completion.chunk
    at a time (or a Burst of those of one read), then DONE or Failed; chunks `direct` takes are not
    yielded. A failure before the first event raises instead, so that the edge can answer it with its
    status. The upstream stream is closed when the generator is."""
    head: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    yielded = False
    async with AsyncExitStack() as upstream:
        async with tasks.scoped(_open(gw, prepared, ex, upstream, head), "stream-open") as opening:
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
                yield failed(ex, exc)
                return
        async with aclosing(_translate(gw, prepared, ex, reads, data, direct)) as events:  # its usage, however it ends
            async for event in events:
                yield event


async def _open(gw: Gateway, prepared: Prepared[Completion], ex: Exchange, upstream: AsyncExitStack,
                head: asyncio.Future[None]) -> tuple[Reads, bytes]:
    """Send; once the service's head has come, wait for the first read of its body (b"": it ended)."""

    async def attempt(lease: Lease) -> tuple[AsyncExitStack, Reads]:
        stack = AsyncExitStack()
        try:
            reads = await stack.enter_async_context(
                lease.client.stream(prepared.encoded, prepared.headers, prepared.timeouts))
        except BaseException:
            await stack.aclose()
            raise
        return stack, reads

    stack, reads = await send(gw, prepared.match, ex, attempt)
    upstream.push_async_callback(stack.aclose)  # closed with the stream, whoever ends it
    head.set_result(None)
    return reads, await anext(reads, b"")


async def _translate(gw: Gateway, prepared: Prepared[Completion], ex: Exchange, reads: Reads, data: bytes,
                     direct: Direct | None) -> AsyncGenerator[StreamEvent, None]:
    """Frames → chunks, from the first read on; DONE at the final frame, or Failed. With `direct`, each
    later read is translated in the upstream connection's callback and its chunks offered there; only
    what `direct` declines, a failure or the end come back to this generator."""
    request = prepared.request
    include_usage = bool(request.stream_options and request.stream_options.include_usage)
    translator: StreamTranslator | TextStreamTranslator
    if isinstance(request, TextCompletionRequest):
        translator = TextStreamTranslator(id=f"cmpl-{ex.request_id}", model=request.model, created=int(time.time()),
                                          include_usage=include_usage, verify=gw.settings.verify_answers)
    else:
        translator = StreamTranslator(id=f"chatcmpl-{ex.request_id}", model=request.model, created=int(time.time()),
                                      include_usage=include_usage, verify=gw.settings.verify_answers,
                                      legacy_functions=request.legacy_functions)
    decoder = FrameDecoder(gw.settings.max_frame_bytes)
    read = translator.read_frame if isinstance(translator, StreamTranslator) else translator.feed_frame
    gaps = Gaps(metrics.INTER_CHUNK.labels(ex.metric_model))

    def take(data: bytes) -> Step:
        """One read: its chunks, and the error that came after them in it (or None)."""
        ex.mark_first_byte()
        burst: list[chat_answers.ChatCompletionChunk | TextCompletion | Delta] = []
        try:
            for frame in decoder.feed(data):
                chunks = read(frame)
                if chunks:
                    now = time.perf_counter()
                    for _ in chunks:
                        gaps.mark(now)
                    burst += chunks
                if translator.done:
                    break  # complete: whatever follows the final frame is not read, however it arrived
        except (FrameError, IngressError) as exc:  # after what came before it in the same read
            return burst, exc
        return burst, None

    def consume(data: bytes) -> Step | None:
        """A read in the connection's callback: None when `direct` took its chunks (or it had none)."""
        try:
            burst, error = step = take(data)
            if error is None and not translator.done and (not burst or direct(_event(burst))):  # type: ignore[misc]  # pumped only when direct is set
                return None
            return step
        except Exception as exc:  # raised in the stream's task, not in the connection's callback
            return [], exc

    try:
        step = take(data) if data else None
        while step is not None:
            burst, error = step
            if burst:
                yield _event(burst)
            if error is not None:
                raise error
            if translator.done:
                break
            if direct is not None:
                step = await reads.pump(consume)
            else:
                data = await anext(reads, b"")
                step = take(data) if data else None
        else:
            decoder.finish()
            translator.finish()
    except FrameError as exc:
        yield failed(ex, UpstreamProtocolError(f"The model service sent a malformed stream: {exc}."))
        return
    except IngressError as exc:
        yield failed(ex, exc)
        return
    finally:
        gaps.flush()
        ex.usage = translator.usage
        if translator.usage is None and translator.output:  # accounting counts what was streamed
            ex.output_tokens = counter(gw, prepared.match).text("".join(translator.output))
        ex.upstream_done = time.perf_counter()
    ex.upstream_ok = True
    yield DONE


Chunks = list[chat_answers.ChatCompletionChunk | TextCompletion | Delta]
Step = tuple[Chunks, Exception | None]


def _event(burst: Chunks) -> StreamEvent:
    return burst[0] if len(burst) == 1 else Burst(burst)


class Gaps:
    """One stream's gaps between chunks, counted into the histogram's buckets here and added to it once,
    at the end (`flush`): as `observe` would count each, for a fraction of its cost per chunk (two
    locked increments and a scan of the bounds, ~2 µs)."""

    __slots__ = ("_child", "_counts", "_last", "_sum")

    def __init__(self, child: Histogram) -> None:
        self._child = child
        self._counts = [0] * len(child._upper_bounds)
        self._sum = 0.0
        self._last: float | None = None

    def mark(self, now: float) -> None:
        """A chunk went out at `now` (perf_counter)."""
        last, self._last = self._last, now
        if last is not None:
            gap = now - last
            self._sum += gap
            self._counts[bisect_left(self._child._upper_bounds, gap)] += 1  # the first bound >= gap, as observe

    def flush(self) -> None:
        child, counts = self._child, self._counts
        if not any(counts):
            return
        for bucket, n in zip(child._buckets, counts, strict=True):
            if n:
                bucket.inc(n)
        child._sum.inc(self._sum)
        self._counts = [0] * len(counts)
        self._sum = 0.0


def failed(ex: Exchange, exc: IngressError) -> Failed:
    ex.error = exc
    # The service's own Error frame is an answer; a broken, unreadable or silent stream is its failure.
    ex.upstream_ok = isinstance(exc, UpstreamAnswered) or not isinstance(exc, UpstreamError)
    return Failed(exc)


async def stream_response(gw: Gateway, prepared: Prepared[Completion], ex: Exchange,
                          events: ResponseEvents) -> AsyncGenerator[ResponsesStreamEvent, None]:
    """A streamed Responses answer: `stream`'s chat chunks made into Responses events by `events`.
    Failed passes through: the edge asks `events` for the failure's own events (it meets failures of
    its own, such as the drain's deadline)."""
    async with aclosing(stream(gw, prepared, ex)) as chunks:
        async for event in chunks:
            if type(event) is Delta:
                for e in events.feed(event.chunk()):
                    yield e
            elif type(event) is chat_answers.ChatCompletionChunk:
                for e in events.feed(event):
                    yield e
            elif type(event) is Burst:
                for chunk in event.chunks:
                    chunk = chunk.chunk() if type(chunk) is Delta else chunk
                    assert type(chunk) is chat_answers.ChatCompletionChunk, chunk
                    for e in events.feed(chunk):
                        yield e
            elif event is OPENED:
                yield OPENED
                for e in events.opened():
                    yield e
            elif event is DONE:
                for e in events.completed(ex.usage):
                    yield e
                yield DONE
            else:
                assert isinstance(event, Signal | Failed), event
                yield event

