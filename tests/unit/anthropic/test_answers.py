"""Anthropic's answer types (ingress/anthropic/answers.py): the error table, every error of the edge's and
every status a service answers with as Anthropic's error type and status, in the envelope the official SDK
reads."""

from __future__ import annotations

from typing import Any

import msgspec
import pydantic
import pytest
from anthropic.types.shared import ErrorResponse

from ingress import errors
from ingress.anthropic import answers
from ingress.errors import UpstreamAnswered

ERROR = pydantic.TypeAdapter(ErrorResponse)


def plain(obj: object) -> Any:
    return msgspec.json.decode(msgspec.json.encode(obj))


def answered(status: int, code: str | None = None, type_: str = "") -> UpstreamAnswered:
    return UpstreamAnswered(status, type_, code, "said the service", None, retry_after=5 if status == 429 else None)


ERRORS: list[tuple[errors.IngressError, str, int]] = [
    (errors.InvalidRequest("bad", param="messages"), "invalid_request_error", 400),
    (errors.PromptBlocked("pii.card", param="messages"), "invalid_request_error", 400),
    (errors.PayloadTooLarge("big"), "request_too_large", 413),
    (errors.ResponseCancelled("cancelled"), "invalid_request_error", 400),
    (errors.NotFound("no such model"), "not_found_error", 404),
    (errors.RequestTimeout("slow body"), "invalid_request_error", 408),
    (errors.UnsupportedEncoding("br"), "invalid_request_error", 415),
    (errors.Unauthenticated("no key"), "authentication_error", 401),
    (errors.RateLimited("slow down", retry_after=3), "rate_limit_error", 429),
    (errors.QuotaExceeded("spent", retry_after=3600), "rate_limit_error", 429),
    (errors.Overloaded("full", retry_after=1), "overloaded_error", 529),
    (errors.ShuttingDown(), "overloaded_error", 529),
    (errors.LimitsUnavailable("store down"), "api_error", 503),
    (errors.StoreUnavailable("store down"), "api_error", 503),
    (errors.IssuerUnavailable("issuer down"), "api_error", 503),
    (errors.UpstreamUnavailable("reset"), "api_error", 502),
    (errors.UpstreamConnectFailed("refused"), "api_error", 502),
    (errors.UpstreamProtocolError("garbage"), "api_error", 502),
    (errors.UpstreamTimeout("silent"), "timeout_error", 504),
    (errors.IngressError("a bug"), "api_error", 500),
    (answered(400, "invalid_request"), "invalid_request_error", 400),
    (answered(401), "authentication_error", 401),
    (answered(403), "permission_error", 403),
    (answered(404, "model_not_found"), "not_found_error", 404),
    (answered(409), "invalid_request_error", 409),
    (answered(413), "request_too_large", 413),
    (answered(429, "rate_limit_exceeded"), "rate_limit_error", 429),
    (answered(500), "api_error", 500),
    (answered(502, "upstream_error"), "api_error", 502),
    (answered(503, "upstream_overloaded"), "overloaded_error", 529),  # a bridge's overloaded provider
    (answered(503), "overloaded_error", 529),
    (answered(529), "overloaded_error", 529),
    (answered(500, "overloaded"), "overloaded_error", 529),
    (answered(500, None, "overloaded_error"), "overloaded_error", 529),
    (answered(504, "upstream_timeout"), "timeout_error", 504),
    (answered(299), "api_error", 502),  # a status that is no error: the service broke
]


@pytest.mark.parametrize(("exc", "kind", "status"), ERRORS, ids=lambda v: type(v).__name__ if isinstance(
    v, Exception) else str(v))
def test_the_error_table(exc: errors.IngressError, kind: str, status: int) -> None:
    assert answers.error_kind(exc) == (kind, status)
    body = plain(answers.error_envelope(exc, request_id="req_1"))
    assert body == {"type": "error", "error": {"type": kind, "message": exc.message}, "request_id": "req_1"}
    if kind != "request_too_large":  # Anthropic documents it; the SDK's union of error objects lacks it
        ERROR.validate_python(body)


def test_retry_after_stays_the_callers_to_send() -> None:
    for exc in (errors.RateLimited("x", retry_after=7), errors.Overloaded("x"), answered(429)):
        assert exc.retry_after is not None  # the header the edge writes beside the envelope, as for OpenAI's
    assert "request_id" not in plain(answers.error_envelope(errors.Overloaded("x")))


def test_every_error_class_has_a_row() -> None:
    def subclasses(cls: type[errors.IngressError]) -> set[type[errors.IngressError]]:
        return {cls}.union(*(subclasses(s) for s in cls.__subclasses__()))

    covered = {type(exc) for exc, _, _ in ERRORS} | {errors.WriteTimeout}  # never sent: the client left
    assert subclasses(errors.IngressError) - {errors.UpstreamError} <= covered
