"""An engine's or provider's refusal as the ErrorInfo our contract carries, its text scrubbed (sans-I/O).

The client's mistakes (4xx) keep their status in OpenAI's shape; 401/403 are the bridge's own
credentials refused, a 502 `upstream_auth_failed` (the client's key is not the problem: the operator's to
fix, and a 5xx a fallback chain moves on), unless the key was the client's own (`clients_key`, a route
with `forward_authorization`): then the 401/403 is the client's, its status kept, and moves nowhere;
429 stays 429 and 503 (or Anthropic's 529) is a 503, each with the provider's Retry-After; 504 is a
504 `upstream_timeout`; any other 5xx a 502 `upstream_error`. The body may be OpenAI's shape
(`{"error": {...}}`), vLLM's (the same with an integer `code`, or its old flat `{"object": "error",
"message", ...}`), TGI's (`{"error": "...", "error_type": ...}`), FastAPI's (`{"detail": ...}`), plain text
or a proxy's HTML page. What reaches the client of the provider's text is scrubbed: keys, tokens,
URLs, addresses and internal host names replaced by "[redacted]", bounded in length.
"""

from __future__ import annotations

import email.utils
import math
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from ingress.wire import types as wire_types

MAX_MESSAGE = 512  # characters of a provider's text passed on
MAX_RETRY_AFTER = 3600  # seconds, as the edge's own upstream client bounds it
REDACTED = "[redacted]"

_SCRUB = [(re.compile(p, re.IGNORECASE), r) for p, r in (
    (r"\bbearer\s+[^\s\"',;]+", f"Bearer {REDACTED}"),
    (r"\b(api[_-]?key|x-api-key|access[_-]?token|token|secret|password|authorization)"
     r"([\"']?\s*[:=]\s*[\"']?)(?!bearer\s)[^\s\"',;&]+", rf"\1\2{REDACTED}"),
    (r"\b(?:sk|pk|rk)-[a-z0-9_\-]{6,}", REDACTED),  # OpenAI's and Anthropic's keys (sk-proj-, sk-ant-)
    (r"\b(?:https?|wss?|tcp|grpcs?)://[^\s\"'<>]+", REDACTED),
    (r"\bunix:[^\s\"'<>]+", REDACTED),
    (r"\b(?:\d{1,3}\.){3}\d{1,3}(?::\d{1,5})?\b", REDACTED),
    (r"\[[0-9a-f.]*:[0-9a-f:.]*\](?::\d{1,5})?", REDACTED),  # [::1]:8000
    (r"(?<![\w:])(?:[0-9a-f]{1,4}:){5,7}[0-9a-f]{1,4}\b|(?<![\w:])[0-9a-f:]*::[0-9a-f]{1,4}\b", REDACTED),
    (r"\blocalhost(?::\d{1,5})?\b", REDACTED),
    (r"\b[a-z0-9-]+(?:\.[a-z0-9-]+)*\.(?:internal|local|localdomain|lan|corp|intranet|svc|home\.arpa)"
     r"(?::\d{1,5})?\b", REDACTED),
    (r"\b[a-z][a-z0-9-]*(?:\.[a-z0-9-]+)+:\d{2,5}\b", REDACTED),  # host.name:port
)]
# llama.cpp answers an input longer than its batch with a 500, though the input is what is wrong: "input (701
# tokens) is too large to process. increase the physical batch size (current batch size: 512)".
_INPUT_TOO_LARGE = re.compile(r"^input \(\d+ tokens\) is too large to process")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")
_SPACES = re.compile(r"\s+")
_IDENTIFIER = re.compile(r"[a-z][a-z0-9_.\-]{0,63}")
_any = msgspec.json.Decoder()


def scrub(text: str, limit: int = MAX_MESSAGE) -> str:
    """A provider's text with its secrets and addresses replaced, on one line, at most `limit` characters."""
    text = _SPACES.sub(" ", _CONTROL.sub(" ", text)).strip()
    for pattern, replacement in _SCRUB:
        text = pattern.sub(replacement, text)
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


def protocol_error(message: str) -> wire_types.ErrorInfo:
    """An engine's answer we cannot read: the bridge's 502."""
    return wire_types.ErrorInfo(status=502, type="server_error", code="upstream_protocol_error", message=scrub(message))


