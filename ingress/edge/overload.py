"""A worker's in-flight limit at the door: requests beyond it wait in arrival order, then are refused.

A request takes a place (`enter`) before the edge does any work on it, and gives it back (`Place.leave`)
when its answer's head is sent or it ends, whichever is first: a stream that has started holds no place.
While the worker is at its limit (concurrency.py tunes it), newcomers wait in a FIFO: a future each, and
one timer for the whole queue, armed for the oldest one's deadline, so a waiting request costs nothing
until a place frees. One that waited `max_wait` is refused with `Overloaded` (503, Retry-After), cheaply:
nothing of it was read but its head.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

from ingress import metrics
from ingress.edge.concurrency import ConcurrencyLimit
from ingress.errors import Overloaded
from ingress.exchange import Exchange
from ingress.settings import Overload

Clock = Callable[[], float]

TIMER_SLACK = 0.001  # uvloop's timers fire to the millisecond
REFUSAL = "The server is at its capacity and the request waited too long for a place; retry it shortly."


class Place:
    """A request's place under the limit, from admission until `leave` (once; later calls do nothing)."""

    __slots__ = ("_gate", "admitted", "waited")

    def __init__(self, gate: Gate, admitted: float, waited: float) -> None:
        self._gate: Gate | None = gate
        self.admitted = admitted
        self.waited = waited

    def leave(self, upstream: float = 0.0) -> None:
        """Give the place back; `upstream`: how much of the time since admission the upstream had."""
        gate, self._gate = self._gate, None
        if gate is not None:
            gate.leave(self.admitted, upstream)


class Gate:
    """The limit and its queue. `enter` returns a Place, at once or after a wait, or raises Overloaded."""

    def __init__(self, settings: Overload, clock: Clock = time.perf_counter) -> None:
        self.limit = ConcurrencyLimit(initial=settings.initial_limit, min_limit=settings.min_limit,
                                      max_limit=settings.max_limit, target=settings.target_queue)
        self.max_wait = settings.max_wait_ms / 1000
        self.in_flight = 0
        self.refused = 0  # ever
        self._clock = clock
        self._waiting: deque[tuple[float, asyncio.Future[bool]]] = deque()  # (deadline, granted?)
        self._timer: asyncio.TimerHandle | None = None
        metrics.CONCURRENCY_LIMIT.set(int(self.limit))

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    async def enter(self) -> Place:
        now = self._clock()
        if self.in_flight < int(self.limit) and not self._waiting:
            self.in_flight += 1
            metrics.child(metrics.CONCURRENCY_WAIT).observe(0.0)
            return Place(self, now, 0.0)
        if self.max_wait <= 0:
            self._refuse()
        granted: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        entry = (now + self.max_wait, granted)
        self._waiting.append(entry)
        metrics.CONCURRENCY_WAITING.inc()
        if self._timer is None:
            self._arm()
        try:
            admitted = await granted
        except asyncio.CancelledError:  # the client went away while waiting
            if granted.cancelled():
                self._waiting.remove(entry)  # still queued: no later arrival may wait behind it
            elif granted.result():
                self._give_back()  # granted in the same turn: the place goes to the next
            raise
        finally:
            metrics.CONCURRENCY_WAITING.dec()
        start = self._clock()
        metrics.child(metrics.CONCURRENCY_WAIT).observe(start - now)
        if not admitted:
            self._refuse()
        return Place(self, start, start - now)

    def leave(self, admitted: float, upstream: float) -> None:
        now = self._clock()
        total = now - admitted
        if (window := self.limit.observe(total - upstream, total, self.in_flight, now)) is not None:
            metrics.CONCURRENCY_LIMIT.set(window.limit)
        self._give_back()

    def _give_back(self) -> None:
        self.in_flight -= 1
        limit = int(self.limit)
        waiting = self._waiting
        while waiting and self.in_flight < limit:
            _, granted = waiting.popleft()
            if not granted.done():  # done: its request was cancelled while waiting
                self.in_flight += 1
                granted.set_result(True)

    def _refuse(self) -> None:
        self.refused += 1
        metrics.child(metrics.CONCURRENCY_REFUSED).inc()
        raise Overloaded(REFUSAL)

    def _arm(self) -> None:
        waiting = self._waiting
        self._timer = asyncio.get_running_loop().call_later(
            max(waiting[0][0] - self._clock(), 0.0), self._expire) if waiting else None

    def _expire(self) -> None:
        """The oldest waiters' deadlines: each past one (or within the loop's millisecond timer resolution
        of it) is refused; deadlines are in arrival order."""
        now = self._clock() + TIMER_SLACK
        waiting = self._waiting
        while waiting and waiting[0][0] <= now:
            _, granted = waiting.popleft()
            if not granted.done():
                granted.set_result(False)
        self._arm()


def upstream_time(exchange: Exchange, now: float) -> float:
    """How long the request's answer was the upstream's business: from its last send to its answer's end
    (or head, or now), as the request's metrics count it (0 if it was never sent)."""
    attempts, answer = exchange.attempts, exchange.answer
    if attempts.sent is None:
        return 0.0
    return (answer.done or attempts.head or now) - attempts.sent
