"""Start pacing: a burst of new requests takes the event loop a few at a time, so that the streams already
flowing are not held behind it.

All of a request's start (its parse, encoding, admission and upstream send) runs in one step of its task,
and every task made ready by one poll of the loop runs before the next poll. A burst of 256 new requests
is ~100 ms of such steps in one turn, and every stream's next chunk waits for all of them (bench/notes/chunks.md,
"What does delay the loop"). Here a request starts at once while the current turn has spent less than `budget`
since its first start; later ones wait, in arrival order, and each following turn lets through as many as
fit in the budget at the mean cost of a start measured so far. Chunks read by each poll are written in the
turn between two such batches.

A turn spent on starts is a wait for every stream's next chunk: past STREAMS_AT_FULL streams being written,
the turn's budget is shared among them (with 2 ms: 2 ms at 64, 0.5 ms at 256), down to `streaming`. At 512 paced
streams a 2 ms budget left the chunks behind a burst of starts late by 4-11 ms at the p99 where 0.25 ms kept
them within 1-2 ms; but a small budget a turn costs throughput past saturation (a fifth of a worker's
req/s without streams, and of its chunks with 32 unpaced ones), so it holds only where many streams wait
(bench/notes/chunks.md, "512 streams: starts and ends paced by the streams waiting")."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

STREAMS_AT_FULL = 64  # streams being written up to which a turn gets the whole budget


class StartPacer:
    def __init__(self, budget: float, clock: Callable[[], float] = time.perf_counter,
                 streaming: float | None = None) -> None:
        self.budget = budget
        self.streaming = budget if streaming is None else min(budget, streaming)  # while streams are written
        self.streams = 0  # streams being written now (`writing`)
        self._clock = clock
        self._turn: float | None = None  # when this turn's first start ran
        self._last = 0.0  # when this turn's latest start ran
        self._cost = 0.0  # a start's mean cost: the gap between two starts in one turn, averaged
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._armed = False  # a call of _next_turn is due
        self.deferred = 0  # starts that waited for a later turn, ever
        self.ends_deferred = 0  # ends (`start(end=True)`) that did

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def turn_budget(self) -> float:
        """What a turn may spend on starts now: `budget` up to STREAMS_AT_FULL streams being written, and
        beyond, shared among them (each stream's next chunk waits for the whole turn), down to `streaming`."""
        if self.streams <= STREAMS_AT_FULL:
            return self.budget
        return max(self.streaming, self.budget * STREAMS_AT_FULL / self.streams)

    def writing(self, delta: int) -> None:
        """A stream's writing began (+1) or ended (-1)."""
        self.streams += delta

    async def start(self, *, end: bool = False) -> bool:
        """Return once the caller may start: at once (False), or in a later turn of the loop (True). `end`:
        the work left once an answer is out (its metrics and access line), paced as starts are: when many
        streams end in one turn, the others' last chunks do not wait for all of it (counted in `ends_deferred`)."""
        waited = bool(self._waiting) or (self._turn is not None and self._clock() - self._turn >= self.turn_budget)
        if waited:
            turn = asyncio.get_running_loop().create_future()
            self._waiting.append(turn)
            if end:
                self.ends_deferred += 1
            else:
                self.deferred += 1
            await turn  # cancelled: the future is done, and _next_turn passes over it
        self._started(self._clock())
        return waited

    def _started(self, now: float) -> None:
        if self._turn is None:
            self._turn = now
            self._arm()
        else:
            gap = now - self._last
            self._cost = gap if not self._cost else self._cost + (gap - self._cost) / 8
        self._last = now

    def _arm(self) -> None:
        if not self._armed:
            self._armed = True
            asyncio.get_running_loop().call_soon(self._next_turn)

    def _next_turn(self) -> None:
        """Called once a turn while starts run or wait: the turn is over; let the next batch go."""
        self._armed = False
        self._turn = None
        batch = max(1, round(self.turn_budget / self._cost)) if self._cost else 1
        while self._waiting and batch:
            turn = self._waiting.popleft()
            if not turn.done():
                turn.set_result(None)
                batch -= 1
        if self._waiting:
            self._arm()
