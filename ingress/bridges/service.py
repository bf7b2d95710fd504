"""A bridge as a service: our contract in (`POST /v1/complete`, `/v1/embed`), a dialect's engine API out.

    buffer ─ verify ─ dialect.build (.embed) ─▶ engine request ─ http1 ─▶ engine
                                                                          │
    CompletionResponse (EmbeddingResponse) ◀─ call.answer ◀─ whole body ◀─┤
    CompletionChunk frames ◀─ decoder.feed / finish ◀────────── reads ◀───┘
    Error buffer ◀─ dialect.error (a refusal) / EngineFailed / a broken hop

The provider hop is the edge's own HTTP/1.1 client (`upstream/http1.py`, HTTPS included). Every failure
becomes an `Error` in our contract: alone with its status before the answer began, or as the stream's
last frame after, so the edge's retry, fallback and in-band rules apply to a bridge as to any service.
A client that goes away (the edge cancelling) ends the engine request with it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypeGuard

import msgspec
from aiohttp import web

from ingress import wire
from ingress.bridges.dialect import Dialect, EmbeddingCall, EngineCall, EngineFailed, Target, Unsupported
from ingress.errors import IngressError, UpstreamConnectFailed
from ingress.log import get_logger
from ingress.settings import Timeouts
from ingress.sockets import chunk, clear, name_server
from ingress.tracing import Tracer, provider_answered, provider_span
from ingress.upstream.http1 import Response
from ingress.upstream.pool import ConnectionPool
from ingress.wire import identifiers
from ingress.wire.decode import WireError
from ingress.wire.verify import verify_embedding_request

if TYPE_CHECKING:
    from ingress.tracing import Span

MAX_REQUEST = 64 << 20  # a CompletionRequest buffer: the edge's own body limit is far below
MAX_ANSWER = 64 << 20  # an engine's whole answer, or its error body (read only to describe the error)
MAX_ERROR_BODY = 64 << 10

log = get_logger("ingress.bridge")


@dataclass
class Bridge:
    dialect: Dialect
    target: Target
    timeouts: Timeouts
    pool: ConnectionPool
    tracer: Tracer | None = None  # its spans continue the edge's traces (the passport's context)


BRIDGE = web.AppKey("bridge", Bridge)


def _error(info: wire.ErrorInfo, retry_after: str | None = None) -> web.Response:
    """An Error buffer with its status, and a Retry-After for the edge to pass on (a client told to wait
    by the provider waits as long): the dialect's reading of it, else the engine's own whole seconds."""
    if info.retry_after is not None:
        retry_after = str(info.retry_after)
    headers = {"Retry-After": retry_after} if retry_after and retry_after.isascii() and retry_after.isdigit() \
        else None
    return web.Response(status=info.status, body=wire.write_error(info), content_type=identifiers.CONTENT_TYPE,
                        headers=headers)


def _hop_failure(exc: BaseException, waiting_for: str) -> wire.ErrorInfo:
    """The engine could not be reached, or broke, or was too slow: our contract's 502 / 504."""
    if isinstance(exc, TimeoutError):
        return wire.ErrorInfo(status=504, type="server_error", code="upstream_timeout",
                              message=f"The engine did not {waiting_for} in time.")
    if isinstance(exc, UpstreamConnectFailed):
        return wire.ErrorInfo(status=502, type="server_error", code="upstream_unavailable",
                              message="The engine is unavailable.")
    detail = exc.message if isinstance(exc, IngressError) else "the connection failed"
    return wire.ErrorInfo(status=502, type="server_error", code="upstream_unavailable",
                          message=f"The engine's answer broke: {detail.rstrip('.')}.")


async def _read_all(response: Response, idle: float, limit: int) -> bytes:
    parts: list[bytes] = []
    size = 0
    while data := await response.read(idle):
        size += len(data)
        if size > limit:
            raise EngineFailed(wire.ErrorInfo(status=502, type="server_error", code="upstream_protocol_error",
                                              message="The engine's answer is too large."))
        parts.append(data)
    return b"".join(parts)


def _client_key(request: web.Request) -> str | None:
    auth = request.headers.get("Authorization", "")
    key = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
    return key or None


async def complete(request: web.Request) -> web.StreamResponse:
    """A CompletionRequest answered by the engine: whole or streamed, as it asks."""
    return await _exchange(request, request.app[BRIDGE].dialect.build)


async def count_tokens(request: web.Request) -> web.StreamResponse:
    """A CompletionRequest's prompt counted by the engine (`COUNT_PATH`), for a dialect that can ask."""
    dialect = request.app[BRIDGE].dialect
    count = getattr(dialect, "count", None)
    if count is None:
        await request.read()
        return _error(wire.ErrorInfo(status=400, type="invalid_request_error", code="unsupported_endpoint",
                                     message=f"The {dialect.name} bridge does not count tokens."))
    return await _exchange(request, count)


