"""A request's usage record: its fields from the Exchange, in the access line's order, and its cost."""

from __future__ import annotations

import pytest

from ingress.errors import NotFound, UpstreamProtocolError
from ingress.exchange import Admitted, Answer, Attempts, Exchange, Routed
from ingress.routing.affinity import Decision, Way
from ingress.routing.health import EndpointState
from ingress.tenancy.keys import new_key
from ingress.tenancy.plan import NANO_USD_PER_USD, TokenPrice, checks_of
from ingress.tenancy.policy import Policy
from ingress.tenancy.settings import Budget, Key, Limits, ModelPolicy, Price, Tenancy, Tenant
from ingress.usage import cost_usd, usage_record
from ingress.wire.types import Usage

KEY, KEY_ID, KEY_HASH = new_key()
GPT_4O = Price(input=2.5, output=10.0)
POLICY = Policy(Tenancy(keys=(Key(id=KEY_ID, tenant="acme", hash=KEY_HASH),),
                        models={"gpt-4o*": ModelPolicy(price=GPT_4O),
                                "llama-3": ModelPolicy(limits=Limits(rpm=10)),  # limits, no price
                                "free-*": ModelPolicy(price=Price())}))
USAGE = Usage(prompt_tokens=1200, completion_tokens=300, total_tokens=1500, cached_tokens=1000,
              reasoning_tokens=120, cache_write_tokens=64)


def served(model: str = "gpt-4o", usage: Usage | None = USAGE) -> Exchange:
    """An exchange as the pipeline leaves a streamed chat answer: routed, admitted, answered."""
    return Exchange("req-1", started=100.0, api="chat", principal=POLICY.authenticate({"x-api-key": KEY}),
                    routed=Routed(model, True, route="gpt-4o*" if model.startswith("gpt-4o") else model),
                    admitted=Admitted(outcome="admitted"), attempts=Attempts(upstream="http://10.0.0.5:9000"),
                    answer=Answer(served_model="gpt-4o-2024-08-06", first_byte=100.25, usage=usage))


def test_a_served_request_has_every_field_in_the_lines_order() -> None:
    record = usage_record(served(), "POST", "/v1/chat/completions", 200, "ok", 101.5, POLICY)

    assert list(record) == [
        "method", "path", "status", "outcome", "duration_ms",
        "model", "stream", "upstream", "route", "served_model",
        "tenant", "key_id", "api", "limit", "ttfb_ms",
        "prompt_tokens", "completion_tokens", "cached_tokens", "cache_write_tokens", "reasoning_tokens", "cost_usd"]
    assert record == {
        "method": "POST", "path": "/v1/chat/completions", "status": 200, "outcome": "ok", "duration_ms": 1500.0,
        "model": "gpt-4o", "stream": True, "upstream": "http://10.0.0.5:9000", "route": "gpt-4o*",
        "served_model": "gpt-4o-2024-08-06", "tenant": "acme", "key_id": KEY_ID, "api": "chat", "limit": "admitted",
        "ttfb_ms": 250.0, "prompt_tokens": 1200, "completion_tokens": 300, "cached_tokens": 1000,
        "cache_write_tokens": 64, "reasoning_tokens": 120,
        # The cached (and cache-written) tokens are part of the prompt's, priced as input (a Price has no cached
        # price); the reasoning tokens are part of the completion's, priced as output.
        "cost_usd": pytest.approx((1200 * 2.5 + 300 * 10.0) / 1e6, rel=1e-12)}


@pytest.mark.parametrize(("model", "policy"), [
    ("llama-3", POLICY),  # a policy with limits and no price
    ("free-model", POLICY),  # a price of zero both ways is none
    ("mistral-large", POLICY),  # no policy for the model
    ("gpt-4o", None),  # no [tenancy]: no prices at all
])
def test_without_a_price_the_usage_is_recorded_without_a_cost(model: str, policy: Policy | None) -> None:
    record = usage_record(served(model), "POST", "/v1/chat/completions", 200, "ok", 101.5, policy)
    assert "cost_usd" not in record
    assert (record["prompt_tokens"], record["completion_tokens"], record["cached_tokens"]) == (1200, 300, 1000)


def test_without_usage_there_are_no_tokens_and_no_cost() -> None:
    """A relayed FlatBuffers answer is not read; a stream cut before its usage frame has none either."""
    record = usage_record(served(usage=None), "POST", "/v1/chat/completions", 499, "client_closed", 101.5, POLICY)
    assert not {"prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens", "cost_usd"} & set(record)
    assert record["served_model"] == "gpt-4o-2024-08-06"


