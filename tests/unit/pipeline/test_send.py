"""ingress/pipeline/send.py, with attempts that answer for the endpoints: a connection that could not be
made retried on another endpoint within the retry budget, the chain's next route on a failure of a class
it lists (and no other), an answer filtered as content_filter falling back, and what `exchange.attempts`
records of it all: how many, the routes fallen back from, the one that served, the lease held."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from gateways import exchange, gateway

from ingress.encoding.passport import RequestMeta
from ingress.errors import IngressError, UpstreamAnswered, UpstreamConnectFailed, UpstreamTimeout
from ingress.exchange import Exchange
from ingress.pipeline.gateway import Gateway
from ingress.pipeline.prepare import Prepared, prepare
from ingress.pipeline.send import send
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


def prepared(gw: Gateway, ex: Exchange) -> Prepared[Any]:
    return prepare(gw, BODY, RequestMeta(), ex)


async def run(gw: Gateway, ex: Exchange, script: Script,
              refused: Callable[[str], bool] | None = None) -> tuple[str, Attempts]:
    attempt, ready = Attempts(script), prepared(gw, ex)
    return await send(gw, ready, ex, attempt, reroute=ready.rerouter(gw, ex), refused=refused), attempt


def served(ex: Exchange) -> tuple[Any, ...]:
    a = ex.attempts
    return a.count, a.group, a.fell_back, a.served_by


async def test_a_connection_not_made_is_retried_on_another_endpoint_of_the_group() -> None:
    gw, ex = gateway(ALONE, endpoints=3), exchange()
    answer, attempt = await run(gw, ex, {"a": [UpstreamConnectFailed("refused"), "answer"]})

    assert answer == "answer"
    assert served(ex) == (2, "a", None, ("gpt-4o", "gpt-4o"))
    first, second = (url for url, _ in attempt.calls)
    assert first != second  # another endpoint: the one that refused is not tried again
    lease = ex.attempts.lease
    assert lease is not None and lease.state.url == second == ex.attempts.upstream
    assert ex.attempts.take() is lease and ex.attempts.lease is None
    lease.release(True)
    assert ex.attempts.sent is not None and ex.attempts.head is not None and ex.attempts.sent <= ex.attempts.head


async def test_retries_stop_when_the_budget_is_spent_and_the_failure_is_raised() -> None:
    gw, ex = gateway(ALONE, endpoints=3, budget=RetryBudget(0.0, 0.0, 0.0)), exchange()
    with pytest.raises(UpstreamConnectFailed, match="refused"):
        await run(gw, ex, {"a": [UpstreamConnectFailed("refused"), "never reached"]})
    assert (ex.attempts.count, ex.attempts.lease, ex.attempts.served_by) == (1, None, None)


async def test_every_endpoint_refusing_ends_in_the_last_failure() -> None:
    gw, ex = gateway(ALONE, endpoints=2), exchange()
    with pytest.raises(UpstreamConnectFailed):
        await run(gw, ex, {"a": [UpstreamConnectFailed("one"), UpstreamConnectFailed("two")]})
    assert (ex.attempts.count, ex.attempts.lease) == (2, None)


@pytest.mark.parametrize(("failure", "kind"), [
    (UpstreamAnswered(503, "server_error", None, "busy", None), "5xx"),
    (UpstreamTimeout("silent"), "timeout"),
])
async def test_a_failure_of_a_listed_class_falls_back_to_the_chains_next_route(failure: IngressError,
                                                                               kind: str) -> None:
    gw, ex = gateway(MAIN, BACKUP), exchange()
    answer, attempt = await run(gw, ex, {"a": [failure], "b": ["from the backup"]})

    assert answer == "from the backup"
    assert served(ex) == (2, "b", [f"gpt-4o:{kind}"], ("backup", "llama-3-8b"))
    assert [model for _, model in attempt.calls] == ["gpt-4o-2024-08-06", "llama-3-8b"]  # prepared for each
    assert ex.attempts.served is not None and ex.attempts.served.route is BACKUP
    assert ex.attempts.lease is not None and ex.attempts.lease.group.name == "b"


async def test_a_failure_of_a_class_not_listed_is_the_answer() -> None:
    gw, ex = gateway(MAIN, BACKUP), exchange()
    limited = UpstreamAnswered(429, "rate_limit_error", None, "slow down", None)
    with pytest.raises(UpstreamAnswered) as caught:
        await run(gw, ex, {"a": [limited], "b": ["never reached"]})
    assert caught.value is limited
    assert served(ex) == (1, "a", None, None)


async def test_the_last_route_failing_raises_its_failure_after_the_fall_back() -> None:
    gw, ex = gateway(MAIN, BACKUP), exchange()
    with pytest.raises(UpstreamAnswered) as caught:
        await run(gw, ex, {"a": [UpstreamAnswered(502, "server_error", None, "a", None)],
                           "b": [UpstreamAnswered(500, "server_error", None, "b", None)]})
    assert caught.value.message == "b"
    assert served(ex) == (2, "b", ["gpt-4o:5xx"], None)


async def test_a_filtered_answer_falls_back_and_is_served_if_nothing_after_it_serves() -> None:
    gw, ex = gateway(MAIN, BACKUP), exchange()
    answer, _ = await run(gw, ex, {"a": ["filtered"], "b": ["clean"]}, refused=lambda a: a == "filtered")
    assert answer == "clean" and served(ex) == (2, "b", ["gpt-4o:content_filter"], ("backup", "llama-3-8b"))

    ex = exchange()
    answer, _ = await run(gw, ex, {"a": ["filtered"], "b": [UpstreamAnswered(500, "server_error", None, "x", None)]},
                          refused=lambda a: a == "filtered")
    assert answer == "filtered"  # kept, and served: the backup had nothing better
    assert served(ex) == (2, "b", ["gpt-4o:content_filter"], ("gpt-4o", "gpt-4o-2024-08-06"))
