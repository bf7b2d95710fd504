"""The spend ledger: each request's usage record added to its hour's rollup in the process, the rollups sent
to a store (stores/ledger.py) by a background flush, and a period's rollups folded into rows for the admin API.

A rollup is keyed by its dimensions (tenant, key id or JWT subject, model as asked, route, variant) and holds
integer measures: requests, tokens by kind, cost in nano-USD (as a `usd` budget charges it: the record's
`cost_usd` is a whole number of nano-USD divided by 10**9, turned back exactly), errors and cache hits. A
request's record is added where its access line is written, with no I/O; the store hears of it within
`interval` seconds, and at a clean stop. Only the API's requests (`/v1/...`, `/v1beta/...`) are counted:
exactly the access lines whose sum the ledger equals.
"""

from __future__ import annotations

import asyncio
import calendar
import itertools
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Literal, Protocol, TypeVar

from ingress import metrics
from ingress.log import get_logger
from ingress.tasks import BackgroundTasks
from ingress.tenancy.plan import NANO_USD_PER_USD
from ingress.tenancy.stores.resp_codec import ReplyError

log = get_logger("ingress.ledger")

DIMENSIONS = ("tenant", "key", "model", "route", "variant")
MEASURES = ("requests", "input_tokens", "output_tokens", "cached_tokens", "reasoning_tokens", "cache_write_tokens",
            "cost_nanos", "errors", "cache_hits")
_TOKENS = (("prompt_tokens", 1), ("completion_tokens", 2), ("cached_tokens", 3), ("reasoning_tokens", 4),
           ("cache_write_tokens", 5))
COST, ERRORS, HITS = MEASURES.index("cost_nanos"), MEASURES.index("errors"), MEASURES.index("cache_hits")
API_PATHS = ("/v1/", "/v1beta/")
Dims = tuple[str, str, str, str, str]  # "" where a record has none (no tenancy: no tenant nor key)
Rows = dict[Dims, list[int]]
Batch = dict[str, Rows]  # hour ("2026-12-06T17") → its rollups
Granularity = Literal["day", "hour"]
K = TypeVar("K", bound=tuple[str, ...])


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timeout"
    return "connection" if isinstance(exc, OSError) else "error"


def nanos_of(cost_usd: float) -> int:
    """A record's cost back in nano-USD: exact for any cost below 2**51 nano-USD (two million USD a request),
    since `cost_usd` is an integer divided by 10**9, each step correctly rounded."""
    return round(cost_usd * NANO_USD_PER_USD)


def usd_of(nanos: int) -> str:
    """Nano-USD as a decimal string with all nine places ("0.000123000"), never a float."""
    sign, nanos = ("-", -nanos) if nanos < 0 else ("", nanos)
    whole, part = divmod(nanos, NANO_USD_PER_USD)
    return f"{sign}{whole}.{part:09d}"


def _text(record: Mapping[str, object], name: str) -> str:
    value = record.get(name)
    return value if isinstance(value, str) else ""


def entry_of(record: Mapping[str, object]) -> tuple[Dims, list[int]] | None:
    """A usage record's dimensions and measures (ingress/usage.py's keys), or None for a request not of the
    API (a health check, the metrics)."""
    path = record.get("path")
    if not isinstance(path, str) or not path.startswith(API_PATHS):
        return None
    values = [0] * len(MEASURES)
    values[0] = 1
    for name, index in _TOKENS:
        count = record.get(name)
        if isinstance(count, int):
            values[index] = count
    cost = record.get("cost_usd")
    if isinstance(cost, float | int):
        values[COST] = nanos_of(cost)
    status = record.get("status")
    if record.get("outcome") != "ok" or not isinstance(status, int) or status >= 400:
        values[ERRORS] = 1
    if record.get("cached") is True:
        values[HITS] = 1
    dims = (_text(record, "tenant"), _text(record, "key_id") or _text(record, "subject"), _text(record, "model"),
            _text(record, "route"), _text(record, "variant"))
    return dims, values


def add_into(rows: dict[K, list[int]], dims: K, values: Sequence[int]) -> None:
    """`values` added to the row of `dims` (made if new)."""
    row = rows.get(dims)
    if row is None:
        rows[dims] = list(values)
    else:
        for i, value in enumerate(values):
            row[i] += value


def hour_of(now_s: float) -> tuple[str, float, float]:
    """The UTC hour `now_s` falls in ("2026-12-06T17"), its start and its end (Unix seconds)."""
    t = time.gmtime(now_s)
    start = calendar.timegm((t.tm_year, t.tm_mon, t.tm_mday, t.tm_hour, 0, 0))
    return f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}T{t.tm_hour:02d}", start, start + 3600


def period_end(period: str) -> int:
    """When an hour ("2026-12-06T17") or a day ("2026-12-06") ends, in Unix seconds."""
    day = time.strptime(period[:10], "%Y-%m-%d")
    start = calendar.timegm((day.tm_year, day.tm_mon, day.tm_mday, int(period[11:13] or 0), 0, 0))
    return start + (3600 if len(period) > 10 else 86_400)


