"""The spend ledger's stores: the fields an hour's and a day's hashes hold, read back; a batch's script calls
split to hold Redis briefly; on a real Redis and Valkey, a batch added to its hour and day, every key expiring,
and a batch sent again under its id counted once; the memory store's retention."""

from __future__ import annotations

import time
from collections.abc import Sequence

from redis.asyncio import Redis as RedisPy
from redis_servers import Server

from ingress.tenancy.ledger import MEASURES, Batch, Dims, Rows, period_end
from ingress.tenancy.settings import Redis
from ingress.tenancy.stores import ledger as stores
from ingress.tenancy.stores.ledger import FLUSH_FIELDS, MemoryLedgerStore, RedisLedgerStore, days_of, field_of, rows_of

NOON = 1_796_558_400.0  # 2026-12-06T12:00:00Z
ACME: Dims = ("acme", "k1", "gpt-4o", "gpt", "")


def values(**named: int) -> list[int]:
    return [named.get(name, 0) for name in MEASURES]


BATCH: Batch = {"2026-12-06T12": {ACME: values(requests=2, cost_nanos=150)},
                "2026-12-06T13": {ACME: values(requests=1, input_tokens=7),
                                  ("beta", "", "m", "", ""): values(requests=1, errors=1)}}


def test_fields_are_read_back_as_rollups_and_unknown_measures_left() -> None:
    reply = [field_of(0, ACME), b"3", field_of(6, ACME), b"150", field_of(99, ACME), b"1",
             field_of(0, ("b", "", "", "", 'quo"te:')), b"1"]
    assert rows_of(reply) == {ACME: values(requests=3, cost_nanos=150),
                              ("b", "", "", "", 'quo"te:'): values(requests=1)}


def test_a_batch_is_written_as_a_field_a_measure_of_its_dimensions() -> None:
    store = RedisLedgerStore(Redis(url="redis://127.0.0.1:1", prefix="p"), 100, 35, 400)
    [(keys, args)] = store.calls("b1", {"2026-12-06T12": BATCH["2026-12-06T12"]})
    assert keys == ["{p}:ledger:f:b1:0", "{p}:ledger:h:2026-12-06T12", "{p}:ledger:d:2026-12-06"]
    hour_fields = [b'0:["acme","k1","gpt-4o","gpt",""]', 2, b'6:["acme","k1","gpt-4o","gpt",""]', 150]
    assert MEASURES[0] == "requests" and MEASURES[6] == "cost_nanos"
    assert args == [stores.MARK_S, period_end("2026-12-06T12") + 35 * 86_400, 2, *hour_fields,
                    period_end("2026-12-06") + 400 * 86_400, 2, *hour_fields]
    assert hour_fields[0] == field_of(0, ACME)  # what the reads take apart (rows_of)


def test_a_batch_s_hours_add_up_to_its_days() -> None:
    assert days_of(BATCH) == {"2026-12-06": {ACME: values(requests=3, input_tokens=7, cost_nanos=150),
                                             ("beta", "", "m", "", ""): values(requests=1, errors=1)}}


def test_a_large_batch_goes_in_calls_of_a_bounded_size_each_with_its_mark() -> None:
    store = RedisLedgerStore(Redis(url="redis://127.0.0.1:1", prefix="p"), 100, 35, 400)
    many: Rows = {(f"t{i}", "", "", "", ""): values(requests=1, input_tokens=1) for i in range(FLUSH_FIELDS)}
    calls = store.calls("b1", {"2026-12-06T12": many})
    fields = [int(str(args[i + 1])) for keys, args in calls for i in _segments(len(keys) - 1, args)]
    assert sum(fields) == 2 * 2 * FLUSH_FIELDS  # two measures a row, in the hour's hash and the day's
    for keys, args in calls:
        assert sum(int(str(args[i + 1])) for i in _segments(len(keys) - 1, args)) <= FLUSH_FIELDS
    assert [keys[0] for keys, _ in calls] == [f"{{p}}:ledger:f:b1:{n}" for n in range(len(calls))]
    assert calls == store.calls("b1", {"2026-12-06T12": many})  # sent again: the same calls, the same marks


def _segments(count: int, args: Sequence[object]) -> list[int]:
    """Where each key's segment (its expiry, its field count, its fields) starts in a call's arguments."""
    starts, at = [], 1
    for _ in range(count):
        starts.append(at)
        at += 2 + 2 * int(str(args[at + 1]))
    return starts


async def test_a_batch_on_redis_is_in_its_hours_and_day_expiring_and_counted_once(limit_server: Server) -> None:
    prefix = f"ledger-{time.monotonic_ns()}"
    store = RedisLedgerStore(Redis(url=limit_server.url, prefix=prefix), 2000, 35, 400)
    day = time.strftime("%Y-%m-%d", time.gmtime())  # today's: an expiry in the past would drop the keys at once
    first, second, third = (f"{day}T{h}" for h in ("12", "13", "14"))
    batch = {first: BATCH["2026-12-06T12"], second: BATCH["2026-12-06T13"]}
    try:
        await store.write("b1", batch)
        await store.write("b1", batch)  # sent again after a timeout: counted once
        await store.write("b2", {second: {ACME: values(requests=1)}})
        hours = await store.read("hour", [first, second, third])
        assert hours == [(first, BATCH["2026-12-06T12"]),
                         (second, {ACME: values(requests=2, input_tokens=7),
                                   ("beta", "", "m", "", ""): values(requests=1, errors=1)}),
                         (third, {})]
        [(_, rows)] = await store.read("day", [day])
        assert rows[ACME] == values(requests=4, input_tokens=7, cost_nanos=150)
        async with RedisPy.from_url(limit_server.url) as raw:
            keys = sorted(k.decode() if isinstance(k, bytes) else k for k in await raw.keys(f"{{{prefix}}}:ledger:*"))
            tag = f"{{{prefix}}}:ledger:"
            assert keys == [f"{tag}d:{day}", f"{tag}f:b1:0", f"{tag}f:b2:0", f"{tag}h:{first}", f"{tag}h:{second}"]
            assert await raw.expiretime(keys[0]) == period_end(day) + 400 * 86_400
            assert await raw.expiretime(keys[3]) == period_end(first) + 35 * 86_400
            for key in keys:
                assert await raw.ttl(key) > 0
            await raw.delete(*keys)
    finally:
        await store.close()


async def test_the_memory_store_keeps_hours_and_days_for_their_retention() -> None:
    now = [NOON]
    store = MemoryLedgerStore(1, 2, clock=lambda: now[0])
    await store.write("b1", BATCH)
    await store.write("b2", BATCH)  # memory cannot miss a batch: each id is a batch of its own
    [(_, hour)] = await store.read("hour", ["2026-12-06T12"])
    assert hour == {ACME: values(requests=4, cost_nanos=300)}
    now[0] = period_end("2026-12-06T13") + 86_400  # the hours' day of retention has passed; the day's 2 have not
    await store.write("b3", {})
    assert await store.read("hour", ["2026-12-06T12", "2026-12-06T13"]) == [("2026-12-06T12", {}),
                                                                           ("2026-12-06T13", {})]
    assert (await store.read("day", ["2026-12-06"]))[0][1][ACME] == values(requests=6, input_tokens=14,
                                                                           cost_nanos=300)


def test_the_tenancy_s_redis_or_else_memory() -> None:
    assert isinstance(stores.ledger_store(Redis(url="redis://127.0.0.1:1"), 100, 35, 400), RedisLedgerStore)
    assert isinstance(stores.ledger_store(None, 100, 35, 400), MemoryLedgerStore)
