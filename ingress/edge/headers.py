"""The headers the edge puts on every answer: the request id (the caller's kept when well formed), which
route, model and variant served it (x-ingress-served-by), the cache's outcome, and Server-Timing."""

from __future__ import annotations

import os
import re

from ingress.exchange import Exchange

REQUEST_ID = "x-request-id"
SERVED_BY = "x-ingress-served-by"
CACHE_HEADER = "x-ingress-cache"  # a cacheable route's answer: hit, miss or bypass (ingress/pipeline/cache.py)
ANTHROPIC_REQUEST_ID = "request-id"  # where Anthropic's SDKs read an answer's and an error's request id
_VALID_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")


def request_id_of(header: str | None) -> str:
    """Keep a caller's well-formed request id; otherwise make one."""
    return header if header is not None and _VALID_ID.match(header) else os.urandom(16).hex()  # uuid4: 5x the cost


def served_by(exchange: Exchange) -> str | None:
    """x-ingress-served-by: the route (its name) and the model that answered, and the split's variant that
    took the request, as a structured-field dictionary (RFC 8941): `route="claude", model="claude-sonnet-4-5"`.
    A hit of the response cache names the route and model whose attempt made the stored answer, as its entry
    records them (send.served_stored); an entry stored before entries recorded them names none: no header."""
    served = exchange.attempts.served_by
    if served is None:
        return None
    route, model = served
    value = f'route="{_quoted(route)}", model="{_quoted(model)}"'
    variant = exchange.routed.variant
    return f'{value}, variant="{_quoted(variant)}"' if variant is not None else value


def _quoted(text: str) -> str:
    """A structured field's string: printable ASCII, its backslashes and quotes escaped."""
    if not (text.isascii() and text.isprintable()):
        text = "".join(c if " " <= c <= "~" else "?" for c in text)
    return text.replace("\\", "\\\\").replace('"', '\\"')


def server_timing(exchange: Exchange, now: float | None = None) -> str:
    """Server-Timing: the stages done so far, in milliseconds, and the request id."""
    routed, attempts, answer = exchange.routed, exchange.attempts, exchange.answer
    decoded, encoded = routed.decoded, routed.encoded
    upstream_end = answer.done or attempts.head
    marks = [("pacing", exchange.started, exchange.paced), ("decode", exchange.paced or exchange.started, decoded),
             ("encode", decoded, encoded), ("admit", encoded, exchange.admitted.at),
             ("upstream", attempts.sent, upstream_end), ("translate", upstream_end, now)]
    parts = [f"{name};dur={(end - start) * 1000:.3f}" for name, start, end in marks
             if start is not None and end is not None]
    if now is not None:
        parts.append(f"total;dur={(now - exchange.started) * 1000:.3f}")
    return ", ".join([*parts, f'request;desc="{exchange.request_id}"'])
