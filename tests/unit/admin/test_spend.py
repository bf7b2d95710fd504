"""`/admin/v1/spend` on a memory ledger: the parameters and their defaults, each refusal a 400 naming its
parameter, the rows and total as JSON and the same rows as CSV, a viewer reading it, and the route when the
ledger is off. (The credentials on this route are test_api.py's, whose ROUTES name it.)"""

from __future__ import annotations

import csv
import datetime
import io
import time
from collections.abc import AsyncIterator, Sequence

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from ingress.admin.api import create_admin_app
from ingress.admin.keystore import MemoryKeyStore
from ingress.admin.settings import Admin, AdminKey
from ingress.admin.spend import Query, Refused, csv_of, query_of
from ingress.tenancy import build
from ingress.tenancy.keys import new_key
from ingress.tenancy.ledger import SHOWN, Granularity, Ledger, Rows
from ingress.tenancy.settings import Tenancy as TenancySettings
from ingress.tenancy.stores.ledger import MemoryLedgerStore

ADMIN, ADMIN_ID, ADMIN_HASH = new_key()
VIEWER, VIEWER_ID, VIEWER_HASH = new_key()
Client = TestClient[web.Request, web.Application]
DAY = datetime.date(2026, 12, 6)


def test_the_defaults_are_today_by_day_grouped_by_tenant_as_json() -> None:
    assert query_of([], DAY) == Query(DAY, DAY, "day", ("tenant",), {}, "json")
    assert query_of([("from", "2026-12-01")], DAY) == Query(datetime.date(2026, 12, 1), datetime.date(2026, 12, 1),
                                                            "day", ("tenant",), {}, "json")


def test_every_parameter_read() -> None:
    query = query_of([("from", "2026-12-05"), ("to", "2026-12-06"), ("granularity", "hour"),
                      ("group_by", "model, key,route"), ("tenant", "acme"), ("key", "k1"), ("model", "gpt-4o"),
                      ("format", "csv")], DAY)
    assert query == Query(datetime.date(2026, 12, 5), DAY, "hour", ("model", "key", "route"),
                          {"tenant": "acme", "key": "k1", "model": "gpt-4o"}, "csv")
    assert isinstance(query, Query)
    assert query.periods()[:2] == ["2026-12-05T00", "2026-12-05T01"] and len(query.periods()) == 48
    assert query_of([("group_by", "")], DAY) == Query(DAY, DAY, "day", (), {}, "json")


def test_a_parameter_given_empty_is_as_if_absent_but_group_by_groups_by_nothing() -> None:
    empty = [(name, "") for name in ("from", "to", "granularity", "tenant", "key", "model", "format")]
    assert query_of(empty, DAY) == query_of([], DAY) == Query(DAY, DAY, "day", ("tenant",), {}, "json")
    assert query_of([*empty, ("group_by", "")], DAY) == Query(DAY, DAY, "day", (), {}, "json")


@pytest.mark.parametrize(("params", "param"), [
    ([("from", "2026-13-01")], "from"), ([("from", "06/12/2026")], "from"), ([("to", "2026-12-6")], "to"),
    ([("from", "2026-12-06"), ("to", "2026-12-05")], "to"), ([("granularity", "week")], "granularity"),
    ([("group_by", "tenant,colour")], "group_by"), ([("group_by", "model,model")], "group_by"),
    ([("format", "xml")], "format"), ([("since", "2026-12-01")], "since"),
    ([("tenant", "a"), ("tenant", "b")], "tenant"),
    ([("from", "2025-01-01"), ("to", "2026-12-06")], "to"),
    ([("from", "2026-11-01"), ("to", "2026-12-06"), ("granularity", "hour")], "to"),
])
def test_a_parameter_refused_is_named(params: list[tuple[str, str]], param: str) -> None:
    refused = query_of(params, DAY)
    assert isinstance(refused, Refused) and refused.param == param and refused.message.startswith(f"{param}:")


def test_csv_has_a_header_then_a_line_a_row() -> None:
    rows: list[dict[str, object]] = [{"period": "2026-12-06", "tenant": "acme", "model": None,
                                      **{name: 1 for name in SHOWN}}]
    lines = list(csv.reader(io.StringIO(csv_of(rows, ("tenant", "model")))))
    assert lines == [["period", "tenant", "model", *SHOWN], ["2026-12-06", "acme", "", *["1"] * len(SHOWN)]]


@pytest.fixture
async def ledger() -> AsyncIterator[Ledger]:
    made = Ledger(MemoryLedgerStore(35, 400), interval=3600)
    yield made
    await made.close()


