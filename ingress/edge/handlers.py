"""HTTP handlers: read the request, call the pipeline, write JSON or SSE. No business logic here."""

from __future__ import annotations

import asyncio
import time
import zlib
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import TypeVar

import msgspec
from aiohttp import web

from ingress import metrics, pipeline
from ingress.edge.appkeys import DRAIN, EXCHANGE, GATEWAY, STARTED
from ingress.edge.middleware import REQUEST_ID, server_timing
from ingress.edge.sse import EventWriter, ResponsesSseWriter, SseWriter
from ingress.errors import (
    IngressError,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    RequestTimeout,
    UnsupportedEncoding,
    WriteTimeout,
)
from ingress.exchange import Exchange
from ingress.oai import chat_answers
from ingress.sockets import chunk, clear
from ingress.translate.responses import ResponseEvents
from ingress.wire.identifiers import CONTENT_TYPE
from ingress.wire.passport import RequestMeta, valid_traceparent, valid_tracestate

_json = msgspec.json.Encoder()
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def _json_response(obj: object) -> web.Response:
    return web.Response(body=_json.encode(obj), content_type="application/json")


def _bounded_int(headers: web.BaseRequest, name: str, low: int, high: int) -> int:
    raw = headers.headers.get(name)
    if raw is None:
        return 0
    if not (raw.isascii() and raw.isdigit()) or not low <= int(raw) <= high:
        raise InvalidRequest(f"Header '{name}' must be an integer from {low} to {high}.", param=name)
    return int(raw)


def request_meta(request: web.BaseRequest) -> RequestMeta:
    """What the passport needs from the headers; the API key is only hashed, never forwarded."""
    h = request.headers
    auth = h.get("Authorization", "")
    return RequestMeta(
        api_key=auth[7:].strip() or None if auth[:7].lower() == "bearer " else None,
        tenant_id=h.get("OpenAI-Project") or h.get("OpenAI-Organization"),
        priority=_bounded_int(request, "x-ingress-priority", 0, 127),
        timeout_ms=_bounded_int(request, "x-ingress-timeout-ms", 1, 86_400_000),
        traceparent=valid_traceparent(h.get("traceparent")),
        tracestate=valid_tracestate(h.get("tracestate")) if valid_traceparent(h.get("traceparent")) else None,
    )


_GZIP, _ZLIB, _RAW_DEFLATE = 16 + zlib.MAX_WBITS, zlib.MAX_WBITS, -zlib.MAX_WBITS
_CODINGS = {"gzip": _GZIP, "x-gzip": _GZIP, "deflate": _ZLIB}
_GZIP_MEMBERS = 16  # concatenated members are valid gzip; thousands of them are only work for us


def _decode_body(body: bytes | bytearray, encoding: str, limit: int) -> bytes:
    """`body` decoded from its Content-Encoding, never past `limit` bytes (a bomb is a 413, not memory)."""
    codings = [c.strip().lower() for c in encoding.split(",") if c.strip().lower() not in ("", "identity")]
    if not codings:
        return bytes(body)
    if len(codings) > 1 or codings[0] not in _CODINGS:
        plain = encoding.isascii() and len(encoding) <= 40 and all(c.isalnum() or c in " ,._-" for c in encoding)
        named = f"'{encoding}'" if plain else "this encoding"
        raise UnsupportedEncoding(f"Content-Encoding {named} is not supported; send the body as gzip, deflate "
                                  "or unencoded.")
    wbits = _CODINGS[codings[0]]
    if wbits == _ZLIB and not (len(body) >= 2 and body[0] & 0x0F == 8 and int.from_bytes(body[:2]) % 31 == 0):
        wbits = _RAW_DEFLATE  # "deflate" without its zlib header, as some clients send it
    decoded, data = bytearray(), body
    try:
        for _ in range(_GZIP_MEMBERS):
            decoder = zlib.decompressobj(wbits)
            decoded += decoder.decompress(data, limit + 1 - len(decoded))  # max_length >= 1: 0 means no limit
            if len(decoded) > limit:
                raise PayloadTooLarge(f"The request body is larger than {limit} bytes once decoded.")
            if not decoder.eof:
                raise zlib.error("the compressed body ends early")
            data = decoder.unused_data
            if not data:
                return bytes(decoded)
            if wbits != _GZIP:
                break
    except zlib.error:
        pass
    raise InvalidRequest(f"The request body is not valid {codings[0]} data.", code="invalid_encoding")


