"""`/admin/v1/spend`: the spend ledger (ingress/tenancy/ledger.py) by day or hour, grouped and filtered, as JSON or
CSV (docs/admin.md).

    GET /admin/v1/spend?from=2026-12-01&to=2026-12-06&granularity=day&group_by=tenant,model&tenant=acme&format=csv

`from` and `to` are UTC days, both included (today by default); `granularity` day (default) or hour; `group_by`
a comma list of tenant, key, model, route, variant (tenant by default; empty: one row a period); `tenant`, `key`
and `model` keep only what matches; `format` json (default) or csv. Any other parameter given empty is as if
absent. A parameter that is not one of these, given twice, or not valid is a 400 naming it. Viewers may read it,
as every GET. The credentials are api.py's.
"""

from __future__ import annotations

import csv
import datetime
import io
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from aiohttp import web

from ingress.admin.api import RETRY_AFTER, failure
from ingress.tenancy.ledger import DIMENSIONS, SHOWN, Granularity, Ledger, fold, total_of
from ingress.tenancy.stores.resp_codec import ReplyError

LEDGER = web.AppKey("spend_ledger", Ledger)
PARAMS = ("from", "to", "granularity", "group_by", "tenant", "key", "model", "format")
FILTERS = ("tenant", "key", "model")
MOST_DAYS: dict[Granularity, int] = {"day": 366, "hour": 31}  # a query's range, both days included
_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")


@dataclass(frozen=True, slots=True)
class Query:
    start: datetime.date
    end: datetime.date
    granularity: Granularity
    group_by: tuple[str, ...]
    where: dict[str, str]
    format: Literal["json", "csv"]

    def periods(self) -> list[str]:
        """The days from start to end, or each hour of each of them."""
        days = [(self.start + datetime.timedelta(days=n)).isoformat() for n in range((self.end - self.start).days + 1)]
        return days if self.granularity == "day" else [f"{day}T{hour:02d}" for day in days for hour in range(24)]


@dataclass(frozen=True, slots=True)
class Refused:
    """A parameter refused: which, and why."""

    param: str
    message: str


def _day(name: str, value: str) -> datetime.date | Refused:
    if _DAY.fullmatch(value):
        try:
            return datetime.date.fromisoformat(value)
        except ValueError:
            pass
    return Refused(name, f"{name}: {value!r} is not a day (YYYY-MM-DD, UTC)")


def query_of(params: Iterable[tuple[str, str]], today: datetime.date) -> Query | Refused:
    """The query the parameters ask for, or the first one refused."""
    given: dict[str, str] = {}
    for name, value in params:
        if name not in PARAMS:
            return Refused(name, f"{name}: not a parameter of this route (one of {', '.join(PARAMS)})")
        if name in given:
            return Refused(name, f"{name}: given twice")
        if value or name == "group_by":  # an empty one is as if absent: its default, or no filter
            given[name] = value
    start = _day("from", given["from"]) if "from" in given else today
    end = _day("to", given["to"]) if "to" in given else (today if "from" not in given else start)
    if isinstance(start, Refused):
        return start
    if isinstance(end, Refused):
        return end
    asked = given.get("granularity", "day")
    if asked != "day" and asked != "hour":
        return Refused("granularity", f"granularity: {asked!r} is not day or hour")
    granularity: Granularity = "hour" if asked == "hour" else "day"
    if end < start:
        return Refused("to", f"to: {end} is before from ({start})")
    if (end - start).days + 1 > MOST_DAYS[granularity]:
        return Refused("to", f"to: at most {MOST_DAYS[granularity]} days a query by {granularity}; ask for the "
                             "rest in another")
    group_by = tuple(name.strip() for name in given.get("group_by", "tenant").split(",") if name.strip())
    for name in group_by:
        if name not in DIMENSIONS:
            return Refused("group_by", f"group_by: {name!r} is not one of {', '.join(DIMENSIONS)}")
    if len(set(group_by)) != len(group_by):
        return Refused("group_by", "group_by: a dimension is named twice")
    shape = given.get("format", "json")
    if shape != "json" and shape != "csv":
        return Refused("format", f"format: {shape!r} is not json or csv")
    form: Literal["json", "csv"] = "csv" if shape == "csv" else "json"
    where = {name: given[name] for name in FILTERS if name in given}
    return Query(start, end, granularity, group_by, where, form)


def csv_of(rows: list[dict[str, object]], group_by: tuple[str, ...]) -> str:
    """A header line, then a line a row: the period, the dimensions grouped by (empty where none), the measures."""
    out = io.StringIO()
    writer = csv.writer(out)
    columns = ("period", *group_by, *SHOWN)
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if row.get(c) is None else row.get(c) for c in columns])
    return out.getvalue()


def _refused(refused: Refused) -> web.Response:
    return web.json_response({"error": {"type": "invalid_request", "message": refused.message,
                                        "param": refused.param}}, status=400)


async def spend(request: web.Request) -> web.Response:
    ledger = request.app.get(LEDGER)
    if ledger is None:
        return failure(404, "not_found", "The spend ledger is off ([admin.ledger] enabled = false).")
    query = query_of(request.query.items(), datetime.datetime.now(datetime.UTC).date())
    if isinstance(query, Refused):
        return _refused(query)
    try:
        found = await ledger.read(query.granularity, query.periods())
    except (ReplyError, OSError):  # TimeoutError among them
        return failure(503, "store_unavailable", "The ledger's store did not answer; try again.",
                       **{"Retry-After": RETRY_AFTER})
    rows = fold(found, query.group_by, query.where)
    start, end = query.start.isoformat(), query.end.isoformat()
    if query.format == "csv":
        return web.Response(text=csv_of(rows, query.group_by), content_type="text/csv", headers={
            "Content-Disposition": f'attachment; filename="spend-{start}-{end}-{query.granularity}.csv"'})
    return web.json_response({"object": "list", "granularity": query.granularity, "from": start, "to": end,
                              "data": rows, "total": total_of(rows)})


def add_routes(app: web.Application, ledger: Ledger | None) -> None:
    if ledger is not None:
        app[LEDGER] = ledger
    app.router.add_get("/admin/v1/spend", spend)
