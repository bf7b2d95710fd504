"""Gate: places under the in-flight limit, the FIFO beyond it, refusals after the longest wait, cancellation."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import pytest

from ingress.edge.overload import Gate, Place, upstream_time
from ingress.errors import Overloaded
from ingress.exchange import Exchange
from ingress.settings import Overload


def gate(limit: int = 2, max_wait_ms: float = 60_000.0) -> Gate:
    return Gate(Overload(enabled=True, min_limit=limit, max_limit=limit, initial_limit=limit, max_wait_ms=max_wait_ms))


def run(main: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(main, 10))


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_requests_up_to_the_limit_enter_at_once_and_the_rest_wait_in_arrival_order() -> None:
    async def main() -> None:
        door = gate(limit=2)
        first, second = await door.enter(), await door.enter()
        assert door.in_flight == 2 and first.waited == 0.0
        order: list[int] = []

        async def later(i: int) -> Place:
            place = await door.enter()
            order.append(i)
            return place

        waiting = [asyncio.create_task(later(i)) for i in range(3)]
        await settle()
        assert door.waiting == 3 and order == []
        first.leave()
        await settle()
        assert order == [0] and door.in_flight == 2 and door.waiting == 2
        second.leave()
        second.leave()  # a second leave gives nothing back
        await settle()
        assert order == [0, 1] and door.in_flight == 2
        for task in waiting[:2]:
            (await task).leave()
        await settle()
        assert order == [0, 1, 2] and door.in_flight == 1
        (await waiting[2]).leave()
        assert door.in_flight == 0 and door.waiting == 0 and door.refused == 0

    run(main())


def test_a_request_that_waited_the_longest_wait_is_refused_with_retry_after() -> None:
    async def main() -> None:
        door = gate(limit=1, max_wait_ms=30)
        held = await door.enter()
        with pytest.raises(Overloaded) as refused:
            await door.enter()
        assert refused.value.status == 503 and refused.value.retry_after == 1
        assert door.refused == 1 and door.waiting == 0 and door.in_flight == 1
        held.leave()
        place = await door.enter()  # the place freed goes to the next newcomer
        assert place.waited == 0.0

    run(main())


def test_with_no_wait_a_request_at_the_limit_is_refused_at_once() -> None:
    async def main() -> None:
        door = gate(limit=1, max_wait_ms=0)
        await door.enter()
        with pytest.raises(Overloaded):
            await door.enter()
        assert door.waiting == 0

    run(main())


def test_a_request_cancelled_while_waiting_leaves_the_queue_and_no_place_is_lost() -> None:
    async def main() -> None:
        door = gate(limit=1)
        held = await door.enter()
        gone = asyncio.create_task(door.enter())
        await settle()
        gone.cancel()
        await settle()
        assert gone.cancelled() and door.waiting == 0
        held.leave()
        assert door.in_flight == 0
        place = await door.enter()  # nobody waits behind a request that went away
        assert place.waited == 0.0 and door.in_flight == 1

    run(main())


def test_a_place_granted_as_its_request_is_cancelled_goes_to_the_next() -> None:
    async def main() -> None:
        door = gate(limit=1)
        held = await door.enter()
        gone = asyncio.create_task(door.enter())
        after = asyncio.create_task(door.enter())
        await settle()
        held.leave()  # grants `gone` its place...
        gone.cancel()  # ...and it is cancelled before it runs
        await settle()
        assert gone.cancelled()
        place = await after
        assert door.in_flight == 1
        place.leave()
        assert door.in_flight == 0

    run(main())


def test_upstream_time_is_from_the_send_to_the_answer_s_end_or_head() -> None:
    exchange = Exchange("req")
    assert upstream_time(exchange, 5.0) == 0.0
    exchange.attempts.sent = 1.0
    assert upstream_time(exchange, 5.0) == 4.0
    exchange.attempts.head = 2.0
    assert upstream_time(exchange, 5.0) == 1.0
    exchange.answer.done = 3.0
    assert upstream_time(exchange, 5.0) == 2.0