async def _read_body(request: web.Request, limit: int) -> bytes:
    """The body, decoded from its Content-Encoding (aiohttp's own decoding is off: its errors are 500s and
    its refusals plain text); a 408 if the client stops sending it for `client.body_timeout`."""
    if (request.content_length or 0) > limit:
        raise PayloadTooLarge(f"The request body is larger than {limit} bytes.")
    content = request.content
    try:
        # Most bodies arrive whole with their head: taken at once, with no timer and no wait.
        body = content.read_nowait() if content.is_eof() else await _arriving(request, limit)
    except web.RequestPayloadError:  # a bad chunk size, a body cut short: not the server's error
        raise InvalidRequest("The request body could not be read as sent.", code="invalid_body") from None
    if len(body) > limit:
        raise PayloadTooLarge(f"The request body is larger than {limit} bytes.")
    encoding = request.headers.get("Content-Encoding")
    return bytes(body) if encoding is None else _decode_body(body, encoding, limit)


async def _arriving(request: web.Request, limit: int) -> bytearray:
    """A body still arriving, read as it comes, each part within `client.body_timeout` of the last."""
    idle = request.app[GATEWAY].settings.client.body_timeout
    body = bytearray()
    try:
        while True:
            async with asyncio.timeout(idle):
                chunk = await request.content.readany()
            if not chunk:
                return body
            body += chunk
            if len(body) > limit:
                return body
    except TimeoutError:
        raise RequestTimeout(f"No part of the request body arrived for {idle:g} s.") from None


async def chat_completions(request: web.Request) -> web.StreamResponse:
    gw, ex = request.app[GATEWAY], request[EXCHANGE]
    body = await _read_body(request, gw.settings.max_body_bytes)
    if request.content_type == CONTENT_TYPE:
        return await _write_relayed(request, ex, await pipeline.relay(gw, body, ex))
    prepared = pipeline.prepare(gw, body, request_meta(request), ex)
    await pipeline.admit(gw, prepared, ex)
    return await _answer(request, ex, prepared)


async def completions(request: web.Request) -> web.StreamResponse:
    """Legacy text completions: the same path as chat, answered as text_completion objects."""
    gw, ex = request.app[GATEWAY], request[EXCHANGE]
    body = await _read_body(request, gw.settings.max_body_bytes)
    prepared = pipeline.prepare_text(gw, body, request_meta(request), ex)
    await pipeline.admit(gw, prepared, ex)
    return await _answer(request, ex, prepared)


async def _answer(request: web.Request, ex: Exchange,
                  prepared: pipeline.Prepared[pipeline.Completion]) -> web.StreamResponse:
    gw, drain = request.app[GATEWAY], request.app[DRAIN]
    if not prepared.request.stream:
        with drain.deadline():
            completion = await pipeline.complete(gw, prepared, ex)
        return _json_response(completion)
    sse = SseWriter()
    outlet = Outlet(request, sse)
    return await _stream(request, ex, pipeline.stream(gw, prepared, ex, outlet), sse, outlet)


async def embeddings(request: web.Request) -> web.Response:
    gw, drain, ex = request.app[GATEWAY], request.app[DRAIN], request[EXCHANGE]
    body = await _read_body(request, gw.settings.max_body_bytes)
    prepared = pipeline.prepare_embeddings(gw, body, request_meta(request), ex)
    await pipeline.admit(gw, prepared, ex)
    with drain.deadline():
        answer = await pipeline.embed(gw, prepared, ex)
    return _json_response(answer)


async def responses(request: web.Request) -> web.StreamResponse:
    """The Responses API, stateless: carried as the chat request it amounts to, answered in its own shape."""
    gw, drain, ex = request.app[GATEWAY], request.app[DRAIN], request[EXCHANGE]
    body = await _read_body(request, gw.settings.max_body_bytes)
    call, prepared = pipeline.prepare_responses(gw, body, request_meta(request), ex)
    await pipeline.admit(gw, prepared, ex)
    if not call.request.stream:
        with drain.deadline():
            answer = await pipeline.respond(gw, call, prepared, ex)
        return _json_response(answer)
    events = ResponseEvents(call, request_id=ex.request_id, created_at=int(time.time()))
    return await _stream(request, ex, pipeline.stream_response(gw, prepared, ex, events), ResponsesSseWriter(events))


