"""Per-request edge concerns: the request id and the answer's headers (headers.py), one place that renders
errors, one log line a request (its usage record, ingress/usage.py)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import msgspec
import structlog
from aiohttp import ClientConnectionResetError, web

from ingress import metrics, pipeline
from ingress.anthropic.answers import error_envelope, error_kind
from ingress.edge.appkeys import DRAIN, EXCHANGE, GATE, GATEWAY, LEDGER, PACER, PLACE
from ingress.edge.gemini import gemini_client, google_key
from ingress.edge.headers import (
    ANTHROPIC_REQUEST_ID,
    CACHE_HEADER,
    REQUEST_ID,
    SERVED_BY,
    request_id_of,
    served_by,
    server_timing,
)
from ingress.edge.overload import upstream_time
from ingress.edge.pacing import StartPacer
from ingress.edge.spans import end_trace
from ingress.errors import IngressError, InvalidRequest, NotFound, Overloaded, PayloadTooLarge
from ingress.exchange import Exchange
from ingress.gemini import answers as gemini_answers
from ingress.log import access, get_logger
from ingress.tenancy.bearer import UnknownKey
from ingress.tenancy.policy import Client
from ingress.tracing import RequestTrace, Tracer, traced
from ingress.usage import usage_record
from ingress.wire import encode
from ingress.wire.identifiers import CONTENT_TYPE
from ingress.wire.passport import valid_traceparent, valid_tracestate
from ingress.wire.types import ErrorInfo

_json = msgspec.json.Encoder()
log = get_logger("ingress.edge")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_API_PATHS = ("/v1/", "/v1beta/")  # what a key is asked for (tenancy on); /v1beta/: Google's API


def error_response(exc: IngressError, request_id: str, *, binary: bool = False, anthropic: bool = False,
                   gemini: bool = False, more: dict[str, str] | None = None) -> web.Response:
    """OpenAI's error JSON, or Anthropic's envelope for its API's clients (with the status Anthropic
    gives the error's kind), or Google's for its (with the HTTP status Google gives the error's google.rpc
    code, the wait as RetryInfo); for a FlatBuffers request the service failed (not the edge's refusal of
    the request, which stays JSON as documented), a FlatBuffers `Error` buffer with the same fields."""
    headers = {**more, REQUEST_ID: request_id} if more else {REQUEST_ID: request_id}
    if exc.retry_after is not None:
        headers["Retry-After"] = str(exc.retry_after)
    if gemini:
        _, status = gemini_answers.error_kind(exc)
        return web.Response(status=status, body=_json.encode(gemini_answers.error_envelope(exc)),
                            content_type="application/json", headers=headers)
    if anthropic:
        _, status = error_kind(exc)
        return web.Response(status=status, body=_json.encode(error_envelope(exc, request_id=request_id)),
                            content_type="application/json", headers=headers)
    if binary and not isinstance(exc, InvalidRequest):
        info = ErrorInfo(status=exc.status, type=exc.type, code=exc.code, message=exc.message, param=exc.param)
        return web.Response(status=exc.status, body=bytes(encode.encode_error(info)), content_type=CONTENT_TYPE,
                            headers=headers)
    return web.Response(status=exc.status, body=_json.encode(exc.body()), content_type="application/json",
                        headers=headers)


def _from_http(exc: web.HTTPException) -> IngressError:
    """aiohttp's own refusals (unknown path, wrong method, oversized body) in OpenAI's shape."""
    if exc.status == 413:
        return PayloadTooLarge("The request body is too large.")
    if exc.status == 404:
        return NotFound("Unknown request URL. Please check the URL and method.", code="unknown_url")
    return InvalidRequest(exc.reason, code=exc.reason.lower().replace(" ", "_"), status=exc.status)


def speaks_anthropic(request: web.Request) -> bool:
    """A client of Anthropic's API: its errors go in Anthropic's envelope."""
    path = request.path
    return path.startswith("/v1/messages") or (path.startswith("/v1/models") and "anthropic-version" in request.headers)


async def leave_at_head(request: web.Request, response: web.StreamResponse) -> None:
    """A stream gives its place under the in-flight limit back once its head is sent."""
    place = request.get(PLACE)
    if place is not None:
        place.leave(upstream_time(request[EXCHANGE], time.perf_counter()))


async def name_request(request: web.Request, response: web.StreamResponse) -> None:
    """An answer to an Anthropic client (streams and errors too) carries its request id as `request-id`
    as well, as Anthropic's own do: its SDK reads `message._request_id` and `APIStatusError.request_id`
    from that header alone."""
    exchange = request.get(EXCHANGE)
    if exchange is not None and speaks_anthropic(request):
        response.headers[ANTHROPIC_REQUEST_ID] = exchange.request_id


def _draining(request: web.Request) -> bool:
    """Whether a drain has started (while draining, every response closes its connection)."""
    drain = request.app.get(DRAIN)
    return drain is not None and drain.draining


@web.middleware
async def edge_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    exchange = Exchange(request_id_of(request.headers.get(REQUEST_ID)))
    request[EXCHANGE] = exchange
    gateway = request.app.get(GATEWAY)
    if gateway is not None and gateway.tracer is not None and traced(request.path) is not None:
        exchange.trace = begin_trace(gateway.tracer, request)
    structlog.contextvars.bind_contextvars(request_id=exchange.request_id)
    status, outcome = 500, "error"
    end_wait = 0.0  # the end's wait for a turn (start pacing): not the request's time
    metrics.IN_FLIGHT.inc()  # direct, not folded: a gauge of now
    drain = request.app.get(DRAIN)
    if drain is not None:
        drain.enter()
    try:
        try:
            gate = request.app.get(GATE)
            if gate is not None and request.path.startswith(_API_PATHS):
                request[PLACE] = await gate.enter()  # or Overloaded, after waiting at most [overload] max_wait_ms
            pacer = request.app.get(PACER)
            if pacer is not None and await pacer.start():
                exchange.paced = time.perf_counter()
            tenancy = gateway.tenancy if gateway is not None else None
            if tenancy is not None and request.path.startswith(_API_PATHS):
                google = gemini_client(request)
                presented = google_key(request.headers, request.query) if google else None
                client: Client = "google" if google else "anthropic" if speaks_anthropic(request) else "openai"
                try:
                    exchange.principal = tenancy.policy.authenticate(request.headers, presented, client=client)
                except UnknownKey as unknown:  # a JWT of a key not fetched yet: its issuer's keys, again
                    exchange.principal = await tenancy.refreshed(request.headers, unknown, presented)
            response = await handler(request)
            if pacer is not None and response.prepared:  # a stream's answer is out: the rest waits its turn
                end_wait = await _end_turn(pacer)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            raise _from_http(exc) from None
        status = response.status
        outcome = "stream_error" if exchange.failure is not None else "ok"
        if not response.prepared:  # streams set theirs before the head is sent
            response.headers.setdefault(REQUEST_ID, exchange.request_id)
            if (served := served_by(exchange)) is not None:
                response.headers[SERVED_BY] = served
            if exchange.admitted.headers:
                response.headers.update(exchange.admitted.headers)
            if exchange.cache is not None:
                response.headers[CACHE_HEADER] = exchange.cache
            if _draining(request):
                response.force_close()
            response.headers["Server-Timing"] = server_timing(exchange, time.perf_counter())
        return response
    except IngressError as exc:
        exchange.error = exc
        response = error_response(exc, exchange.request_id, binary=exchange.binary, anthropic=speaks_anthropic(request),
                                  gemini=gemini_client(request), more=exchange.admitted.headers)
        if exchange.cache is not None:
            response.headers[CACHE_HEADER] = exchange.cache
        status = response.status
        response.headers["Server-Timing"] = server_timing(exchange, time.perf_counter())
        if _draining(request):
            response.force_close()
        return response
    except asyncio.CancelledError:
        status, outcome = 499, "client_closed"
        raise
    except ClientConnectionResetError:
        # The client went away and a write of its answer failed before aiohttp cancelled the handler (its
        # reset and the stream's next event in one turn of the loop): gone, as above, not the server's error.
        # The response returned is never sent: aiohttp finds the transport closed and lets it go.
        status, outcome = 499, "client_closed"
        return web.Response(status=499)
    except Exception:
        log.exception("unhandled", path=request.path)
        internal = IngressError("The server had an error while processing your request.")
        exchange.error = internal
        return error_response(internal, exchange.request_id, anthropic=speaks_anthropic(request),
                              gemini=gemini_client(request))
    finally:
        settling = time.perf_counter() - end_wait
        if (place := request.get(PLACE)) is not None:
            place.leave(upstream_time(exchange, settling))
        pipeline.settle(exchange)
        now = time.perf_counter() - end_wait
        record = _usage(request, exchange, status, outcome, now)
        if exchange.trace is not None:
            exchange.trace.child("settle", settling, now)
            end_trace(exchange, request.path, status, outcome, record)
        metrics.IN_FLIGHT.dec()
        if drain is not None:
            drain.leave()
        # Counted and logged before aiohttp writes the response: an answer a client has seen is in
        # the metrics and the access log (folded within a second, written at the loop's next turn,
        # and at a drain's end) unless this worker is killed with SIGKILL the moment after.
        _record(request, exchange, status, now)
        failure = exchange.failure
        access(failure.log_level if failure is not None else logging.INFO, record, exchange.request_id)
        if (ledger := request.app.get(LEDGER)) is not None:  # the same record, added up in memory
            ledger.add(record)
        structlog.contextvars.unbind_contextvars("request_id")
        _drop_tracebacks(failure)


async def _end_turn(pacer: StartPacer) -> float:
    """Wait for a turn for what is left of a request whose answer is out (a stream's, or a relayed one's):
    its metrics and access line. Many streams end in the same few turns, and this way the chunks of those
    still going are written between their ends (bench/notes/chunks.md, "512 streams: starts and ends paced
    by the streams waiting"). The time waited. A cancellation here (the client left once it had the whole
    answer, or the server stops) does not change the request's outcome: nothing is left to await, and the
    request is recorded as it ended."""
    began = time.perf_counter()
    try:
        await pacer.start(end=True)
    except asyncio.CancelledError:
        if (task := asyncio.current_task()) is not None:
            task.uncancel()
    return time.perf_counter() - began


def begin_trace(tracer: Tracer, request: web.Request) -> RequestTrace | None:
    """The request's trace, parented on the caller's span when it sent a well-formed traceparent (None: not
    sampled)."""
    headers = request.headers
    traceparent = valid_traceparent(headers.get("traceparent"))
    return tracer.begin(traceparent, valid_tracestate(headers.get("tracestate")) if traceparent else None)


def _drop_tracebacks(error: BaseException | None) -> None:
    """Forget the frames an error (and every error it was raised from or during) passed through.

    The Exchange keeps its error for the log line, and the error's traceback keeps the frames it was
    raised through, which hold the Exchange again and the request body: a reference cycle that only
    the cyclic collector frees, rarely under gctune's thresholds. Refused large bodies piled up."""
    pending: list[BaseException | None] = [error]
    seen: set[int] = set()
    while pending:
        exc = pending.pop()
        if exc is None or id(exc) in seen:
            continue
        seen.add(id(exc))
        exc.__traceback__ = None
        pending += (exc.__cause__, exc.__context__)


