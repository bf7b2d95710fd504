"""ingress/pipeline/send.py, with attempts that answer for the endpoints: a connection that could not be
made retried on another endpoint within the retry budget, the chain's next route on a failure of a class
it lists (and no other), an answer filtered as content_filter falling back, and what `exchange.attempts`
records of it all: how many, the routes fallen back from, the one that served, the lease held; and a hit of
the response cache recorded as served by the route and model that made its entry, with no attempt."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from gateways import new_exchange, new_gateway

from ingress.encoding.passport import RequestMeta
from ingress.errors import IngressError, UpstreamAnswered, UpstreamConnectFailed, UpstreamTimeout
from ingress.exchange import Exchange
from ingress.pipeline.gateway import Gateway
from ingress.pipeline.prepare import Prepared, prepare
from ingress.pipeline.send import send, served_stored
from ingress.routing.budget import RetryBudget
from ingress.settings import Route
from ingress.upstream.group import Lease

BODY = b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}'
MAIN = Route(model="gpt-4o", group="a", upstream_model="gpt-4o-2024-08-06", fallbacks=["backup"],
             fallback_on=("5xx", "timeout", "content_filter"))
BACKUP = Route(name="backup", group="b", upstream_model="llama-3-8b")
ALONE = Route(model="gpt-4o", group="a")

Script = dict[str, list[IngressError | str]]  # what each group's attempts do, in turn: fail, or answer


class Attempts:
    """An attempt that plays a script per group: each call takes the group's next step; a string is the
    answer. It records the endpoint and the route's upstream model each call was made for."""

    def __init__(self, script: Script) -> None:
        self.script = {group: list(steps) for group, steps in script.items()}
        self.calls: list[tuple[str, str]] = []

    async def __call__(self, lease: Lease, ready: Prepared[Any]) -> str:
        self.calls.append((lease.state.url, ready.match.upstream_model))
        step = self.script[lease.group.name].pop(0)
        if isinstance(step, IngressError):
            raise step
        return step


def prepared(gateway: Gateway, exchange: Exchange) -> Prepared[Any]:
    return prepare(gateway, BODY, RequestMeta(), exchange)


async def run(gateway: Gateway, exchange: Exchange, script: Script,
              refused: Callable[[str], bool] | None = None) -> tuple[str, Attempts]:
    attempt, ready = Attempts(script), prepared(gateway, exchange)
    reroute = ready.rerouter(gateway, exchange)
    return await send(gateway, ready, exchange, attempt, reroute=reroute, refused=refused), attempt


def served(exchange: Exchange) -> tuple[Any, ...]:
    a = exchange.attempts
    return a.count, a.group, a.fell_back, a.served_by


async def test_a_connection_not_made_is_retried_on_another_endpoint_of_the_group() -> None:
    gateway, exchange = new_gateway(ALONE, endpoints=3), new_exchange()
    answer, attempt = await run(gateway, exchange, {"a": [UpstreamConnectFailed("refused"), "answer"]})

    assert answer == "answer"
    assert served(exchange) == (2, "a", None, ("gpt-4o", "gpt-4o"))
    first, second = (url for url, _ in attempt.calls)
    assert first != second  # another endpoint: the one that refused is not tried again
    lease = exchange.attempts.lease
    assert lease is not None and lease.state.url == second == exchange.attempts.upstream
    assert exchange.attempts.take() is lease and exchange.attempts.lease is None
    lease.release(True)
    sent, head = exchange.attempts.sent, exchange.attempts.head
    assert sent is not None and head is not None and sent <= head


async def test_retries_stop_when_the_budget_is_spent_and_the_failure_is_raised() -> None:
    gateway, exchange = new_gateway(ALONE, endpoints=3, budget=RetryBudget(0.0, 0.0, 0.0)), new_exchange()
    with pytest.raises(UpstreamConnectFailed, match="refused"):
        await run(gateway, exchange, {"a": [UpstreamConnectFailed("refused"), "never reached"]})
    assert (exchange.attempts.count, exchange.attempts.lease, exchange.attempts.served_by) == (1, None, None)


async def test_every_endpoint_refusing_ends_in_the_last_failure() -> None:
    gateway, exchange = new_gateway(ALONE, endpoints=2), new_exchange()
    with pytest.raises(UpstreamConnectFailed):
        await run(gateway, exchange, {"a": [UpstreamConnectFailed("one"), UpstreamConnectFailed("two")]})
    assert (exchange.attempts.count, exchange.attempts.lease) == (2, None)


