"""ingress/errors.py: each error's status, OpenAI type and code, its body, and fields fixed when it is made."""

from __future__ import annotations

import logging

import pytest

from ingress.errors import (
    IngressError,
    InvalidRequest,
    IssuerUnavailable,
    LimitsUnavailable,
    NotFound,
    Overloaded,
    PayloadTooLarge,
    PromptBlocked,
    QuotaExceeded,
    RateLimited,
    RequestTimeout,
    ResponseCancelled,
    ShuttingDown,
    StoreUnavailable,
    Unauthenticated,
    UnsupportedEncoding,
    UpstreamAnswered,
    UpstreamConnectFailed,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamTimeout,
    UpstreamUnavailable,
    WriteTimeout,
)


@pytest.mark.parametrize(("error", "status", "type_", "code", "retry_after", "level"), [
    (IngressError("boom"), 500, "server_error", "internal_error", None, logging.ERROR),
    (InvalidRequest("bad"), 400, "invalid_request_error", "invalid_request", None, logging.INFO),
    (PayloadTooLarge("big"), 413, "invalid_request_error", "request_too_large", None, logging.INFO),
    (ResponseCancelled("cancelled"), 400, "invalid_request_error", "response_cancelled", None, logging.INFO),
    (NotFound("where"), 404, "invalid_request_error", "not_found", None, logging.INFO),
    (RequestTimeout("slow"), 408, "invalid_request_error", "request_timeout", None, logging.INFO),
    (WriteTimeout("not reading"), 408, "invalid_request_error", "write_timeout", None, logging.INFO),
    (UnsupportedEncoding("br"), 415, "invalid_request_error", "unsupported_encoding", None, logging.INFO),
    (Unauthenticated("who"), 401, "invalid_request_error", "invalid_api_key", None, logging.INFO),
    (RateLimited("slow down"), 429, "requests", "rate_limit_exceeded", None, logging.INFO),
    (RateLimited("tokens", type_="tokens", retry_after=7), 429, "tokens", "rate_limit_exceeded", 7, logging.INFO),
    (QuotaExceeded("spent", retry_after=3600), 429, "insufficient_quota", "insufficient_quota", 3600, logging.INFO),
    (LimitsUnavailable("store"), 503, "server_error", "limits_unavailable", 1, logging.WARNING),
    (StoreUnavailable("store"), 503, "server_error", "response_store_unavailable", 1, logging.WARNING),
    (IssuerUnavailable("issuer"), 503, "server_error", "issuer_unavailable", 1, logging.WARNING),
    (Overloaded("full"), 503, "server_error", "overloaded", 1, logging.WARNING),
    (ShuttingDown(), 503, "server_error", "shutting_down", 1, logging.WARNING),
    (UpstreamError("hop"), 502, "server_error", "internal_error", None, logging.WARNING),
    (UpstreamUnavailable("reset"), 502, "server_error", "upstream_unavailable", None, logging.WARNING),
    (UpstreamConnectFailed("refused"), 502, "server_error", "upstream_unavailable", None, logging.WARNING),
    (UpstreamTimeout("late"), 504, "server_error", "upstream_timeout", None, logging.WARNING),
    (UpstreamProtocolError("junk"), 502, "server_error", "upstream_protocol_error", None, logging.ERROR),
], ids=lambda value: type(value).__name__ if isinstance(value, Exception) else None)
def test_each_error_carries_its_status_type_code_and_level(error: IngressError, status: int, type_: str,
                                                           code: str, retry_after: int | None, level: int) -> None:
    assert (error.status, error.type, error.code, error.retry_after, error.log_level) == (
        status, type_, code, retry_after, level)
    assert error.body() == {"error": {"message": error.message, "type": type_, "param": None, "code": code}}
    assert str(error) == error.message and not error.after_head


def test_a_field_given_when_made_overrides_the_class_s() -> None:
    error = NotFound("The model 'x' does not exist.", param="model", code="model_not_found")

    assert (error.status, error.code, error.param) == (404, "model_not_found", "model")
    assert error.body() == {"error": {"message": "The model 'x' does not exist.", "type": "invalid_request_error",
                                      "param": "model", "code": "model_not_found"}}
    assert NotFound("x").code == "not_found"  # the class's own is untouched
    assert IngressError("x", status=503, retry_after=2).status == 503


@pytest.mark.parametrize("name", ["message", "param", "status", "type", "code", "retry_after", "after_head"])
def test_an_error_cannot_be_changed_once_made(name: str) -> None:
    error = UpstreamUnavailable("reset", after_head=True)

    with pytest.raises(AttributeError, match=rf"UpstreamUnavailable\.{name} is fixed when the error is made"):
        setattr(error, name, None)
    assert error.after_head and error.message == "reset"


def test_other_attributes_may_still_be_set() -> None:
    error = InvalidRequest("bad")
    error.__notes__ = ["context"]  # what exception machinery sets (add_note, tracebacks)

    assert error.__notes__ == ["context"]


def test_a_blocked_prompt_names_its_rule_never_the_text() -> None:
    error = PromptBlocked("pii.card", param="input")

    assert isinstance(error, InvalidRequest) and (error.status, error.code, error.param) == (
        400, "prompt_blocked", "input")
    assert error.message == "The prompt was blocked by the guardrail rule 'pii.card'."
    assert PromptBlocked("max_prompt_tokens", param="messages", message="101 > 100").message == "101 > 100"
    with pytest.raises(AttributeError, match=r"PromptBlocked\.rule is fixed"):
        error.rule = "other"


@pytest.mark.parametrize(("status", "type_", "relayed", "relayed_type"), [
    (429, "tokens", 429, "tokens"),
    (400, "", 400, "invalid_request_error"),  # no type: the status's class names one
    (503, "", 503, "server_error"),
    (200, "odd", 502, "odd"),  # not an error status: the service broke
    (302, "", 502, "server_error"),
])
def test_a_service_s_error_is_relayed_with_its_status_type_and_code(status: int, type_: str, relayed: int,
                                                                   relayed_type: str) -> None:
    error = UpstreamAnswered(status, type_, "context_length_exceeded", "", "messages", retry_after=5)

    assert (error.status, error.type, error.code, error.param, error.retry_after) == (
        relayed, relayed_type, "context_length_exceeded", "messages", 5)
    assert error.message == "The model service returned an error."  # an empty message is given one
    assert isinstance(error, UpstreamError) and error.log_level == logging.INFO
