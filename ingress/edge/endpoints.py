"""The API's endpoints: each reads its request, calls the pipeline and hands the answer to a writer."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from contextlib import aclosing
from datetime import UTC, datetime

import msgspec
from aiohttp import web

from ingress import pipeline
from ingress.anthropic.models import ModelInfo, model_page
from ingress.cache import directive
from ingress.edge import resume
from ingress.edge.appkeys import DRAIN, EXCHANGE, GATEWAY, STARTED, TASKS
from ingress.edge.bodies import read_body
from ingress.edge.sse import ResponsesSseWriter, SseWriter, StoredEventsWriter
from ingress.edge.writers import Outlet, json_response, write_relayed, write_stream
from ingress.encoding.passport import RequestMeta
from ingress.errors import InvalidRequest, NotFound
from ingress.exchange import Exchange
from ingress.oai import chat_answers
from ingress.oai.responses_answers import ResponseObject
from ingress.pipeline.stored import Keeping
from ingress.routing.chain import route_name
from ingress.state import ResponseStore
from ingress.state.record import (
    PageError,
    deleted,
    encode_page,
    encode_record,
    input_items,
    known_id,
    page,
    page_query,
    response_json,
    state,
)
from ingress.translate.responses_events import ResponseEvents
from ingress.wire.identifiers import CONTENT_TYPE
from ingress.wire.passport import new_traceparent, valid_traceparent, valid_tracestate

_response = msgspec.json.Decoder(ResponseObject)


def _bounded_int(headers: web.BaseRequest, name: str, low: int, high: int) -> int:
    raw = headers.headers.get(name)
    if raw is None:
        return 0
    if not (raw.isascii() and raw.isdigit()) or not low <= int(raw) <= high:
        raise InvalidRequest(f"Header '{name}' must be an integer from {low} to {high}.", param=name)
    return int(raw)


def affinity_headers(request: web.Request) -> tuple[tuple[str, str], ...]:
    """The values of the headers routes key cache affinity by (lower-cased names), as sent."""
    names = request.app[GATEWAY].affinity_headers
    h = request.headers
    return tuple((name, value) for name in names if (value := h.get(name)) is not None) if names else ()


def request_meta(request: web.Request) -> RequestMeta:
    """What the passport needs from the headers; the API key is only hashed, never forwarded. A traced
    request's passport carries its own span's context (ingress/tracing/), the caller's tracestate kept."""
    h = request.headers
    auth = h.get("Authorization", "")
    exchange = request[EXCHANGE]
    exchange.cache_control = directive(h.get("Cache-Control"))
    trace = exchange.trace
    traceparent: str | None
    if trace is not None:
        traceparent, tracestate = trace.traceparent, trace.tracestate
    else:
        traceparent = valid_traceparent(h.get("traceparent"))
        tracestate = valid_tracestate(h.get("tracestate")) if traceparent else None
        if traceparent is None and request.app[GATEWAY].tracer is not None:  # traced, but not this request
            traceparent = new_traceparent(sampled=False)
    return RequestMeta(
        api_key=auth[7:].strip() or None if auth[:7].lower() == "bearer " else None,
        tenant_id=h.get("OpenAI-Project") or h.get("OpenAI-Organization"),
        priority=_bounded_int(request, "x-ingress-priority", 0, 127),
        timeout_ms=_bounded_int(request, "x-ingress-timeout-ms", 1, 86_400_000),
        traceparent=traceparent,
        tracestate=tracestate,
        affinity_headers=affinity_headers(request),
    )


async def chat_completions(request: web.Request) -> web.StreamResponse:
    gateway, exchange = request.app[GATEWAY], request[EXCHANGE]
    exchange.api = "chat"  # a FlatBuffers request's too: relayed, it is a chat request
    body = await read_body(request, gateway.settings.max_body_bytes)
    if request.content_type == CONTENT_TYPE:
        exchange.binary = True
        relayed = await pipeline.relay(gateway, body, exchange, affinity_headers(request))
        return await write_relayed(request, exchange, relayed)
    prepared = pipeline.prepare(gateway, body, request_meta(request), exchange)
    await pipeline.admit(gateway, prepared, exchange)
    return await _answer(request, exchange, prepared)


