"""The one error tree: each class carries its HTTP status, OpenAI error type/code and log level."""

from __future__ import annotations

import logging
import re

import msgspec


class IngressError(Exception):
    """Base of every error the edge renders as OpenAI's `{"error": {...}}`."""

    status: int = 500
    type: str = "server_error"
    code: str | None = "internal_error"
    log_level: int = logging.ERROR
    retry_after: int | None = None  # seconds, sent as a Retry-After header
    after_head: bool = False  # an upstream failure after its answer began: never retried elsewhere

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code

    def body(self) -> dict[str, dict[str, str | None]]:
        """OpenAI's error shape."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


class InvalidRequest(IngressError):
    """The client's request cannot be accepted as sent."""

    status = 400
    type = "invalid_request_error"
    code = "invalid_request"
    log_level = logging.INFO


class PayloadTooLarge(InvalidRequest):
    status = 413
    code = "request_too_large"


class NotFound(InvalidRequest):
    status = 404
    code = "not_found"


class RequestTimeout(InvalidRequest):
    """The client stopped sending its request body; the connection is closed after the answer."""

    status = 408
    code = "request_timeout"


class UnsupportedEncoding(InvalidRequest):
    """A request body in a Content-Encoding the edge does not decode."""

    status = 415
    code = "unsupported_encoding"


class UpstreamUnavailable(IngressError):
    """The internal service refused the connection or could not be reached."""

    status = 502
    code = "upstream_unavailable"
    log_level = logging.WARNING


class UpstreamConnectFailed(UpstreamUnavailable):
    """No connection could be made: nothing was sent, so another endpoint may be tried."""


class Overloaded(IngressError):
    """Every endpoint of the group is at its limit and the wait queue is full or timed out."""

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


class UpstreamTimeout(IngressError):
    status = 504
    code = "upstream_timeout"
    log_level = logging.WARNING


class UpstreamProtocolError(IngressError):
    """The internal service answered something that is not a valid answer of our contract."""

    status = 502
    code = "upstream_protocol_error"


class UpstreamAnswered(IngressError):
    """The internal service answered with an `Error` buffer: relay its status, type and code."""

    log_level = logging.INFO

    def __init__(self, status: int, type_: str, code: str | None, message: str, param: str | None) -> None:
        super().__init__(message or "The model service returned an error.", param=param)
        # Only client and server error statuses are relayed; anything else means the service broke.
        self.status = status if 400 <= status <= 599 else 502
        self.type = type_ or ("invalid_request_error" if self.status < 500 else "server_error")
        self.code = code


_VALIDATION = re.compile(r"^(?P<detail>.*?)(?: - at `(?:key` in `)?\$(?P<path>[^`]*)`)?\Z", re.DOTALL)
_FIELD = re.compile(r"(?:unknown|required) field `(?P<field>[^`]+)`")


def validation_path(exc: msgspec.ValidationError) -> tuple[str, str]:
    """msgspec's message split into (what is wrong, where): `Expected int - at $.a[0]` gives
    ('Expected int', 'a[0]'); an unknown or missing field is named at the end of the path. A dict's
    entries stay `[...]`, as msgspec reports them, for the caller to name."""
    match = _VALIDATION.match(str(exc))
    assert match is not None  # the pattern matches any string
    detail, path = match["detail"], (match["path"] or "").lstrip(".")
    field = _FIELD.search(detail)
    if field:
        path = f"{path}.{field['field']}" if path else field["field"]
    return detail, path