@pytest.mark.parametrize(("way", "matched"), [(Way.HIT, 12), (Way.HASHED, 0), (Way.OVERRIDDEN_BY_LOAD, 7)])
def test_a_cache_affine_choice_names_its_way_and_blocks_after_the_model_served(way: Way, matched: int) -> None:
    exchange = served()
    exchange.attempts.choice = Decision(EndpointState(url="http://10.0.0.5:9000"), way, matched)
    record = usage_record(exchange, "POST", "/v1/chat/completions", 200, "ok", 101.5, POLICY)

    keys = list(record)
    assert keys[keys.index("served_model") + 1:keys.index("tenant")] == ["affinity", "matched_blocks"]
    assert (record["affinity"], record["matched_blocks"]) == (way.value, matched)
    # the other keys keep their order; a P2C group's request has neither
    assert [k for k in keys if k not in ("affinity", "matched_blocks")] == list(usage_record(
        served(), "POST", "/v1/chat/completions", 200, "ok", 101.5, POLICY))


def test_a_refused_request_has_its_head_and_its_error() -> None:
    exchange = Exchange("req-2", started=100.0, api="chat", error=NotFound("no such model", code="model_not_found"))
    record = usage_record(exchange, "POST", "/v1/chat/completions", 404, "error", 100.002, POLICY)
    assert record == {"method": "POST", "path": "/v1/chat/completions", "status": 404, "outcome": "error",
                      "duration_ms": 2.0, "api": "chat", "error_code": "model_not_found",
                      "error_type": "invalid_request_error"}


def test_an_unrouted_request_names_no_route_and_a_failure_inside_is_detailed() -> None:
    exchange = Exchange("req-3", started=100.0, api="chat", routed=Routed("gpt-4o"))
    try:
        raise UpstreamProtocolError("The model service sent a broken answer.") from ValueError("bad frame")
    except UpstreamProtocolError as exc:
        exchange.error = exc
    record = usage_record(exchange, "POST", "/v1/chat/completions", 502, "error", 100.1, POLICY)
    assert "route" not in record and "served_model" not in record and record["upstream"] is None
    assert record["error_detail"] == "ValueError: bad frame"


def test_the_cost_is_what_a_usd_budget_charges_for_the_same_usage() -> None:
    """So a tenant's spending and the sum of its requests' records agree to the nano-dollar."""
    price = Price(input=0.15, output=0.6)
    (budget,) = checks_of(Limits(budget=Budget(usd=10.0)), "tenant", "acme", price, 0.0, 1, "local")
    for usage in (USAGE, Usage(prompt_tokens=7), Usage(completion_tokens=1), Usage()):
        charged = budget.cost(usage.prompt_tokens, usage.completion_tokens)
        assert cost_usd(usage, TokenPrice.of(price)) == charged / NANO_USD_PER_USD



def test_a_cache_hit_says_so_and_reports_the_cached_usage_at_no_cost() -> None:
    exchange = served()
    exchange.cache, exchange.attempts.upstream = "hit", None
    record = usage_record(exchange, "POST", "/v1/chat/completions", 200, "ok", 101.5, POLICY)
    assert record["cached"] is True and record["upstream"] is None
    assert list(record).index("cached") == list(record).index("ttfb_ms") + 1
    assert (record["prompt_tokens"], record["completion_tokens"], record["cost_usd"]) == (1200, 300, 0.0)
    exchange.cache = "miss"
    assert "cached" not in usage_record(exchange, "POST", "/v1/chat/completions", 200, "ok", 101.5, POLICY)


def test_a_jwts_caller_is_recorded_as_its_subject_and_team_not_a_key() -> None:
    import re

    from ingress.tenancy.policy import Principal

    subject = Principal("sso:alice@example.com", "acme", POLICY.tenants.get("acme") or Tenant(), Limits(),
                        re.compile(".*"), re.compile(".*"), (), subject="alice@example.com", team="eng")
    exchange = served()
    exchange.principal = subject
    record = usage_record(exchange, "POST", "/v1/chat/completions", 200, "ok", 101.5, POLICY)
    assert (record["tenant"], record["subject"], record["team"]) == ("acme", "sso:alice@example.com", "eng")
    assert "key_id" not in record
    assert list(record).index("subject") == list(record).index("tenant") + 1
