"""The one error tree: each class carries its HTTP status, OpenAI error type/code and log level.

    IngressError                    500 server_error / internal_error   (a bug: logged with its traceback)
     ├── InvalidRequest             400 invalid_request_error           the client's request, as sent
     │    ├── PayloadTooLarge       413 request_too_large
     │    ├── NotFound              404 not_found / model_not_found
     │    ├── RequestTimeout        408 request_timeout                 the body stopped coming
     │    ├── WriteTimeout          408 write_timeout   (logged only)   the client stopped reading
     │    ├── UnsupportedEncoding   415 unsupported_encoding
     │    ├── ResponseCancelled     400 response_cancelled              a background response cancelled as it ran
     │    └── PromptBlocked         400 prompt_blocked                  a guardrail: names the rule, never the match
     ├── Unauthenticated            401 invalid_api_key                 no key, or not one of ours
     ├── RateLimited                429 rate_limit_exceeded (type requests / tokens) + Retry-After
     │    └── QuotaExceeded         429 insufficient_quota              a budget is spent: not retried
     ├── LimitsUnavailable          503 limits_unavailable + Retry-After the limit store cannot answer
     ├── StoreUnavailable           503 response_store_unavailable + Retry-After  stored responses unreadable
     ├── IssuerUnavailable          503 issuer_unavailable + Retry-After a JWT's issuer has not given its keys
     ├── Overloaded                 503 overloaded       + Retry-After  every endpoint and the queue full
     ├── ShuttingDown               503 shutting_down    + Retry-After  the drain deadline passed
     └── UpstreamError              the internal hop; `after_head` decides whether another endpoint may try
          ├── UpstreamUnavailable   502 upstream_unavailable            refused, reset, or broke mid-answer
          │    └── UpstreamConnectFailed                                 no connection: nothing was sent
          ├── UpstreamTimeout       504 upstream_timeout                never retried: it may be generating
          ├── UpstreamProtocolError 502 upstream_protocol_error         not an answer of our contract
          └── UpstreamAnswered      the service's status, type, code    an `Error` buffer, relayed

Every field is fixed when the error is made, and an error cannot be changed afterwards: whether a
failure may be retried elsewhere (`after_head`) is decided where it happened, by the layer that knows,
never flipped by a layer above it. A caller that knows more raises a new error `from` the old one.
"""

from __future__ import annotations

import logging
from typing import Any

_FROZEN = frozenset({"message", "param", "status", "type", "code", "retry_after", "after_head"})


class IngressError(Exception):
    """Base of every error the edge renders as OpenAI's `{"error": {...}}`; on its own, an internal error."""

    message: str
    param: str | None
    status: int = 500
    type: str = "server_error"
    code: str | None = "internal_error"
    log_level: int = logging.ERROR
    retry_after: int | None = None  # seconds, sent as a Retry-After header
    after_head: bool = False  # an upstream failure after its answer began: never retried elsewhere

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None,
                 status: int | None = None, retry_after: int | None = None, after_head: bool = False) -> None:
        super().__init__(message)
        fields: dict[str, Any] = {"message": message, "param": param}
        if code is not None:
            fields["code"] = code
        if status is not None:
            fields["status"] = status
        if retry_after is not None:
            fields["retry_after"] = retry_after
        if after_head:
            fields["after_head"] = True
        for name, value in fields.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        if name in _FROZEN:
            raise AttributeError(f"{type(self).__name__}.{name} is fixed when the error is made")
        super().__setattr__(name, value)

    def body(self) -> dict[str, dict[str, str | None]]:
        """OpenAI's error shape."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


class InvalidRequest(IngressError):
    """The client's request cannot be accepted as sent; `param` names the field when there is one."""

    status = 400
    type = "invalid_request_error"
    code = "invalid_request"
    log_level = logging.INFO


class PayloadTooLarge(InvalidRequest):
    """The request body is larger than the edge accepts (`max_body_bytes`)."""

    status = 413
    code = "request_too_large"


class NotFound(InvalidRequest):
    """An unknown URL, or a model no route serves."""

    status = 404
    code = "not_found"


class RequestTimeout(InvalidRequest):
    """The client stopped sending its request body; the connection is closed after the answer."""

    status = 408
    code = "request_timeout"


class WriteTimeout(InvalidRequest):
    """The client stopped reading its answer for longer than `client.write_timeout`: the connection is
    aborted and the upstream call ends. Logged, never sent (the client is not reading)."""

    status = 408
    code = "write_timeout"


class UnsupportedEncoding(InvalidRequest):
    """A request body in a Content-Encoding the edge does not decode."""

    status = 415
    code = "unsupported_encoding"


class ResponseCancelled(InvalidRequest):
    """A background response cancelled (POST /v1/responses/{id}/cancel) while it ran: how its record and the
    stream of a client reading it end."""

    code = "response_cancelled"


