"""ingress/routing/chain.py: which class of failure an attempt met, table-driven, and each route's chain."""

from __future__ import annotations

import pytest

from ingress.errors import (
    IngressError,
    InvalidRequest,
    Overloaded,
    RateLimited,
    UpstreamAnswered,
    UpstreamConnectFailed,
    UpstreamProtocolError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from ingress.routing.chain import GROUP_FALLBACK, chain_of, classify, falls_back, link_of, route_name, too_long
from ingress.settings import ErrorClass, Route


def _answered(status: int, message: str = "", code: str | None = None, type_: str = "") -> UpstreamAnswered:
    return UpstreamAnswered(status, type_, code, message, None)


CASES: list[tuple[str, IngressError, ErrorClass | None]] = [
    # the service could not be reached, or broke before its head
    ("no connection", UpstreamConnectFailed("refused"), "unavailable"),
    ("reset before the head", UpstreamUnavailable("reset"), "unavailable"),
    ("unreadable before the head", UpstreamProtocolError("bad"), "unavailable"),
    ("the group at capacity", Overloaded("full"), "unavailable"),
    ("no head in time", UpstreamTimeout("slow"), "timeout"),
    # after the head: the generation may have run
    ("broken after the head", UpstreamUnavailable("reset", after_head=True), None),
    ("silent after the head", UpstreamTimeout("idle", after_head=True), None),
    ("unreadable whole answer", UpstreamProtocolError("bad", after_head=True), None),
    # the service's answers
    ("429", _answered(429, "Rate limit reached", "rate_limit_exceeded"), "rate_limited"),
    ("503 overloaded", _answered(503, "overloaded", "upstream_overloaded"), "unavailable"),
    ("504 from the provider", _answered(504, "timed out", "upstream_timeout"), "timeout"),
    ("500", _answered(500, "boom"), "5xx"),
    ("502 upstream_error", _answered(502, "The model provider failed (HTTP 500).", "upstream_error"), "5xx"),
    # context length, in each dialect's words
    ("openai code", _answered(400, "too long", "context_length_exceeded"), "context_length"),
    ("openai words", _answered(400, "This model's maximum context length is 128000 tokens. However, your "
                                    "messages resulted in 130000 tokens."), "context_length"),
    ("openai responses", _answered(400, "Your input exceeds the context window of this model."), "context_length"),
    ("anthropic", _answered(400, "prompt is too long: 208310 tokens > 200000 maximum", None,
                            "invalid_request_error"), "context_length"),
    ("anthropic window", _answered(400, "input length and `max_tokens` exceed context limit: 190000 + 20000 > "
                                        "200000"), "context_length"),
    ("vllm", _answered(400, "This model's maximum context length is 4096 tokens. However, you requested 5000 "
                            "tokens."), "context_length"),
    ("vllm decoder", _answered(400, "The decoder prompt (length 5000) is longer than the maximum model length of "
                                    "4096."), "context_length"),
    ("tgi", _answered(422, "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096."),
     "context_length"),
    ("llama.cpp", _answered(400, "the request exceeds the available context size", "exceed_context_size_error"),
     "context_length"),
    # a filtered prompt
    ("azure filter", _answered(400, "The response was filtered", "content_filter"), "content_filter"),
    ("policy violation", _answered(400, "Your request was rejected", "content_policy_violation"), "content_filter"),
    # client errors that never move
    ("400 invalid", _answered(400, "Invalid value for temperature.", "invalid_value"), None),
    ("400 max_tokens", _answered(400, "max_tokens is too large: 100000. This model supports at most 4096 "
                                      "completion tokens"), None),
    ("401", _answered(401, "bad key"), None),
    ("404", _answered(404, "The model does not exist", "model_not_found"), None),
    ("the edge's own refusal", InvalidRequest("bad"), None),
    ("the edge's own limit", RateLimited("slow down"), None),
]


@pytest.mark.parametrize(("error", "expected"), [pytest.param(e, k, id=name) for name, e, k in CASES])
def test_classify(error: IngressError, expected: ErrorClass | None) -> None:
    assert classify(error) == expected


@pytest.mark.parametrize(("error", "on", "expected"), [
    (_answered(503, "overloaded"), frozenset({"unavailable"}), "unavailable"),
    (_answered(503, "overloaded"), frozenset({"5xx"}), "5xx"),  # every 5xx answer is a 5xx
    (_answered(504, "slow"), frozenset({"5xx"}), "5xx"),
    (_answered(504, "slow"), frozenset({"timeout", "5xx"}), "timeout"),
    (UpstreamTimeout("slow"), frozenset({"5xx"}), None),  # no answer: not the service's 5xx
    (_answered(429, "slow down"), frozenset({"5xx", "unavailable"}), None),
    (_answered(500, "boom"), frozenset({"unavailable"}), None),
    (UpstreamConnectFailed("refused"), GROUP_FALLBACK, "unavailable"),
    (_answered(502, "failed"), GROUP_FALLBACK, "5xx"),
])
def test_falls_back_only_for_the_listed_classes(error: IngressError, on: frozenset[ErrorClass],
                                                expected: ErrorClass | None) -> None:
    assert falls_back(error, on) == expected


def test_a_routes_chain_is_itself_then_its_fallbacks_with_their_groups_and_models() -> None:
    gpt = Route(model="gpt", group="openai", upstream_model="gpt-4o", fallbacks=["claude", "local"],
                fallback_on=("rate_limited",))
    claude = Route(name="claude", group="anthropic", upstream_model="claude-sonnet-4-5", provider="anthropic")
    local = Route(prefix="llama-", group="gpu")
    chain, on = chain_of(gpt, {"claude": claude, "llama-": local, "local": local})

    assert [(link.name, link.group, link.model("gpt")) for link in chain] == [
        ("gpt", "openai", "gpt-4o"), ("claude", "anthropic", "claude-sonnet-4-5"), ("llama-", "gpu", "gpt")]
    assert on == {"rate_limited"}


def test_a_group_fallback_is_a_chain_of_the_same_route() -> None:
    route = Route(model="m", group="main", fallback="spare")
    chain, on = chain_of(route, {})

    assert [(link.route, link.group) for link in chain] == [(route, "main"), (route, "spare")]
    assert on == GROUP_FALLBACK
    assert chain_of(Route(model="m", group="main"), {}) == ((link_of(Route(model="m", group="main")),), frozenset())


@pytest.mark.parametrize(("route", "name"), [
    (Route(model="m", group="g"), "m"), (Route(prefix="p-", group="g"), "p-"), (Route(glob="*", group="g"), "*"),
    (Route(name="n", model="m", group="g"), "n"),
])
def test_route_name(route: Route, name: str) -> None:
    assert route_name(route) == name


@pytest.mark.parametrize(("max_context", "tokens", "skipped"), [
    (None, 10**6, False), (100, 100, False), (100, 101, True), (100, None, False)])
def test_too_long(max_context: int | None, tokens: int | None, skipped: bool) -> None:
    assert too_long(link_of(Route(name="r", group="g", upstream_model="m", max_context=max_context)), tokens) == skipped
