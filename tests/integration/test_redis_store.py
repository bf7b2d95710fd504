"""The limit store's contract, with the same test bodies against the memory store, a real Redis and a
real Valkey; then what only a shared server has (key TTLs, one hash tag, live processes, several
processes at once); then its faults against a real server process: refused, frozen (SIGSTOP), the breaker.

Limits here mostly run per day, not per minute, so that a bucket refills by one token in 86 s: a test's
own duration never shows in the figures it checks.
"""

from __future__ import annotations

import asyncio
import io
import json
import math
import os
import random
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import pytest
from logcapture import lines
from metric_values import sample_value
from redis.asyncio import Redis as Client
from redis_servers import SERVER_KINDS, LimitServers, Server
from waiting import eventually

from ingress.tenancy.limiter import Limiter
from ingress.tenancy.plan import IN_FLIGHT_US, MINUTE_US, Actual, Check, Plan
from ingress.tenancy.settings import Breaker, Redis
from ingress.tenancy.stores import redis as redis_module
from ingress.tenancy.stores.memory import MemoryStore
from ingress.tenancy.stores.redis import BATCH, SHA, RedisStore
from ingress.tenancy.stores.store import LocalStore, Store

DAY_US = 86_400_000_000
CALM_MS = 5_000  # the contract tests' deadline: a loaded machine must never make them fall back
Policy = Literal["local", "allow", "refuse"]


def rate(key: str, limit: int, per: tuple[int, int, int] = (1, 0, 0), period_us: int = DAY_US,
         degraded: Policy = "local") -> Check:
    kind: Literal["requests", "tokens"] = "requests" if per == (1, 0, 0) else "tokens"
    return Check(key, kind, "key", "k1", "rate", limit, period_us, *per, unit=kind, degraded=degraded)


def tokens(key: str, limit: int, period_us: int = DAY_US, degraded: Policy = "local") -> Check:
    return rate(key, limit, (0, 1, 1), period_us, degraded)


def quota(key: str, limit: int) -> Check:
    return Check(key, "budget", "tenant", "acme", "quota", limit, DAY_US, 0, 1, 1, unit="tokens per day")


def slots(key: str, limit: int, lease_us: int) -> Check:
    return Check(key, "concurrency", "key", "k1", "slots", limit, lease_us, 1, unit="requests in progress")


def plan(*checks: Check, input_tokens: int = 0, output_tokens: int = 0, ticket: str | None = None) -> Plan:
    return Plan(ticket or os.urandom(12).hex(), checks, input_tokens, output_tokens)


def store_on(server: Server, prefix: str, deadline_ms: int = CALM_MS, failures: int = 1000,
             open_for: float = 2.0) -> RedisStore:
    return RedisStore(Redis(url=server.url, prefix=prefix, deadline_ms=deadline_ms,
                            breaker=Breaker(failures=failures, open_for=open_for)), workers=1)


def sample(name: str, **labels: str) -> float:
    return sample_value(name, labels) or 0.0


def errors(call: str, reason: str) -> float:
    return sample("ingress_limit_store_errors_total", call=call, reason=reason)


@dataclass
class Subject:
    """A store under test, and for a real server its raw client and key prefix (to look inside)."""

    kind: str
    store: Store
    raw: Client | None = None
    prefix: str = ""

    def leases_expired(self) -> float:
        return sample("ingress_leases_expired_total")


def _prefix() -> str:
    return "t" + os.urandom(5).hex()


@pytest.fixture(params=["memory", *SERVER_KINDS])
async def subject(request: pytest.FixtureRequest, limit_servers: LimitServers) -> AsyncIterator[Subject]:
    """The memory store, then a Redis store on the session's Redis, then on its Valkey."""
    if request.param == "memory":
        yield Subject("memory", LocalStore())
        return
    server, prefix = limit_servers.get(request.param), _prefix()
    store = store_on(server, prefix)
    async with Client.from_url(server.url) as raw:
        yield Subject(request.param, store, raw, prefix)
    await store.close()


async def remaining(store: Store, check: Check) -> int:
    """What a rate check has left, read by an admission that costs nothing."""
    probe = replace(check, per_request=0, per_input=0, per_output=0)
    decision = await store.admit(plan(probe))
    assert decision.degraded is None
    (state,) = decision.states
    return state.remaining


# --- the contract: memory, Redis, Valkey -------------------------------------------------------------


async def test_a_refused_request_consumes_nothing(subject: Subject) -> None:
    store, rpm, tpm = subject.store, rate("k:a:rpm", 10), tokens("k:a:tpm", 100)
    assert (await store.admit(plan(rpm, tpm, input_tokens=30, output_tokens=50))).admitted
    refused = await store.admit(plan(rpm, tpm, input_tokens=10, output_tokens=40))
    assert not refused.admitted and refused.refused == tpm and not refused.never
    assert refused.retry_after_us > 0
    assert await remaining(store, rpm) == 9  # the refused request took no request from rpm
    assert await remaining(store, tpm) == 20


