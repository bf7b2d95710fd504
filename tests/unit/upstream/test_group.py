"""EndpointGroup: per-endpoint and per-group limits, a bounded FIFO wait queue, and wake-ups never lost."""

from __future__ import annotations

import asyncio
import io
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from ingress.errors import Overloaded
from ingress.routing.affinity import Prefix, Way
from ingress.settings import Affinity, Ejection, Endpoint, Group, HealthCheck, Timeouts
from ingress.upstream.client import UpstreamClient
from ingress.upstream.group import EndpointGroup, Lease

URLS = [f"http://10.0.0.{i}:9000" for i in range(1, 4)]  # never connected to: leases only

MakePool = Callable[..., EndpointGroup]


@pytest.fixture
async def make_pool() -> AsyncIterator[MakePool]:
    """`make_pool(endpoints=..., **group_settings)`: a pool whose endpoints are never contacted."""

    def make(endpoints: list[Endpoint] | None = None, **group: Any) -> EndpointGroup:
        config = Group(endpoints=endpoints or [Endpoint(url=URLS[0])], **group)
        clients = [UpstreamClient(e.url or "", Timeouts(), 1 << 20) for e in config.endpoints]
        return EndpointGroup("g", config, clients)

    yield make


async def _settle() -> None:
    """Let every task that is ready run until it blocks again."""
    for _ in range(5):
        await asyncio.sleep(0)


async def _queued(pool: EndpointGroup, n: int) -> list[asyncio.Task[Lease]]:
    """`n` acquirers started one after the other, each waiting in the queue before the next comes."""
    tasks = []
    for i in range(n):
        tasks.append(asyncio.create_task(pool.acquire(), name=f"waiter-{i}"))
        await _settle()
        assert pool.waiting == i + 1
    return tasks


# --- limits -------------------------------------------------------------------------------------


async def test_each_endpoint_takes_at_most_its_max_in_flight(make_pool: MakePool) -> None:
    pool = make_pool([Endpoint(url=URLS[0], max_in_flight=1), Endpoint(url=URLS[1], max_in_flight=2)])

    leases = [await pool.acquire() for _ in range(3)]

    assert sorted(lease.state.url for lease in leases) == [URLS[0], URLS[1], URLS[1]]
    with pytest.raises(Overloaded):
        await pool.acquire()
    leases[0].release(True)
    assert (await pool.acquire()).state.url == leases[0].state.url


async def test_the_group_takes_at_most_its_max_in_flight(make_pool: MakePool) -> None:
    pool = make_pool([Endpoint(url=u) for u in URLS], max_in_flight=2)

    leases = [await pool.acquire(), await pool.acquire()]

    assert pool.in_flight == 2
    with pytest.raises(Overloaded) as caught:
        await pool.acquire()
    assert (caught.value.status, caught.value.code, caught.value.retry_after) == (503, "overloaded", 1)
    for lease in leases:
        lease.release(True)
    assert (pool.in_flight, [s.in_flight for s in pool.states]) == (0, [0, 0, 0])


async def test_a_lease_is_released_once(make_pool: MakePool) -> None:
    pool = make_pool(max_in_flight=1)
    lease = await pool.acquire()

    lease.release(False)
    lease.release(False)
    lease.release(True)

    assert (pool.in_flight, pool.states[0].in_flight, pool.states[0].failures) == (0, 0, 1)


async def test_outcomes_feed_passive_health(make_pool: MakePool) -> None:
    pool = make_pool(ejection=Ejection(failures=2, base=30.0))
    state = pool.states[0]

    (await pool.acquire()).release(False)
    (await pool.acquire()).release(None)  # neither: e.g. the client's own error
    assert state.failures == 1
    (await pool.acquire()).release(False)

    assert state.ejections == 1 and not state.healthy(time.monotonic())
    (await pool.acquire()).release(True)
    assert (state.failures, state.ejections) == (0, 0)


# --- the wait queue -----------------------------------------------------------------------------


