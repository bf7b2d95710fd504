"""Where the spend ledger's rollups live: the tenancy's Redis/Valkey (every replica's flushes added up), or one
process's memory (the embedded default, one worker).

In Redis, under the tenancy's hash tag, a hash an hour and one a day, each field a measure of one set of
dimensions (`<measure index>:<JSON array of the dimensions>`) and its value an integer:

    {ingress}:ledger:h:2026-12-06T17    expires `hour_days` after its hour ends (35 by default)
    {ingress}:ledger:d:2026-12-06       expires `day_days` after its day ends (400 by default)
    {ingress}:ledger:f:<batch id>       a flush's mark: a batch sent again after a timeout is not counted twice

A flush is one script a batch (FLUSH_FIELDS fields at most a call): it sets the mark (NX) or returns, then
HINCRBYs each field of each hour and of its day, and sets each hash's expiry. Calls go through the tenancy's
RESP client (resp.py), on a connection of their own, each with a deadline; nothing is retried here (the
recorder, ledger.py, sends a missed batch again at its next flush).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

import msgspec

from ingress.tenancy.ledger import MEASURES, Batch, Dims, Granularity, LedgerStore, Rows, add_into, period_end
from ingress.tenancy.settings import Redis
from ingress.tenancy.stores.resp import Client
from ingress.tenancy.stores.resp_codec import Arg, Script, encode

FLUSH = Script("""
if not redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[1]) then return 0 end
local a = 2
for i = 2, #KEYS do
  local expires, n = ARGV[a], tonumber(ARGV[a + 1])
  a = a + 2
  for _ = 1, n do
    redis.call('HINCRBY', KEYS[i], ARGV[a], ARGV[a + 1])
    a = a + 2
  end
  redis.call('EXPIREAT', KEYS[i], expires)
end
return #KEYS - 1
""")
MARK_S = 86_400  # how long a flush's mark is kept: far longer than any batch waits to be sent again
FLUSH_FIELDS = 4096  # fields a script call: a long outage's batch goes in several, none holding Redis long
DAY_S = 86_400
_DIMS = msgspec.json.Decoder(tuple[str, str, str, str, str])
_json = msgspec.json.Encoder()


def field_of(index: int, dims: Dims) -> bytes:
    """A hash's field: the measure's index and the dimensions as a JSON array (`0:["acme","k1","gpt-4o","gpt",""]`)."""
    return b"%d:%b" % (index, _json.encode(dims))


def rows_of(reply: Sequence[bytes]) -> Rows:
    """An HGETALL's fields and values as rollups; a field of a measure this version does not know is left."""
    rows: Rows = {}
    for field, value in zip(reply[::2], reply[1::2], strict=True):
        index, _, dims = field.partition(b":")
        if int(index) < len(MEASURES):
            values = [0] * len(MEASURES)
            values[int(index)] = int(value)
            add_into(rows, _DIMS.decode(dims), values)
    return rows


def days_of(batch: Batch) -> Batch:
    """The batch's hours added up by day."""
    days: Batch = {}
    for hour, rows in batch.items():
        day = days.setdefault(hour[:10], {})
        for dims, values in rows.items():
            add_into(day, dims, values)
    return days


class RedisLedgerStore:
    def __init__(self, settings: Redis, deadline_ms: int, hour_days: int, day_days: int) -> None:
        self.deadline = deadline_ms / 1000
        self.client = Client(settings.url, connect_timeout=self.deadline)  # its own connection
        self.tag = "{" + settings.prefix + "}:ledger:"
        self.keep = {"h": hour_days * DAY_S, "d": day_days * DAY_S}

    def key(self, granularity: Granularity, period: str) -> str:
        return f"{self.tag}{granularity[0]}:{period}"

    def calls(self, batch_id: str, batch: Batch) -> list[tuple[list[Arg], list[Arg]]]:
        """The script calls that write `batch`: each call's keys and arguments."""
        calls: list[tuple[list[Arg], list[Arg]]] = []
        keys: list[Arg] = []
        args: list[Arg] = []
        count = 0
        for kind, periods in (("h", batch), ("d", days_of(batch))):
            for period, rows in periods.items():
                fields: list[Arg] = []
                for dims, values in rows.items():
                    fields += (arg for i, v in enumerate(values) if v for arg in (field_of(i, dims), v))
                for start in range(0, len(fields), 2 * FLUSH_FIELDS):
                    part = fields[start:start + 2 * FLUSH_FIELDS]
                    if count + len(part) // 2 > FLUSH_FIELDS:
                        calls.append(([self.tag + f"f:{batch_id}:{len(calls)}", *keys], [MARK_S, *args]))
                        keys, args, count = [], [], 0
                    keys.append(f"{self.tag}{kind}:{period}")
                    args += (period_end(period) + self.keep[kind], len(part) // 2, *part)
                    count += len(part) // 2
        if keys:
            calls.append(([self.tag + f"f:{batch_id}:{len(calls)}", *keys], [MARK_S, *args]))
        return calls

    async def write(self, batch_id: str, batch: Batch) -> None:
        loop = asyncio.get_running_loop()
        for keys, args in self.calls(batch_id, batch):  # one at a time: a call's mark holds for its part alone
            await self.client.evalsha(FLUSH, keys, args, loop.time() + self.deadline)

    async def read(self, granularity: Granularity, periods: Sequence[str]) -> list[tuple[str, Rows]]:
        deadline = asyncio.get_running_loop().time() + self.deadline
        replies = await asyncio.gather(*(self.client.call(encode("HGETALL", self.key(granularity, p)), deadline)
                                         for p in periods))  # pipelined on the one connection
        return [(period, rows_of(reply)) for period, reply in zip(periods, replies, strict=True)]

    async def close(self) -> None:
        await self.client.close()


class MemoryLedgerStore:
    """One process's rollups, by hour and by day, each dropped once its retention has passed."""

    def __init__(self, hour_days: int, day_days: int, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.periods: dict[Granularity, dict[str, Rows]] = {"hour": {}, "day": {}}
        self.keep: dict[Granularity, int] = {"hour": hour_days * DAY_S, "day": day_days * DAY_S}

    async def write(self, batch_id: str, batch: Batch) -> None:
        for kept, periods in ((self.periods["hour"], batch), (self.periods["day"], days_of(batch))):
            for period, rows in periods.items():
                into = kept.setdefault(period, {})
                for dims, values in rows.items():
                    add_into(into, dims, values)
        self._expire()

    def _expire(self) -> None:
        now = self.clock()
        for granularity, kept in self.periods.items():
            for period in [p for p in kept if period_end(p) + self.keep[granularity] <= now]:
                del kept[period]

    async def read(self, granularity: Granularity, periods: Sequence[str]) -> list[tuple[str, Rows]]:
        kept = self.periods[granularity]
        return [(period, {dims: list(values) for dims, values in kept.get(period, {}).items()}) for period in periods]

    async def close(self) -> None:
        pass


def ledger_store(redis: Redis | None, deadline_ms: int, hour_days: int, day_days: int) -> LedgerStore:
    """The tenancy's Redis when it has one, else this process's memory."""
    store: LedgerStore = (RedisLedgerStore(redis, deadline_ms, hour_days, day_days) if redis is not None
                          else MemoryLedgerStore(hour_days, day_days))
    return store
