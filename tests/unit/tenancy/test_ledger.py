"""The spend ledger's arithmetic: a usage record's dimensions and measures, its cost back in whole nano-USD,
rollups by hour across an hour's end, the recorder's flush (a batch the store missed sent again under its id,
nothing lost at close), and the rows the admin API folds from them."""

from __future__ import annotations

import asyncio
import random

import pytest
from metric_values import sample_value

from ingress import metrics
from ingress.tenancy.ledger import (
    MEASURES,
    Batch,
    Ledger,
    Rollup,
    Rows,
    entry_of,
    fold,
    hour_of,
    nanos_of,
    period_end,
    total_of,
    usd_of,
)
from ingress.tenancy.plan import TokenPrice
from ingress.tenancy.stores.ledger import MemoryLedgerStore
from ingress.usage import cost_usd
from ingress.wire.types import Usage

NOON = 1_796_558_400.0  # 2026-12-06T12:00:00Z


def record(**fields: object) -> dict[str, object]:
    return {"method": "POST", "path": "/v1/chat/completions", "status": 200, "outcome": "ok", "duration_ms": 1.0,
            **fields}


def values(**named: int) -> list[int]:
    return [named.get(name, 0) for name in MEASURES]


def test_a_record_s_dimensions_and_measures() -> None:
    line = record(model="gpt-4o", route="gpt", variant="b", tenant="acme", key_id="k1", prompt_tokens=12,
                  completion_tokens=5, cached_tokens=4, cache_write_tokens=1, reasoning_tokens=2, cost_usd=0.000123)
    assert entry_of(line) == (("acme", "k1", "gpt-4o", "gpt", "b"),
                              values(requests=1, input_tokens=12, output_tokens=5, cached_tokens=4,
                                     reasoning_tokens=2, cache_write_tokens=1, cost_nanos=123_000))


def test_a_subject_is_the_key_and_what_a_record_lacks_is_empty() -> None:
    dims, _ = entry_of(record(tenant="acme", subject="corp:alice", team="search")) or ((), [])
    assert dims == ("acme", "corp:alice", "", "", "")
    assert entry_of(record()) == (("", "", "", "", ""), values(requests=1))


@pytest.mark.parametrize(("status", "outcome", "errors"), [(200, "ok", 0), (200, "stream_error", 1), (429, "error", 1),
                                                           (499, "client_closed", 1), (404, "ok", 1)])
def test_an_error_is_a_status_of_400_or_more_or_an_end_not_ok(status: int, outcome: str, errors: int) -> None:
    _, measured = entry_of(record(status=status, outcome=outcome)) or ((), [])
    assert measured[MEASURES.index("errors")] == errors


def test_a_cache_hit_is_counted_and_costs_nothing() -> None:
    _, measured = entry_of(record(cached=True, prompt_tokens=3, completion_tokens=2, cost_usd=0.0)) or ((), [])
    assert measured == values(requests=1, input_tokens=3, output_tokens=2, cache_hits=1)


@pytest.mark.parametrize("path", ["/healthz", "/metrics", "/admin/v1/keys", "/v1"])
def test_only_the_api_s_requests_are_counted(path: str) -> None:
    assert entry_of(record(path=path)) is None
    assert entry_of(record(path="/v1beta/models/gemini:generateContent")) is not None


def test_a_record_s_cost_is_the_budget_s_charge_to_the_nano_dollar() -> None:
    """usage.py divides the budget's integer charge by 10**9; the ledger gets that integer back, exactly."""
    rng = random.Random(47)
    for _ in range(20_000):
        price = TokenPrice(rng.randrange(0, 200_000), rng.randrange(0, 800_000))  # up to $200 / $800 per M
        usage = Usage(prompt_tokens=rng.randrange(0, 2_000_000), completion_tokens=rng.randrange(0, 200_000))
        charged = price.input * usage.prompt_tokens + price.output * usage.completion_tokens
        assert nanos_of(cost_usd(usage, price)) == charged
    assert nanos_of(2**51 / 10**9) == 2**51


def test_usd_is_a_decimal_string_with_nine_places() -> None:
    assert [usd_of(n) for n in (0, 123_000, 10**9, 12_345_678_901, -5)] == [
        "0.000000000", "0.000123000", "1.000000000", "12.345678901", "-0.000000005"]


def test_hours_and_their_ends() -> None:
    assert hour_of(NOON + 3599.9) == ("2026-12-06T12", NOON, NOON + 3600)
    assert period_end("2026-12-06T12") == NOON + 3600
    assert period_end("2026-12-06") == NOON + 12 * 3600
    assert period_end("2026-12-31T23") == period_end("2026-12-31") == 1_798_761_600


def test_a_rollup_adds_by_hour_and_dimensions_and_a_take_empties_it() -> None:
    now = [NOON + 3590.0]
    rollup = Rollup(lambda: now[0])
    for _ in range(3):
        rollup.add(record(tenant="acme", model="m", prompt_tokens=2, cost_usd=1e-9))
    rollup.add(record(tenant="beta", model="m"))
    now[0] = NOON + 3600.0  # the next hour
    rollup.add(record(tenant="acme", model="m", prompt_tokens=1))
    rollup.add(record(path="/healthz"))
    assert len(rollup) == 3
    assert rollup.take() == {
        "2026-12-06T12": {("acme", "", "m", "", ""): values(requests=3, input_tokens=6, cost_nanos=3),
                          ("beta", "", "m", "", ""): values(requests=1)},
        "2026-12-06T13": {("acme", "", "m", "", ""): values(requests=1, input_tokens=1)}}
    assert rollup.take() == {}
    rollup.add(record(tenant="acme"))  # after a take, the hour is opened again
    assert list(rollup.take()) == ["2026-12-06T13"]


