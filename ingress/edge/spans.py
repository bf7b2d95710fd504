"""A traced request's server span, ended from its Exchange (ingress/tracing/ makes the spans)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ingress.exchange import Exchange
from ingress.tracing import error_type, traced


def end_trace(exchange: Exchange, path: str, status: int, outcome: str, record: Mapping[str, object]) -> None:
    """The server span's name, attributes and status from how the request ended: a server's failure
    (a 5xx, a stream failed, the client gone) sets the error status; a refusal is only named. The
    request's usage record (ingress/usage.py, its access line's fields) is on the span: as its attributes,
    and the fields they do not carry as its `usage` event."""
    trace = exchange.trace
    if trace is None:
        return
    attributes = attributes_of(exchange, path)
    attributes["http.response.status_code"] = status
    operation = attributes["gen_ai.operation.name"]
    error: tuple[str, str | None] | None = None
    if outcome == "client_closed":
        error = ("client_closed", "the client went away before the answer ended")
    elif (failure := exchange.failure) is not None:
        failed = status >= 500 or outcome == "stream_error"
        error = (error_type(failure), failure.message if failed else None)
    usage = {k: v for k, v in record.items() if v is not None and k not in _ON_THE_SPAN}
    model = exchange.routed.model
    trace.finish(f"{operation} {model}" if model else operation, attributes, usage,
                 first_token=exchange.answer.first_byte, attempt_error=exchange.failure if outcome != "ok" else None,
                 attempt_end=exchange.answer.done or exchange.attempts.head, error=error)


# The usage record's fields the server span's attributes already carry (gen_ai.*, http.*, ingress.*): its
# `usage` event holds the rest (the outcome, times, cache and reasoning tokens, the cost, hints not sent).
_ON_THE_SPAN = frozenset({"method", "path", "status", "model", "stream", "upstream", "route", "served_model",
                          "tenant", "key_id", "api", "limit", "prompt_tokens", "completion_tokens", "error_code",
                          "error_type"})


def attributes_of(exchange: Exchange, path: str) -> dict[str, Any]:
    """The server span's attributes that are known once the request has ended, from its Exchange and the
    request's path."""
    operation, route = traced(path) or ("chat", path)
    attributes: dict[str, Any] = {"gen_ai.operation.name": operation, "http.route": route,
                                  "ingress.request_id": exchange.request_id,
                                  "ingress.attempts": exchange.attempts.count}
    routed, answer, principal = exchange.routed, exchange.answer, exchange.principal
    if exchange.api is not None:
        attributes["ingress.api"] = exchange.api
    if routed.model is not None:
        attributes["gen_ai.request.model"] = routed.model
    if answer.served_model is not None:
        attributes["gen_ai.response.model"] = answer.served_model
    if routed.route is not None:
        attributes["ingress.route"] = routed.route
    if exchange.attempts.upstream is not None:
        attributes.update({"ingress.endpoint": exchange.attempts.upstream, "ingress.group": exchange.group or ""})
    if principal is not None:
        attributes["ingress.tenant"] = principal.tenant_name
        attributes["ingress.key_id" if principal.key is not None else "ingress.subject"] = principal.id
    if exchange.admitted.outcome is not None:
        attributes["ingress.limit.outcome"] = exchange.admitted.outcome
    if routed.stream and answer.first_byte is not None:
        attributes["gen_ai.response.time_to_first_chunk"] = answer.first_byte - exchange.started
    usage = answer.usage
    if usage is not None:
        attributes["gen_ai.usage.input_tokens"] = usage.prompt_tokens
        attributes["gen_ai.usage.output_tokens"] = usage.completion_tokens
        for name, value in (("gen_ai.usage.cache_read.input_tokens", usage.cached_tokens),
                            ("gen_ai.usage.cache_creation.input_tokens", usage.cache_write_tokens),
                            ("gen_ai.usage.reasoning.output_tokens", usage.reasoning_tokens)):
            if value:  # 0: the service did not report them
                attributes[name] = value
    return attributes


