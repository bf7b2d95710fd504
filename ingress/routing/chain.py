"""Fallback chains: which class of failure an attempt met, and whether the next route may take the request.

Pure decisions on errors already made (ingress/errors.py): no I/O, nothing awaited. The classes a route
lists in `fallback_on`:

    unavailable     no answer could be had: no connection, broken or unreadable before its head, the
                    group at capacity, or the service's 503 (overloaded, unavailable)
    5xx             any 5xx the service answered (its 503 and 504 too)
    timeout         no answer head within the first-byte timeout, or the service's 504
    rate_limited    the service's (or its provider's) 429
    context_length  the service's 400 for a prompt too long, in the words of each dialect (below)
    content_filter  the service's 400 for a filtered prompt, or an answer that ended content_filter /
                    refusal before any content (pipeline/answer.py, pipeline/stream.py)

An error after the answer's head (`after_head`) has no class: the generation may have run, and the client
may have been sent part of it. Neither has any other client error: a 400 the client can fix never moves.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from ingress.errors import (
    Overloaded,
    UpstreamAnswered,
    UpstreamError,
    UpstreamTimeout,
)
from ingress.settings import ErrorClass, Route

# The classes of today's `fallback` group: a service unavailable or failing (a 5xx) before the first byte.
GROUP_FALLBACK: Final = frozenset[ErrorClass]({"unavailable", "5xx"})

# How each dialect says "the prompt is too long", as its bridge relays it (ingress/bridges/failures.py keeps
# the provider's code, type and scrubbed message): (dialect, code, message pattern).
_CONTEXT_LENGTH: Final = (
    # OpenAI: code context_length_exceeded, "This model's maximum context length is 128000 tokens. However,
    # your messages resulted in 130000 tokens..."; the Responses API: "Your input exceeds the context window"
    ("openai", "context_length_exceeded", r"maximum context length is \d+|exceeds the context window"),
    # Anthropic: invalid_request_error "prompt is too long: 208310 tokens > 200000 maximum"; its
    # context-window beta: "input length and `max_tokens` exceed context limit"
    ("anthropic", None, r"^prompt is too long|exceed context limit"),
    # vLLM ("...maximum context length is 4096 tokens. However, you requested 5000 tokens", or "The decoder
    # prompt (length 5000) is longer than the maximum model length of 4096"), TGI ("`inputs` tokens +
    # `max_new_tokens` must be <= 4096"), llama.cpp (exceed_context_size_error: "the request exceeds the
    # available context size")
    ("self_hosted", "exceed_context_size_error",
     r"longer than the maximum model length|tokens \+ `max_new_tokens` must be <=|exceeds the available context size"),
)
_CONTEXT_CODES: Final = frozenset(code for _, code, _ in _CONTEXT_LENGTH if code)
_CONTEXT_WORDS: Final = re.compile("|".join(f"(?:{words})" for _, _, words in _CONTEXT_LENGTH), re.IGNORECASE)
# A prompt a provider's filter refused: Azure OpenAI's content_filter, OpenAI's content_policy_violation.
_FILTER_CODES: Final = frozenset({"content_filter", "content_policy_violation"})
FILTERED_FINISH: Final = frozenset({"content_filter", "refusal"})  # an answer's finish reasons that mean filtered


def classify(exc: BaseException) -> ErrorClass | None:
    """The class of an attempt's failure, or None: one that must not move to another route."""
    if isinstance(exc, Overloaded):
        return "unavailable"
    if not isinstance(exc, UpstreamError) or exc.after_head:
        return None
    if isinstance(exc, UpstreamAnswered):
        return _answered(exc)
    if isinstance(exc, UpstreamTimeout):
        return "timeout"
    return "unavailable"  # no connection, broken or unreadable before the head


def _answered(exc: UpstreamAnswered) -> ErrorClass | None:
    status = exc.status
    if status == 429:
        return "rate_limited"
    if status == 503:
        return "unavailable"
    if status == 504:
        return "timeout"
    if status >= 500:
        return "5xx"
    if status in (400, 413, 422):
        if exc.code in _CONTEXT_CODES or _CONTEXT_WORDS.search(exc.message):
            return "context_length"
        if exc.code in _FILTER_CODES:
            return "content_filter"
    return None


def falls_back(exc: BaseException, on: frozenset[ErrorClass]) -> ErrorClass | None:
    """The class the failure falls back for under `on` (a route's fallback_on), or None: raise it. Every
    5xx the service answered is a `5xx`, whatever its narrower class."""
    kind = classify(exc)
    if kind is None:
        return None
    if kind in on:
        return kind
    if "5xx" in on and isinstance(exc, UpstreamAnswered) and exc.status >= 500:
        return "5xx"
    return None


def route_name(route: Route) -> str:
    """What other routes call it: its name, else its model, prefix or glob."""
    return route.name or route.model or route.prefix or route.glob or ""


@dataclass(frozen=True, slots=True)
class Link:
    """One step of a chain: a route, the group it sends to, and the model name it sends (None: the name
    asked for, on a prefix or glob route that names no upstream model)."""

    route: Route
    name: str
    group: str
    upstream_model: str | None

    def model(self, asked: str) -> str:
        return self.upstream_model or asked


def link_of(route: Route, group: str | None = None) -> Link:
    return Link(route, route_name(route), group or route.group, route.upstream_model or route.model)


def chain_of(route: Route, routes: dict[str, Route]) -> tuple[tuple[Link, ...], frozenset[ErrorClass]]:
    """A route's chain (itself first) and the classes it moves on: its `fallbacks` (other routes, each
    with its own group and model) for `fallback_on`, or its `fallback` group, as before chains."""
    first = link_of(route)
    if route.fallbacks:
        return (first, *(link_of(routes[name]) for name in route.fallbacks)), frozenset(route.fallback_on)
    if route.fallback is not None:
        return (first, link_of(route, route.fallback)), GROUP_FALLBACK
    return (first,), frozenset()


def too_long(link: Link, prompt_tokens: int | None) -> bool:
    """A fallback route skipped up front: the edge's count of the prompt is above its max_context."""
    limit = link.route.max_context
    return limit is not None and prompt_tokens is not None and prompt_tokens > limit
