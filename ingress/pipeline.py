"""The whole request path on one screen: decode → route → encode → send → translate.

    prepare(): JSON body → msgspec (validated) → route → passport → FlatBuffers   (no I/O)
    chat(): the prepared request → upstream → JSON or SSE
    relay(): FlatBuffers body → verify → route (fields read in place) → the same bytes → upstream → bytes
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import TypeVar

from ingress import metrics
from ingress.edge.sse import DONE, HEARTBEAT, SseWriter
from ingress.errors import (
    IngressError,
    InvalidRequest,
    NotFound,
    UpstreamAnswered,
    UpstreamConnectFailed,
    UpstreamProtocolError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from ingress.oai import responses as out
from ingress.oai.codec import decode_chat_request
from ingress.oai.models import ChatCompletionRequest
from ingress.passport import Passport, RequestMeta, compute_passport
from ingress.routing.budget import RetryBudget
from ingress.routing.table import Match, RouteTable
from ingress.settings import Settings, Timeouts
from ingress.translate.completion import decode_answer, translate_response
from ingress.translate.stream import StreamTranslator
from ingress.upstream import http1
from ingress.upstream.pool import GroupPool, Lease
from ingress.wire import verify
from ingress.wire.decode import PROVIDER_NAMES, WireError, read_request
from ingress.wire.encode import encode_request, encode_request_stock
from ingress.wire.framing import FrameDecoder, FrameError
from ingress.wire.pool import BuilderPool
from ingress.wire.types import Response, Usage

T = TypeVar("T")


@dataclass
class Exchange:
    """What one request did, for its log line; filled in as the request moves along."""

    request_id: str
    started: float = field(default_factory=time.perf_counter)
    model: str | None = None
    metric_model: str = "other"  # a name some route serves, for bounded metric labels
    group: str | None = None
    upstream: str | None = None
    stream: bool = False
    binary: bool = False
    attempts: int = 0
    decoded: float | None = None  # perf_counter marks of the stages, for Server-Timing and metrics
    encoded: float | None = None
    upstream_sent: float | None = None
    upstream_head: float | None = None
    upstream_done: float | None = None
    first_byte: float | None = None
    heartbeat: float | None = None  # the route's, once routed
    usage: Usage | None = None
    error: IngressError | None = None

    def mark_first_byte(self) -> None:
        if self.first_byte is None:
            self.first_byte = time.perf_counter()


@dataclass
class Gateway:
    """What every request shares: settings, routes, upstream groups, the retry budget, the encoder."""

    settings: Settings
    routes: RouteTable
    groups: dict[str, GroupPool]
    budget: RetryBudget
    builders: BuilderPool = field(default_factory=BuilderPool)

    def encode(self, request: ChatCompletionRequest, request_id: str, passport: Passport, match: Match) -> bytes | bytearray:
        route = match.route
        if self.settings.encoder == "stock":
            return encode_request_stock(self.builders, request, request_id, passport, route.provider,
                                        match.upstream_model)
        return encode_request(request, request_id, passport, route.provider, match.upstream_model)

    def route(self, model: str, ex: Exchange) -> Match:
        match = self.routes.match(model)
        if match is None:
            raise NotFound(f"The model '{model}' does not exist.", param="model", code="model_not_found")
        r = match.route
        ex.metric_model = model if r.model is not None else (r.prefix or r.glob or "other")
        ex.group = r.group
        return match

    def timeouts(self, match: Match) -> Timeouts:
        return match.route.timeouts or self.settings.timeouts


def _hop_headers(request_id: str, passport: Passport | None) -> dict[str, str]:
    headers = {"x-request-id": request_id}
    if passport is not None and passport.traceparent:
        headers["traceparent"] = passport.traceparent
        if passport.tracestate:
            headers["tracestate"] = passport.tracestate
    return headers


# --- sending: endpoint choice, retries, fallback -----------------------------------------------


async def send(gw: Gateway, match: Match, ex: Exchange, attempt: Callable[[Lease], Awaitable[T]]) -> tuple[T, Lease]:
    """Run `attempt` on an endpoint of the route's group, and on others when it is safe to.

    Retried, within the retry budget: a connection that could not be made (nothing was sent).
    Then the fallback group, if any: when the group is unavailable or fails before the first byte.
    Never retried: timeouts, answers (even errors) and anything once a stream has started.
    The lease comes back held: the caller releases it when the exchange ends.
    """
    loop = asyncio.get_running_loop()
    gw.budget.deposit(loop.time())
    groups = [match.route.group] + ([match.route.fallback] if match.route.fallback else [])
    last: IngressError | None = None
    for name in groups:
        group = gw.groups[name]
        tried: set[str] = set()
        while group.has_candidates(frozenset(tried)):
            if ex.attempts and not gw.budget.withdraw(loop.time()):
                raise last or UpstreamUnavailable("The model service is unavailable.")
            if ex.attempts:
                metrics.RETRIES.labels(name).inc()
            ex.attempts += 1
            ex.group = name
            lease = await group.acquire(frozenset(tried))
            tried.add(lease.state.url)
            ex.upstream = lease.state.url
            if ex.upstream_sent is None:
                ex.upstream_sent = time.perf_counter()  # retries count as upstream time, not overhead
            try:
                try:
                    result = await attempt(lease)
                finally:
                    ex.upstream_head = time.perf_counter()
                return result, lease
            except UpstreamConnectFailed as exc:
                lease.release(False)
                last = exc
                if len(tried) > gw.settings.retry.attempts:
                    break
            except (UpstreamUnavailable, UpstreamProtocolError, UpstreamTimeout) as exc:
                lease.release(False)
                last = exc
                if isinstance(exc, UpstreamTimeout) or exc.after_head:
                    raise  # the generation may have run: sending it elsewhere could run it twice
                break  # the endpoint took the request: no retry in this group; the fallback may serve it
            except UpstreamAnswered as exc:
                lease.release(exc.status < 500)
                if exc.status < 500:
                    raise
                last = exc
                break
            except BaseException:
                lease.release(None)
                raise
    assert last is not None
    raise last


# --- JSON: OpenAI chat completions ------------------------------------------------------------


@dataclass
class Prepared:
    """A chat request decoded, routed and encoded: everything the internal hop needs."""

    request: ChatCompletionRequest
    match: Match
    encoded: bytes | bytearray
    headers: dict[str, str]
    timeouts: Timeouts


def prepare(gw: Gateway, body: bytes, meta: RequestMeta, ex: Exchange) -> Prepared:
    """The CPU-only half of a chat completion: decode, route, passport, encode. Bad input raises here."""
    request = decode_chat_request(body)
    ex.decoded = time.perf_counter()
    ex.model, ex.stream = request.model, bool(request.stream)
    match = gw.route(request.model, ex)
    passport = compute_passport(request, meta)
    encoded = gw.encode(request, ex.request_id, passport, match)
    ex.encoded = time.perf_counter()
    timeouts = gw.timeouts(match)
    ex.heartbeat = timeouts.heartbeat
    return Prepared(request, match, encoded, _hop_headers(ex.request_id, passport), timeouts)


async def chat(gw: Gateway, prepared: Prepared, ex: Exchange) -> out.ChatCompletion | ChatStream:
    """A prepared chat completion: the whole answer, or an opened stream. Errors before the first byte raise."""
    request, match, encoded = prepared.request, prepared.match, prepared.encoded
    headers, timeouts = prepared.headers, prepared.timeouts

    if not request.stream:
        async def complete(lease: Lease) -> Response:
            answer = await lease.client.complete(encoded, headers, timeouts)
            try:
                return decode_answer(answer, verify_answer=gw.settings.verify_answers)  # an Error answer raises
            except UpstreamProtocolError as exc:
                exc.after_head = True
                raise

        response, lease = await send(gw, match, ex, complete)
        lease.release(True)
        ex.mark_first_byte()
        ex.usage = response.usage
        return translate_response(response)

    async def open_stream(lease: Lease) -> tuple[AsyncExitStack, AsyncIterator[bytes]]:
        stack = AsyncExitStack()
        try:
            reads = await stack.enter_async_context(lease.client.stream(encoded, headers, timeouts))
        except BaseException:
            await stack.aclose()
            raise
        return stack, reads

    (stack, reads), lease = await send(gw, match, ex, open_stream)
    include_usage = bool(request.stream_options and request.stream_options.include_usage)
    translator = StreamTranslator(id=f"chatcmpl-{ex.request_id}", model=request.model, created=int(time.time()),
                                  include_usage=include_usage, verify=gw.settings.verify_answers)
    return ChatStream(stack, reads, lease, translator, FrameDecoder(gw.settings.max_frame_bytes), ex,
                      timeouts.heartbeat)


class ChatStream:
    """An opened upstream stream. `events()` yields SSE bytes; a failure after opening is in-band.

    Until the first frame, an SSE comment is sent every `heartbeat` seconds so that load balancers
    in front of the edge do not close a stream that is waiting for its first token.
    """

    def __init__(self, stack: AsyncExitStack, reads: AsyncIterator[bytes], lease: Lease,
                 translator: StreamTranslator, decoder: FrameDecoder, ex: Exchange, heartbeat: float) -> None:
        self._stack = stack
        self._reads = reads
        self._lease = lease
        self._translator = translator
        self._decoder = decoder
        self._ex = ex
        self._heartbeat = heartbeat
        self._sse = SseWriter()
        self._ok: bool | None = None

    async def _first_read(self) -> AsyncIterator[bytes | None]:
        """The upstream reads, with None for every heartbeat interval spent waiting for the first one."""
        pending = asyncio.ensure_future(anext(self._reads))  # awaited or cancelled below
        try:
            while not (await asyncio.wait({pending}, timeout=self._heartbeat))[0]:
                yield None
            first = pending.result()
        except StopAsyncIteration:
            return
        finally:
            pending.cancel()
        yield first
        async for data in self._reads:
            yield data

    async def events(self) -> AsyncIterator[bytes]:
        translator, ex = self._translator, self._ex
        gaps = metrics.INTER_CHUNK.labels(ex.metric_model)
        last: float | None = None
        try:
            async for data in self._first_read():
                if data is None:
                    yield HEARTBEAT
                    continue
                ex.mark_first_byte()
                for frame in self._decoder.feed(data):
                    for chunk in translator.feed_frame(frame):
                        now = time.perf_counter()
                        if last is not None:
                            gaps.observe(now - last)
                        last = now
                        yield self._sse.event(chunk)
                    if translator.done:
                        break  # complete: whatever follows the final frame is not read, however it arrived
                if translator.done:
                    break
            else:
                self._decoder.finish()
                translator.finish()
        except FrameError as exc:
            yield self._fail(UpstreamProtocolError(f"The model service sent a malformed stream: {exc}."))
            return
        except IngressError as exc:
            yield self._fail(exc)
            return
        finally:
            ex.usage = translator.usage
            ex.upstream_done = time.perf_counter()
        self._ok = True
        yield DONE

    def _fail(self, exc: IngressError) -> bytes:
        self._ex.error = exc
        self._ok = not isinstance(exc, (UpstreamUnavailable, UpstreamProtocolError, UpstreamTimeout))
        return self._sse.event(exc.body())

    async def aclose(self) -> None:
        try:
            await self._stack.aclose()
        finally:
            self._lease.release(self._ok)


# --- FlatBuffers: binary ingress for internal clients -----------------------------------------


RELAYED_HEADERS = ("Content-Type", "Retry-After")


@dataclass
class Relay:
    """An upstream answer to relay unmodified: status, headers, and the body as it arrives.
    `close(ok)` ends the exchange; ok=False counts a failure against the endpoint."""

    status: int
    headers: dict[str, str]
    chunks: AsyncIterator[bytes]
    close: Callable[[bool], Awaitable[None]]


async def relay(gw: Gateway, body: bytes, ex: Exchange) -> Relay:
    """Verify a CompletionRequest, route on fields read in place, forward the exact bytes."""
    ex.binary = True
    try:
        verify.verify_request(body, max_size=gw.settings.max_body_bytes)
        view = read_request(body)
        model = (view.ModelName() or b"").decode()
        provider = view.Provider()
        ex.model, ex.stream = model, view.Stream()
    except WireError as exc:
        raise InvalidRequest(f"The FlatBuffers request is invalid: {exc}.", code="invalid_flatbuffer") from None
    if not model:
        raise InvalidRequest("The FlatBuffers request names no model.", param="model_name")
    if not 0 <= provider < len(PROVIDER_NAMES):
        raise InvalidRequest(f"Unknown provider {provider}.", param="provider")
    match = gw.route(model, ex)
    headers, timeouts = _hop_headers(ex.request_id, None), gw.timeouts(match)

    async def forward(lease: Lease) -> http1.Response:
        response = await lease.client.relay(body, headers, timeouts)
        if response.status >= 500:
            response.close()  # its connection is kept only if the whole error already arrived
            raise UpstreamAnswered(response.status, "", None, "The model service failed.", None)
        return response

    response, lease = await send(gw, match, ex, forward)
    ex.mark_first_byte()

    async def chunks() -> AsyncIterator[bytes]:
        while data := await response.read(timeouts.idle):
            yield data

    async def close(ok: bool) -> None:
        ex.upstream_done = time.perf_counter()
        response.close()
        lease.release(ok)

    headers_out = {name: value for name in RELAYED_HEADERS if (value := response.headers.get(name.lower())) is not None}
    return Relay(response.status, headers_out, chunks(), close)