async def completions(request: web.Request) -> web.StreamResponse:
    """Legacy text completions: the same path as chat, answered as text_completion objects."""
    gateway, exchange = request.app[GATEWAY], request[EXCHANGE]
    exchange.api = "completions"
    body = await read_body(request, gateway.settings.max_body_bytes)
    prepared = pipeline.prepare_text(gateway, body, request_meta(request), exchange)
    await pipeline.admit(gateway, prepared, exchange)
    return await _answer(request, exchange, prepared)


async def _answer(request: web.Request, exchange: Exchange,
                  prepared: pipeline.Prepared[pipeline.Completion]) -> web.StreamResponse:
    gateway, drain = request.app[GATEWAY], request.app[DRAIN]
    if not prepared.request.stream:
        with drain.deadline():
            completion = await pipeline.complete(gateway, prepared, exchange)
        return json_response(completion)
    sse = SseWriter()
    outlet = Outlet(request, sse)
    return await write_stream(request, exchange, pipeline.stream(gateway, prepared, exchange, outlet), sse, outlet)


async def embeddings(request: web.Request) -> web.Response:
    gateway, drain, exchange = request.app[GATEWAY], request.app[DRAIN], request[EXCHANGE]
    exchange.api = "embeddings"
    body = await read_body(request, gateway.settings.max_body_bytes)
    prepared = pipeline.prepare_embeddings(gateway, body, request_meta(request), exchange)
    await pipeline.admit(gateway, prepared, exchange)
    with drain.deadline():
        answer = await pipeline.embed(gateway, prepared, exchange)
    return json_response(answer)


async def responses(request: web.Request) -> web.StreamResponse:
    """The Responses API: carried as the chat request it amounts to (with the conversation of the response
    it continues, or the conversation's items, when it names one), answered in its own shape, stored
    unless `store: false`, and its turn added to its conversation."""
    gateway, drain, exchange = request.app[GATEWAY], request.app[DRAIN], request[EXCHANGE]
    exchange.api = "responses"
    body = await read_body(request, gateway.settings.max_body_bytes)
    recalled = await pipeline.recall(gateway, exchange, body)
    call, prepared = pipeline.prepare_responses(gateway, body, request_meta(request), exchange, recalled.prior,
                                                recalled.keep, recalled.conversation)
    kept = pipeline.kept_input(recalled, call)
    await pipeline.admit(gateway, prepared, exchange)
    if not (call.request.stream or call.request.background):
        with drain.deadline():
            answer = await pipeline.respond(gateway, call, prepared, exchange, recalled.rid)
            await pipeline.keep(recalled, kept, answer)
        return json_response(answer)

    async def keep(final: ResponseObject) -> None:
        await pipeline.keep(recalled, kept, final)

    events = ResponseEvents(call, request_id=recalled.rid, created_at=int(time.time()),
                            seal=pipeline.sealing_for(gateway, prepared, exchange))
    live = pipeline.stream_response(gateway, prepared, exchange, events, keep if kept is not None else None)
    if call.request.background:
        return await _background(request, recalled, kept, events, live, bool(call.request.stream))
    if recalled.store is not None and kept is not None and kept.record is not None:  # stored: resumable
        live = resume.detach(request.app[TASKS], drain, recalled.store, recalled.owner, events, live)
    return await write_stream(request, exchange, live, ResponsesSseWriter(events))


