"""The in-memory store: one process's limit state, with the same semantics as the Redis store's script.

`share` scales every limit: a worker of `--workers N` holds 1/N of each (documented), and the Redis store
falls back to one of these with 1/(live processes) when Redis cannot answer. Time is the store's own
clock (microseconds); a Plan's costs and keys come from plan.py.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ingress import metrics
from ingress.tenancy.plan import IN_FLIGHT_US, Actual, Check, Decision, Plan, State

TOMBSTONE_US = 600_000_000  # a settled ticket is remembered this long: settling twice refunds once
# The memory backend's own tickets: its admissions are decided in the request's own call (no cancel can
# come before one) and the limiter settles each once, so a tombstone there guards only against a slip.
# Kept 600 s, they were the soak's largest growth: ~130 bytes a request, 76 MiB a worker at 1,000/s.
LOCAL_TOMBSTONE_US = 30_000_000


def monotonic_us() -> int:
    return time.monotonic_ns() // 1000


@dataclass(slots=True)
class _Reservation:
    checks: tuple[Check, ...]
    costs: list[int]
    expires: int


class MemoryStore:
    def __init__(self, share: float = 1.0, clock: Callable[[], int] = monotonic_us,
                 tombstone_us: int = TOMBSTONE_US) -> None:
        self.share = share
        self.clock = clock
        self.tombstone_us = tombstone_us
        self._tat: dict[str, float] = {}  # rate: the theoretical arrival time of the next request, in µs
        self._quota: dict[str, tuple[int, int]] = {}  # quota: (used, expires)
        self._inflight: dict[str, int] = {}  # quota: how much of `used` reservations not yet settled hold
        self._slots: dict[str, dict[str, int]] = {}  # slots: ticket → lease expiry
        self._reserved: dict[str, _Reservation] = {}
        self._settled: dict[str, int] = {}  # ticket → when it may be forgotten
        self.leases_expired = 0

    def limit(self, check: Check) -> float:
        """The check's limit, scaled by the share; at least one (a request, a slot, a token) per period."""
        scaled = check.limit * self.share
        return max(scaled, 1.0) if check.algorithm == "rate" else max(math.floor(scaled), 1)

    def admit(self, plan: Plan) -> Decision:
        """Every check passes and all are applied, or none is: a refused request consumes nothing.

        On every request's path: the rate checks (nearly all) are decided and read back inline, a pass each,
        with no call a check (the general form, a call a stage a check, cost the edge ~25 µs a request with
        three limits; tests/property/test_memory_store.py holds it and checks the two agree)."""
        now = self.clock()
        ticket = plan.ticket
        if ticket in self._settled or ticket in self._reserved:
            return Decision(False, (), None, 0, never=False, degraded="cancelled")
        checks, share, tats = plan.checks, self.share, self._tat
        inputs, outputs = plan.input_tokens, plan.output_tokens
        costs: list[int] = []
        limits: list[float] = []
        refused: list[tuple[bool, int, Check]] = []
        lease: int | None = None
        for check in checks:
            cost = check.per_request + check.per_input * inputs + check.per_output * outputs
            costs.append(cost)
            scaled = check.limit * share
            algorithm = check.algorithm
            if algorithm == "rate":
                rate = scaled if scaled > 1.0 else 1.0
                limits.append(rate)
                period = check.period_us
                step = cost * (period / rate)
                tat = tats.get(check.key, 0.0)
                ahead = (tat if tat > now else now) + step - now
                if step > period:
                    refused.append((True, 0, check))
                elif ahead > period:
                    refused.append((False, math.ceil(ahead - period), check))
                continue
            limit = max(math.floor(scaled), 1)
            limits.append(limit)
            if algorithm == "quota":
                used = self._used(check.key, now)
                if cost > limit or used + cost > limit:
                    refused.append(self._spent(check, cost, limit, used))
            else:
                lease = check.period_us if lease is None else max(lease, check.period_us)
                if len(self._held(check.key, now)) + 1 > limit:
                    refused.append((False, 1_000_000, check))
        if refused:
            never = [r for r in refused if r[0]]
            _, wait, check = never[0] if never else max(refused, key=lambda r: r[1])
            return Decision(False, self._states(checks, limits, now), check, wait, never=bool(never))
        for check, cost, bound in zip(checks, costs, limits, strict=True):
            self._apply(check, cost, now, ticket, bound)
        self._reserved[ticket] = _Reservation(checks, costs, now + (TOMBSTONE_US if lease is None else lease))
        return Decision(True, self._states(checks, limits, now))

    def settle(self, ticket: str, actual: Actual | None) -> bool:
        """Charge what the request used (refund or debt against its reservation), free its slots, once.
        `actual` None cancels: the reservation is refunded whole, and a ticket not yet admitted never will be.
        False when there was nothing to settle (settled before, or never reserved)."""
        now = self.clock()
        reservation = self._reserved.pop(ticket, None)
        if ticket not in self._settled:
            self._settled[ticket] = now + self.tombstone_us
        if reservation is None:
            return False
        for check, reserved in zip(reservation.checks, reservation.costs, strict=True):
            used = 0 if actual is None else check.cost(actual.input_tokens, actual.output_tokens)
            if check.algorithm == "quota":
                self._hold(check.key, -reserved)
            self._apply(check, used - reserved, now, ticket, self.limit(check), release=True)
        return True

    def renew(self, tickets: Iterable[str]) -> None:
        """Extend the leases of requests still in progress."""
        now = self.clock()
        for ticket in tickets:
            reservation = self._reserved.get(ticket)
            if reservation is None:
                continue
            reservation.expires = max(reservation.expires, now + TOMBSTONE_US)
            for check in reservation.checks:
                if check.algorithm == "slots":
                    self._slots.setdefault(check.key, {})[ticket] = now + check.period_us

    def sweep(self) -> None:
        """Forget what has expired: full buckets, ended periods, dead leases, old tombstones."""
        now = self.clock()
        self._tat = {k: v for k, v in self._tat.items() if v > now}
        self._quota = {k: v for k, v in self._quota.items() if v[1] > now}
        for key in list(self._slots):
            if not self._held(key, now):
                del self._slots[key]
        self._settled = {k: v for k, v in self._settled.items() if v > now}
        for ticket in [t for t, r in self._reserved.items() if r.expires <= now]:
            reservation = self._reserved.pop(ticket)  # its worker died: the reservation stays charged, as spent
            for check, reserved in zip(reservation.checks, reservation.costs, strict=True):
                if check.algorithm == "quota":
                    self._hold(check.key, -reserved)

    def _spent(self, check: Check, cost: int, limit: int, used: int) -> tuple[bool, int, Check]:
        """A budget's refusal: for good when what is spent leaves no room for `cost` (until the period
        renews); else the reservations of requests in flight hold the room, and settle soon."""
        spent = used - self._inflight.get(check.key, 0)
        if cost > limit or spent + cost > limit:
            return True, check.period_us, check
        return False, IN_FLIGHT_US, check

    def _hold(self, key: str, amount: int) -> None:
        held = self._inflight.get(key, 0) + amount
        if held > 0:
            self._inflight[key] = held
        else:
            self._inflight.pop(key, None)

    def _used(self, key: str, now: int) -> int:
        used, expires = self._quota.get(key, (0, 0))
        return used if expires > now else 0

    def _held(self, key: str, now: int) -> dict[str, int]:
        held = self._slots.get(key, {})
        expired = [t for t, until in held.items() if until <= now]
        for ticket in expired:
            del held[ticket]
        if expired:
            self.leases_expired += len(expired)
            metrics.child(metrics.LEASES_EXPIRED).inc(len(expired))
        return held

    def _apply(self, check: Check, amount: int, now: int, ticket: str, limit: float, release: bool = False) -> None:
        if check.algorithm == "rate":
            interval = check.period_us / limit
            self._tat[check.key] = max(self._tat.get(check.key, 0.0), now) + amount * interval
        elif check.algorithm == "quota":
            expires = self._quota.get(check.key, (0, now + check.period_us))[1]
            self._quota[check.key] = (max(self._used(check.key, now) + amount, 0), expires)
            if not release:
                self._hold(check.key, amount)
        elif release:
            self._slots.get(check.key, {}).pop(ticket, None)
        else:
            self._slots.setdefault(check.key, {})[ticket] = now + check.period_us

    def _states(self, checks: tuple[Check, ...], limits: list[float], now: int) -> tuple[State, ...]:
        states = []
        tats = self._tat
        for check, limit in zip(checks, limits, strict=True):
            if check.algorithm != "rate":
                continue
            period = check.period_us
            ahead = tats.get(check.key, 0.0) - now
            if ahead < 0.0:
                ahead = 0.0
            remaining = min(math.floor((period - ahead) / (period / limit)), math.floor(limit))
            states.append(State(check, remaining if remaining > 0 else 0, math.ceil(ahead)))
        return tuple(states)
