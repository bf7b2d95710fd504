"""Anthropic's Messages API: `POST /v1/messages` (also with `?beta=true`, as its SDK's beta client sends
it) and `POST /v1/messages/count_tokens`. Each request is read as the chat request it amounts to, served
by whatever its route names, and answered in Anthropic's shape; errors in Anthropic's envelope (the
middleware renders them so for every path under /v1/messages)."""

from __future__ import annotations

import msgspec
from aiohttp import web

from ingress import pipeline
from ingress.anthropic.answers import TokenCount
from ingress.edge.appkeys import DRAIN, EXCHANGE, GATEWAY
from ingress.edge.bodies import read_body
from ingress.edge.endpoints import request_meta
from ingress.edge.sse import MessagesSseWriter
from ingress.edge.writers import Outlet, json_response, write_stream
from ingress.encoding.passport import RequestMeta

API = "messages"


def _meta(request: web.Request) -> RequestMeta:
    """As the OpenAI endpoints', with the key Anthropic's clients send: `x-api-key`."""
    meta = request_meta(request)
    key = request.headers.get("x-api-key")
    if meta.api_key is None and key:
        meta = msgspec.structs.replace(meta, api_key=key)
    return meta


async def messages(request: web.Request) -> web.StreamResponse:
    gateway, drain, exchange = request.app[GATEWAY], request.app[DRAIN], request[EXCHANGE]
    exchange.api = API
    body = await read_body(request, gateway.settings.max_body_bytes)
    decoded, prepared = pipeline.prepare_messages(gateway, body, _meta(request), exchange, beta=_betas(request),
                                                  version=request.headers.get("anthropic-version"))
    await pipeline.admit(gateway, prepared, exchange)
    if not decoded.stream:
        with drain.deadline():
            answer = await pipeline.answer_message(gateway, decoded, prepared, exchange)
        return json_response(answer)
    sse = MessagesSseWriter(exchange.request_id)
    outlet = Outlet(request, sse)
    events = pipeline.stream_messages(gateway, decoded, prepared, exchange, outlet)
    return await write_stream(request, exchange, events, sse, outlet)


def _betas(request: web.Request) -> list[str]:
    """The `anthropic-beta` flags: comma-separated, in one header or several."""
    return [flag.strip() for value in request.headers.getall("anthropic-beta", ()) for flag in value.split(",")
            if flag.strip()]


async def count_tokens(request: web.Request) -> web.Response:
    gateway, exchange = request.app[GATEWAY], request[EXCHANGE]
    exchange.api = "count_tokens"  # a family of its own in a usage record: a count, not a generation
    body = await read_body(request, gateway.settings.max_body_bytes)
    tokens, prepared = pipeline.prepare_count(gateway, body, _meta(request), exchange, beta=_betas(request),
                                              version=request.headers.get("anthropic-version"))
    if prepared is not None:  # the route asks its provider to count
        with request.app[DRAIN].deadline():
            tokens = await pipeline.count_by_service(gateway, prepared, exchange)
    return json_response(TokenCount(input_tokens=tokens))
