"""tenancy/stores/redis.py without a server: the breaker on a fake clock, the reservation record, and the
degraded policies, decided with the breaker open (so nothing is sent anywhere)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Literal

import pytest
from metric_values import sample_value

from ingress.tenancy.plan import Actual, Check, Plan
from ingress.tenancy.settings import Redis
from ingress.tenancy.stores.breaker import Breaker
from ingress.tenancy.stores.redis import RedisStore, record_of


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_breaker_opens_after_failures_in_a_row_and_lets_one_probe_through_after_open_for() -> None:
    clock = Clock()
    breaker = Breaker(failures=3, open_for=2.0, clock=clock)
    assert breaker.allows() and not breaker.failed_once() and not breaker.failed_once()
    assert not breaker.succeeded()  # a success in between: the count starts again
    assert [breaker.failed_once() for _ in range(3)] == [False, False, True]
    assert not breaker.closed and not breaker.allows()
    clock.now += 1.9
    assert not breaker.allows()
    clock.now += 0.2
    assert breaker.allows()  # the probe
    assert not breaker.allows()  # one at a time
    assert not breaker.failed_once()  # the probe failed: open again, quietly
    assert not breaker.allows()
    clock.now += 2.0
    assert breaker.allows()
    assert breaker.succeeded() and breaker.closed and breaker.allows()


def test_a_probe_that_never_answered_lets_the_next_call_probe() -> None:
    clock = Clock()
    breaker = Breaker(failures=1, open_for=1.0, clock=clock)
    assert breaker.failed_once()
    clock.now += 1.0
    assert breaker.allows() and not breaker.allows()
    breaker.abandoned()  # its caller was cancelled
    assert breaker.allows()


def test_the_record_holds_what_settle_reconciles() -> None:
    checks = (Check("k:a:tpm", "tokens", "key", "a", "rate", 1000, 60_000_000, 0, 1, 1),
              Check("k:a:conc", "concurrency", "key", "a", "slots", 4, 30_000_000, 1),
              Check("t:x:busd:2026-12", "budget", "tenant", "x", "quota", 5 * 10**9, 999, 0, 2500, 10_000))
    plan = Plan("t1", checks, 120, 30)
    record = json.loads(record_of(["{p}:k:a:tpm", "{p}:k:a:conc", "{p}:t:x:busd:2026-12"], plan))
    assert record == {"k": ["{p}:k:a:tpm", "{p}:k:a:conc", "{p}:t:x:busd:2026-12"],
                      "c": [["r", 1000, 60_000_000, 150, 0, 1, 1], ["s", 4, 30_000_000, 1, 1, 0, 0],
                            ["q", 5 * 10**9, 999, 600_000, 0, 2500, 10_000]]}


def rpm(key: str, limit: int, degraded: Literal["local", "allow", "refuse"]) -> Check:
    return Check(key, "requests", "key", "a", "rate", limit, 60_000_000, 1, degraded=degraded)


@pytest.fixture
async def open_store() -> AsyncIterator[RedisStore]:
    """A store whose breaker is open: every call is decided by the degraded policies, none is sent."""
    store = RedisStore(Redis(url="redis://127.0.0.1:1/0"), workers=4)
    store.breaker.opened_at = float("inf")  # and it stays open
    yield store
    await store.close()


async def test_refuse_wins_over_local_over_allow(open_store: RedisStore) -> None:
    allow, local, refuse = rpm("k:a", 8, "allow"), rpm("k:l", 8, "local"), rpm("k:r", 8, "refuse")
    for checks, policy, admitted in (((allow,), "allow", True), ((local,), "local", True),
                                     ((allow, local), "local", True), ((allow, local, refuse), "refuse", False),
                                     ((), "local", True)):
        decision = await open_store.admit(Plan(f"t-{policy}-{len(checks)}", checks, 1, 1))
        assert (decision.degraded, decision.admitted, decision.refused) == (policy, admitted, None)
    assert open_store.pending == 0  # nothing was sent, so nothing needs cancelling


async def test_the_local_fallback_holds_a_share_per_live_process_and_settles_locally(open_store: RedisStore) -> None:
    skipped = sample_value("ingress_limit_store_errors_total",
                                        {"call": "admit", "reason": "breaker_open"}) or 0.0
    local, allow = rpm("k:s", 8, "local"), rpm("k:t", 8, "allow")
    decisions = [await open_store.admit(Plan(f"s{i}", (local, allow), 0, 0)) for i in range(3)]
    assert [d.admitted for d in decisions] == [True, True, False]  # 8 / 4 workers, the allow check not counted
    assert decisions[2].refused == local and decisions[2].degraded == "local"
    assert sample_value("ingress_limit_store_errors_total",
                                     {"call": "admit", "reason": "breaker_open"}) == skipped + 3
    await open_store.settle("s0", Actual(1, 1))  # admitted here, settled here: charged as reserved
    await open_store.settle("s1", None)  # cancelled here: its request given back
    assert open_store.pending == 0
    assert (await open_store.admit(Plan("s3", (local,), 0, 0))).admitted
    assert not (await open_store.admit(Plan("s4", (local,), 0, 0))).admitted


async def test_a_settle_redis_could_not_take_waits_for_it(open_store: RedisStore) -> None:
    await open_store.settle("admitted-by-redis-earlier", Actual(3, 4))
    await open_store.renew(["admitted-by-redis-earlier"])
    assert open_store.pending == 1