async def embed(request: web.Request) -> web.StreamResponse:
    """An EmbeddingRequest answered by the engine (`EMBED_PATH`), for a dialect whose engines embed; a clear
    refusal in our contract from one whose API has no embeddings (Anthropic's), rather than a bare 404."""
    dialect = request.app[BRIDGE].dialect
    embed = getattr(dialect, "embed", None)
    if embed is None:
        await request.read()
        return _error(wire.ErrorInfo(status=400, type="invalid_request_error", code="unsupported_endpoint",
                                     message=f"Embeddings are not served through the {dialect.name} bridge (its "
                                             "API has none); route the embedding model to a service that answers "
                                             "them, such as an OpenAI-compatible engine through the openai bridge."))
    return await _exchange(request, embed, verify_embedding_request, "embeddings")


async def _exchange(request: web.Request, build: Callable[[bytes, Target], EngineCall | EmbeddingCall],
                    verify: Callable[..., None] = wire.verify_request, operation: str = "chat") -> web.StreamResponse:
    bridge = request.app[BRIDGE]
    body = await request.read()
    target = bridge.target
    if (key := _client_key(request)) is not None:  # a route forwarding its callers' own keys
        target = replace(target, api_key=key)
    clients_key = key is not None
    try:
        verify(body, max_size=MAX_REQUEST)
        call = build(body, target)
    except WireError as exc:
        return _error(wire.ErrorInfo(status=400, type="invalid_request_error", code="invalid_flatbuffer",
                                     message=f"The FlatBuffers request is invalid: {exc}."))
    except msgspec.DecodeError as exc:  # a verified buffer whose JSON field (tool_choice_json...) is not
        return _error(wire.ErrorInfo(status=400, type="invalid_request_error", code="invalid_json",
                                     message=f"A JSON field of the FlatBuffers request is invalid: {exc}."))
    except Unsupported as exc:
        return _error(exc.info())
    headers = dict(call.request.headers)
    if (request_id := request.headers.get("x-request-id")) is not None:
        headers["x-request-id"] = request_id  # the edge's id, for the engine's logs
    if bridge.tracer is None:
        return await _call(request, bridge, call, headers, clients_key)
    span = provider_span(bridge.tracer, body, bridge.dialect.name, bridge.target.url, headers, operation)
    if span is None:
        return await _call(request, bridge, call, headers, clients_key)
    try:
        return await _call(request, bridge, call, headers, clients_key, span)
    except BaseException as exc:  # the edge went away (cancelled), or a fault
        span.set_attribute("error.type", "cancelled" if isinstance(exc, asyncio.CancelledError) else type(exc).__name__)
        raise
    finally:
        span.end()


async def _call(request: web.Request, bridge: Bridge, call: EngineCall | EmbeddingCall, headers: dict[str, str],
                clients_key: bool, span: Span | None = None) -> web.StreamResponse:
    """The engine's request, and its answer in our contract. `clients_key`: the request carries its
    client's own key, so that a refusal of it is the client's (a 401), not the bridge's (a 502)."""
    t = bridge.timeouts
    loop = asyncio.get_running_loop()
    try:
        response = await bridge.pool.request(call.request.method, call.request.path, headers, call.request.body,
                                             t.connect, loop.time() + t.first_byte)
    except (IngressError, OSError, ValueError) as exc:  # ValueError: a header the engine request cannot hold
        log.warning("engine unreachable", target=bridge.target.url, error=type(exc).__name__)
        info = _hop_failure(exc, "answer")
        if span is not None:
            span.fail(info.code or "upstream_unavailable", info.message)
        return _error(info)
    if span is not None:
        provider_answered(span, response.status, response.headers)
    try:
        if response.status != 200:
            try:
                error_body = await _read_all(response, t.idle, MAX_ERROR_BODY)
            except (IngressError, OSError, EngineFailed):
                error_body = b""
            info = bridge.dialect.error(response.status, response.headers, error_body, clients_key=clients_key)
            log.info("engine refused", status=response.status, code=info.code)
            if span is not None:
                span.fail(info.code or info.type or str(info.status), info.message)
            return _error(info, response.headers.get("retry-after"))
        if not _streamed(call):
            return await _whole(call, response, t)
        return await _stream(request, call, response, t)
    finally:
        response.close()  # also on cancellation: the engine's request ends with the edge's


def _streamed(call: EngineCall | EmbeddingCall) -> TypeGuard[EngineCall]:
    """A request the engine answers as a stream: a completion's (an embeddings request never streams)."""
    return call.request.stream