async def test_waiters_are_served_in_arrival_order(make_pool: MakePool) -> None:
    pool = make_pool(max_in_flight=1, max_queue=3)
    held = await pool.acquire()
    waiters = await _queued(pool, 3)
    order: list[str] = []

    for task in waiters:
        task.add_done_callback(lambda t: order.append(t.get_name()))
    lease = held
    for task in waiters:
        lease.release(True)
        lease = await task

    lease.release(True)
    assert order == ["waiter-0", "waiter-1", "waiter-2"]
    assert (pool.in_flight, pool.waiting) == (0, 0)


async def test_a_full_queue_refuses_at_once(make_pool: MakePool) -> None:
    pool = make_pool(max_in_flight=1, max_queue=2, queue_timeout=30.0)
    held = await pool.acquire()
    waiters = await _queued(pool, 2)

    refusal = pool.acquire()
    with pytest.raises(Overloaded):
        refusal.send(None)  # raised in the coroutine's first step: it never waited at all
    assert pool.waiting == 2

    held.release(True)
    (await waiters[0]).release(True)
    (await waiters[1]).release(True)


async def test_without_a_queue_a_full_group_refuses_at_once(make_pool: MakePool) -> None:
    pool = make_pool(max_in_flight=1, max_queue=0)
    held = await pool.acquire()

    with pytest.raises(Overloaded):
        await pool.acquire()
    assert pool.waiting == 0
    held.release(True)


async def test_a_waiter_gives_up_after_the_queue_timeout(make_pool: MakePool) -> None:
    pool = make_pool(max_in_flight=1, max_queue=4, queue_timeout=0.2)
    held = await pool.acquire()

    started = time.perf_counter()
    with pytest.raises(Overloaded, match="at capacity"):
        await pool.acquire()

    assert 0.2 <= time.perf_counter() - started < 1.5  # the timeout, with headroom for a loaded machine
    assert pool.waiting == 0
    held.release(True)
    (await pool.acquire()).release(True)


async def test_a_cancelled_waiter_leaves_the_queue(make_pool: MakePool) -> None:
    pool = make_pool(max_in_flight=1, max_queue=2)
    held = await pool.acquire()
    first, second = await _queued(pool, 2)

    first.cancel()
    await _settle()

    assert first.cancelled() and pool.waiting == 1
    held.release(True)
    (await second).release(True)
    assert (pool.in_flight, pool.waiting) == (0, 0)


async def test_a_waiter_cancelled_after_its_wake_up_passes_it_on(make_pool: MakePool) -> None:
    pool = make_pool(max_in_flight=1, max_queue=2, queue_timeout=1.0)
    held = await pool.acquire()
    first, second = await _queued(pool, 2)

    held.release(True)  # wakes `first`...
    first.cancel()  # ...which is cancelled before it runs

    lease = await asyncio.wait_for(second, timeout=0.5)
    assert first.cancelled()
    lease.release(True)
    assert (pool.in_flight, pool.waiting) == (0, 0)


async def test_every_release_wakes_a_waiter_when_many_are_cancelled(make_pool: MakePool) -> None:
    pool = make_pool(max_in_flight=2, max_queue=10, queue_timeout=2.0)
    held = [await pool.acquire(), await pool.acquire()]
    waiters = await _queued(pool, 10)

    for lease in held:
        lease.release(True)
    for task in waiters[::2]:
        task.cancel()  # half of them, including both that were just woken

    served = 0
    for task in waiters[1::2]:
        lease = await asyncio.wait_for(task, timeout=1.0)
        served += 1
        lease.release(True)
    assert served == 5
    assert (pool.in_flight, pool.waiting) == (0, 0)