@pytest.mark.parametrize(("failure", "kind"), [
    (UpstreamAnswered(503, "server_error", None, "busy", None), "5xx"),
    (UpstreamTimeout("silent"), "timeout"),
])
async def test_a_failure_of_a_listed_class_falls_back_to_the_chains_next_route(failure: IngressError,
                                                                               kind: str) -> None:
    gateway, exchange = new_gateway(MAIN, BACKUP), new_exchange()
    answer, attempt = await run(gateway, exchange, {"a": [failure], "b": ["from the backup"]})

    assert answer == "from the backup"
    assert served(exchange) == (2, "b", [f"gpt-4o:{kind}"], ("backup", "llama-3-8b"))
    assert [model for _, model in attempt.calls] == ["gpt-4o-2024-08-06", "llama-3-8b"]  # prepared for each
    assert exchange.attempts.served is not None and exchange.attempts.served.route is BACKUP
    assert exchange.attempts.lease is not None and exchange.attempts.lease.group.name == "b"


async def test_a_failure_of_a_class_not_listed_is_the_answer() -> None:
    gateway, exchange = new_gateway(MAIN, BACKUP), new_exchange()
    limited = UpstreamAnswered(429, "rate_limit_error", None, "slow down", None)
    with pytest.raises(UpstreamAnswered) as caught:
        await run(gateway, exchange, {"a": [limited], "b": ["never reached"]})
    assert caught.value is limited
    assert served(exchange) == (1, "a", None, None)


async def test_the_last_route_failing_raises_its_failure_after_the_fall_back() -> None:
    gateway, exchange = new_gateway(MAIN, BACKUP), new_exchange()
    with pytest.raises(UpstreamAnswered) as caught:
        await run(gateway, exchange, {"a": [UpstreamAnswered(502, "server_error", None, "a", None)],
                           "b": [UpstreamAnswered(500, "server_error", None, "b", None)]})
    assert caught.value.message == "b"
    assert served(exchange) == (2, "b", ["gpt-4o:5xx"], None)


async def test_a_filtered_answer_falls_back_and_is_served_if_nothing_after_it_serves() -> None:
    gateway, exchange = new_gateway(MAIN, BACKUP), new_exchange()
    answer, _ = await run(gateway, exchange, {"a": ["filtered"], "b": ["clean"]}, refused=lambda a: a == "filtered")
    assert answer == "clean" and served(exchange) == (2, "b", ["gpt-4o:content_filter"], ("backup", "llama-3-8b"))

    exchange = new_exchange()
    failing = UpstreamAnswered(500, "server_error", None, "x", None)
    answer, attempt = await run(gateway, exchange, {"a": ["filtered"], "b": [failing]},
                                refused=lambda a: a == "filtered")
    assert answer == "filtered"  # kept, and served: the backup had nothing better
    # the group and endpoint that answered it, not the backup's that failed
    assert served(exchange) == (2, "a", ["gpt-4o:content_filter"], ("gpt-4o", "gpt-4o-2024-08-06"))
    assert exchange.attempts.upstream == attempt.calls[0][0]


def test_a_hit_of_the_cache_is_served_by_what_made_its_entry_with_no_attempt() -> None:
    gateway, exchange = new_gateway(MAIN, BACKUP), new_exchange()
    served_stored(exchange, prepared(gateway, exchange), ("backup", "llama-3-8b"))  # a miss that fell back stored it
    assert served(exchange) == (0, None, None, ("backup", "llama-3-8b"))
    # what seals its reasoning and counts its streamed tokens is the route that made it, with its model
    assert exchange.attempts.served is not None and exchange.attempts.served.route is BACKUP
    assert exchange.attempts.served.upstream_model == "llama-3-8b"
    assert exchange.attempts.lease is None

    own = new_exchange()  # made by the request's own route: its match, as prepared
    ready = prepared(gateway, own)
    served_stored(own, ready, ("gpt-4o", "gpt-4o-2024-08-06"))
    assert own.attempts.served is ready.match

    old = new_exchange()  # an entry that does not say what made it: no route is named, and it is read as the request's
    ready = prepared(gateway, old)
    served_stored(old, ready, None)
    assert served(old) == (0, None, None, None)
    assert old.attempts.served is ready.match