class FlakyStore(MemoryLedgerStore):
    """The memory store, failing the writes it is told to, and recording each batch id it was sent."""

    def __init__(self) -> None:
        super().__init__(35, 400, clock=lambda: NOON)
        self.fail = 0
        self.sent: list[str] = []

    async def write(self, batch_id: str, batch: Batch) -> None:
        self.sent.append(batch_id)
        if self.fail:
            self.fail -= 1
            raise TimeoutError
        await super().write(batch_id, batch)


async def _day(store: MemoryLedgerStore) -> Rows:
    return (await store.read("day", ["2026-12-06"]))[0][1]


def _errors(reason: str) -> float:
    metrics.fold()
    return sample_value("ingress_ledger_errors_total", {"reason": reason}) or 0.0


async def test_a_batch_the_store_missed_is_sent_again_as_it_was_before_anything_newer() -> None:
    store = FlakyStore()
    ledger = Ledger(store, clock=lambda: NOON)
    ledger.add(record(tenant="acme", prompt_tokens=1))
    store.fail = 1
    timeouts = _errors("timeout")
    assert await ledger.flush() is False and ledger.failing
    assert _errors("timeout") == timeouts + 1
    ledger.add(record(tenant="acme", prompt_tokens=10))  # after the miss: in the next batch
    assert await ledger.flush() is True and not ledger.failing
    assert store.sent[0] == store.sent[1] != store.sent[2]  # the missed batch, again under its id; then the next
    assert await _day(store) == {("acme", "", "", "", ""): values(requests=2, input_tokens=11)}
    assert await ledger.flush() is True and len(store.sent) == 3  # nothing to send: nothing sent


async def test_what_a_stop_cannot_write_is_counted() -> None:
    store = FlakyStore()
    ledger = Ledger(store, clock=lambda: NOON)
    ledger.add(record(tenant="acme"))
    ledger.add(record(tenant="beta"))
    store.fail = 1
    unwritten = _errors("unwritten")
    await ledger.close()
    assert _errors("unwritten") == unwritten + 2


async def test_close_writes_what_is_left() -> None:
    store = FlakyStore()
    ledger = Ledger(store, interval=3600, clock=lambda: NOON)
    ledger.start()
    ledger.add(record(tenant="acme"))
    await ledger.close()
    assert await _day(store) == {("acme", "", "", "", ""): values(requests=1)}
    assert len(ledger.tasks) == 0


async def test_flushes_run_every_interval() -> None:
    store = FlakyStore()
    ledger = Ledger(store, interval=0.01, clock=lambda: NOON)
    ledger.start()
    ledger.add(record(tenant="acme"))
    for _ in range(500):
        if store.sent:
            break
        await asyncio.sleep(0.01)
    assert await _day(store) == {("acme", "", "", "", ""): values(requests=1)}
    await ledger.close()


ROWS: list[tuple[str, Rows]] = [
    ("2026-12-05", {("acme", "k1", "m1", "r", ""): values(requests=2, cost_nanos=5),
                    ("acme", "k2", "m1", "r", ""): values(requests=1, cost_nanos=7, errors=1),
                    ("beta", "k3", "m2", "r", ""): values(requests=4, input_tokens=9)}),
    ("2026-12-06", {("", "", "m1", "", ""): values(requests=1)}),
]


def test_rows_are_grouped_by_the_dimensions_asked_in_their_order() -> None:
    rows = fold(ROWS, ("model", "tenant"), {})
    assert [(r["period"], r["model"], r["tenant"], r["requests"], r["cost_nanos"]) for r in rows] == [
        ("2026-12-05", "m1", "acme", 3, 12), ("2026-12-05", "m2", "beta", 4, 0), ("2026-12-06", "m1", None, 1, 0)]
    assert list(rows[0]) == ["period", "model", "tenant", "requests", "input_tokens", "output_tokens", "cached_tokens",
                             "cost_nanos", "cost_usd", "errors", "cache_hits", "reasoning_tokens",
                             "cache_write_tokens"]
    assert rows[0]["cost_usd"] == "0.000000012"


def test_filters_keep_what_matches_and_no_grouping_is_a_row_a_period() -> None:
    rows = fold(ROWS, (), {"tenant": "acme", "model": "m1"})
    assert [(r["period"], r["requests"], r["errors"]) for r in rows] == [("2026-12-05", 3, 1)]
    assert fold(ROWS, ("key",), {"key": "nobody"}) == []


def test_the_total_sums_every_row() -> None:
    rows = fold(ROWS, ("tenant", "key"), {})
    total = total_of(rows)
    assert (total["requests"], total["cost_nanos"], total["cost_usd"], total["input_tokens"]) == (
        8, 12, "0.000000012", 9)
    assert total == total_of(fold(ROWS, (), {}))


def test_a_period_without_rollups_has_no_rows() -> None:
    assert fold([("2026-12-07", {})], ("tenant",), {}) == []
    assert total_of([])["cost_usd"] == "0.000000000"
