"""The whole request path on one screen: decode → encode → route → send → translate."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field

from ingress.edge.sse import DONE, SseWriter
from ingress.errors import IngressError, NotFound, UpstreamProtocolError
from ingress.oai import responses as out
from ingress.oai.codec import decode_chat_request
from ingress.oai.models import ChatCompletionRequest
from ingress.passport import Passport, RequestMeta, compute_passport
from ingress.settings import Settings
from ingress.translate.completion import decode_answer, translate_response
from ingress.translate.stream import StreamTranslator
from ingress.upstream.client import UpstreamClient
from ingress.wire.encode import encode_request, encode_request_stock
from ingress.wire.framing import FrameDecoder, FrameError
from ingress.wire.pool import BuilderPool
from ingress.wire.types import Usage


@dataclass
class Exchange:
    """What one request did, for its log line; filled in as the request moves along."""

    request_id: str
    started: float = field(default_factory=time.perf_counter)
    model: str | None = None
    upstream: str | None = None
    stream: bool = False
    first_byte: float | None = None
    usage: Usage | None = None
    error: IngressError | None = None

    def mark_first_byte(self) -> None:
        if self.first_byte is None:
            self.first_byte = time.perf_counter()


@dataclass
class Gateway:
    """What every request shares: settings, the encoder (and the stock path's builders), the upstream."""

    settings: Settings
    upstream: UpstreamClient
    served: frozenset[str] = frozenset()
    builders: BuilderPool = field(default_factory=BuilderPool)

    def encode(self, request: ChatCompletionRequest, request_id: str, passport: Passport) -> bytes:
        if self.settings.encoder == "stock":
            return encode_request_stock(self.builders, request, request_id, passport)
        return encode_request(request, request_id, passport)


def _prepare(gw: Gateway, body: bytes, meta: RequestMeta, ex: Exchange) -> tuple[ChatCompletionRequest, bytes, dict[str, str]]:
    request = decode_chat_request(body)
    ex.model, ex.stream, ex.upstream = request.model, bool(request.stream), gw.upstream.url
    if gw.served and request.model not in gw.served:
        raise NotFound(f"The model '{request.model}' does not exist.", param="model", code="model_not_found")
    passport = compute_passport(request, meta)
    encoded = gw.encode(request, ex.request_id, passport)
    return request, encoded, _hop_headers(ex.request_id, passport)


def _hop_headers(request_id: str, passport: Passport) -> dict[str, str]:
    headers = {"x-request-id": request_id}
    if passport.traceparent:
        headers["traceparent"] = passport.traceparent
    if passport.tracestate:
        headers["tracestate"] = passport.tracestate
    return headers


class ChatStream:
    """An opened upstream stream. `events()` yields SSE bytes; a failure after opening is in-band."""

    def __init__(self, stack: AsyncExitStack, reads: AsyncIterator[bytes], translator: StreamTranslator,
                 decoder: FrameDecoder, ex: Exchange) -> None:
        self._stack = stack
        self._reads = reads
        self._translator = translator
        self._decoder = decoder
        self._ex = ex
        self._sse = SseWriter()

    async def events(self) -> AsyncIterator[bytes]:
        translator, ex = self._translator, self._ex
        try:
            async for data in self._reads:
                ex.mark_first_byte()
                for frame in self._decoder.feed(data):
                    for chunk in translator.feed_frame(frame):
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
        yield DONE

    def _fail(self, exc: IngressError) -> bytes:
        self._ex.error = exc
        return self._sse.event(exc.body())

    async def aclose(self) -> None:
        await self._stack.aclose()


async def chat(gw: Gateway, body: bytes, meta: RequestMeta, ex: Exchange) -> out.ChatCompletion | ChatStream:
    """A chat completion: the whole answer, or an opened stream. Errors before the first byte raise."""
    request, encoded, headers = _prepare(gw, body, meta, ex)
    if not request.stream:
        answer = await gw.upstream.complete(encoded, headers)
        ex.mark_first_byte()
        response = decode_answer(answer, verify_answer=gw.settings.verify_answers)
        ex.usage = response.usage
        return translate_response(response)
    stack = AsyncExitStack()
    reads = await stack.enter_async_context(gw.upstream.stream(encoded, headers))
    include_usage = bool(request.stream_options and request.stream_options.include_usage)
    translator = StreamTranslator(id=f"chatcmpl-{ex.request_id}", model=request.model, created=int(time.time()),
                                  include_usage=include_usage, verify=gw.settings.verify_answers)
    return ChatStream(stack, reads, translator, FrameDecoder(gw.settings.max_frame_bytes), ex)
