"""The admin console in a real browser (Debian's chromium, headless, driven by Playwright) against two edges
sharing one real Redis: signed in with an admin key, it makes a key (whose secret, shown once, then works
through the openai SDK on the public port), changes its limits, rotates it, revokes it, makes and changes a
tenant, shows the audit log of all that and the spend by day; after each action the admin API, called with
the admin key, says it happened. A viewer's console hides every change and its session's changes are
refused; a change sent with the cookie and no CSRF token is refused; failed sign-ins are limited per address
on every edge. A screenshot of each run is kept (tests/support/browser.py's artifacts())."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import aiohttp
import pytest
from admin_edges import ADMIN, ADMIN_ID, Edge, admin, two_edges
from browser import artifacts, browsing
from playwright.async_api import Page, Route, expect
from redis_servers import Server, running
from waiting import eventually

from ingress.tenancy.keys import new_key

pytestmark = [pytest.mark.redis, pytest.mark.browser, pytest.mark.timeout(300)]
VIEWER, VIEWER_ID, VIEWER_HASH = new_key()
PROPAGATED_S = 10.0  # a bound for a loaded machine: the promise (a second) is test_admin_keys.py's to prove


# A price, so that the spend view has a cost to show (USD a million tokens: a request of a few tokens costs
# some thousandths of a dollar).
PRICED = """[tenancy.tenants.acme]
[tenancy.models."ingress-demo"]
price = { input = 300.0, output = 600.0 }
"""


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Server]:
    with running("redis", tmp_path) as server:
        yield server


@pytest.fixture
async def edges(tmp_path: Path, store: Server) -> AsyncIterator[tuple[Edge, Edge]]:
    viewer = f'[[admin.keys]]\nid = "{VIEWER_ID}"\nhash = "{VIEWER_HASH}"\nrole = "viewer"\n'
    async with two_edges(tmp_path, store, PRICED, viewer) as pair:
        yield pair


@pytest.fixture
async def page(chromium: Path, tmp_path: Path) -> AsyncIterator[Page]:
    async with browsing(chromium, tmp_path / "profile") as context:
        yield await context.new_page()


def console(edge: Edge) -> str:
    return edge.admin.removesuffix("v1")


async def sign_in(page: Page, edge: Edge, key: str, actor: str) -> None:
    await page.goto(console(edge))
    await expect(page.locator("#sign-in")).to_be_visible()
    await page.fill("#admin-key", key)
    await page.click("#sign-in-form button[type=submit]")
    await expect(page.locator("#actor")).to_contain_text(actor)


async def status(page: Page, text: str) -> None:
    await expect(page.locator("#error")).to_have_text("")
    await expect(page.locator("#status")).to_have_text(text)


async def in_page(page: Page, method: str, path: str, csrf: str | None, body: dict[str, Any] | None = None) -> int:
    """The status of a call made by the console's own page (its cookie sent, as the page's script does)."""
    return int(await page.evaluate(
        """async ([method, path, csrf, body]) => {
             const headers = {"Content-Type": "application/json"};
             if (csrf) headers["X-CSRF-Token"] = csrf;
             const answer = await fetch(path, {method, headers, body: body ? JSON.stringify(body) : undefined});
             return answer.status;
           }""", [method, path, csrf, body]))


async def table(page: Page, selector: str) -> list[list[str]]:
    rows = page.locator(f"{selector} tbody tr")
    return [[cell.strip() for cell in await rows.nth(i).locator("th, td").all_inner_texts()]
            for i in range(await rows.count())]


def kept(page_png: Path) -> None:
    data = page_png.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000, (page_png, len(data))
    print(f"screenshot: {page_png} ({len(data)} bytes)")


async def spend_shown(page: Page, edge: Edge, http: aiohttp.ClientSession) -> None:
    """The spend view against GET /admin/v1/spend for the same days (the ledger, which
    tests/integration/test_spend_ledger.py holds equal to the access lines): its table is the API's cost_usd
    summed per day, once the ledger has the requests this test made (a worker flushes it every second)."""
    await page.click("#nav-spend")
    await page.locator("#spend-empty:not([hidden]), #spend-result:not([hidden])").wait_for()
    days = {name: await page.locator(f"#spend-range input[name={name}]").input_value() for name in ("from", "to")}
    query = {**days, "granularity": "day", "group_by": "tenant", "format": "json"}
    rows: list[dict[str, Any]] = []
    deadline, before = time.monotonic() + 15, None
    while time.monotonic() < deadline:  # until every edge's last flush is in: two reads a flush apart agree
        async with http.get(f"{edge.admin}/spend", params=query, headers={"Authorization": f"Bearer {ADMIN}"}) as r:
            assert r.status == 200, await r.text()
            rows = (await r.json())["data"]
        if rows and rows == before:
            break
        before = rows
        await asyncio.sleep(1.5)  # the edges flush their ledgers every second
    assert rows and sum(int(row["requests"]) for row in rows) >= 1  # the SDK's request on the new key, at least
    assert sum(Decimal(row["cost_usd"]) for row in rows) > 0  # priced: PRICED
    await page.click("#nav-keys")
    await page.click("#nav-spend")  # the view read again, now that the ledger has it
    await page.locator("#spend-result:not([hidden])").wait_for()
    expected: dict[str, tuple[int, Decimal]] = {}
    for row in rows:
        requests, cost = expected.get(row["period"], (0, Decimal(0)))
        expected[row["period"]] = (requests + int(row["requests"]), cost + Decimal(row["cost_usd"]))
    shown = await table(page, "#spend-table")
    assert [(day, int(requests), Decimal(cost)) for day, requests, cost in shown] == [
        (day, *expected[day]) for day in sorted(expected)]
    assert await page.locator("#spend-chart rect.bar").count() == len(expected)


async def test_an_admin_makes_changes_rotates_and_revokes_a_key_and_reads_the_audit_log_and_spend(
        edges: tuple[Edge, Edge], page: Page) -> None:
    a, b = edges
    async with aiohttp.ClientSession() as http:
        await sign_in(page, a, ADMIN, ADMIN_ID)
        await expect(page.locator("#view-keys")).to_be_visible()

        # a key made: its secret shown once, and it works on the public port (the openai SDK, on both edges)
        form = page.locator("#key-create")
        await form.locator("input[name=tenant]").fill("acme")
        await form.locator("input[name=name]").fill("console bot")
        await form.locator("textarea[name=limits]").fill('{"rpm": 100}')
        await form.locator("button[type=submit]").click()
        await expect(page.locator("#secret")).to_be_visible()
        secret = (await page.locator("#secret-value").text_content() or "").strip()
        made = (await admin(http, "GET", f"{a.admin}/keys"))["data"]
        assert [(k["name"], k["tenant"], k["limits"]) for k in made] == [("console bot", "acme", {"rpm": 100})]
        key_id = made[0]["id"]
        assert secret.startswith(f"sk-ig-{key_id}-")
        await status(page, f"Key {key_id} created.")
        await eventually(lambda: b.works(secret), "the key made in the console admitted by B", timeout=PROPAGATED_S)
        await eventually(lambda: a.works(secret), "the key made in the console admitted by A", timeout=PROPAGATED_S)
        await page.click("#secret-done")
        await expect(page.locator("#secret")).to_be_hidden()
        row = page.locator(f'#keys-table tr[data-id="{key_id}"]')
        await expect(row).to_contain_text("console bot")

        # its limits changed
        await row.get_by_role("button", name="Edit").click()
        edit = page.locator("#key-edit")
        await edit.locator("textarea[name=limits]").fill('{"rpm": 7, "budget": {"usd": 3}}')
        await edit.locator("button[type=submit]").click()
        await status(page, f"Key {key_id} saved.")
        changed = await admin(http, "GET", f"{b.admin}/keys/{key_id}")
        assert changed["limits"] == {"rpm": 7, "budget": {"usd": 3.0, "period": "month"}}
        assert changed["name"] == "console bot" and changed["models"] == ["*"]
        await expect(row).to_contain_text('"rpm":7')
        png = artifacts() / "admin-console-keys.png"
        await page.screenshot(path=str(png), full_page=True)
        kept(png)

        # rotated with a grace: the new secret shown once; both work meanwhile
        await row.get_by_role("button", name="Rotate").click()
        await page.locator("#key-rotate input[name=grace]").fill("600")
        await page.locator("#key-rotate button[type=submit]").click()
        await status(page, f"Key {key_id} rotated.")
        rotated = (await page.locator("#secret-value").text_content() or "").strip()
        assert rotated.startswith(f"sk-ig-{key_id}-") and rotated != secret
        shown = await admin(http, "GET", f"{a.admin}/keys/{key_id}")
        assert shown["rotating_until"] is not None and shown["rotating_until"] > shown["updated_at"] + 590
        await eventually(lambda: b.works(rotated), "the rotated secret admitted by B", timeout=PROPAGATED_S)
        assert await b.works(secret)  # the former one, in its grace
        await page.click("#secret-done")

        # revoked: gone from the API, refused on the public port
        await row.get_by_role("button", name="Revoke").click()
        await page.locator("#key-revoke button[type=submit]").click()
        await status(page, f"Key {key_id} revoked.")
        async with http.get(f"{a.admin}/keys/{key_id}", headers={"Authorization": f"Bearer {ADMIN}"}) as r:
            assert r.status == 404
        await expect(row).to_have_count(0)

        async def refused() -> bool:
            return not await b.works(rotated) and not await b.works(secret)

        await eventually(refused, "the revoked key refused by B", timeout=PROPAGATED_S)

        # a tenant made, and its budget and models changed
        await page.click("#nav-tenants")
        tenant_form = page.locator("#tenant-create")
        await tenant_form.locator("input[name=name]").fill("beta")
        await tenant_form.locator("textarea[name=limits]").fill('{"rpm": 50}')
        await tenant_form.locator("button[type=submit]").click()
        await status(page, "Tenant beta created.")
        assert (await admin(http, "GET", f"{a.admin}/tenants/beta"))["limits"] == {"rpm": 50}
        await page.locator('#tenants-table tr[data-name="beta"]').get_by_role("button", name="Edit").click()
        tenant_edit = page.locator("#tenant-edit")
        await tenant_edit.locator("input[name=models]").fill("ingress-demo, gpt-4o*")
        await tenant_edit.locator("textarea[name=limits]").fill('{"rpm": 50, "budget": {"usd": 20, "period": "day"}}')
        await tenant_edit.locator("button[type=submit]").click()
        await status(page, "Tenant beta saved.")
        beta = await admin(http, "GET", f"{b.admin}/tenants/beta")
        assert beta["models"] == ["ingress-demo", "gpt-4o*"]
        assert beta["limits"] == {"rpm": 50, "budget": {"usd": 20.0, "period": "day"}}

        # the audit log: the page's table is the API's, newest first
        await page.click("#nav-audit")
        await expect(page.locator("#audit-table tbody tr")).to_have_count(6)
        log = (await admin(http, "GET", f"{a.admin}/audit"))["data"]
        assert [(e["action"], e["key_id"] or e["tenant"]) for e in log] == [
            ("create", key_id), ("update", key_id), ("rotate", key_id), ("revoke", key_id), ("create", "beta"),
            ("update", "beta")]
        rows = await table(page, "#audit-table")
        assert [(int(r[0]), r[2], r[3], r[4], r[5]) for r in rows] == [
            (e["seq"], e["actor"], e["action"], e["key_id"] or e["tenant"], e["client"]) for e in reversed(log)]
        assert all(r[2] == ADMIN_ID and r[5] == "127.0.0.1" for r in rows)
        assert "rpm" in rows[-2][6] and "7" in rows[-2][6]  # the update's change, shown
        assert secret not in str(rows) and rotated not in str(rows)
        png = artifacts() / "admin-console-audit.png"
        await page.screenshot(path=str(png), full_page=True)
        kept(png)

        await spend_shown(page, a, http)
        png = artifacts() / "admin-console-spend.png"
        await page.screenshot(path=str(png), full_page=True)
        kept(png)

        # the session is in the store both edges share: B's console is signed in already (a host's cookie)
        await page.goto(console(b) + "#keys")
        await expect(page.locator("#actor")).to_contain_text(ADMIN_ID)
        await page.click("#sign-out")
        await expect(page.locator("#sign-in")).to_be_visible()
        assert await in_page(page, "GET", "/admin/v1/keys", None) == 401  # signed out on every edge
        await page.goto(console(a))
        await expect(page.locator("#sign-in")).to_be_visible()


async def test_a_viewer_s_console_shows_no_change_and_its_session_s_changes_are_refused(
        edges: tuple[Edge, Edge], page: Page) -> None:
    a, _ = edges
    async with aiohttp.ClientSession() as http:
        made = await admin(http, "POST", f"{a.admin}/keys", {"tenant": "acme", "name": "seen"}, 201)
        await sign_in(page, a, VIEWER, VIEWER_ID)
        await expect(page.locator("#actor")).to_have_text(f"{VIEWER_ID} (viewer)")
        row = page.locator(f'#keys-table tr[data-id="{made["id"]}"]')
        await expect(row).to_contain_text("seen")
        await expect(page.locator("#key-create")).to_be_hidden()
        for name in ("Edit", "Rotate", "Revoke"):
            await expect(row.get_by_role("button", name=name)).to_be_hidden()
        await page.click("#nav-tenants")
        await expect(page.locator("#tenant-create")).to_be_hidden()
        csrf = await page.evaluate('fetch("/admin/v1/session").then((r) => r.json()).then((w) => w.csrf_token)')
        assert isinstance(csrf, str) and csrf
        assert await in_page(page, "POST", "/admin/v1/keys", csrf, {"tenant": "acme"}) == 403
        assert await in_page(page, "DELETE", f"/admin/v1/keys/{made['id']}", csrf) == 403
        assert await in_page(page, "GET", "/admin/v1/audit", None) == 200
        assert [k["id"] for k in (await admin(http, "GET", f"{a.admin}/keys"))["data"]] == [made["id"]]
        assert (await admin(http, "GET", f"{a.admin}/audit"))["total"] == 1


async def test_a_change_sent_with_the_cookie_but_no_csrf_token_is_refused(
        edges: tuple[Edge, Edge], page: Page) -> None:
    a, _ = edges
    async with aiohttp.ClientSession() as http:
        await sign_in(page, a, ADMIN, ADMIN_ID)
        assert await in_page(page, "POST", "/admin/v1/keys", None, {"tenant": "acme"}) == 403
        assert await in_page(page, "POST", "/admin/v1/keys", "forged", {"tenant": "acme"}) == 403
        assert (await admin(http, "GET", f"{a.admin}/audit"))["total"] == 0
        csrf = await page.evaluate('fetch("/admin/v1/session").then((r) => r.json()).then((w) => w.csrf_token)')
        assert await in_page(page, "POST", "/admin/v1/keys", csrf, {"tenant": "acme"}) == 201
        log = (await admin(http, "GET", f"{a.admin}/audit"))["data"]
        assert [(e["action"], e["actor"]) for e in log] == [("create", ADMIN_ID)]


async def test_failed_sign_ins_are_limited_per_address_on_every_edge(edges: tuple[Edge, Edge], page: Page) -> None:
    a, b = edges
    await page.goto(console(a))
    wrong = new_key()[0]
    for _ in range(5):
        await page.fill("#admin-key", wrong)
        await page.click("#sign-in-form button[type=submit]")
        await expect(page.locator("#sign-in-error")).to_have_text("That is not an admin key.")
        await page.evaluate('document.querySelector("#sign-in-error").textContent = ""')
    await page.fill("#admin-key", ADMIN)  # the right key waits too
    await page.click("#sign-in-form button[type=submit]")
    await expect(page.locator("#sign-in-error")).to_contain_text("Too many failed sign-ins")
    text = await page.locator("#sign-in-error").text_content() or ""
    assert re.search(r"\(wait \d+ s\)$", text), text
    await expect(page.locator("#app")).to_be_hidden()
    async with aiohttp.ClientSession() as http:
        for edge in (a, b):  # the count is in the store the edges share
            async with http.post(f"{edge.admin}/session", json={"key": ADMIN}) as r:
                assert r.status == 429, await r.text()
                assert 1 <= int(r.headers["Retry-After"]) <= 60
        assert (await admin(http, "GET", f"{a.admin}/keys"))["data"] == []  # the API's admin key is not concerned


async def test_the_spend_view_sums_each_day_s_cost_exactly_and_draws_a_bar_a_day(
        edges: tuple[Edge, Edge], page: Page) -> None:
    """The view's arithmetic on an answer of the shape GET /admin/v1/spend specifies (docs/admin.md), given
    to the page in place of the edge's: cost_usd strings summed per day as decimals (0.1 + 0.2 is 0.3, not
    0.30000000000000004), the days in order, a bar each, the totals."""
    a, _ = edges
    answer = {"object": "list", "granularity": "day", "from": "2026-12-01", "to": "2026-12-06", "data": [
        {"period": "2026-12-06", "tenant": "acme", "requests": 3, "cost_nanos": 123, "cost_usd": "0.000000123"},
        {"period": "2026-12-05", "tenant": "acme", "requests": 2, "cost_nanos": 10**8, "cost_usd": "0.100000000"},
        {"period": "2026-12-05", "tenant": "beta", "requests": 1, "cost_nanos": 2 * 10**8, "cost_usd": "0.200000000"}]}
    asked: list[str] = []

    async def ledger(route: Route) -> None:
        asked.append(route.request.url)
        await route.fulfill(status=200, content_type="application/json", body=json.dumps(answer))

    await sign_in(page, a, ADMIN, ADMIN_ID)
    await page.route("**/admin/v1/spend?*", ledger)
    await page.click("#nav-spend")
    await expect(page.locator("#spend-result")).to_be_visible()
    await expect(page.locator("#spend-empty")).to_be_hidden()
    assert await table(page, "#spend-table") == [["2026-12-05", "3", "0.300000000"], ["2026-12-06", "3", "0.000000123"]]
    assert await page.locator("#spend-total-requests").text_content() == "6"
    assert await page.locator("#spend-total-cost").text_content() == "0.300000123"
    bars = page.locator("#spend-chart rect.bar")
    assert await bars.count() == 2
    assert [await bars.nth(i).locator("title").text_content() for i in range(2)] == [
        "2026-12-05: 0.300000000 USD", "2026-12-06: 0.000000123 USD"]
    heights = [float(await bars.nth(i).get_attribute("height") or "nan") for i in range(2)]
    assert heights[0] > 100 and heights[1] == 1  # a day's cost too small to draw is still a line
    query = parse_qs(urlsplit(asked[-1]).query)
    days = [await page.locator(f"#spend-range input[name={name}]").input_value() for name in ("from", "to")]
    assert query == {"from": [days[0]], "to": [days[1]], "granularity": ["day"], "group_by": ["tenant"],
                     "format": ["json"]}
    png = artifacts() / "admin-console-spend-chart.png"
    await page.screenshot(path=str(png), full_page=True)
    kept(png)