def _record(request: web.Request, exchange: Exchange, status: int, now: float) -> None:
    """The request's metrics, all from its Exchange."""
    resource = request.match_info.route.resource
    route = resource.canonical if resource is not None else "unmatched"
    routed, attempts, answer = exchange.routed, exchange.attempts, exchange.answer
    model = routed.metric_model
    child = metrics.child
    child(metrics.REQUESTS, route, model, str(status)).inc()
    total = now - exchange.started
    child(metrics.DURATION, route).observe(total)
    upstream = 0.0
    if attempts.sent is not None and (answer.done or attempts.head) is not None:
        upstream = upstream_time(exchange, now)
        child(metrics.UPSTREAM, exchange.group or "unknown").observe(upstream)
    child(metrics.OVERHEAD_S, route).observe(max(total - upstream, 0.0))
    if routed.stream and answer.first_byte is not None:
        child(metrics.TTFT, model).observe(answer.first_byte - exchange.started)
    if attempts.choice is not None:
        group = exchange.group or "unknown"
        child(metrics.AFFINITY_CHOICES, group, attempts.choice.way.value).inc()
        child(metrics.AFFINITY_MATCHED, group).observe(attempts.choice.matched)
    if (usage := answer.usage) is not None:
        if exchange.group is not None:
            child(metrics.GROUP_TOKENS, exchange.group, "prompt").inc(usage.prompt_tokens)
            child(metrics.GROUP_TOKENS, exchange.group, "cached").inc(usage.cached_tokens)
        child(metrics.TOKENS, model, "prompt").inc(usage.prompt_tokens)
        if routed.prompt_tokens is not None:
            child(metrics.PROMPT_COUNTED, model).inc(routed.prompt_tokens)
        child(metrics.TOKENS, model, "completion").inc(usage.completion_tokens)
    if routed.variant is not None:
        child(metrics.SPLITS, routed.route or "", routed.variant).inc()
    for hint in routed.hints:
        child(metrics.HINTS_NOT_SENT, hint).inc()
    if isinstance(exchange.failure, (InvalidRequest, Overloaded)):  # refused by the edge itself
        child(metrics.REJECTIONS, exchange.failure.code or str(exchange.failure.status)).inc()


def _usage(request: web.Request, exchange: Exchange, status: int, outcome: str, now: float) -> dict[str, object]:
    """The request's usage record: its access line, and its span's `usage` event when it is traced."""
    gateway = request.app.get(GATEWAY)
    policy = gateway.tenancy.policy if gateway is not None and gateway.tenancy is not None else None  # the prices
    return usage_record(exchange, request.method, request.path, status, outcome, now, policy)