async def test_gcra_admits_the_limit_at_once_then_tells_a_true_retry_after(subject: Subject) -> None:
    store, rpm = subject.store, rate("k:g:rpm", 60, period_us=MINUTE_US)  # one request a second
    burst = [await store.admit(plan(rpm)) for _ in range(60)]
    assert all(d.admitted for d in burst)
    refused = await store.admit(plan(rpm))
    assert not refused.admitted and refused.refused == rpm
    assert 0 < refused.retry_after_us <= 1_000_000
    await asyncio.sleep(-(-refused.retry_after_us // 1000) / 1000)  # as retry-after-ms says, to the ms
    assert (await store.admit(plan(rpm))).admitted
    # No second burst at any window's edge: one interval gave back one request, not sixty.
    again = await store.admit(plan(rpm))
    assert not again.admitted and again.refused == rpm


async def test_settling_refunds_what_was_not_used_and_charges_what_was_over(subject: Subject) -> None:
    store, tpm = subject.store, tokens("k:r:tpm", 1000)
    first = plan(tpm, input_tokens=100, output_tokens=400)
    assert (await store.admit(first)).admitted
    assert await remaining(store, tpm) == 500
    await store.settle(first.ticket, Actual(100, 100))  # a refund of 300
    assert await remaining(store, tpm) == 800
    second = plan(tpm, input_tokens=100, output_tokens=100)
    assert (await store.admit(second)).admitted
    await store.settle(second.ticket, Actual(100, 700))  # a debt of 600
    assert await remaining(store, tpm) == 0
    assert not (await store.admit(plan(tpm, input_tokens=1))).admitted


async def test_settling_twice_refunds_once(subject: Subject) -> None:
    store, tpm = subject.store, tokens("k:s:tpm", 1000)
    p = plan(tpm, input_tokens=100, output_tokens=100)
    assert (await store.admit(p)).admitted
    await store.settle(p.ticket, Actual(10, 0))
    await store.settle(p.ticket, Actual(10, 0))
    await store.settle(p.ticket, None)
    assert await remaining(store, tpm) == 990


async def test_a_cancel_before_a_late_admission_reserves_nothing(subject: Subject) -> None:
    store, tpm, conc = subject.store, tokens("k:c:tpm", 1000), slots("k:c:conc", 1, 60_000_000)
    p = plan(tpm, conc, input_tokens=500)
    await store.settle(p.ticket, None)
    late = await store.admit(p)
    assert not late.admitted and late.degraded == "cancelled"
    assert await remaining(store, tpm) == 1000
    assert (await store.admit(plan(conc))).admitted  # and its slot is free


async def test_concurrency_slots_free_on_settle(subject: Subject) -> None:
    store, conc = subject.store, slots("k:n:conc", 2, 60_000_000)
    a, b = plan(conc), plan(conc)
    assert (await store.admit(a)).admitted and (await store.admit(b)).admitted
    refused = await store.admit(plan(conc))
    assert not refused.admitted and refused.refused == conc and refused.retry_after_us == 1_000_000
    await store.settle(a.ticket, Actual(1, 1))
    assert (await store.admit(plan(conc))).admitted


async def test_a_lease_never_settled_expires_after_its_ttl(subject: Subject) -> None:
    store, conc = subject.store, slots("k:l:conc", 2, 500_000)  # a killed worker's leases: never settled
    expired_before = subject.leases_expired()
    assert (await store.admit(plan(conc))).admitted and (await store.admit(plan(conc))).admitted
    assert not (await store.admit(plan(conc))).admitted

    async def admitted() -> bool:
        return (await store.admit(plan(conc))).admitted

    await eventually(admitted, "a slot freed by its lease running out")
    assert subject.leases_expired() - expired_before >= 1


async def test_renewed_leases_outlive_their_ttl(subject: Subject) -> None:
    store, conc = subject.store, slots("k:w:conc", 1, 1_000_000)
    held = plan(conc)
    assert (await store.admit(held)).admitted
    started = time.monotonic()
    while time.monotonic() - started < 2.5:  # 2.5 lease lives, renewed ten times a life
        await store.renew([held.ticket])
        await asyncio.sleep(0.1)
    await store.renew([held.ticket])
    assert not (await store.admit(plan(conc))).admitted
    await store.settle(held.ticket, Actual(1, 1))
    assert (await store.admit(plan(conc))).admitted


async def test_budget_counters_reserve_and_reconcile_in_integers(subject: Subject) -> None:
    store, budget = subject.store, quota("t:acme:btok:2026-12", 1000)
    p = plan(budget, input_tokens=100, output_tokens=200)
    assert (await store.admit(p)).admitted
    await store.settle(p.ticket, Actual(100, 400))  # used 500 of the 300 reserved
    over = await store.admit(plan(budget, input_tokens=600))
    assert not over.admitted and over.never and over.refused == budget and over.retry_after_us == DAY_US
    rest = plan(budget, input_tokens=500)
    assert (await store.admit(rest)).admitted
    held = await store.admit(plan(budget, input_tokens=1))
    assert not held.admitted and not held.never  # the 500 are reserved, not yet spent
    await store.settle(rest.ticket, Actual(500, 0))
    spent = await store.admit(plan(budget, input_tokens=1))
    assert not spent.admitted and spent.never
    too_big = await store.admit(plan(quota("t:acme:btok:other", 10), input_tokens=11))
    assert not too_big.admitted and too_big.never


async def test_a_budget_held_by_reservations_in_flight_is_told_from_a_spent_one(subject: Subject) -> None:
    """Issue 29, 5: 24 tokens; each request reserves 12 and uses 2. Two unsettled reservations refuse a
    third for a second, not for good (nothing is spent); once what is spent leaves no room, for good."""
    store, budget = subject.store, quota("t:acme:btok:held", 24)
    first, second = (plan(budget, input_tokens=10, output_tokens=2) for _ in range(2))
    assert (await store.admit(first)).admitted and (await store.admit(second)).admitted
    held = await store.admit(plan(budget, input_tokens=10, output_tokens=2))
    assert not held.admitted and held.refused == budget and not held.never and held.retry_after_us == IN_FLIGHT_US
    await store.settle(first.ticket, Actual(1, 1))
    assert not (await store.admit(plan(budget, input_tokens=10, output_tokens=2))).never  # second still holds 12
    await store.settle(second.ticket, Actual(1, 1))
    for _ in range(5):  # 4 spent, then 2 more each: the fifth finds 12 spent and 12 room
        p = plan(budget, input_tokens=10, output_tokens=2)
        assert (await store.admit(p)).admitted
        await store.settle(p.ticket, Actual(1, 1))
    spent = await store.admit(plan(budget, input_tokens=10, output_tokens=2))  # 14 spent
    assert not spent.admitted and spent.never and spent.retry_after_us == DAY_US
    in_flight = plan(budget, input_tokens=5)
    assert (await store.admit(in_flight)).admitted  # 19 of 24: a request of 5 fits what is spent, not what is held
    assert not (await store.admit(plan(budget, input_tokens=5))).never
    assert (await store.admit(plan(budget, input_tokens=11))).never  # 14 + 11: too much whatever in_flight uses


async def test_a_reservation_that_expired_unsettled_counts_as_spent(subject: Subject) -> None:
    """A worker that died holding a reservation: it stays charged, and once its life is over it no longer
    passes for a reservation in flight (a budget it filled is spent, and refused for good)."""
    store, budget, conc = subject.store, quota("t:acme:btok:dead", 10), slots("k:d:conc", 5, 200_000)
    assert (await store.admit(plan(budget, conc, input_tokens=8))).admitted  # never settled; lives 0.2 s
    assert not (await store.admit(plan(budget, input_tokens=5))).never
    await asyncio.sleep(0.5)
    await store.renew([])  # the memory store forgets expired reservations as it sweeps
    assert (await store.admit(plan(budget, input_tokens=5))).never


async def test_the_refusal_names_the_check_that_can_never_pass_else_the_one_that_frees_last(subject: Subject) -> None:
    store = subject.store
    slow, fast, small = rate("k:o:slow", 2), rate("k:o:fast", 4), tokens("k:o:small", 10)
    for _ in range(2):
        assert (await store.admit(plan(slow, fast))).admitted
    later = await store.admit(plan(fast, slow))
    assert later.refused == slow and later.retry_after_us > DAY_US // 4 and not later.never
    never = await store.admit(plan(fast, slow, small, input_tokens=11))
    assert never.refused == small and never.never and never.retry_after_us == 0
    assert [s.check for s in never.states] == [fast, slow, small]


async def test_the_states_tell_remaining_and_reset(subject: Subject) -> None:
    store, rpm, tpm = subject.store, rate("k:h:rpm", 10), tokens("k:h:tpm", 1000)
    decision = await store.admit(plan(rpm, tpm, input_tokens=200, output_tokens=50))
    assert decision.admitted
    by_kind = {s.check.kind: s for s in decision.states}
    assert by_kind["requests"].remaining == 9
    assert by_kind["tokens"].remaining == 750
    assert abs(by_kind["requests"].reset_us - DAY_US // 10) < 60_000_000
    assert abs(by_kind["tokens"].reset_us - DAY_US // 4) < 60_000_000


async def test_settles_sent_together_are_each_settled_as_if_alone(subject: Subject) -> None:
    store, tpm, conc = subject.store, tokens("k:t:tpm", 10_000), slots("k:t:conc", 10, 60_000_000)
    plans = [plan(tpm, conc, input_tokens=100, output_tokens=100) for _ in range(10)]
    for p in plans:
        assert (await store.admit(p)).admitted
    assert await remaining(store, tpm) == 8000
    used: list[Actual | None] = [Actual(100, 0)] * 5 + [None] * 3 + [Actual(100, 300)] * 2
    await asyncio.gather(*(store.settle(p.ticket, u) for p, u in zip(plans, used, strict=True)))
    assert await remaining(store, tpm) == 8000 + 5 * 100 + 3 * 200 - 2 * 200
    assert all([(await store.admit(plan(conc))).admitted for _ in range(10)])  # every slot freed


async def test_settling_one_ticket_several_times_at_once_refunds_once(subject: Subject) -> None:
    store, tpm = subject.store, tokens("k:u:tpm", 1000)
    p = plan(tpm, input_tokens=100, output_tokens=100)
    assert (await store.admit(p)).admitted
    await asyncio.gather(store.settle(p.ticket, Actual(10, 0)), store.settle(p.ticket, Actual(10, 0)),
                         store.settle(p.ticket, None))
    assert await remaining(store, tpm) == 990  # the first settle counts, as settled one after another


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000_000

    def __call__(self) -> int:
        return self.now


def test_a_stream_longer_than_ten_minutes_is_still_reconciled() -> None:
    clock = FakeClock()
    store, tpm = MemoryStore(clock=clock), tokens("k:long:tpm", 10_000)
    p = plan(tpm, input_tokens=100, output_tokens=4000)
    assert store.admit(p).admitted
    for _ in range(90):  # a 15-minute stream, renewed every 10 s as the limiter renews it (lease_ttl / 3)
        clock.now += 10_000_000
        store.renew([p.ticket])
        store.sweep()
    clock.now += 10_000_000
    assert store.settle(p.ticket, Actual(100, 50))  # the 3,950 tokens it did not use are given back


# --- what only a shared server has ------------------------------------------------------------------

@pytest.fixture
async def shared(limit_server: Server) -> AsyncIterator[Subject]:
    """A Redis store, then a Valkey one, on the session's server under a prefix of its own."""
    prefix = _prefix()
    store = store_on(limit_server, prefix)
    async with Client.from_url(limit_server.url) as raw:
        yield Subject(limit_server.kind, store, raw, prefix)
    await store.close()


async def _keys(raw: Client, prefix: str) -> list[bytes]:
    return [key async for key in raw.scan_iter(match="{" + prefix + "}:*", count=1000)]


async def test_every_key_has_a_ttl_after_thousands_of_random_cancellations(shared: Subject) -> None:
    assert isinstance(shared.store, RedisStore) and shared.raw is not None
    store, rng = shared.store, random.Random(13)
    checks = [rate("k:x:rpm", 500), tokens("k:x:tpm", 20_000), slots("k:x:conc", 8, 30_000_000),
              quota("t:x:btok:2026-12", 50_000), tokens("m:x:tpm", 5_000, period_us=MINUTE_US)]
    admitted: list[Plan] = []
    for i in range(3000):
        roll = rng.random()
        if roll < 0.45:
            p = plan(*rng.sample(checks, rng.randint(1, len(checks))), input_tokens=rng.randint(0, 50),
                     output_tokens=rng.randint(0, 50), ticket=f"x{i}")
            if (await store.admit(p)).admitted:
                admitted.append(p)
        elif roll < 0.75 and admitted:
            await store.settle(admitted.pop(rng.randrange(len(admitted))).ticket, None)
        elif roll < 0.85 and admitted:
            p = rng.choice(admitted)
            await store.settle(p.ticket, Actual(rng.randint(0, 80), rng.randint(0, 80)))
        elif roll < 0.95:
            await store.settle(f"x{i + rng.randint(1, 50)}", None)  # a cancel before its (late) admission
        else:
            await store.renew([p.ticket for p in admitted[:20]])
    keys = await _keys(shared.raw, shared.prefix)
    assert len(keys) > 1000
    ttls = {key: await shared.raw.pttl(key) for key in keys}
    assert [key for key, ttl in ttls.items() if ttl <= 0] == []


async def test_every_key_is_under_one_hash_tag_and_none_holds_a_secret(shared: Subject) -> None:
    from ingress.tenancy.keys import new_key
    from ingress.tenancy.policy import Policy
    from ingress.tenancy.settings import Budget, Key, Limits, Tenancy, Tenant

    assert shared.raw is not None
    key, key_id, digest = new_key()
    limits = Limits(rpm=100, tpm=10_000, concurrency=4, budget=Budget(tokens=100_000, usd=5.0))
    policy = Policy(Tenancy(keys=(Key(id=key_id, tenant="acme", hash=digest, limits=limits),),
                            tenants={"acme": Tenant(limits=limits)}))
    principal = policy.authenticate({"Authorization": f"Bearer {key}"})
    p = policy.plan(principal, "gpt-4o", 120, 300)
    assert (await shared.store.admit(p)).admitted
    await shared.store.renew([p.ticket])
    keys = await _keys(shared.raw, shared.prefix)
    everything = [k async for k in shared.raw.scan_iter(count=1000)]
    mine = [k for k in everything if shared.prefix.encode() in k]
    assert sorted(mine) == sorted(keys) and len(keys) >= 8  # 6 checks, the reservation, the registry
    secret = key.removeprefix(f"sk-ig-{key_id}-").encode()
    values = [await shared.raw.dump(k) or b"" for k in keys]
    assert not [k for k in keys if secret in k] and not [v for v in values if secret in v]
    assert all(k.startswith(b"{" + shared.prefix.encode() + b"}:") for k in keys)


async def test_renewing_keeps_a_reservation_ten_minutes_and_its_lease_one_lease_life(shared: Subject) -> None:
    """As MemoryStore.renew: the reservation lives at least TOMBSTONE_US past each renewal, its leases one more life."""
    assert shared.raw is not None
    conc = slots("k:v:conc", 2, 1_000_000)
    p = plan(conc, tokens("k:v:tpm", 1000), input_tokens=10)
    assert (await shared.store.admit(p)).admitted
    record = f"{{{shared.prefix}}}:r:{p.ticket}"
    assert 0 < await shared.raw.pttl(record) <= 1_000
    await shared.store.renew([p.ticket])
    assert 590_000 < await shared.raw.pttl(record) <= 600_000
    until = await shared.raw.zscore(f"{{{shared.prefix}}}:k:v:conc", p.ticket)
    seconds, micros = await shared.raw.time()
    assert until is not None and 0 < until - (seconds * 1_000_000 + micros) <= 1_000_000


async def test_a_flushed_script_cache_loads_the_script_again(shared: Subject) -> None:
    assert shared.raw is not None
    await shared.raw.script_flush()
    assert (await shared.raw.script_exists(SHA)) == [False]
    decision = await shared.store.admit(plan(rate("k:f:rpm", 5)))
    assert decision.admitted and decision.degraded is None
    assert (await shared.raw.script_exists(SHA)) == [True]


async def _script_calls(raw: Client) -> int:
    stats = await raw.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{cmd}", {"calls": 0})["calls"]) for cmd in ("evalsha", "eval"))


async def test_a_burst_of_settles_goes_out_as_few_script_calls(shared: Subject) -> None:
    assert isinstance(shared.store, RedisStore) and shared.raw is not None
    store, tpm, n = shared.store, tokens("k:burst:tpm", 100_000), 200
    plans = [plan(tpm, input_tokens=100, output_tokens=100) for _ in range(n)]
    for p in plans:
        assert (await store.admit(p)).admitted
    await store.tasks.wait(5)  # its heartbeat, sent after its first answer, is not counted below
    limiter = Limiter(store, 30.0)
    admissions = [(await limiter.admit(plan(tpm, input_tokens=100, output_tokens=100), "acme")).admission
                  for _ in range(n)]
    before = await _script_calls(shared.raw)
    settling = time.monotonic()
    for p in plans:  # 400 requests ending at once, each settled in a task of its own
        limiter.tasks.spawn(store.settle(p.ticket, Actual(100, 0)), "settle")
    for admission in admissions:
        assert admission is not None
        admission.settle(None)
    await limiter.tasks.wait(10)
    calls = await _script_calls(shared.raw) - before
    assert store.pending == 0
    assert calls <= math.ceil(2 * n / BATCH), calls  # 400 settles in 7 calls, not 400
    # 200 settles of 100 tokens charged, 200 refunded whole. At 100,000 a minute the window refills a token
    # every 0.6 ms, which a slow machine shows by the time this reads it (2 tokens, once in CI); a settle
    # missed or counted twice would be 100 tokens or more below.
    left = await remaining(store, tpm)
    refilled = (time.monotonic() - settling) * 100_000 / 60
    assert 0 <= left - (100_000 - n * 100) <= refilled + 1, (left, refilled)


async def test_the_script_settles_a_ticket_given_twice_in_one_call_once(shared: Subject) -> None:
    assert shared.raw is not None
    store, tpm = shared.store, tokens("k:d:tpm", 1000)
    p, other = plan(tpm, input_tokens=100, output_tokens=100), plan(tpm, input_tokens=100, output_tokens=100)
    assert (await store.admit(p)).admitted and (await store.admit(other)).admitted
    r, s, r2, s2 = (f"{{{shared.prefix}}}:{kind}:{t}" for t in (p.ticket, other.ticket) for kind in ("r", "s"))
    settled = await shared.raw.evalsha(SHA, 6, r, s, r2, s2, r, s, "settle", p.ticket, "1", 10, 0,
                                       other.ticket, "0", 0, 0, p.ticket, "0", 0, 0)
    assert settled == 2
    assert await remaining(store, tpm) == 1000 - 10  # p charged its 10 tokens once, other refunded whole
    assert await shared.raw.pttl(s) > 0 and await shared.raw.pttl(s2) > 0


async def test_closing_the_store_sends_the_queued_settles(shared: Subject, monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(shared.store, RedisStore) and shared.raw is not None
    monkeypatch.setattr(redis_module, "BATCH_DELAY", 60.0)  # a settle alone waits a minute for company
    store, tpm = shared.store, tokens("k:e:tpm", 1000)
    p = plan(tpm, input_tokens=100, output_tokens=100)
    assert (await store.admit(p)).admitted
    waiting = asyncio.get_running_loop().create_task(store.settle(p.ticket, Actual(10, 0)))
    await asyncio.sleep(0.2)
    assert store.pending == 1 and not waiting.done()
    await store.close()
    await waiting
    assert await shared.raw.exists(f"{{{shared.prefix}}}:r:{p.ticket}") == 0
    assert await shared.raw.exists(f"{{{shared.prefix}}}:s:{p.ticket}") == 1


async def test_a_settle_that_frees_a_slot_goes_at_once_with_what_is_queued(
        shared: Subject, monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(shared.store, RedisStore)
    monkeypatch.setattr(redis_module, "BATCH_DELAY", 60.0)
    store, conc, tpm = shared.store, slots("k:i:conc", 1, 60_000_000), tokens("k:i:tpm", 1000)
    held, plain = plan(conc), plan(tpm, input_tokens=100)
    assert (await store.admit(held)).admitted and (await store.admit(plain)).admitted
    queued = asyncio.get_running_loop().create_task(store.settle(plain.ticket, Actual(10, 0)))
    await asyncio.sleep(0)
    assert store.pending == 1
    async with asyncio.timeout(20):  # not the minute a settle alone waits
        await store.settle(held.ticket, Actual(1, 1))
    assert queued.done() and store.pending == 0
    assert (await store.admit(plan(conc))).admitted  # the next request of a client at its concurrency
    assert await remaining(store, tpm) == 990


async def test_live_processes_are_counted_from_their_heartbeats(limit_server: Server) -> None:
    prefix = _prefix()
    stores = [store_on(limit_server, prefix) for _ in range(3)]
    try:
        for store in stores:
            await store.renew([])
        await stores[0].renew([])
        assert [s.live for s in stores] == [3, 2, 3]  # the second renewed before the third had registered
        await stores[2].close()
        await stores[1].renew([])
        assert stores[1].live == 2 and stores[1].local.share == 0.5
    finally:
        for store in stores[:2]:
            await store.close()


HAMMER = """
import asyncio, json, os, sys
from ingress.tenancy.plan import Check, Plan
from ingress.tenancy.stores.redis import RedisStore
from ingress.tenancy.settings import Redis

url, prefix, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
tpm = Check("k:burst:tpm", "tokens", "key", "burst", "rate", 6000, 60_000_000, 0, 1, 1)

async def main():
    store = RedisStore(Redis(url=url, prefix=prefix, deadline_ms=10_000), 1)
    await store.renew([])  # connected and registered before the start
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    plans = [Plan(f"{os.getpid()}-{i}", (tpm,), 50, 50) for i in range(n)]
    decisions = await asyncio.gather(*(store.admit(p) for p in plans))
    print(json.dumps({"admitted": sum(d.admitted for d in decisions),
                      "degraded": sum(d.degraded is not None for d in decisions)}), flush=True)
    await store.close()

asyncio.run(main())
"""


async def test_concurrent_bursts_from_several_processes_cannot_overshoot_a_tpm_limit(limit_server: Server) -> None:
    prefix, processes, each = _prefix(), 4, 40  # 160 requests of 100 tokens at a limit of 6,000 a minute
    procs = [subprocess.Popen([sys.executable, "-c", HAMMER, limit_server.url, prefix, str(each)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              cwd=Path(__file__).resolve().parents[2]) for _ in range(processes)]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        async with Client.from_url(limit_server.url) as raw:
            start_s, start_us = await raw.time()
            for proc in procs:
                assert proc.stdin is not None
                proc.stdin.write("go\n")
                proc.stdin.flush()
            results = [json.loads(proc.communicate(timeout=30)[0]) for proc in procs]
            end_s, end_us = await raw.time()
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    elapsed = (end_s - start_s) + (end_us - start_us) / 1e6
    admitted = sum(r["admitted"] for r in results)
    assert sum(r["degraded"] for r in results) == 0
    # GCRA: the burst (6,000 tokens) plus what refilled while they ran (100 tokens a second), never more.
    assert 60 <= admitted <= 60 + int(elapsed) + 1, (admitted, elapsed)


# --- faults, against a server process of the test's own ---------------------------------------------

DEADLINE_MS = 200


async def _tat(raw: Client, key: bytes) -> float:
    value = await raw.get(key)
    assert isinstance(value, bytes)
    return float(value)


async def test_a_refused_server_obeys_each_policy_within_the_deadline(own_limit_server: Server) -> None:
    store = store_on(own_limit_server, _prefix(), DEADLINE_MS)
    try:
        assert (await store.admit(plan(rate("k:p:rpm", 5)))).degraded is None
        own_limit_server.stop()
        limiter = Limiter(store, 30.0)
        cases: list[tuple[tuple[Check, ...], str, bool]] = [
            ((rate("k:p:rpm", 5, degraded="local"),), "local", True),
            ((rate("k:p:rpm", 5, degraded="allow"),), "allow", True),
            ((rate("k:p:rpm", 5, degraded="refuse"),), "refuse", False),
            ((rate("k:p:a", 5, degraded="allow"), rate("k:p:b", 5, degraded="local")), "local", True),
            ((rate("k:p:a", 5, degraded="allow"), rate("k:p:b", 5, degraded="refuse"),
              rate("k:p:c", 5, degraded="local")), "refuse", False),
        ]
        for checks, policy, admitted in cases:
            failed_before = errors("admit", "connection")
            counted_before = sample("ingress_admissions_total", tenant="acme", outcome=f"degraded_{policy}")
            started = time.monotonic()
            verdict = await limiter.admit(plan(*checks), "acme")
            elapsed = time.monotonic() - started
            assert elapsed < 3 * DEADLINE_MS / 1000, (policy, elapsed)
            assert verdict.outcome == f"degraded_{policy}"
            assert (verdict.admission is not None) == admitted
            if not admitted:
                assert verdict.error is not None and verdict.error.status == 503
            assert errors("admit", "connection") == failed_before + 1
            assert sample("ingress_admissions_total", tenant="acme", outcome=f"degraded_{policy}") == counted_before + 1
            if verdict.admission is not None:
                verdict.admission.settle(Actual(1, 1))
        await limiter.tasks.wait(5)
    finally:
        await store.close()


async def test_the_local_fallback_holds_its_share_of_the_live_processes(own_limit_server: Server) -> None:
    prefix = _prefix()
    store, other = store_on(own_limit_server, prefix, DEADLINE_MS), store_on(own_limit_server, prefix, DEADLINE_MS)
    try:
        await store.renew([])
        await other.renew([])
        await store.renew([])
        assert store.live == 2
        own_limit_server.stop()
        rpm = rate("k:q:rpm", 4)
        decisions = [await store.admit(plan(rpm)) for _ in range(3)]
        assert [(d.admitted, d.degraded) for d in decisions] == [(True, "local"), (True, "local"), (False, "local")]
        assert decisions[2].refused == rpm  # limited by this process's half of the limit
        await store.renew([])  # Redis down: the last count stays
        assert store.live == 2
    finally:
        await store.close()
        await other.close()


async def test_a_frozen_server_times_out_at_the_deadline_and_leaves_no_phantom_reservation(
        own_limit_server: Server) -> None:
    prefix = _prefix()
    store = store_on(own_limit_server, prefix, DEADLINE_MS)
    async with Client.from_url(own_limit_server.url) as raw:
        try:
            tpm, conc = tokens("k:z:tpm", 1000), slots("k:z:conc", 5, 60_000_000)
            kept = plan(tpm, conc, input_tokens=100)
            assert (await store.admit(kept)).admitted
            tat_key, conc_key = f"{{{prefix}}}:k:z:tpm".encode(), f"{{{prefix}}}:k:z:conc"
            tat_before = await _tat(raw, tat_key)
            timeouts = errors("admit", "timeout")

            own_limit_server.freeze()
            lost = plan(tpm, conc, input_tokens=300, ticket="lost")
            started = time.monotonic()
            decision = await store.admit(lost)
            elapsed = time.monotonic() - started
            assert elapsed < 3 * DEADLINE_MS / 1000, elapsed
            assert decision.admitted and decision.degraded == "local"
            assert errors("admit", "timeout") == timeouts + 1
            await store.settle(lost.ticket, Actual(300, 10))  # admitted locally: settled locally
            own_limit_server.thaw()

            async def no_phantom() -> bool:
                await store.renew([kept.ticket])  # Redis answers: the cancel for "lost" goes out
                return (not store.pending and await raw.exists(f"{{{prefix}}}:r:lost") == 0
                        and await raw.zscore(conc_key, "lost") is None)

            await eventually(no_phantom, "the timed-out admission cancelled")
            assert abs(await _tat(raw, tat_key) - tat_before) < 1  # as if it never happened
            assert await raw.zcard(conc_key) == 1 and await raw.exists(f"{{{prefix}}}:r:{kept.ticket}") == 1
        finally:
            own_limit_server.thaw()
            await store.close()


async def test_a_settle_redis_missed_is_sent_once_it_answers(own_limit_server: Server) -> None:
    prefix = _prefix()
    store = store_on(own_limit_server, prefix, DEADLINE_MS)
    try:
        tpm = tokens("k:m:tpm", 1000)
        p = plan(tpm, input_tokens=100, output_tokens=100)
        assert (await store.admit(p)).admitted
        own_limit_server.freeze()
        started = time.monotonic()
        await store.settle(p.ticket, Actual(10, 0))
        assert time.monotonic() - started < 3 * DEADLINE_MS / 1000
        own_limit_server.thaw()

        async def settled() -> bool:
            await store.renew([])
            return not store.pending

        await eventually(settled, "the missed settle sent")
        assert await remaining(store, tpm) == 990
    finally:
        own_limit_server.thaw()
        await store.close()


async def test_a_batch_lost_to_a_timeout_is_sent_again_once_redis_answers_and_refunds_once(
        own_limit_server: Server) -> None:
    prefix = _prefix()
    store = store_on(own_limit_server, prefix, DEADLINE_MS)
    try:
        tpm, conc = tokens("k:j:tpm", 10_000), slots("k:j:conc", 5, 60_000_000)
        plans = [plan(tpm, conc, input_tokens=100, output_tokens=100) for _ in range(5)]
        for p in plans:
            assert (await store.admit(p)).admitted
        timeouts = errors("settle", "timeout")
        own_limit_server.freeze()  # the batch reaches the server's socket: its script runs when it thaws
        await asyncio.gather(*(store.settle(p.ticket, Actual(100, 0)) for p in plans))
        assert store.pending == 5
        assert errors("settle", "timeout") == timeouts + 1  # one batch, one call
        own_limit_server.thaw()

        async def sent() -> bool:
            await store.renew([])
            return not store.pending

        await eventually(sent, "the lost batch sent again")
        assert await remaining(store, tpm) == 10_000 - 5 * 100  # each refunded 100 once, not twice
        assert all([(await store.admit(plan(conc))).admitted for _ in range(5)])
    finally:
        own_limit_server.thaw()
        await store.close()


async def test_an_admission_whose_client_left_is_cancelled(own_limit_server: Server) -> None:
    prefix = _prefix()
    store = store_on(own_limit_server, prefix, 2_000)
    try:
        tpm = tokens("k:y:tpm", 1000)
        own_limit_server.freeze()
        task = asyncio.get_running_loop().create_task(store.admit(plan(tpm, input_tokens=400, ticket="left")))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        own_limit_server.thaw()

        async def cancelled() -> bool:
            await store.renew([])
            return not store.pending

        await eventually(cancelled, "the abandoned admission cancelled")
        assert await remaining(store, tpm) == 1000
    finally:
        own_limit_server.thaw()
        await store.close()


async def test_the_breaker_opens_after_failures_and_probes_after_open_for(
        own_limit_server: Server, log_stream: io.StringIO) -> None:
    open_for = 2.0
    store = store_on(own_limit_server, _prefix(), DEADLINE_MS, failures=3, open_for=open_for)
    rpm = rate("k:b:rpm", 100)
    try:
        assert (await store.admit(plan(rpm))).degraded is None
        await store.tasks.wait(5)  # its first heartbeat, sent after its first answer
        own_limit_server.stop()
        refused, skipped = errors("admit", "connection"), errors("admit", "breaker_open")
        for _ in range(3):
            assert (await store.admit(plan(rpm))).degraded == "local"
        assert errors("admit", "connection") == refused + 3
        assert sample("ingress_limit_breaker_open") == 1
        for _ in range(5):  # not even tried: no more connection errors
            assert (await store.admit(plan(rpm))).degraded == "local"
        assert errors("admit", "breaker_open") == skipped + 5
        assert errors("admit", "connection") == refused + 3
        own_limit_server.start()
        await asyncio.sleep(open_for)
        probe = await store.admit(plan(rpm))
        assert probe.admitted and probe.degraded is None
        assert sample("ingress_limit_breaker_open") == 0
        logged = [line["event"] for line in lines(log_stream) if "breaker" in line["event"]]
        assert logged == ["limit store unavailable: breaker opened, degraded policies decide",
                          "limit store answers again: breaker closed"]
    finally:
        await store.close()


async def test_the_local_decision_matches_the_memory_store(own_limit_server: Server) -> None:
    """What a degraded-local admission decides is the memory store's decision at the same share."""
    store = store_on(own_limit_server, _prefix(), DEADLINE_MS)
    try:
        own_limit_server.stop()
        memory = MemoryStore(1.0, clock=store.local.clock)
        rpm, conc = rate("k:e:rpm", 3), slots("k:e:conc", 2, 60_000_000)
        for i in range(4):
            p = plan(rpm, conc, ticket=f"e{i}")
            ours, theirs = await store.admit(p), memory.admit(p)
            assert (ours.admitted, ours.refused, ours.retry_after_us, ours.degraded) == (
                theirs.admitted, theirs.refused, theirs.retry_after_us, "local")
    finally:
        await store.close()