async def _whole(call: EngineCall | EmbeddingCall, response: Response, t: Timeouts) -> web.Response:
    """A whole answer: a CompletionResponse, or an EmbeddingResponse."""
    try:
        answer = call.answer(await _read_all(response, t.idle, MAX_ANSWER))
    except EngineFailed as exc:
        return _error(exc.info)
    except (IngressError, OSError) as exc:
        return _error(_hop_failure(exc, "finish its answer"))
    body = wire.write_embeddings(answer) if isinstance(answer, wire.Embeddings) else wire.write_response(answer)
    return web.Response(body=body, content_type=identifiers.CONTENT_TYPE)


async def _stream(request: web.Request, call: EngineCall, response: Response, t: Timeouts) -> web.StreamResponse:
    """Frames as the engine's events arrive. The head waits for the first frame that says something (a
    chunk with only the role, as a stream's first one, is held back with it): a failure before then keeps
    its status and Retry-After, so the edge can still retry, fall back or answer it as an HTTP error; after,
    it is the stream's last frame, an Error. Once the head is out, each read is translated in the engine
    connection's callback, and its frames written there while the edge's socket buffer is empty."""
    decoder = call.stream()
    transport = request.transport
    out: web.StreamResponse | None = None
    held: list[wire.Chunk] = []  # chunks with nothing to say yet, while the head waits
    framed = False  # the head is out and the body chunked: frames may go straight to the transport
    sent_done = False

    def consume(data: bytes) -> tuple[list[wire.Chunk], Exception | None] | None:
        """A read in the engine connection's callback: None when its frames went out there (or it had none)."""
        try:
            chunks = decoder.feed(data)
            if not chunks:
                return None
            if chunks[-1].done or not clear(transport):
                return chunks, None
            transport.write(chunk(b"".join(wire.write_chunk(c) for c in chunks)))
            return None
        except Exception as exc:  # EngineFailed, or a fault: raised in the handler's task
            return [], exc

    try:
        while True:
            if framed:
                got = await response.pump(consume, t.idle, None)
                ended = got is None
                chunks, error = got or ([], None)
                if error is not None:
                    raise error
                if ended:
                    chunks = decoder.finish()
            else:
                data = await response.read(t.idle)
                ended = not data
                chunks = decoder.feed(data) if data else decoder.finish()
            if chunks and out is None:
                if not any(map(_says_something, chunks)):
                    held += chunks
                    continue
                chunks, held = held + chunks, []
                out = web.StreamResponse(headers={"Content-Type": identifiers.STREAM_CONTENT_TYPE})
                await out.prepare(request)
            if chunks:
                assert out is not None
                await out.write(b"".join(wire.write_chunk(c) for c in chunks))
                sent_done = chunks[-1].done
                framed = out.headers.get("Transfer-Encoding") == "chunked"
            if ended or sent_done:
                break
    except EngineFailed as exc:
        info, before = exc.info, held + exc.chunks
    except (IngressError, OSError) as exc:
        info, before = _hop_failure(exc, "send the next part of its answer"), held
    else:
        assert out is not None  # a finished decoder has sent its done chunk
        await out.write_eof()
        return out
    if out is None and not any(map(_says_something, before)):
        return _error(info)
    if out is None:
        out = web.StreamResponse(headers={"Content-Type": identifiers.STREAM_CONTENT_TYPE})
        await out.prepare(request)
    await out.write(b"".join(wire.write_chunk(c) for c in before) + wire.write_error(info, framed=True))
    await out.write_eof()
    return out


def _says_something(chunk: wire.Chunk) -> bool:
    """More than a role (an engine's first chunk, Anthropic's message_start): text, a call, the end..."""
    return bool(chunk.content or chunk.reasoning or chunk.refusal or chunk.tool_calls or chunk.finish_reason
                or chunk.signature or chunk.redacted_thinking or chunk.usage is not None or chunk.done
                or chunk.logprobs or chunk.refusal_logprobs)


async def healthz(request: web.Request) -> web.Response:
    """The bridge serves; whether its engine does is for the edge's checks of answers to find."""
    return web.json_response({"status": "ok", "dialect": request.app[BRIDGE].dialect.name})


def create_bridge_app(dialect: Dialect, target: Target, timeouts: Timeouts | None = None,
                      keepalive: float = 4.0, tracer: Tracer | None = None) -> web.Application:
    """`tracer`: the spans of the calls to the engine, each the child of the span that sent the request."""
    app = web.Application(client_max_size=MAX_REQUEST)
    app[BRIDGE] = Bridge(dialect, target, timeouts or Timeouts(), ConnectionPool(target.url, keepalive), tracer)
    app.router.add_post(identifiers.COMPLETE_PATH, complete)
    app.router.add_post(identifiers.EMBED_PATH, embed)
    app.router.add_post(identifiers.COUNT_PATH, count_tokens)
    app.router.add_get("/healthz", healthz)
    name_server(app)

    async def close_pool(app: web.Application) -> None:
        await app[BRIDGE].pool.close()

    app.on_cleanup.append(close_pool)
    return app
