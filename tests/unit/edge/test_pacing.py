"""StartPacer: how many starts one turn of the event loop runs, in what order, and that every one runs."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import aiohttp
import pytest
import uvloop

from ingress.edge.appkeys import PACER
from ingress.edge.middleware import _end_turn
from ingress.edge.pacing import STREAMS_AT_FULL, StartPacer
from ingress.serve.app import create_app, serve_app
from ingress.settings import DEMO_MODEL, Settings

BUDGET = 0.002
LoopFactory = Callable[[], asyncio.AbstractEventLoop]
LOOPS = [pytest.param(asyncio.new_event_loop, id="asyncio"), pytest.param(uvloop.new_event_loop, id="uvloop")]


class Clock:
    """A perf_counter that moves only when a start says it spent time."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def run(loop_factory: LoopFactory, main: Coroutine[Any, Any, None]) -> None:
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(asyncio.wait_for(main, 10))


async def burst(pacer: StartPacer, clock: Clock, costs: list[float], log: list[object],
                cancel: frozenset[int] = frozenset()) -> None:
    """Start len(costs) requests in one turn, each spending its cost once started, while a ticker (standing for
    the chunks every poll reads) marks each turn of the loop in `log` until all have started or been cancelled."""

    async def one(i: int) -> None:
        await pacer.start()
        log.append(i)
        clock.now += costs[i]

    tasks = [asyncio.get_running_loop().create_task(one(i)) for i in range(len(costs))]

    def tick() -> None:
        log.append("turn")
        if not all(t.done() for t in tasks):
            asyncio.get_running_loop().call_soon(tick)

    asyncio.get_running_loop().call_soon(tick)
    await asyncio.sleep(0)
    for i in cancel:
        tasks[i].cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def batches(log: list[object]) -> list[list[int]]:
    """The starts between two turns, for each turn that had any."""
    out: list[list[int]] = [[]]
    for item in log:
        if item == "turn":
            out.append([])
        else:
            assert isinstance(item, int)
            out[-1].append(item)
    return [b for b in out if b]


@pytest.mark.parametrize("loop_factory", LOOPS)
def test_a_burst_starts_a_budget_of_requests_a_turn_in_arrival_order(loop_factory: LoopFactory) -> None:
    clock, log = Clock(), list[object]()
    pacer = StartPacer(BUDGET, clock)
    run(loop_factory, burst(pacer, clock, [0.0005] * 40, log))
    got = batches(log)
    assert [i for b in got for i in b] == list(range(40))  # every one, first come first started
    assert max(len(b) for b in got) == 4  # 2 ms at 0.5 ms each: the fifth would start past the budget
    assert len(got) <= 12  # batches of the measured size, not one start a turn
    assert pacer.waiting == 0


@pytest.mark.parametrize("loop_factory", LOOPS)
def test_a_start_dearer_than_the_budget_still_lets_one_start_every_turn(loop_factory: LoopFactory) -> None:
    clock, log = Clock(), list[object]()
    run(loop_factory, burst(StartPacer(BUDGET, clock), clock, [0.010] * 6, log))
    assert batches(log) == [[0], [1], [2], [3], [4], [5]]


@pytest.mark.parametrize("loop_factory", LOOPS)
def test_a_request_cancelled_while_waiting_leaves_its_place_to_the_next(loop_factory: LoopFactory) -> None:
    clock, log = Clock(), list[object]()
    pacer = StartPacer(BUDGET, clock)
    run(loop_factory, burst(pacer, clock, [0.001] * 10, log, cancel=frozenset({2, 3, 9})))
    assert [i for b in batches(log) for i in b] == [0, 1, 4, 5, 6, 7, 8]
    assert pacer.waiting == 0


async def test_a_start_within_the_budget_does_not_wait_for_a_turn() -> None:
    clock = Clock()
    pacer = StartPacer(BUDGET, clock)
    for _ in range(3):  # three in one turn, 0.5 ms apart: all within 2 ms
        with pytest.raises(StopIteration):
            pacer.start().send(None)  # finished without suspending
        clock.now += 0.0005
    await asyncio.sleep(0)  # the turn is over; the next one starts afresh
    clock.now += 0.0100
    with pytest.raises(StopIteration):
        pacer.start().send(None)