async def _background(request: web.Request, recalled: pipeline.Recalled, kept: Keeping | None,
                      events: ResponseEvents, live: AsyncGenerator[pipeline.ResponsesStreamEvent, None],
                      streamed: bool) -> web.StreamResponse:
    """`background: true`: kept `queued` at once, then run by a task of the edge's (streamed inside, its
    events logged as any kept stream's), `in_progress`, then `completed`, `failed` or `cancelled`. Streamed,
    the client reads it as it runs; else it is answered the queued response at once (`Connection: close`,
    so that its next call does not wait behind this one), and the request waits for the task, without the
    client, so that its usage is recorded and charged whole. Either way, the drain's deadline ends it."""
    store, owner = recalled.store, recalled.owner
    assert store is not None and kept is not None and kept.record is not None  # kept_input: background is kept
    record = kept.record

    async def status(obj: ResponseObject) -> None:
        await store.put(owner, obj.id, encode_record(obj, record))

    async def asked() -> bool:
        return await store.cancel_asked(owner, events.id)

    queued = events.snapshot("queued")
    await status(queued)
    live = resume.detach(request.app[TASKS], request.app[DRAIN], store, owner, events, live,
                         resume.Background(status, asked))
    if streamed:
        return await write_stream(request, request[EXCHANGE], live, ResponsesSseWriter(events))
    answered = json_response(queued)
    answered.force_close()
    await answered.prepare(request)
    await answered.write_eof()
    async with aclosing(live):
        async for _ in live:
            pass
    return answered


async def stored_response(request: web.Request) -> web.StreamResponse:
    """A stored response: retrieved (GET), its stream read again (GET ?stream=true), deleted (DELETE), its
    input items listed (GET .../input_items); cancelling is for background responses, which this edge does
    not run. Another owner's response is not found, exactly as an unknown id is (ingress/state); an
    admin-scope key (`scope = "admin"`) reads, never deletes or cancels, those of every key of its tenant."""
    gateway, exchange = request.app[GATEWAY], request[EXCHANGE]
    exchange.api = "responses"
    response_id = request.match_info["response_id"]
    action = request.match_info.get("action")
    allowed = ["GET", "DELETE"] if action is None else ["POST"] if action == "cancel" else ["GET"]
    if request.method not in allowed:
        raise web.HTTPMethodNotAllowed(request.method, allowed)
    store = gateway.responses
    if store is None:
        raise NotFound(f"Response with id '{_shown(response_id)}' not found: this edge keeps no responses "
                       "([responses] backend is off).", param="response_id", code="response_not_found")
    owner = store.owner(exchange.principal)
    if action is None and request.method == "DELETE":
        if not (known_id(response_id) and await store.delete(owner, response_id)):
            raise _not_found(response_id)
        return web.Response(body=deleted(response_id), content_type="application/json")
    # read: the caller's own, or, for an admin-scope key, its tenant's; cancelled: its own only
    owners = (owner,) if action == "cancel" else store.readers(exchange.principal, gateway.tenancy)
    if action is None and request.query.get("stream", "false") != "false":
        return await _resume(request, store, owners, response_id)
    found = await store.first(owners, lambda o: store.get(o, response_id)) if known_id(response_id) else None
    if found is None:
        raise _not_found(response_id)
    owner, record = found
    if action == "cancel":
        return await _cancel(store, owner, response_id, record)
    if action is None:
        return web.Response(body=response_json(record), content_type="application/json")
    try:
        listed = page(input_items(record), page_query(dict(request.query)))
    except PageError as exc:
        raise InvalidRequest(str(exc), param=exc.param) from None
    return web.Response(body=encode_page(listed), content_type="application/json")


async def _resume(request: web.Request, store: ResponseStore, owners: tuple[str, ...],
                  response_id: str) -> web.StreamResponse:
    """A stored response's stream from `starting_after` + 1 on (from its first event without it), following
    it while it still runs (ingress/edge/resume.py); a response kept whole, not streamed, is refused."""
    raw = request.query.get("starting_after", "-1")
    if not (raw == "-1" or (raw.isascii() and raw.isdigit() and len(raw) < 10)):
        raise InvalidRequest("'starting_after' must be a non-negative integer: an event's sequence_number.",
                             param="starting_after")
    start = int(raw) + 1
    found = await store.first(owners, lambda o: store.read_events(o, response_id, max(start - 1, 0))) \
        if known_id(response_id) else None
    if found is None:
        if known_id(response_id) and await store.first(owners, lambda o: store.get(o, response_id)) is not None:
            raise InvalidRequest("This response was not streamed: it has no events to stream again; retrieve it "
                                 "whole.", param="stream", code="response_not_streamed")
        raise _not_found(response_id)
    owner, got = found
    ended = False
    if start > 0:  # the event the client has is read too: whether the stream ended there
        ended = bool(got) and resume.event_type(got[0]) in resume.TERMINAL
        got = got[1:]
    return await write_stream(request, request[EXCHANGE], resume.replay(store, owner, response_id, start, got, ended),
                              StoredEventsWriter(start))


