"""ingress/pipeline/admit.py: a request admitted against its key's limits (the reservation held on the
exchange, the x-ratelimit headers either way), settled once with what it used; and `used()`, what a
reservation is charged in each way an exchange ends."""

from __future__ import annotations

import pytest
from gateways import keyed, new_exchange, new_gateway

from ingress.errors import RateLimited, UpstreamAnswered, UpstreamTimeout
from ingress.exchange import Exchange
from ingress.pipeline.admit import admit_estimate, settle, used
from ingress.settings import Route
from ingress.tenancy.plan import Actual, Plan
from ingress.tenancy.settings import Limits
from ingress.wire.types import Usage

PLAN = Plan("ticket", (), input_tokens=100, output_tokens=50)
ROUTE = Route(model="m", group="a")


def sent(**answer: object) -> Exchange:
    exchange = new_exchange()
    exchange.attempts.sent = 1.0
    for name, value in answer.items():
        setattr(exchange.answer, name, value)
    return exchange


def test_a_cache_hit_counts_the_request_not_its_tokens() -> None:
    exchange = sent(usage=Usage(prompt_tokens=7, completion_tokens=3))
    exchange.cache = "hit"
    assert used(exchange, PLAN) == Actual(0, 0)


def test_the_services_usage_is_what_was_used() -> None:
    assert used(sent(usage=Usage(prompt_tokens=7, completion_tokens=3), output_tokens=99), PLAN) == Actual(7, 3)
    unsent = new_exchange()  # usage wins even where nothing else says the request went out
    unsent.answer.usage = Usage(prompt_tokens=1, completion_tokens=2)
    assert used(unsent, PLAN) == Actual(1, 2)


def test_a_relayed_answer_is_not_read_so_the_reservation_stands() -> None:
    exchange = sent()
    exchange.binary = True
    assert used(exchange, PLAN) == Actual(100, 50)


def test_a_request_never_sent_is_refunded_whole() -> None:
    assert used(new_exchange(), PLAN) is None
    exchange = new_exchange()
    exchange.error = UpstreamTimeout("silent")
    assert used(exchange, PLAN) is None


def test_refused_by_the_service_before_any_output_is_refunded_whole() -> None:
    refused = sent()
    refused.error = UpstreamAnswered(400, "invalid_request_error", None, "no", None)
    assert used(refused, PLAN) is None
    broke = sent(output_tokens=12, failure=UpstreamAnswered(500, "server_error", None, "mid-stream", None))
    assert used(broke, PLAN) == Actual(100, 12)  # it had answered: the prompt as counted, what was streamed


def test_without_usage_the_prompt_as_counted_and_what_was_streamed() -> None:
    assert used(sent(output_tokens=12), PLAN) == Actual(100, 12)
    assert used(sent(), PLAN) == Actual(100, 0)
    timed_out = sent()
    timed_out.error = UpstreamTimeout("silent")  # not the service's answer: it may have run
    assert used(timed_out, PLAN) == Actual(100, 0)


async def test_admitted_the_reservation_is_held_and_settled_once_refused_nothing_is_held() -> None:
    tenancy, principal, _ = keyed(limits=Limits(rpm=1))
    gateway = new_gateway(ROUTE, tenancy=tenancy)
    first = new_exchange(principal)
    first.routed.model = "m"
    await admit_estimate(gateway, first, 10, 5)
    admission = first.admitted.admission
    assert admission is not None and first.admitted.outcome == "admitted"
    assert first.admitted.headers is not None and "x-ratelimit-limit-requests" in first.admitted.headers
    assert first.admitted.at is not None and tenancy.limiter.live == {admission.plan.ticket: admission}

    second = new_exchange(principal)
    second.routed.model = "m"
    with pytest.raises(RateLimited) as caught:
        await admit_estimate(gateway, second, 10, 5)
    assert (second.admitted.admission, second.admitted.outcome) == (None, "limited")
    assert second.admitted.headers is not None and second.admitted.headers["x-ratelimit-remaining-requests"] == "0"
    # the window's rest: a minute less what a busy machine took since the first admission
    assert 59_000 <= int(second.admitted.headers["retry-after-ms"]) <= 60_000 and caught.value.retry_after == 60

    first.answer.usage = Usage(prompt_tokens=8, completion_tokens=2)
    settle(first)
    assert admission.settled and first.admitted.admission is None and tenancy.limiter.live == {}
    settle(first)  # once: nothing is left to let go


async def test_an_open_edge_admits_without_a_round_trip() -> None:
    exchange = new_exchange()
    await admit_estimate(new_gateway(ROUTE), exchange, 10, 5)
    assert (exchange.admitted.outcome, exchange.admitted.headers, exchange.admitted.admission) == (None, None, None)
