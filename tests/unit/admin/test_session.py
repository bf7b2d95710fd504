"""The console's sign-in on one process's store: an admin key exchanged for an HttpOnly, SameSite=Strict
cookie; a change made with it needs the session's CSRF token (403 without); the role is the admin key's;
signing out ends it; failed sign-ins from an address are 429 after five a minute. (On Redis, shared by
every worker: tests/integration/test_admin_console.py.)"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from http.cookies import SimpleCookie

import msgspec
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from ingress.admin import session
from ingress.admin.api import ADMIN_KEYS, SIGNINS, create_admin_app
from ingress.admin.authcode import Flow
from ingress.admin.keystore import MemoryKeyStore
from ingress.admin.session import COOKIE, FAILURES, SESSIONS, WINDOW_S, MemorySessions, Session
from ingress.admin.settings import Admin, AdminKey, AdminOidc
from ingress.tenancy import build
from ingress.tenancy.keys import new_key
from ingress.tenancy.settings import Tenancy as TenancySettings
from ingress.tenancy.settings import Tenant

ADMIN, ADMIN_ID, ADMIN_HASH = new_key()
VIEWER, VIEWER_ID, VIEWER_HASH = new_key()
Client = TestClient[web.Request, web.Application]


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    settings = Admin(listen="127.0.0.1:0", keys=(AdminKey(id=ADMIN_ID, hash=ADMIN_HASH, role="admin"),
                                                  AdminKey(id=VIEWER_ID, hash=VIEWER_HASH, role="viewer")))
    app = create_admin_app(settings, MemoryKeyStore(), build(TenancySettings(tenants={"acme": Tenant()})))
    async with TestClient[web.Request, web.Application](TestServer(app)) as c:
        yield c


async def _sign_in(client: Client, key: str) -> dict[str, object]:
    async with client.post("/admin/v1/session", json={"key": key}) as r:
        assert r.status == 200, await r.text()
        return dict(await r.json())


async def test_a_sign_in_sets_an_http_only_strict_cookie_and_answers_the_csrf_token(client: Client) -> None:
    async with client.post("/admin/v1/session", json={"key": ADMIN}) as r:
        assert r.status == 200
        who = await r.json()
        cookie = SimpleCookie(r.headers["Set-Cookie"])[COOKIE]
    assert who["actor"] == ADMIN_ID and who["role"] == "admin" and len(who["csrf_token"]) >= 32
    assert cookie["httponly"] and cookie["samesite"] == "Strict" and cookie["path"] == "/admin/"
    assert not cookie["secure"] and int(cookie["max-age"]) == int(session.SESSION_S)
    assert cookie.value != who["csrf_token"] and ADMIN not in r.headers["Set-Cookie"]
    async with client.get("/admin/v1/session") as r:  # the cookie alone: a page reloaded reads its token again
        assert (await r.json()) == {**who, "expires_at": pytest.approx(who["expires_at"])}
    async with client.get("/admin/v1/keys") as r:
        assert r.status == 200 and r.headers["Cache-Control"] == "no-store"
    async with client.post("/admin/v1/session", json={"key": ADMIN}, headers={"X-Forwarded-Proto": "https"}) as r:
        assert SimpleCookie(r.headers["Set-Cookie"])[COOKIE]["secure"]


async def test_a_change_with_the_cookie_needs_the_session_s_csrf_token(client: Client) -> None:
    who = await _sign_in(client, ADMIN)
    for headers in ({}, {"X-CSRF-Token": "forged"}, {"X-CSRF-Token": ""}):
        async with client.post("/admin/v1/keys", json={"tenant": "acme"}, headers=headers) as r:
            assert r.status == 403 and (await r.json())["error"]["type"] == "csrf"
    async with client.get("/admin/v1/audit") as r:
        assert (await r.json())["total"] == 0
    csrf = {"X-CSRF-Token": str(who["csrf_token"])}
    async with client.post("/admin/v1/keys", json={"tenant": "acme"}, headers=csrf) as r:
        assert r.status == 201
    async with client.get("/admin/v1/audit") as r:
        entries = (await r.json())["data"]
    assert [(e["action"], e["actor"]) for e in entries] == [("create", ADMIN_ID)]


async def test_a_viewer_s_session_reads_and_may_not_change_anything(client: Client) -> None:
    who = await _sign_in(client, VIEWER)
    assert who["role"] == "viewer"
    async with client.get("/admin/v1/keys") as r:
        assert r.status == 200
    csrf = {"X-CSRF-Token": str(who["csrf_token"])}
    for method, path in (("POST", "/admin/v1/keys"), ("POST", "/admin/v1/tenants"), ("DELETE", "/admin/v1/tenants/x")):
        async with client.request(method, path, json={"tenant": "acme", "name": "x"}, headers=csrf) as r:
            assert r.status == 403 and (await r.json())["error"]["type"] == "forbidden"
    # an admin key presented beside the viewer's cookie is the caller: its header is its proof, no CSRF token
    bearer = {"Authorization": f"Bearer {ADMIN}"}
    async with client.post("/admin/v1/keys", json={"tenant": "acme"}, headers=bearer) as r:
        assert r.status == 201


async def test_signing_out_needs_the_token_and_ends_the_session(client: Client) -> None:
    who = await _sign_in(client, ADMIN)
    async with client.delete("/admin/v1/session") as r:
        assert r.status == 403  # a page elsewhere cannot sign the console out
    async with client.get("/admin/v1/keys") as r:
        assert r.status == 200
    token = client.session.cookie_jar.filter_cookies(client.make_url("/admin/"))[COOKIE].value
    async with client.delete("/admin/v1/session", headers={"X-CSRF-Token": str(who["csrf_token"])}) as r:
        assert r.status == 200 and SimpleCookie(r.headers["Set-Cookie"])[COOKIE].value == ""
    async with client.get("/admin/v1/keys", cookies={COOKIE: token}) as r:  # the old cookie, sent again
        assert r.status == 401
    assert await client.app[SESSIONS].get(session.digest(token)) is None


async def test_a_session_of_an_admin_key_taken_out_of_the_configuration_ends(client: Client) -> None:
    await _sign_in(client, VIEWER)
    del client.app[ADMIN_KEYS][VIEWER_ID]  # what a restart with that key removed leaves
    async with client.get("/admin/v1/keys") as r:
        assert r.status == 401


async def test_failed_sign_ins_are_limited_per_address_and_the_right_key_waits_too(client: Client) -> None:
    for i in range(FAILURES):
        async with client.post("/admin/v1/session", json={"key": VIEWER[:-2] + "xx"}) as r:
            assert r.status == 401, i
    async with client.post("/admin/v1/session", json={"key": ADMIN}) as r:
        assert r.status == 429
        assert 1 <= int(r.headers["Retry-After"]) <= WINDOW_S
        assert (await r.json())["error"]["type"] == "rate_limited"
    async with client.get("/admin/v1/keys", headers={"Authorization": f"Bearer {ADMIN}"}) as r:
        assert r.status == 200  # the API's callers with an admin key are not concerned


@pytest.mark.parametrize("body", [b"", b"{}", b'{"key": ""}', b"key=x", b'{"key": "x", "more": 1}'])
async def test_a_bad_sign_in_body_is_a_400_and_counts_no_failure(client: Client, body: bytes) -> None:
    async with client.post("/admin/v1/session", data=body) as r:
        assert r.status == 400 and (await r.json())["error"]["type"] == "invalid_request"
    assert await client.app[SESSIONS].failures("127.0.0.1") == (0, 0.0)


async def test_one_process_s_sessions_expire_and_its_failure_and_start_windows_end() -> None:
    clock = Clock()
    sessions = MemorySessions(clock)
    await sessions.put("d", Session(actor="a", csrf="c", expires_at=clock.now + 10))
    assert (await sessions.get("d")) is not None
    clock.now += 10
    assert await sessions.get("d") is None
    assert await sessions.failed("10.0.0.1") == (1, WINDOW_S)
    clock.now += 20
    assert await sessions.failed("10.0.0.1") == (2, WINDOW_S - 20)
    assert await sessions.failures("10.0.0.2") == (0, 0.0)  # another address
    assert await sessions.started("10.0.0.1") == (1, WINDOW_S)  # a count of its own
    assert await sessions.started("10.0.0.1") == (2, WINDOW_S)
    assert await sessions.failures("10.0.0.1") == (2, WINDOW_S - 20)
    clock.now += WINDOW_S
    assert await sessions.failures("10.0.0.1") == (0, 0.0)
    assert await sessions.failed("10.0.0.1") == (1, WINDOW_S)
    assert await sessions.started("10.0.0.1") == (1, WINDOW_S)


async def test_a_flow_is_taken_once_and_not_after_it_expires() -> None:
    clock = Clock()
    sessions = MemorySessions(clock)
    flow = Flow(nonce="n", verifier="v", expires_at=clock.now + 10)
    await sessions.put_flow("d", flow)
    assert await sessions.take_flow("d") == flow
    assert await sessions.take_flow("d") is None
    await sessions.put_flow("e", flow)
    clock.now += 10
    assert await sessions.take_flow("e") is None


async def _as_session(client: Client, found: Session) -> tuple[int, dict[str, object]]:
    """GET /admin/v1/session with a cookie of `found`, stored as the callback stores it."""
    token, _ = await session.opened(client.app[SESSIONS], found)
    async with client.get("/admin/v1/session", headers={"Cookie": f"{COOKIE}={token}"}) as r:
        return r.status, dict(await r.json())


@pytest.fixture
async def with_oidc() -> AsyncIterator[Client]:
    settings = Admin(listen="127.0.0.1:0", keys=(AdminKey(id=ADMIN_ID, hash=ADMIN_HASH, role="admin"),),
                     oidc=AdminOidc(issuer="https://sso.example.com", audience=("ingress-admin",),
                                    admin_values=("ops",), viewer_values=("audit",),
                                    jwks_uri="http://127.0.0.1:9/jwks"))  # never fetched
    app = create_admin_app(settings, MemoryKeyStore(), build(TenancySettings(tenants={"acme": Tenant()})))
    async with TestClient[web.Request, web.Application](TestServer(app)) as c:
        yield c


async def test_an_oidc_session_s_role_is_its_values_under_the_configuration_as_it_is_now(
        with_oidc: Client, client: Client) -> None:
    signed_in = Session(actor="oidc:alice", csrf="", expires_at=time.time() + 60, oidc=True, values=("ops",))
    status, who = await _as_session(with_oidc, signed_in)
    assert status == 200 and (who["actor"], who["role"]) == ("oidc:alice", "admin")
    signins = with_oidc.app[SIGNINS]
    signins.oidc = msgspec.structs.replace(signins.oidc, admin_values=("root",), viewer_values=("ops",))
    status, who = await _as_session(with_oidc, signed_in)
    assert status == 200 and who["role"] == "viewer"  # what a restart with ops made viewers leaves
    signins.oidc = msgspec.structs.replace(signins.oidc, viewer_values=("audit",))
    assert (await _as_session(with_oidc, signed_in))[0] == 401  # its values make no role now
    assert (await _as_session(client, signed_in))[0] == 401  # an edge without [admin.oidc]: no such session


async def test_a_key_session_is_the_key_s_and_an_oidc_one_never_an_admin_key_s(with_oidc: Client) -> None:
    status, who = await _as_session(with_oidc, Session(actor=ADMIN_ID, csrf="", expires_at=time.time() + 60))
    assert status == 200 and (who["actor"], who["role"]) == (ADMIN_ID, "admin")
    as_key = Session(actor=ADMIN_ID, csrf="", expires_at=time.time() + 60, oidc=True, values=("audit",))
    status, who = await _as_session(with_oidc, as_key)
    assert status == 200 and who["role"] == "viewer"  # its values' role, not the key's of that id
    nothing = Session(actor="oidc:ned", csrf="", expires_at=time.time() + 60)  # no key has that id
    assert (await _as_session(with_oidc, nothing))[0] == 401