async def test_a_newcomer_does_not_overtake_the_queue(make_pool: MakePool) -> None:
    pool = make_pool(max_in_flight=1, max_queue=3, queue_timeout=2.0)
    held = await pool.acquire()
    waiters = await _queued(pool, 2)
    order: list[str] = []
    for task in waiters:
        task.add_done_callback(lambda t: order.append(t.get_name()))

    newcomer = asyncio.create_task(pool.acquire(), name="newcomer")  # it runs just before the woken waiter
    held.release(True)
    newcomer.add_done_callback(lambda t: order.append(t.get_name()))
    try:
        for _ in range(3):
            await asyncio.wait({newcomer, *waiters}, timeout=1.0, return_when=asyncio.FIRST_COMPLETED)
            for task in (newcomer, *waiters):
                if task.done() and not task.cancelled() and not task.result().released:
                    task.result().release(True)
            await _settle()
        assert order == ["waiter-0", "waiter-1", "newcomer"]
    finally:
        for task in (newcomer, *waiters):
            task.cancel()
        await asyncio.gather(newcomer, *waiters, return_exceptions=True)


async def test_a_waiter_timing_out_as_it_is_woken_passes_the_wake_up_on(make_pool: MakePool) -> None:
    pool = make_pool(max_in_flight=1, max_queue=2, queue_timeout=0.2)
    held = await pool.acquire()
    first = asyncio.create_task(pool.acquire())
    await asyncio.sleep(0.1)
    second = asyncio.create_task(pool.acquire())
    await _settle()

    time.sleep(0.12)  # `first`'s deadline passes while the loop is busy (second still has ~0.08 s)
    await asyncio.sleep(0)  # the loop takes up the expired timer...
    held.release(True)  # ...and this wake-up, in the same iteration

    outcomes = await asyncio.gather(first, second, return_exceptions=True)
    assert isinstance(outcomes[0], Overloaded)
    assert isinstance(outcomes[1], Lease), outcomes[1]


async def test_a_wake_up_reaches_a_waiter_that_can_use_the_freed_endpoint(make_pool: MakePool) -> None:
    pool = make_pool([Endpoint(url=URLS[0], max_in_flight=1), Endpoint(url=URLS[1], max_in_flight=1)],
                     max_queue=2, queue_timeout=0.3)
    first, second = await pool.acquire(), await pool.acquire()
    retrying = asyncio.create_task(pool.acquire(exclude=frozenset({first.state.url})))
    await _settle()
    fresh = asyncio.create_task(pool.acquire())
    await _settle()

    first.release(True)

    try:
        lease = await fresh
        assert lease.state.url == first.state.url
        lease.release(True)
    finally:
        second.release(True)
        await asyncio.gather(retrying, return_exceptions=True)


# --- cache-affine groups ------------------------------------------------------------------------


async def test_a_cache_affine_group_leases_where_the_conversation_was_served(make_pool: MakePool) -> None:
    pool = make_pool([Endpoint(url=u) for u in URLS], balance="cache_affine",
                     affinity=Affinity(load_allowance=0))  # the relative bound alone

    first = await pool.acquire(prefix=Prefix([1, 2], 1))
    first.release(True)
    again = await pool.acquire(prefix=Prefix([1, 2, 3], 1))  # the next turn
    meanwhile = await pool.acquire(prefix=Prefix([1, 2, 3, 4], 1))  # while it runs: 2 on one of 3 is too many

    assert first.decision is not None and first.decision.way is Way.HASHED
    assert again.decision is not None and (again.decision.way, again.state.url) == (Way.HIT, first.state.url)
    assert meanwhile.decision is not None and meanwhile.decision.way is Way.OVERRIDDEN_BY_LOAD
    assert meanwhile.state.url != first.state.url
    assert pool.affinity is not None and len(pool.affinity.seen) == 3  # blocks 2, 3 and 4: from the conversation's on


async def test_a_cache_affine_groups_default_allowance_keeps_a_conversation_home_at_low_load(
        make_pool: MakePool) -> None:
    pool = make_pool([Endpoint(url=u) for u in URLS], balance="cache_affine")

    first = await pool.acquire(prefix=Prefix([1, 2], 1))
    again = await pool.acquire(prefix=Prefix([1, 2, 3], 1))  # 2 on one of 3: the others' mean (0) + 2
    third = await pool.acquire(prefix=Prefix([1, 2, 3, 4], 1))  # 3 on one: past 0 + 2 and ceil(1.25 x 1)

    assert again.decision is not None and (again.decision.way, again.state.url) == (Way.HIT, first.state.url)
    assert third.decision is not None and third.decision.way is Way.OVERRIDDEN_BY_LOAD
    assert third.state.url != first.state.url


