"""Writing answers to the client, the edge's three ways: a JSON body, an SSE stream (with the outlet the
pipeline writes through) and a relayed FlatBuffers answer; the streams within the client's write timeout."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import TypeVar

import msgspec
from aiohttp import web

from ingress import pipeline
from ingress.edge.appkeys import DRAIN, GATEWAY, PACER
from ingress.edge.headers import CACHE_HEADER, REQUEST_ID, SERVED_BY, served_by, server_timing
from ingress.edge.sse import EventWriter
from ingress.errors import IngressError, WriteTimeout
from ingress.exchange import Exchange
from ingress.sockets import chunk, clear
from ingress.wire.identifiers import CONTENT_TYPE

_json = msgspec.json.Encoder()
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def json_response(obj: object) -> web.Response:
    return web.Response(body=_json.encode(obj), content_type="application/json")


E = TypeVar("E")


class Outlet:
    """A chat stream's chunks straight from the upstream connection's callback (`pipeline.Direct`): to the
    client's transport, framed as one chunk (`sockets.chunk`), once the head is out and while
    the transport's buffer is empty. Otherwise declined: the stream's task writes them, with backpressure."""

    __slots__ = ("_render", "_transport", "framed")

    def __init__(self, request: web.Request, sse: EventWriter[pipeline.StreamEvent]) -> None:
        self.framed = False  # set by `write_stream` once the head is out and the body chunked
        self._render = sse.render
        self._transport = request.transport

    def __call__(self, event: pipeline.StreamEvent) -> bool:
        transport = self._transport
        if not self.framed or not clear(transport):
            return False
        transport.write(chunk(self._render(event)))  # into an empty buffer: the next write sees any backlog
        return True


async def write_stream(request: web.Request, exchange: Exchange, events: AsyncGenerator[E, None],
                  sse: EventWriter[E], outlet: Outlet | None = None,
                  content_type: str = "text/event-stream") -> web.StreamResponse:
    """Write the events as SSE (or as the stream `content_type` names, which `sse` renders). The response
    begins with the first event; a failure before it is answered with its status (by the middleware),
    after it in-band, and the stream ends without [DONE]. With an `outlet`, the pipeline writes what it
    can itself once the head is out."""
    pacer = request.app.get(PACER)
    if pacer is None:
        return await _write_stream(request, exchange, events, sse, outlet, content_type)
    pacer.writing(1)  # counted while it lasts: past 64 streams, a turn's budget for starts is shared among them
    try:
        return await _write_stream(request, exchange, events, sse, outlet, content_type)
    finally:
        pacer.writing(-1)


async def _write_stream(request: web.Request, exchange: Exchange, events: AsyncGenerator[E, None],
                        sse: EventWriter[E], outlet: Outlet | None, content_type: str) -> web.StreamResponse:
    drain, stall = request.app[DRAIN], request.app[GATEWAY].settings.client.write_timeout
    response: web.StreamResponse | None = None
    framed = False  # the head is out and the body is chunked: events may go straight to the transport
    async with aclosing(events):
        try:
            with drain.deadline():
                async for event in events:
                    if response is None:
                        response = await _start_sse(request, exchange, content_type)
                    if data := sse.render(event):
                        if framed:
                            await _write_event(request, response, data, stall)
                        else:
                            await _write(request, response, data, stall)  # with the head, which aiohttp holds
                            framed = response.headers.get("Transfer-Encoding") == "chunked"
                            if outlet is not None:
                                outlet.framed = framed
        except WriteTimeout as exc:  # the client stopped reading: nothing more can reach it
            exchange.error = exc
            _abort(request)
            assert response is not None
            return response
        except IngressError as exc:  # the drain's deadline, at any point of the stream
            if response is None:
                raise
            exchange.error = exc
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


async def _start_sse(request: web.Request, exchange: Exchange, content_type: str) -> web.StreamResponse:
    response = web.StreamResponse(headers={**SSE_HEADERS, "Content-Type": content_type,
                                           **(exchange.admitted.headers or {}),
                                           REQUEST_ID: exchange.request_id,
                                           "Server-Timing": server_timing(exchange)})
    if (served := served_by(exchange)) is not None:
        response.headers[SERVED_BY] = served
    if exchange.cache is not None:
        response.headers[CACHE_HEADER] = exchange.cache
    if request.app[DRAIN].draining:
        response.force_close()
    await response.prepare(request)
    return response


async def write_relayed(request: web.Request, exchange: Exchange, relay: pipeline.RelayedAnswer) -> web.StreamResponse:
    """The upstream's answer, byte for byte. A failure mid-body aborts the connection, so a binary
    client sees an incomplete body, never one that looks complete."""
    stall = request.app[GATEWAY].settings.client.write_timeout
    try:
        response = web.StreamResponse(status=relay.status, headers={
            "Content-Type": CONTENT_TYPE, **relay.headers, **(exchange.admitted.headers or {}),
            REQUEST_ID: exchange.request_id})
        if (served := served_by(exchange)) is not None:
            response.headers[SERVED_BY] = served
        await response.prepare(request)
        try:
            async with aclosing(relay.chunks):
                async for data in relay.chunks:
                    await _write(request, response, data, stall)
        except IngressError as exc:  # the pipeline has recorded the upstream's failures on the exchange
            if isinstance(exc, WriteTimeout):
                exchange.error = exc
            _abort(request)
            return response
        await response.write_eof()
        return response
    finally:
        relay.close()