@pytest.mark.parametrize("loop_factory", LOOPS)
def test_past_many_streams_being_written_a_turn_gets_a_share_of_the_budget(loop_factory: LoopFactory) -> None:
    clock, log = Clock(), list[object]()
    pacer = StartPacer(BUDGET, clock, streaming=0.0005)
    pacer.writing(2 * STREAMS_AT_FULL)
    assert pacer.turn_budget == pytest.approx(BUDGET / 2)  # shared among the streams past STREAMS_AT_FULL
    run(loop_factory, burst(pacer, clock, [0.0005] * 12, log))
    assert max(len(b) for b in batches(log)) == 2  # 1 ms at 0.5 ms each, where 2 ms let 4 through
    assert [i for b in batches(log) for i in b] == list(range(12))
    pacer.writing(100 * STREAMS_AT_FULL)
    assert pacer.turn_budget == pytest.approx(0.0005)  # never below `streaming`
    pacer.writing(-102 * STREAMS_AT_FULL + 1)  # up to STREAMS_AT_FULL: the whole budget again
    assert pacer.turn_budget == BUDGET
    clock2, log2 = Clock(), list[object]()
    pacer2 = StartPacer(BUDGET, clock2, streaming=0.0005)
    pacer2.writing(STREAMS_AT_FULL)
    run(loop_factory, burst(pacer2, clock2, [0.0005] * 12, log2))
    assert max(len(b) for b in batches(log2)) == 4


async def test_an_end_past_the_budget_waits_for_a_turn_and_is_counted_apart() -> None:
    clock = Clock()
    pacer = StartPacer(BUDGET, clock)
    with pytest.raises(StopIteration):
        pacer.start().send(None)  # the turn's first start
    clock.now += 0.0100  # it spent the whole budget
    ending = pacer.start(end=True)
    turn = ending.send(None)  # suspended on its turn
    assert pacer.waiting == 1
    assert (pacer.ends_deferred, pacer.deferred) == (1, 0)  # not a start that waited (Server-Timing's pacing)
    await asyncio.sleep(0)  # the next turn lets it go
    assert turn.done() and pacer.waiting == 0
    with pytest.raises(StopIteration) as returned:
        ending.send(None)
    assert returned.value.value is True


async def test_an_end_cancelled_while_it_waits_for_its_turn_still_ends_as_answered() -> None:
    clock = Clock()
    pacer = StartPacer(BUDGET, clock)
    with pytest.raises(StopIteration):
        pacer.start().send(None)
    clock.now += 0.0100  # the turn's budget is spent: the next ones wait, one a turn
    ahead = [pacer.start(), pacer.start()]
    for start in ahead:
        start.send(None)  # suspended on its turn
    ending = asyncio.get_running_loop().create_task(_end_turn(pacer))
    await asyncio.sleep(0)  # a turn: the first waiting start goes, the end waits behind the second
    assert not ending.done() and pacer.ends_deferred == 1
    ending.cancel()  # the client left after its whole answer, or the server stops
    waited = await asyncio.wait_for(ending, 5)  # returns, not cancelled: the request is recorded as it ended
    assert waited >= 0.0 and not ending.cancelled()
    for start in ahead:
        start.close()


def test_the_setting_turns_pacing_off_at_zero_and_sets_its_budget() -> None:
    assert PACER not in create_app(Settings(start_pacing_ms=0))
    assert create_app(Settings())[PACER].budget == pytest.approx(Settings().start_pacing_ms / 1000)
    assert create_app(Settings())[PACER].streaming == pytest.approx(Settings().start_pacing_streaming_ms / 1000)
    assert Settings().start_pacing_streaming_ms < Settings().start_pacing_ms
    assert StartPacer(0.001, streaming=0.002).streaming == 0.001  # never more than the budget


async def test_a_burst_through_the_edge_is_answered_whole_with_starts_paced_one_a_turn() -> None:
    app = create_app(Settings(start_pacing_ms=0.001))  # every start past the first of a turn waits
    body = {"model": DEMO_MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    async with serve_app(app, "127.0.0.1", 0) as url, aiohttp.ClientSession() as session:

        async def one() -> tuple[int, str, bytes]:
            async with session.post(url + "/v1/chat/completions", json=body) as response:
                return response.status, response.headers["Server-Timing"], await response.read()

        answers = await asyncio.gather(*(one() for _ in range(40)))
        for _ in range(500):  # the ends' bookkeeping, paced too, may still wait for its turns
            if not app[PACER].waiting:
                break
            await asyncio.sleep(0.01)
        assert app[PACER].waiting == 0
        assert app[PACER].deferred >= 20  # most of them waited for a turn of their own
        assert app[PACER].streams == 0  # every stream counted while written, and no longer
        assert app[PACER].streaming == app[PACER].budget  # the smaller of the two
    assert all(status == 200 and text.rstrip().endswith(b"data: [DONE]") for status, _, text in answers)
    waited = [timing for _, timing, _ in answers if "pacing;dur=" in timing]
    assert len(waited) == app[PACER].deferred  # each wait is its own Server-Timing entry, apart from decode
