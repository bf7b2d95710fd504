"""The console's "Sign in with SSO" in a real browser (Debian's chromium, driven by Playwright) with a real OIDC
provider (oidc-provider-mock in its own process: tests/support/oidc_issuer.py, its own authorization form) and
two edges on one real Redis: the flow starts on edge A and its callback lands on edge B (the redirect URI
names B), so the flow's state crosses replicas through the store. A person whose `groups` hold the admin value
comes back signed in as `oidc:<sub>` (admin), makes a key in the console, and the audit log (read with an
admin key) names `oidc:<sub>`; the provider saw PKCE (S256) and the verifier that matches it. A person of no
role gets no session and is told why; a forged state, a replayed one and one sent to another browser are
refused, and counted as failed sign-ins of the address; an address starts at most STARTS sign-ins a minute, counted
across the replicas, and a refused start stores no flow."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import parse_qs, quote, urlsplit

import aiohttp
import pytest
from admin_edges import Edge, admin, two_edges
from browser import artifacts, browsing
from fakes.processes import free_port
from oidc_issuer import Issuer
from playwright.async_api import BrowserContext, Page, Route, expect
from redis.asyncio import Redis
from redis_servers import Server, running

from ingress.admin.sso import STARTS

pytestmark = [pytest.mark.redis, pytest.mark.browser, pytest.mark.timeout(300)]
CLIENT = "ingress-admin"  # the admin API's client id at the provider (and its tokens' audience)
OIDC = """[tenancy.tenants.acme]
[admin.oidc]
issuer = "{issuer}"
audience = ["{client}"]
role_claim = "groups"
admin_values = ["ingress-admins"]
viewer_values = ["ingress-viewers"]
redirect_uri = "{callback}"
scopes = ["openid", "profile", "email", "groups"]
client_secret_env = "{secret_env}"
"""
SECRET_ENV = "INGRESS_TEST_ADMIN_OIDC_SECRET"
SECRET = "s3cret:with/odd chars"  # a confidential client (this provider knows no public ones)


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    with Issuer().serving() as serving:
        yield serving


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Server]:
    with running("redis", tmp_path) as server:
        yield server


@pytest.fixture
async def edges(tmp_path: Path, store: Server, issuer: Issuer,
                monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[Edge, Edge]]:
    monkeypatch.setenv(SECRET_ENV, SECRET)  # the edges' environment is the test's
    ports = (free_port(), free_port())
    callback = f"http://127.0.0.1:{ports[1]}/admin/v1/session/oidc/callback"  # edge B's
    async with two_edges(tmp_path, store, OIDC.format(issuer=issuer.url, client=CLIENT, callback=callback,
                                                              secret_env=SECRET_ENV),
                         admin_ports=ports) as pair:
        yield pair


@pytest.fixture
async def context(chromium: Path, tmp_path: Path) -> AsyncIterator[BrowserContext]:
    async with browsing(chromium, tmp_path / "profile") as opened:
        async def offline(route: Route) -> None:  # the provider's page links a stylesheet on a CDN
            await route.abort()

        await opened.route("https://cdn.jsdelivr.net/**", offline)
        yield opened


def console(edge: Edge) -> str:
    return edge.admin.removesuffix("v1")


async def through_provider(page: Page, edge: Edge, issuer: Issuer, sub: str) -> None:
    """"Sign in with SSO" on `edge`'s console, then the provider's own form, signed in as `sub`."""
    await page.goto(console(edge))
    await expect(page.locator("#sso-sign-in")).to_be_visible()
    await page.screenshot(path=artifacts() / "console-oidc-sign-in.png")
    await page.click("#sso-sign-in")
    await page.wait_for_url(f"{issuer.url}/oauth2/authorize?*")
    await page.fill("input[name=sub]", sub)
    await page.click("button[type=submit]:has-text('Authorize')")


async def test_an_admin_signs_in_with_sso_on_one_edge_comes_back_on_the_other_and_makes_a_key(
        edges: tuple[Edge, Edge], issuer: Issuer, context: BrowserContext) -> None:
    a, b = edges
    issuer.set_user("alice", {"groups": ["eng", "ingress-admins"]})
    page = await context.new_page()
    await through_provider(page, a, issuer, "alice")
    await expect(page.locator("#actor")).to_have_text("oidc:alice (admin)")
    assert page.url == console(b)  # the callback, on B, sent the browser to the console
    cookies = {c["name"]: c for c in await context.cookies()}
    assert "ingress_admin_oidc" not in cookies  # the flow's cookie is spent
    assert cookies["ingress_admin_session"]["sameSite"] == "Strict" and cookies["ingress_admin_session"]["httpOnly"]

    await page.fill("#key-create input[name=tenant]", "acme")
    await page.fill("#key-create input[name=name]", "made by sso")
    await page.click("#key-create button[type=submit]")
    await expect(page.locator("#secret")).to_be_visible()
    await page.screenshot(path=artifacts() / "console-oidc-keys.png", full_page=True)
    async with aiohttp.ClientSession() as http:
        keys = (await admin(http, "GET", f"{a.admin}/keys"))["data"]
        assert [(k["name"], k["created_by"]) for k in keys] == [("made by sso", "oidc:alice")]
        log = (await admin(http, "GET", f"{a.admin}/audit"))["data"]
        assert [(e["action"], e["actor"], e["key_id"]) for e in log] == [("create", "oidc:alice", keys[0]["id"])]

    await page.goto(console(a))  # the session is in the store: edge A knows it too
    await expect(page.locator("#actor")).to_have_text("oidc:alice (admin)")

    seen = issuer.seen()
    asked, exchanged = seen["authorize"][-1], seen["token"][-1]
    assert asked["client_id"] == CLIENT and asked["response_type"] == "code"
    assert asked["redirect_uri"] == f"{console(b)}v1/session/oidc/callback"
    assert asked["scope"] == "openid profile email groups" and len(asked["nonce"]) >= 43
    assert asked["code_challenge_method"] == "S256"
    verifier = exchanged["form"]["code_verifier"]
    assert asked["code_challenge"] == base64.urlsafe_b64encode(
        hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    basic = base64.b64encode(f"{CLIENT}:{quote(SECRET, safe='')}".encode()).decode()
    assert exchanged["authorization"] == f"Basic {basic}" and "client_id" not in exchanged["form"]
    assert exchanged["form"]["grant_type"] == "authorization_code" and exchanged["form"]["redirect_uri"] == (
        asked["redirect_uri"])
    assert "code_verifier" not in asked and verifier not in str(asked)


async def test_a_person_of_no_role_gets_no_session_and_is_told_why(
        edges: tuple[Edge, Edge], issuer: Issuer, context: BrowserContext) -> None:
    a, _ = edges
    issuer.set_user("ned", {"groups": ["eng"]})
    page = await context.new_page()
    await through_provider(page, a, issuer, "ned")
    await expect(page.locator("#sign-in-error")).to_contain_text("has no admin role")
    await expect(page.locator("#app")).to_be_hidden()
    assert "#" not in page.url  # the reason is shown once, not kept in the address
    assert "ingress_admin_session" not in {c["name"] for c in await context.cookies()}

    await page.click("#sso-sign-in")  # and the provider's "Deny"
    await page.click("button[value=deny]")
    await expect(page.locator("#sign-in-error")).to_contain_text("did not sign you in")
    assert "ingress_admin_session" not in {c["name"] for c in await context.cookies()}


async def _started(http: aiohttp.ClientSession, edge: Edge) -> tuple[str, str]:
    """A flow started on `edge` by a client that is no browser: the provider's URL, and the state."""
    async with http.get(f"{edge.admin}/session/oidc", allow_redirects=False) as r:
        assert r.status == 302, await r.text()
        location = r.headers["Location"]
    return location, parse_qs(urlsplit(location).query)["state"][0]


