"""The fleet's store: every edge's limit state in one Redis (or Valkey), one script call a request.

    admit    one EVALSHA of limits.lua: all of a Plan's checks on Redis's clock, applied all or none
    settle   queued, and sent with the others queued as one call: idempotent per ticket (a tombstone
             remembers it 10 minutes); a batch goes when BATCH are queued or BATCH_DELAY after the first
    renew    one call: the leases of requests in progress, and this process's heartbeat

Every key is under one hash tag, `{<prefix>}:`, so one request's keys share a Redis Cluster slot, and
every key the script writes expires. Nothing secret is stored: keys hold key ids, tenant and model names.

The calls go through resp.py's client, one pipelined connection. When Redis is slow or down, a call gives
up at the deadline (no client-side retries), a circuit breaker stops asking for a while, and each check's
`degraded` policy decides: "local" (a MemoryStore holding 1/(live processes) of each limit; the count
comes from the processes' heartbeats in Redis, the last one kept), "allow", or "refuse" (503); refuse
wins over local over allow. What Redis missed meanwhile (settles, and cancels of admissions that timed
out, since their script may still run) stays queued, and is sent once it answers again.

Settling is off the response path, so it need not cost a round trip a request: the settles (and cancels)
are queued, and one flush at a time sends them, oldest first, BATCH to a call, under the same deadline
and breaker as every call. `settle()` returns once its ticket's batch was answered, or missed (then the
ticket waits in the queue for Redis to answer again).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from importlib import resources
from typing import Any, Literal

import msgspec

from ingress import metrics
from ingress.log import get_logger
from ingress.tasks import BackgroundTasks
from ingress.tenancy.plan import Actual, Check, Decision, Plan, State, fitted
from ingress.tenancy.settings import Redis as RedisSettings
from ingress.tenancy.stores.breaker import Breaker
from ingress.tenancy.stores.memory import MemoryStore
from ingress.tenancy.stores.resp import Client
from ingress.tenancy.stores.resp_codec import ReplyError, Script, encode

log = get_logger("ingress.tenancy")

SCRIPT = resources.files("ingress.tenancy.stores").joinpath("limits.lua").read_text()
LIMITS = Script(SCRIPT)  # its EVALSHA head encoded once (resp_codec.py)
SHA = LIMITS.sha
ADMITTED, CANCELLED = 1, 2
HEARTBEAT_US = 30_000_000  # a process is live this long after its last renew (or 3 gaps between renews)
MAX_PENDING = 100_000  # settles and cancels kept for Redis while it cannot answer; the oldest go first
BATCH = 64  # settles a call: a flush goes at once when this many are queued
BATCH_DELAY = 0.003  # else this long (s) after the first was queued: the most a settle waits for others
# ...unless it frees a concurrency slot: that one goes at once (with what else is queued), since a client
# that keeps its `concurrency` requests in flight sends the next one as soon as one ends
_ALGORITHM = {"rate": "r", "quota": "q", "slots": "s"}
_RANK = {"allow": 0, "local": 1, "refuse": 2}  # refuse wins over local over allow


class _Unanswered(Exception):
    """The store could not answer; `sent` when the call may have reached it (its script may still run)."""

    def __init__(self, sent: bool) -> None:
        super().__init__(sent)
        self.sent = sent


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timeout"
    if isinstance(exc, OSError):  # ConnectionError among them
        return "connection"
    return "error"


def record_of(keys: list[str], plan: Plan) -> bytes:
    """What a reservation remembers for settle: each check's key, algorithm, limit, period, reserved cost
    and cost per request, input token and output token."""
    return msgspec.json.encode({"k": keys, "c": [
        [_ALGORITHM[c.algorithm], c.limit, c.period_us, cost, c.per_request, c.per_input, c.per_output]
        for c, cost in zip(plan.checks, plan.costs(), strict=True)]})


def _checks_of(plan: Plan) -> list[str | int]:
    """What the admission decides by, per check: algorithm, limit, period and cost."""
    return [value for check, cost in zip(plan.checks, plan.costs(), strict=True)
            for value in (_ALGORITHM[check.algorithm], check.limit, check.period_us, cost)]


class RedisStore:
    share = 1.0  # the fleet's limits, whole (the local fallback holds its share, self.local.share)

    def __init__(self, settings: RedisSettings, workers: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.deadline = settings.deadline_ms / 1000
        self.client = Client(settings.url, connect_timeout=self.deadline)  # one pipelined connection
        self.prefix = "{" + settings.prefix + "}:"
        self.registry = self.prefix + "procs"
        self.process = f"{socket.gethostname()}:{os.getpid()}:{os.urandom(4).hex()}"
        self.breaker = Breaker(settings.breaker.failures, settings.breaker.open_for, clock)
        self.clock = clock
        self.live = max(workers, 1)  # until the registry says otherwise: at least this machine's workers
        self.local = MemoryStore(1 / self.live)
        self._local: set[str] = set()  # tickets admitted by the local fallback: settled there too
        self._allowed: set[str] = set()  # tickets admitted by the "allow" policy: nothing to settle
        self._pending: dict[str, Actual | None] = {}  # ticket → what to settle, oldest first (the first one wins)
        self._waiting: dict[str, list[asyncio.Future[None]]] = {}  # ticket → the settle() calls waiting for it
        self._since = 0.0  # loop time: when the oldest of the queued settles was queued
        self._slotted: set[str] = set()  # tickets holding a concurrency slot in Redis: their settle is not delayed
        self._urgent = False  # a settle that frees a slot is queued
        self._wake: asyncio.Future[None] | None = None  # the flush waiting for company: resolved, it sends now
        self._closing = False  # close(): send what is queued without waiting for more
        self._renewed_at: float | None = None
        self._registered = False
        self._flushing = False
        self.tasks = BackgroundTasks()

    @property
    def pending(self) -> int:
        """Settles and cancels not yet answered by Redis: queued for the next batch, or missed by the last."""
        return len(self._pending)

    # --- the Store protocol -------------------------------------------------------------------------

    async def admit(self, plan: Plan) -> Decision:
        keys = [self.prefix + c.key for c in plan.checks]
        try:
            reply = await self._call("admit", [self._reservation(plan.ticket), self._tombstone(plan.ticket), *keys],
                                     ["admit", plan.ticket, record_of(keys, plan), *_checks_of(plan)])
        except _Unanswered as exc:
            if exc.sent:
                self._settle_later(plan.ticket, None)
            return self._degraded(plan)
        except asyncio.CancelledError:  # the client left while Redis decided: undo whatever it decided
            self._settle_later(plan.ticket, None)
            self._kick()
            raise
        decision = self._decision(plan, reply)
        if decision.admitted and any(c.algorithm == "slots" for c in plan.checks):
            self._slotted.add(plan.ticket)
        return decision

    async def settle(self, ticket: str, actual: Actual | None) -> None:
        if ticket in self._local:
            self._local.discard(ticket)
            self.local.settle(ticket, actual)
            return
        if ticket in self._allowed:
            self._allowed.discard(ticket)
            return
        urgent = ticket in self._slotted
        self._slotted.discard(ticket)
        self._settle_later(ticket, actual, urgent)
        if not self.breaker.closed:
            return  # it waits in the queue until Redis answers again
        done = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(ticket, []).append(done)
        self._kick()
        await done

    async def renew(self, tickets: list[str]) -> None:
        here = [t for t in tickets if t in self._local]
        self.local.renew(here)
        self.local.sweep()
        now = self.clock()
        gap = 0.0 if self._renewed_at is None else now - self._renewed_at
        self._renewed_at = now
        life = max(HEARTBEAT_US, int(3 * gap * 1_000_000))
        there = [t for t in tickets if t not in self._local and t not in self._allowed]
        try:
            live = await self._call("renew", [self.registry, *(self._reservation(t) for t in there)],
                                    ["renew", self.process, life, *there])
        except _Unanswered:
            return  # the leases run on; the last count of live processes stays
        self.live = max(int(live), 1)
        self.local.share = 1 / self.live

    async def close(self) -> None:
        self._closing = True  # what is queued goes now, in batches, each call within the deadline
        self._send_now()
        self._kick()
        await self.tasks.wait(self.deadline * 4)
        await self.tasks.close()
        if self.breaker.closed and self._registered:
            with contextlib.suppress(ReplyError, OSError):  # TimeoutError among them; its heartbeat expires
                await self.client.call(encode("ZREM", self.registry, self.process),
                                       asyncio.get_running_loop().time() + self.deadline)
        await self.client.close()

    # --- one call -----------------------------------------------------------------------------------

    async def _call(self, call: str, keys: list[str], args: list[Any]) -> Any:
        """One script call within the deadline, counted; _Unanswered when the store cannot answer."""
        if not self.breaker.allows():
            metrics.child(metrics.STORE_ERRORS, call, "breaker_open").inc()
            raise _Unanswered(sent=False)
        started = time.perf_counter()
        outcome: BaseException | None = None
        try:  # a restarted or flushed server (NOSCRIPT) is sent the script and the call again, once
            reply = await self.client.evalsha(LIMITS, keys, args, asyncio.get_running_loop().time() + self.deadline)
        except (ReplyError, OSError) as exc:  # TimeoutError (the deadline) among them
            outcome = exc
        except BaseException:
            self.breaker.abandoned()
            raise
        finally:
            metrics.child(metrics.STORE_LATENCY, call).observe(time.perf_counter() - started)
        if outcome is not None:
            self._failed(call, outcome)
            raise _Unanswered(sent=True)
        self._answered()
        return reply

    def _failed(self, call: str, exc: BaseException) -> None:
        metrics.child(metrics.STORE_ERRORS, call, _reason(exc)).inc()
        if self.breaker.failed_once():
            metrics.BREAKER_OPEN.set(1)
            log.warning("limit store unavailable: breaker opened, degraded policies decide",
                        failures=self.breaker.failed, open_for_s=self.breaker.open_for, error=type(exc).__name__,
                        reason=_reason(exc))

    def _answered(self) -> None:
        if self.breaker.succeeded():
            metrics.BREAKER_OPEN.set(0)
            log.info("limit store answers again: breaker closed", pending=len(self._pending))
        if not self._registered:
            self._registered = True
            self.tasks.spawn(self.renew([]), "limits-register")
        self._kick()

    # --- the settle queue: what Redis has not answered yet ----------------------------------------

    def _settle_later(self, ticket: str, actual: Actual | None, urgent: bool = False) -> None:
        if not self._pending:
            self._since = asyncio.get_running_loop().time()
        self._pending.setdefault(ticket, actual)  # settled twice: the first settle is the one Redis sees first
        if len(self._pending) > MAX_PENDING:
            dropped = next(iter(self._pending))
            del self._pending[dropped]  # its reservation stays charged until its TTL
            self._release([dropped])
            metrics.child(metrics.STORE_ERRORS, "settle", "dropped").inc()
        if urgent:
            self._urgent = True
        if urgent or len(self._pending) >= BATCH:
            self._send_now()

    def _send_now(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    def _kick(self) -> None:
        if self._pending and not self._flushing and self.breaker.closed:
            self._flushing = True
            self.tasks.spawn(self._flush(), "limits-flush")

    async def _flush(self) -> None:
        """Send the queued settles, oldest first, BATCH a call, one call at a time, while Redis answers. A
        batch that is not full waits for more until BATCH_DELAY after the first of it was queued, unless one
        of them frees a slot; while a call is in flight, the next batch gathers."""
        loop = asyncio.get_running_loop()
        try:
            while self._pending and self.breaker.closed:
                wait = self._since + BATCH_DELAY - loop.time()
                if len(self._pending) < BATCH and not (self._closing or self._urgent) and wait > 0:
                    self._wake = loop.create_future()
                    timer = loop.call_later(wait, self._send_now)
                    try:
                        await self._wake
                    finally:
                        timer.cancel()
                        self._wake = None
                    continue  # the breaker may have opened meanwhile
                batch = dict(itertools.islice(self._pending.items(), BATCH))
                for ticket in batch:
                    del self._pending[ticket]
                if self._pending:  # the rest waited at least as long as this batch's call takes
                    self._since = loop.time()
                else:
                    self._urgent = False
                try:
                    await self._settle(batch)
                except _Unanswered:
                    for ticket, actual in self._pending.items():  # the batch is still the oldest, first again
                        batch.setdefault(ticket, actual)
                    self._pending = batch
                    self._since = 0.0  # overdue: sent as soon as Redis answers
                    return
                finally:
                    self._release(list(batch))
        finally:
            self._flushing = False
            self._release(list(self._waiting))  # what is still queued waits for Redis, not its callers

    def _release(self, tickets: Iterable[str]) -> None:
        """The settle() calls waiting for these tickets return."""
        for ticket in tickets:
            for done in self._waiting.pop(ticket, ()):
                if not done.done():
                    done.set_result(None)

    async def _settle(self, batch: dict[str, Actual | None]) -> None:
        """One call for the batch: each ticket settled as if alone (idempotent, refunds and debts, slots freed)."""
        keys: list[str] = []
        args: list[Any] = ["settle"]
        for ticket, actual in batch.items():
            keys += (self._reservation(ticket), self._tombstone(ticket))
            args += (ticket, "1", actual.input_tokens, actual.output_tokens) if actual is not None else (
                ticket, "0", 0, 0)
        await self._call("settle", keys, args)

    # --- decisions ----------------------------------------------------------------------------------

    def _decision(self, plan: Plan, reply: list[int]) -> Decision:
        status, index, wait, never, expired, *states = reply
        if expired:
            metrics.child(metrics.LEASES_EXPIRED).inc(expired)
        if status == CANCELLED:
            return Decision(False, (), None, 0, never=False, degraded="cancelled")
        rates = [c for c in plan.checks if c.algorithm == "rate"]
        told = tuple(State(c, states[2 * i], states[2 * i + 1]) for i, c in enumerate(rates))
        if status == ADMITTED:
            return Decision(True, told)
        return Decision(False, told, plan.checks[index - 1], wait, never=bool(never))

    def _degraded(self, plan: Plan) -> Decision:
        """The decision when Redis cannot answer: by the strictest policy among the plan's checks."""
        policy: Literal["local", "allow", "refuse"] = max(
            (c.degraded for c in plan.checks), key=_RANK.__getitem__, default="local")
        if policy == "refuse":
            return Decision(False, (), None, 0, degraded="refuse")
        if policy == "allow":
            self._allowed.add(plan.ticket)
            return Decision(True, (), degraded="allow")
        local: tuple[Check, ...] = tuple(c for c in plan.checks if c.degraded == "local")
        decision = self.local.admit(fitted(replace(plan, checks=local), self.local.share))
        if decision.admitted:
            self._local.add(plan.ticket)
        return replace(decision, degraded=decision.degraded or "local")

    def _reservation(self, ticket: str) -> str:
        return f"{self.prefix}r:{ticket}"

    def _tombstone(self, ticket: str) -> str:
        return f"{self.prefix}s:{ticket}"