class Rollup:
    """This process's rollups not yet sent, by hour: what a request adds, and a flush takes."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.hours: Batch = {}
        self._open: Rows = {}
        self._start = self._end = 0.0

    def add(self, record: Mapping[str, object]) -> None:
        entry = entry_of(record)
        if entry is None:
            return
        now = self.clock()
        if not self._start <= now < self._end:
            name, self._start, self._end = hour_of(now)
            self._open = self.hours.setdefault(name, {})
        add_into(self._open, *entry)

    def take(self) -> Batch:
        """Every rollup added since the last take; the next add opens its hour again."""
        taken, self.hours = self.hours, {}
        self._start = self._end = 0.0
        return taken

    def __len__(self) -> int:
        return sum(len(rows) for rows in self.hours.values())


class LedgerStore(Protocol):
    async def write(self, batch_id: str, batch: Batch) -> None:
        """Add the batch to its hours and their days, once per `batch_id` (sent again after a failure, it is
        not counted twice); ReplyError or OSError (TimeoutError) when the store did not answer."""

    async def read(self, granularity: Granularity, periods: Sequence[str]) -> list[tuple[str, Rows]]:
        """Each period's rollups (days "2026-12-06" or hours "2026-12-06T17"), in the order asked."""

    async def close(self) -> None: ...


class Ledger:
    """The recorder: the rollup a request adds to, flushed to the store every `interval` seconds by one
    background task; a batch the store did not take is sent again, as it was, before anything newer."""

    def __init__(self, store: LedgerStore, interval: float = 1.0, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.interval = interval
        self.rollup = Rollup(clock)
        self.process = os.urandom(6).hex()
        self._seq = itertools.count()
        self._unsent: tuple[str, Batch] | None = None
        self._lock = asyncio.Lock()
        self.failing = False
        self.tasks = BackgroundTasks()

    def add(self, record: Mapping[str, object]) -> None:
        """A request's usage record (its access line), added in memory: no I/O, no task."""
        self.rollup.add(record)

    def start(self) -> None:
        self.tasks.spawn(self._forever(), "ledger-flush")

    async def _forever(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.flush()

    async def flush(self) -> bool:
        """Send what was added (the batch the store missed first); whether the store took all of it."""
        async with self._lock:
            while True:
                if self._unsent is None:
                    batch = self.rollup.take()
                    if not batch:
                        return True
                    self._unsent = (f"{self.process}:{next(self._seq)}", batch)
                batch_id, batch = self._unsent
                try:
                    await self.store.write(batch_id, batch)
                except (ReplyError, OSError) as exc:  # TimeoutError among them: sent again, under the same id
                    metrics.child(metrics.LEDGER_ERRORS, _reason(exc)).inc()
                    if not self.failing:
                        log.warning("spend ledger not written; kept to send again", error=repr(exc))
                    self.failing = True
                    return False
                self._unsent = None
                if self.failing:
                    log.info("spend ledger written again")
                    self.failing = False

    async def read(self, granularity: Granularity, periods: Sequence[str]) -> list[tuple[str, Rows]]:
        return await self.store.read(granularity, periods)

    async def close(self) -> None:
        """Stop flushing, send what is left (a clean stop loses nothing the store can take), close the store."""
        await self.tasks.close()
        if not await self.flush():
            left = len(self.rollup) + (sum(len(r) for r in self._unsent[1].values()) if self._unsent else 0)
            metrics.child(metrics.LEDGER_ERRORS, "unwritten").inc(left)
            log.error("spend ledger: rollups not written at stop", rollups=left)
        await self.store.close()


# --- the admin API's rows ------------------------------------------------------------------------------


def fold(periods: Iterable[tuple[str, Rows]], group_by: Sequence[str], where: Mapping[str, str]) -> list[
        dict[str, object]]:
    """Rows of each period's rollups grouped by the dimensions of `group_by` (in its order; "" shown as None),
    of those matching every `where` (dimension → value), oldest period first, then by dimension."""
    picks = [DIMENSIONS.index(name) for name in group_by]
    filters = [(DIMENSIONS.index(name), value) for name, value in where.items()]
    rows: list[dict[str, object]] = []
    for period, found in periods:
        grouped: dict[tuple[str, ...], list[int]] = {}
        for dims, values in found.items():
            if all(dims[i] == value for i, value in filters):
                add_into(grouped, tuple(dims[i] for i in picks), values)
        for key in sorted(grouped):
            row: dict[str, object] = {"period": period}
            row.update((name, key[n] or None) for n, name in enumerate(group_by))
            row.update(measures_of(grouped[key]))
            rows.append(row)
    return rows


SHOWN = ("requests", "input_tokens", "output_tokens", "cached_tokens", "cost_nanos", "cost_usd", "errors",
         "cache_hits", "reasoning_tokens", "cache_write_tokens")  # the admin API's columns, in its order


def measures_of(values: Sequence[int]) -> dict[str, object]:
    """The measures as the admin API shows them, the cost in nano-USD and as a decimal string."""
    named: dict[str, object] = dict(zip(MEASURES, values, strict=False))
    named["cost_usd"] = usd_of(values[COST])
    return {name: named.get(name, 0) for name in SHOWN}


def total_of(rows: Iterable[Mapping[str, object]]) -> dict[str, object]:
    totals = [0] * len(MEASURES)
    for row in rows:
        for i, name in enumerate(MEASURES):
            value = row.get(name)
            if isinstance(value, int):
                totals[i] += value
    return measures_of(totals)