async def _authorized(http: aiohttp.ClientSession, location: str, sub: str) -> str:
    """The provider's form posted as `sub`: the callback URL it sends the browser to."""
    async with http.post(location, data={"sub": sub}, allow_redirects=False) as r:
        assert r.status == 302, await r.text()
        return r.headers["Location"]


async def _called_back(http: aiohttp.ClientSession, url: str) -> tuple[str, bool]:
    """The callback's redirect, and whether it gave a session cookie."""
    async with http.get(url, allow_redirects=False) as r:
        assert r.status == 302, await r.text()
        return r.headers["Location"], "ingress_admin_session" in r.cookies


async def test_forged_replayed_and_misplaced_states_are_refused_and_counted(
        edges: tuple[Edge, Edge], issuer: Issuer) -> None:
    a, b = edges
    issuer.set_user("alice", {"groups": ["ingress-admins"]})
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        location, state = await _started(http, a)
        callback = await _authorized(http, location, "alice")
        assert parse_qs(urlsplit(callback).query)["state"] == [state]
        assert await _called_back(http, callback) == ("/admin/", True)
        async with http.get(f"{b.admin}/session") as r:
            assert (await r.json())["actor"] == "oidc:alice"
        assert await _called_back(http, callback) == ("/admin/#signin-error=state", False)  # replayed

        forged = f"{b.admin}/session/oidc/callback?code=made-up&state=forged"
        async with aiohttp.ClientSession(headers={"Cookie": "ingress_admin_oidc=forged"}) as forger:
            for _ in range(2):
                assert await _called_back(forger, forged) == ("/admin/#signin-error=state", False)

        location, _ = await _started(http, a)
        callback = await _authorized(http, location, "alice")
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as victim:
            assert await _called_back(victim, callback) == ("/admin/#signin-error=state", False)  # not its flow
        location, _ = await _started(http, a)
        callback = await _authorized(http, location, "alice")
        assert await _called_back(http, f"{b.admin}/session/oidc/callback?error=access_denied") == (
            "/admin/#signin-error=denied", False)  # five failures from this address: the next is refused unchecked
        assert await _called_back(http, callback) == ("/admin/#signin-error=rate_limited", False)
        assert await _start_refused(http, a)  # and it starts no other sign-in


async def _start_refused(http: aiohttp.ClientSession, edge: Edge) -> bool:
    """Whether a start on `edge` was sent back to the console as rate_limited, with no flow."""
    async with http.get(f"{edge.admin}/session/oidc", allow_redirects=False) as r:
        assert r.status == 302, await r.text()
        flow = r.cookies.get("ingress_admin_oidc")
        return r.headers["Location"] == "/admin/#signin-error=rate_limited" and (flow is None or not flow.value)


async def test_an_address_starts_a_bounded_number_of_sign_ins_across_replicas(
        edges: tuple[Edge, Edge], store: Server) -> None:
    async with aiohttp.ClientSession() as http:
        for n in range(STARTS):
            await _started(http, edges[n % 2])
        assert await _start_refused(http, edges[0]) and await _start_refused(http, edges[1])
    async with Redis.from_url(store.url) as redis:
        flows = [key async for key in redis.scan_iter(match="{ingress}:admin:flow:*")]
    assert len(flows) == STARTS  # the refused starts stored nothing