async def test_a_p2c_group_leaves_the_prefix_alone(make_pool: MakePool) -> None:
    pool = make_pool([Endpoint(url=u) for u in URLS])

    lease = await pool.acquire(prefix=Prefix([1, 2], 1))

    assert (lease.decision, pool.affinity) == (None, None)


async def test_a_round_robin_group_leases_each_endpoint_in_turn(make_pool: MakePool) -> None:
    pool = make_pool([Endpoint(url=u) for u in URLS], balance="round_robin")

    leases = [await pool.acquire(prefix=Prefix([1, 2], 1)) for _ in range(6)]  # held: load changes nothing

    assert [lease.state.url for lease in leases] == URLS * 2
    assert (leases[0].decision, pool.affinity) == (None, None)


async def test_a_waiter_is_chosen_for_by_its_own_prefix(make_pool: MakePool) -> None:
    pool = make_pool([Endpoint(url=u) for u in URLS], balance="cache_affine", max_in_flight=1, max_queue=1)
    held = await pool.acquire(prefix=Prefix([7, 8], 1))
    waiter = asyncio.create_task(pool.acquire(prefix=Prefix([7, 8, 9], 1)))
    await _settle()

    held.release(True)
    lease = await waiter

    assert lease.decision is not None and (lease.decision.way, lease.state.url) == (Way.HIT, held.state.url)


# --- active health checks -----------------------------------------------------------------------


class _Prober(UpstreamClient):
    """An endpoint client whose probes give `verdicts` in turn (the last one repeated); an exception
    among them is raised, as a bug in the probe would."""

    def __init__(self, url: str, verdicts: list[bool | Exception]) -> None:
        super().__init__(url, Timeouts(), 1 << 20)
        self.verdicts = verdicts
        self.probes = 0
        self.all_given = asyncio.Event()

    async def probe(self, path: str, timeout: float) -> bool:
        verdict = self.verdicts[min(self.probes, len(self.verdicts) - 1)]
        self.probes += 1
        if self.probes >= len(self.verdicts):
            self.all_given.set()
        if isinstance(verdict, Exception):
            raise verdict
        return verdict


async def test_the_health_check_loop_survives_an_unexpected_exception(log_stream: io.StringIO) -> None:
    config = Group(endpoints=[Endpoint(url=URLS[0]), Endpoint(url=URLS[1])],
                   health_check=HealthCheck(interval=0.01, timeout=0.5))
    broken = _Prober(URLS[0], [RuntimeError("a bug in the probe"), True, False, True])
    well = _Prober(URLS[1], [True])
    pool = EndpointGroup("g", config, [broken, well])
    checks = asyncio.create_task(pool.check_health())
    try:
        reached = asyncio.create_task(broken.all_given.wait())
        await asyncio.wait({checks, reached}, timeout=10.0, return_when=asyncio.FIRST_COMPLETED)
        assert not checks.done(), checks.exception()  # still checking after the exception
        assert reached.done()
    finally:
        checks.cancel()
        await asyncio.gather(checks, return_exceptions=True)

    # The raise counted as a failed check; later ones decided again, for both endpoints.
    assert pool.states[0].active_healthy and pool.states[1].active_healthy
    assert well.probes >= 4
    lines = [json.loads(line) for line in log_stream.getvalue().splitlines()]
    [raised] = [line for line in lines if line["event"] == "health check raised"]
    assert (raised["level"], raised["group"], raised["endpoint"]) == ("error", "g", URLS[0])
    assert raised["exc_type"] == "RuntimeError"  # its type and frames; a message is never logged
    changes = [line["healthy"] for line in lines if line["event"] == "endpoint health changed"
               and line["endpoint"] == URLS[0]]
    assert changes[:4] == [False, True, False, True]  # the raise, then the verdicts True, False, True