async def _client(ledger: Ledger | None) -> Client:
    settings = Admin(listen="127.0.0.1:0", keys=(AdminKey(id=ADMIN_ID, hash=ADMIN_HASH, role="admin"),
                                                  AdminKey(id=VIEWER_ID, hash=VIEWER_HASH, role="viewer")))
    app = create_admin_app(settings, MemoryKeyStore(), build(TenancySettings()), ledger)
    return TestClient[web.Request, web.Application](TestServer(app))


def _line(**fields: object) -> dict[str, object]:
    return {"method": "POST", "path": "/v1/chat/completions", "status": 200, "outcome": "ok", **fields}


async def test_a_viewer_reads_the_rows_and_total_as_json_and_csv(ledger: Ledger) -> None:
    ledger.add(_line(tenant="acme", key_id="k1", model="gpt-4o", route="gpt", prompt_tokens=10, completion_tokens=2,
                     cost_usd=0.00000345))
    ledger.add(_line(tenant="acme", key_id="k2", model="gpt-4o", route="gpt", prompt_tokens=5, cached=True,
                     cost_usd=0.0))
    ledger.add(_line(tenant="beta", key_id="k3", model="claude", status=429, outcome="error"))
    await ledger.flush()
    today = time.strftime("%Y-%m-%d", time.gmtime())
    async with await _client(ledger) as client:
        auth = {"Authorization": f"Bearer {VIEWER}"}
        async with client.get("/admin/v1/spend", params={"group_by": "tenant,model"}, headers=auth) as r:
            assert r.status == 200
            answer = await r.json()
        assert {k: answer[k] for k in ("object", "granularity", "from", "to")} == {
            "object": "list", "granularity": "day", "from": today, "to": today}
        assert [(d["period"], d["tenant"], d["model"], d["requests"], d["input_tokens"], d["cost_nanos"],
                 d["cost_usd"], d["errors"], d["cache_hits"]) for d in answer["data"]] == [
            (today, "acme", "gpt-4o", 2, 15, 3450, "0.000003450", 0, 1),
            (today, "beta", "claude", 1, 0, 0, "0.000000000", 1, 0)]
        assert "key" not in answer["data"][0] and "route" not in answer["data"][0]
        assert (answer["total"]["requests"], answer["total"]["cost_nanos"], answer["total"]["output_tokens"]) == (
            3, 3450, 2)
        async with client.get("/admin/v1/spend", params={"group_by": "key", "tenant": "acme", "format": "csv",
                                                         "granularity": "hour"}, headers=auth) as r:
            assert r.status == 200 and r.content_type == "text/csv"
            assert "attachment" in r.headers["Content-Disposition"]
            lines = list(csv.DictReader(io.StringIO(await r.text())))
        assert [(line["period"][:10], line["key"], line["requests"], line["cost_usd"]) for line in lines] == [
            (today, "k1", "1", "0.000003450"), (today, "k2", "1", "0.000000000")]


async def test_a_bad_parameter_is_a_400_naming_it(ledger: Ledger) -> None:
    async with await _client(ledger) as client:
        async with client.get("/admin/v1/spend?granularity=minute",
                              headers={"Authorization": f"Bearer {ADMIN}"}) as r:
            assert r.status == 400
            error = (await r.json())["error"]
        assert error["type"] == "invalid_request" and error["param"] == "granularity"
        assert "minute" in error["message"]


async def test_the_route_says_when_the_ledger_is_off() -> None:
    async with await _client(None) as client, client.get("/admin/v1/spend",
                                                           headers={"Authorization": f"Bearer {ADMIN}"}) as r:
        assert r.status == 404
        assert "[admin.ledger]" in (await r.json())["error"]["message"]


class DownStore(MemoryLedgerStore):
    async def read(self, granularity: Granularity, periods: Sequence[str]) -> list[tuple[str, Rows]]:
        raise ConnectionError("the connection to Redis was lost")


async def test_a_store_that_does_not_answer_is_a_503_with_retry_after() -> None:
    ledger = Ledger(DownStore(35, 400))
    async with await _client(ledger) as client, client.get("/admin/v1/spend",
                                                             headers={"Authorization": f"Bearer {ADMIN}"}) as r:
        assert r.status == 503
        assert r.headers["Retry-After"] == "1"  # as every 503 of the admin API (docs/admin.md)
        assert (await r.json())["error"]["type"] == "store_unavailable"