async def _cancel(store: ResponseStore, owner: str, response_id: str, record: bytes) -> web.Response:
    """A background response still running is marked to be cancelled, on whichever replica runs it (it
    stops within CANCEL_POLL seconds of its next event, and is kept `cancelled`): answered as cancelled."""
    status, background = state(record)
    if not background:
        raise InvalidRequest("Only a background response can be cancelled; this one is not.",
                             param="response_id", code="response_not_background")
    if status not in ("queued", "in_progress", "cancelled"):
        raise InvalidRequest(f"This response has ended ({status}): it cannot be cancelled.", param="response_id",
                             code="response_not_cancellable")
    if status != "cancelled":
        await store.ask_cancel(owner, response_id)
    obj = _response.decode(response_json(record))
    return json_response(msgspec.structs.replace(obj, status="cancelled"))


def _shown(response_id: str) -> str:
    return response_id[:64] if response_id.isascii() and response_id.isprintable() else "..."


def _not_found(response_id: str) -> NotFound:
    """The one answer for an id that is unknown, expired, deleted or another owner's."""
    return NotFound(f"Response with id '{_shown(response_id)}' not found.", param="response_id",
                    code="response_not_found")


async def responses_socket(request: web.Request) -> web.Response:
    """`GET /v1/responses`: a WebSocket upgrade (Codex CLI's Responses transport, tried first) is answered
    426, on which its clients go on over HTTP at once (any other refusal, they retry for seconds first);
    any other GET, 405 as for every path that takes only POST."""
    request[EXCHANGE].api = "responses"
    if request.headers.get("Upgrade", "").lower() == "websocket":
        raise InvalidRequest("This edge serves the Responses API over HTTP: send POST /v1/responses (server-sent "
                             "events when streamed).", code="websocket_not_supported", status=426)
    raise web.HTTPMethodNotAllowed("GET", ["POST"])


def listed_models(request: web.Request) -> list[str]:
    """The models listed: those the routes name, and of them those the request's key may use, on a route its
    tenant allows."""
    principal = request[EXCHANGE].principal
    routes = request.app[GATEWAY].routes
    models = routes.listed_models()
    return models if principal is None else [m for m in models if principal.allows(m) and (
        (match := routes.match(m)) is not None and principal.reaches(route_name(match.route)))]


def _anthropic(request: web.Request) -> bool:
    """Asked by an Anthropic client (its SDK sends `anthropic-version` on every request)."""
    return "anthropic-version" in request.headers


def _created_at(request: web.Request) -> str:
    return datetime.fromtimestamp(request.app[STARTED], UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def list_models(request: web.Request) -> web.Response:
    """The models, in OpenAI's list shape, or Anthropic's (one page) for an Anthropic client."""
    request[EXCHANGE].api = "models"
    created = request.app[STARTED]
    if _anthropic(request):
        return json_response(model_page(listed_models(request), _created_at(request)))
    return json_response(chat_answers.ModelList(data=[chat_answers.ModelOut(id=m, created=created, owned_by="ingress")
                                                       for m in listed_models(request)]))


async def get_model(request: web.Request) -> web.Response:
    request[EXCHANGE].api = "models"
    model = request.match_info["model"]
    if model not in listed_models(request):
        raise NotFound(f"The model '{model}' does not exist or you do not have access to it.", param="model",
                       code="model_not_found")
    if _anthropic(request):
        return json_response(ModelInfo(id=model, display_name=model, created_at=_created_at(request)))
    return json_response(chat_answers.ModelOut(id=model, created=request.app[STARTED], owned_by="ingress"))