async def stored_response(request: web.Request) -> web.Response:
    """Retrieving, deleting, cancelling a response or listing its input: the edge keeps none."""
    response_id = request.match_info["response_id"]
    shown = response_id[:64] if response_id.isascii() and response_id.isprintable() else "..."
    raise NotFound(f"Response with id '{shown}' not found: this edge keeps no responses (store is not "
                   "supported; every request is answered statelessly).", param="response_id", code="response_not_found")


E = TypeVar("E")


class Outlet:
    """A chat stream's chunks straight from the upstream connection's callback (`pipeline.Direct`): to the
    client's transport, framed as one chunk (`sockets.chunk`), once the head is out and while
    the transport's buffer is empty. Otherwise declined: the stream's task writes them, with backpressure."""

    __slots__ = ("_render", "_transport", "framed")

    def __init__(self, request: web.Request, sse: SseWriter) -> None:
        self.framed = False  # set by `_stream` once the head is out and the body chunked
        self._render = sse.render
        self._transport = request.transport

    def __call__(self, event: pipeline.StreamEvent) -> bool:
        transport = self._transport
        if not self.framed or not clear(transport):
            return False
        transport.write(chunk(self._render(event)))  # into an empty buffer: the next write sees any backlog
        return True


async def _stream(request: web.Request, ex: Exchange, events: AsyncGenerator[E, None],
                  sse: EventWriter[E], outlet: Outlet | None = None) -> web.StreamResponse:
    """Write the events as SSE. The response begins with the first event; a failure before it is
    answered with its status (by the middleware), after it in-band, and the stream ends without [DONE].
    With an `outlet`, the pipeline writes what it can itself once the head is out."""
    drain, stall = request.app[DRAIN], request.app[GATEWAY].settings.client.write_timeout
    response: web.StreamResponse | None = None
    framed = False  # the head is out and the body is chunked: events may go straight to the transport
    async with aclosing(events):
        try:
            with drain.deadline():
                async for event in events:
                    if response is None:
                        response = await _start_sse(request, ex)
                    if data := sse.render(event):
                        if framed:
                            await _write_event(request, response, data, stall)
                        else:
                            await _write(request, response, data, stall)  # with the head, which aiohttp holds
                            framed = response.headers.get("Transfer-Encoding") == "chunked"
                            if outlet is not None:
                                outlet.framed = framed
        except WriteTimeout as exc:  # the client stopped reading: nothing more can reach it
            ex.error = exc
            _abort(request)
            assert response is not None
            return response
        except IngressError as exc:  # the drain's deadline, at any point of the stream
            if response is None:
                raise
            ex.error = exc
            await response.write(sse.error(exc))
    assert response is not None  # a stream yields until DONE or Failed
    if drain.draining:
        response.force_close()  # no keep-alive connection left for a draining edge to race with
    await response.write_eof()
    return response


_SMALL_WRITE = 16 * 1024  # below the transports' 64 KiB high-water mark: into an empty buffer, it cannot wait


async def _write(request: web.Request, response: web.StreamResponse, data: bytes, stall: float) -> None:
    """One write of an answer. A client that stops reading makes writes wait (backpressure); after
    `stall` seconds of that, WriteTimeout. A timer only where a write could wait: most go straight
    into an empty socket buffer, and a timer each would cost more than the write."""
    transport = request.transport
    if transport is None or (not transport.get_write_buffer_size() and len(data) < _SMALL_WRITE):
        await response.write(data)
        return
    try:
        async with asyncio.timeout(stall):
            await response.write(data)
    except TimeoutError:
        raise WriteTimeout(f"The client read nothing of its answer for {stall:g} s.") from None


