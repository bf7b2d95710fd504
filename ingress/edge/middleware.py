"""Per-request edge concerns: the request id, one place that renders errors, one log line a request."""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Awaitable, Callable

import msgspec
import structlog
from aiohttp import web

from ingress.errors import IngressError, InvalidRequest, NotFound, PayloadTooLarge
from ingress.log import get_logger
from ingress.pipeline import Exchange

EXCHANGE = web.RequestKey("exchange", Exchange)
REQUEST_ID = "x-request-id"
_VALID_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
_json = msgspec.json.Encoder()
log = get_logger("ingress.edge")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def request_id_of(header: str | None) -> str:
    """Keep a caller's well-formed request id; otherwise make one."""
    return header if header is not None and _VALID_ID.match(header) else uuid.uuid4().hex


def error_response(exc: IngressError, request_id: str) -> web.Response:
    headers = {REQUEST_ID: request_id}
    if exc.retry_after is not None:
        headers["Retry-After"] = str(exc.retry_after)
    return web.Response(status=exc.status, body=_json.encode(exc.body()), content_type="application/json",
                        headers=headers)


def _from_http(exc: web.HTTPException) -> IngressError:
    """aiohttp's own refusals (unknown path, wrong method, oversized body) in OpenAI's shape."""
    if exc.status == 413:
        return PayloadTooLarge("The request body is too large.")
    if exc.status == 404:
        return NotFound("Unknown request URL. Please check the URL and method.", code="unknown_url")
    error = InvalidRequest(exc.reason, code=exc.reason.lower().replace(" ", "_"))
    error.status = exc.status
    return error


@web.middleware
async def edge_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    ex = Exchange(request_id_of(request.headers.get(REQUEST_ID)))
    request[EXCHANGE] = ex
    structlog.contextvars.bind_contextvars(request_id=ex.request_id)
    status, outcome = 500, "error"
    try:
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            raise _from_http(exc) from None
        status = response.status
        outcome = "stream_error" if ex.error is not None else "ok"
        if not response.prepared:  # streams set theirs before the head is sent
            response.headers.setdefault(REQUEST_ID, ex.request_id)
        return response
    except IngressError as exc:
        ex.error = exc
        status = exc.status
        return error_response(exc, ex.request_id)
    except asyncio.CancelledError:
        status, outcome = 499, "client_closed"
        raise
    except Exception:
        log.exception("unhandled", path=request.path)
        internal = IngressError("The server had an error while processing your request.")
        ex.error = internal
        return error_response(internal, ex.request_id)
    finally:
        _log_exchange(request, ex, status, outcome)
        structlog.contextvars.unbind_contextvars("request_id")


def _log_exchange(request: web.Request, ex: Exchange, status: int, outcome: str) -> None:
    now = time.perf_counter()
    fields: dict[str, object] = {
        "method": request.method, "path": request.path, "status": status, "outcome": outcome,
        "duration_ms": round((now - ex.started) * 1000, 3),
    }
    if ex.model is not None:
        fields.update(model=ex.model, stream=ex.stream, upstream=ex.upstream)
    if ex.first_byte is not None:
        fields["ttfb_ms"] = round((ex.first_byte - ex.started) * 1000, 3)
    if ex.usage is not None:
        fields.update(prompt_tokens=ex.usage.prompt_tokens, completion_tokens=ex.usage.completion_tokens)
    if ex.error is not None:
        fields.update(error_code=ex.error.code, error_type=ex.error.type)
        if ex.error.__cause__ is not None:  # what went wrong inside, for operators only
            fields["error_detail"] = f"{type(ex.error.__cause__).__name__}: {ex.error.__cause__}"[:300]
    level = ex.error.log_level if ex.error is not None else 20
    log.log(level, "request", **fields)