class Unauthenticated(IngressError):
    """No API key, or one the edge does not know (OpenAI's answer to both: 401 invalid_api_key). The
    message never repeats the key."""

    status = 401
    type = "invalid_request_error"
    code = "invalid_api_key"
    log_level = logging.INFO


class RateLimited(IngressError):
    """A limit refused the request; nothing was consumed. `type` is OpenAI's: "requests" or "tokens"."""

    status = 429
    type = "requests"
    code = "rate_limit_exceeded"
    log_level = logging.INFO

    def __init__(self, message: str, *, type_: str = "requests", retry_after: int | None = None) -> None:
        super().__init__(message, retry_after=retry_after)
        object.__setattr__(self, "type", type_)


class QuotaExceeded(RateLimited):
    """A budget is spent for its period: retrying before it renews cannot succeed."""

    code = "insufficient_quota"

    def __init__(self, message: str, *, retry_after: int | None = None) -> None:
        super().__init__(message, type_="insufficient_quota", retry_after=retry_after)


class LimitsUnavailable(IngressError):
    """The limit store could not answer in time and the limit's policy is to refuse."""

    status = 503
    code = "limits_unavailable"
    log_level = logging.WARNING
    retry_after: int | None = 1


class StoreUnavailable(IngressError):
    """The response store could not answer in time (or at all) for a call that needs it: a stored
    response read, continued or kept. Never raised for `store: false`."""

    status = 503
    code = "response_store_unavailable"
    log_level = logging.WARNING
    retry_after: int | None = 1


class IssuerUnavailable(IngressError):
    """A JWT names an issuer of ours whose keys the edge has not been able to fetch (it was down at start
    and since): not the token's fault, so not a 401; the message names no issuer."""

    status = 503
    code = "issuer_unavailable"
    log_level = logging.WARNING
    retry_after: int | None = 1


class PromptBlocked(InvalidRequest):
    """A guardrail refused the prompt (ingress/guardrails/). The message and `rule` name the rule
    (`pii.card`, `patterns.ticket-id`, `max_prompt_tokens`...), never the text that matched it; `param` is
    the field that held the prompt (`messages`, `prompt` or `input`)."""

    code = "prompt_blocked"
    rule: str

    def __init__(self, rule: str, *, param: str, message: str | None = None) -> None:
        super().__init__(message or f"The prompt was blocked by the guardrail rule '{rule}'.", param=param)
        object.__setattr__(self, "rule", rule)

    def __setattr__(self, name: str, value: object) -> None:
        if name == "rule":
            raise AttributeError("PromptBlocked.rule is fixed when the error is made")
        super().__setattr__(name, value)


class Overloaded(IngressError):
    """Every endpoint of the group is at its limit and the wait queue is full or timed out; or the worker is at
    its own in-flight limit ([overload]) and the request waited its longest wait."""

    status = 503
    code = "overloaded"
    log_level = logging.WARNING
    retry_after: int | None = 1


class ShuttingDown(IngressError):
    """The drain deadline passed before this request finished."""

    status = 503
    code = "shutting_down"
    log_level = logging.WARNING
    retry_after: int | None = 1

    def __init__(self, message: str = "The server is shutting down; retry the request.") -> None:
        super().__init__(message)


class UpstreamError(IngressError):
    """A failure of the internal hop. `after_head`: the service had begun its answer, so the generation
    may have run; such a failure is never sent to another endpoint, which could run it twice."""

    status = 502
    log_level = logging.WARNING


class UpstreamUnavailable(UpstreamError):
    """The internal service refused the connection, could not be reached, or broke it mid-answer."""

    code = "upstream_unavailable"


class UpstreamConnectFailed(UpstreamUnavailable):
    """No connection could be made: nothing was sent, so another endpoint may be tried."""


class UpstreamTimeout(UpstreamError):
    """The internal service did not answer, or stopped answering, in time. Never retried: it may still
    be generating."""

    status = 504
    code = "upstream_timeout"


class UpstreamProtocolError(UpstreamError):
    """The internal service answered something that is not a valid answer of our contract."""

    code = "upstream_protocol_error"
    log_level = logging.ERROR


class UpstreamAnswered(UpstreamError):
    """The internal service answered with an `Error` buffer: relay its status, type and code."""

    log_level = logging.INFO

    def __init__(self, status: int, type_: str, code: str | None, message: str, param: str | None,
                 *, retry_after: int | None = None) -> None:
        # Only client and server error statuses are relayed; anything else means the service broke.
        relayed = status if 400 <= status <= 599 else 502
        super().__init__(message or "The model service returned an error.", param=param, status=relayed,
                         retry_after=retry_after)
        object.__setattr__(self, "type", type_ or ("invalid_request_error" if relayed < 500 else "server_error"))
        object.__setattr__(self, "code", code)