async def _write_event(request: web.Request, response: web.StreamResponse, data: bytes, stall: float) -> None:
    """One event of a chunked SSE answer whose head is out: into an empty socket buffer it goes straight
    to the transport, framed as a chunk here as aiohttp frames it (its StreamResponse.write and writer
    cost more than the write itself); anything else through `_write`, with its backpressure."""
    transport = request.transport
    if len(data) < _SMALL_WRITE and clear(transport):
        transport.write(chunk(data))
        return
    await _write(request, response, data, stall)


def _abort(request: web.Request) -> None:
    if request.transport is not None:
        request.transport.abort()


async def _start_sse(request: web.Request, ex: Exchange) -> web.StreamResponse:
    response = web.StreamResponse(headers={**SSE_HEADERS, **(ex.limit_headers or {}), REQUEST_ID: ex.request_id,
                                           "Server-Timing": server_timing(ex)})
    if request.app[DRAIN].draining:
        response.force_close()
    await response.prepare(request)
    return response


async def _write_relayed(request: web.Request, ex: Exchange, relay: pipeline.RelayedAnswer) -> web.StreamResponse:
    """The upstream's answer, byte for byte. A failure mid-body aborts the connection, so a binary
    client sees an incomplete body, never one that looks complete."""
    stall = request.app[GATEWAY].settings.client.write_timeout
    try:
        response = web.StreamResponse(status=relay.status, headers={
            "Content-Type": CONTENT_TYPE, **relay.headers, **(ex.limit_headers or {}), REQUEST_ID: ex.request_id})
        await response.prepare(request)
        try:
            async with aclosing(relay.chunks):
                async for data in relay.chunks:
                    await _write(request, response, data, stall)
        except IngressError as exc:  # the pipeline has recorded the upstream's failures on the exchange
            if isinstance(exc, WriteTimeout):
                ex.error = exc
            _abort(request)
            return response
        await response.write_eof()
        return response
    finally:
        relay.close()


def _models(request: web.Request) -> list[str]:
    """The models listed: those the routes name, and of them those the request's key may use."""
    principal = request[EXCHANGE].principal
    models = request.app[GATEWAY].routes.listed_models()
    return models if principal is None else [m for m in models if principal.allows(m)]


async def list_models(request: web.Request) -> web.Response:
    created = request.app[STARTED]
    return _json_response(chat_answers.ModelList(data=[chat_answers.ModelOut(id=m, created=created, owned_by="ingress")
                                                       for m in _models(request)]))


async def get_model(request: web.Request) -> web.Response:
    model = request.match_info["model"]
    if model not in _models(request):
        raise NotFound(f"The model '{model}' does not exist or you do not have access to it.", param="model",
                       code="model_not_found")
    return _json_response(chat_answers.ModelOut(id=model, created=request.app[STARTED], owned_by="ingress"))


async def healthz(request: web.Request) -> web.Response:
    """Liveness: the process serves requests."""
    return _json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """Readiness: not draining, and some upstream endpoint may be chosen (not ejected, checks passing)."""
    gw, drain = request.app[GATEWAY], request.app[DRAIN]
    now = time.monotonic()
    reachable = {name: sum(s.healthy(now) for s in g.states) for name, g in gw.groups.items()}
    ready = not drain.draining and any(reachable.values())
    body = {"status": "ready" if ready else "not ready", "draining": drain.draining, "healthy_endpoints": reachable}
    response = _json_response(body)
    response.set_status(200 if ready else 503)
    return response


async def metrics_endpoint(request: web.Request) -> web.Response:
    gw = request.app[GATEWAY]
    now = time.monotonic()
    for name, group in gw.groups.items():
        for state in group.states:
            metrics.ENDPOINT_HEALTHY.labels(name, state.url).set(1 if state.healthy(now) else 0)
    body, content_type = metrics.render()
    response = web.Response(body=body)
    response.headers["Content-Type"] = content_type
    return response


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/embeddings", embeddings)
    app.router.add_post("/v1/responses", responses)
    app.router.add_route("*", "/v1/responses/{response_id}", stored_response)
    app.router.add_route("*", "/v1/responses/{response_id}/{action:cancel|input_items}", stored_response)
    app.router.add_get("/v1/models", list_models)
    app.router.add_get("/v1/models/{model:.+}", get_model)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_endpoint)