class _Said(msgspec.Struct):
    message: str = ""
    type: str | None = None
    code: str | None = None
    param: str | None = None
    status: int | None = None  # vLLM's integer `code`: the HTTP status it meant
    html: bool = False


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _said(body: bytes) -> _Said:
    text = body.decode("utf-8", "replace").strip()
    try:
        doc = _any.decode(body)
    except msgspec.DecodeError:
        lowered = text[:256].lower()
        return _Said(html=lowered.startswith(("<!doctype", "<html", "<?xml")) or "<body" in lowered,
                     message="" if lowered.startswith("<") else text)
    if not isinstance(doc, dict):
        return _Said(message=doc if isinstance(doc, str) else "")
    error = doc.get("error")
    source: dict[str, Any]
    if isinstance(error, dict):
        source = error
    elif isinstance(error, str):  # TGI: {"error": "...", "error_type": "validation"}
        source = {"message": error, "type": doc.get("error_type")}
    elif "detail" in doc and "message" not in doc:  # FastAPI: {"detail": "..."} or a list of problems
        detail = doc["detail"]
        source = {"message": detail if isinstance(detail, str) else msgspec.json.encode(detail).decode()}
    else:
        source = doc  # vLLM's old flat shape, or a bare {"message": ...}
    code = source.get("code")
    return _Said(message=_string(source.get("message")) or "", type=_string(source.get("type")),
                 code=_string(code), param=_string(source.get("param")),
                 status=code if isinstance(code, int) and not isinstance(code, bool) and 400 <= code <= 599 else None)


def retry_after(headers: Mapping[str, str], clock: Callable[[], float] = time.time) -> int | None:
    """Retry-After in seconds (a number or an HTTP date), or OpenAI's retry-after-ms; bounded."""
    values = {k.lower(): v for k, v in headers.items()}
    raw = values.get("retry-after", "").strip()
    seconds: float | None = None
    if raw.isascii() and raw.isdigit():
        seconds = int(raw)
    elif raw:
        try:
            seconds = email.utils.parsedate_to_datetime(raw).timestamp() - clock()
        except (TypeError, ValueError):
            seconds = None
    if seconds is None:
        ms = values.get("retry-after-ms", "").strip()
        if ms.isascii() and ms.replace(".", "", 1).isdigit():
            seconds = float(ms) / 1000
    if seconds is None:
        return None
    return max(0, min(math.ceil(seconds), MAX_RETRY_AFTER))


def clients_key_refused(status: int, text: str, *, kind: str | None = None, code: str | None = None,
                        param: str | None = None) -> wire_types.ErrorInfo:
    """A provider's 401/403 to a key its client sent (a route with `forward_authorization`): the client's
    to fix, its status kept, never a failure of ours that another route could serve. `text` is scrubbed."""
    default = ("invalid_request_error", "invalid_api_key") if status == 401 else ("permission_error", None)
    return wire_types.ErrorInfo(status=status, type=kind or default[0], code=code or default[1], param=param,
                                message=text or f"The model provider refused the key sent with the request "
                                                f"(HTTP {status}).")


def engine_error(status: int | None, headers: Mapping[str, str], body: bytes, *, clients_key: bool = False,
                 clock: Callable[[], float] = time.time) -> wire_types.ErrorInfo:
    """An engine's error: its HTTP answer (`status`), or an error event inside its stream (`status`
    None: the one the event names, else 500). `clients_key`: the request carried its client's own key,
    whose refusal (401/403) is the client's, not the bridge's."""
    said = _said(body)
    if status is None:
        status = said.status or 500
    text = scrub(said.message)
    code = said.code if said.code and _IDENTIFIER.fullmatch(said.code) else None
    kind = said.type if said.type and _IDENTIFIER.fullmatch(said.type) else None
    if said.html:
        text = f"The engine, or a proxy in front of it, answered HTTP {status} with an HTML page."
    if status == 500 and _INPUT_TOO_LARGE.match(text):  # the client's to shorten, never the engine failing
        return wire_types.ErrorInfo(status=400, type="invalid_request_error", code="context_length_exceeded",
                                    message=text)
    if status in (401, 403) and clients_key:
        return clients_key_refused(status, text, kind=kind, code=code, param=said.param)
    if status in (401, 403):
        return wire_types.ErrorInfo(status=502, type="server_error", code="upstream_auth_failed",
                                    message=f"The model provider refused the bridge's credentials (HTTP {status})."
                                    + (f" It said: {text}" if text else ""))
    if status == 429:
        return wire_types.ErrorInfo(status=429, type=kind or "rate_limit_error", code=code or "rate_limit_exceeded",
                                    message=text or "The model provider is rate limiting the bridge.", param=said.param,
                                    retry_after=retry_after(headers, clock))
    if 400 <= status < 500:
        return wire_types.ErrorInfo(status=status, type=kind or "invalid_request_error", code=code, param=said.param,
                                    message=text or f"The model provider refused the request (HTTP {status}).")
    if status in (503, 529):
        return wire_types.ErrorInfo(status=503, type="server_error", code="upstream_overloaded",
                                    message=text or "The model provider is overloaded.",
                                    retry_after=retry_after(headers, clock))
    if status == 504:
        return wire_types.ErrorInfo(status=504, type="server_error", code="upstream_timeout",
                                    message=text or "The model provider timed out.")
    if 500 <= status < 600:
        said_text = f" It said: {text}" if text else ""
        return wire_types.ErrorInfo(status=502, type="server_error", code="upstream_error",
                                    message=f"The model provider failed (HTTP {status}).{said_text}")
    return protocol_error(f"The model provider answered HTTP {status}, which is not an answer.")
