"""The admin API on one process's store: every route, as the app's router lists them (a route added later is
covered without a word here), refuses a caller without an admin credential (401: none, an unknown or wrong key,
a data-plane key, a data-plane, expired or foreign token), a viewer's change (403, key or token) and a token of
no role (403); the description is behind the credentials too, and names every route; each change is made,
answered without a hash, and written to the audit log by whom, from where."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import jwt
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from ingress.admin.api import SIGNINS, STORE, create_admin_app
from ingress.admin.keystore import Found, FoundTenant, MemoryKeyStore, Unavailable
from ingress.admin.records import AuditEntry, StoredKey
from ingress.admin.settings import Admin, AdminKey, AdminOidc
from ingress.admin.sync import Follower
from ingress.tenancy import Tenancy, build
from ingress.tenancy.bearer import KeySet
from ingress.tenancy.keys import new_key
from ingress.tenancy.settings import Key, Tenant
from ingress.tenancy.settings import Tenancy as TenancySettings

ADMIN, ADMIN_ID, ADMIN_HASH = new_key()
VIEWER, VIEWER_ID, VIEWER_HASH = new_key()
DATA, DATA_ID, DATA_HASH = new_key()  # a key of the data plane, configured
ISS = "https://sso.example.com/realms/ops"
SIGNER = rsa.generate_private_key(public_exponent=65537, key_size=2048)  # the provider's key, given by hand
SETTINGS = Admin(listen="127.0.0.1:0", keys=(AdminKey(id=ADMIN_ID, hash=ADMIN_HASH, role="admin"),
                                             AdminKey(id=VIEWER_ID, hash=VIEWER_HASH, role="viewer")),
                 oidc=AdminOidc(issuer=ISS, audience=("ingress-admin",), admin_values=("ops",),
                                viewer_values=("audit",), jwks_uri="http://127.0.0.1:9/jwks",  # never fetched
                                redirect_uri="http://127.0.0.1:9090/admin/v1/session/oidc/callback"))
Client = TestClient[web.Request, web.Application]
SAMPLES = {"key_id": "abcdefgh1234", "name": "acme"}


def _tenancy() -> Tenancy:
    return build(TenancySettings(tenants={"acme": Tenant()}, keys=(Key(id=DATA_ID, tenant="acme", hash=DATA_HASH),)))


# What answers without an admin credential: the console's files (console.py) and signing in and out, which
# check what they need themselves (session.py; tests/unit/admin/test_session.py); and the two steps of the
# console's SSO sign-in, made by a browser that has no credential yet: the start makes nothing but a one-use
# flow, the callback signs in only with the provider's answer to that flow (sso.py; test_sso.py). Nothing else
# may join. (Whether the console shows SSO is in its page, not in a route of its own.)
OPEN = {("GET", "/admin"), ("HEAD", "/admin"), ("GET", "/admin/"), ("HEAD", "/admin/"), ("GET", "/admin/{file}"),
        ("HEAD", "/admin/{file}"), ("POST", "/admin/v1/session"), ("DELETE", "/admin/v1/session"),
        ("GET", "/admin/v1/session/oidc"), ("GET", "/admin/v1/session/oidc/callback")}


def _routed() -> list[tuple[str, str]]:
    app = create_admin_app(SETTINGS, MemoryKeyStore(), _tenancy())
    return [(route.method, route.resource.canonical) for route in app.router.routes() if route.resource is not None]


def _routes() -> list[tuple[str, str]]:
    """Every route of the admin app as its router has it (so that a route added later is covered), each
    path's parameters filled in, but the open ones; and a path no route has."""
    found = [(method, path.format(**SAMPLES)) for method, path in _routed() if (method, path) not in OPEN]
    return [*found, ("GET", "/admin/v1/nothing-here")]


ROUTES = _routes()
WRITES = [(method, path) for method, path in ROUTES if method not in ("GET", "HEAD")]


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _token(**claims: object) -> str:
    now = int(time.time())
    body = {"iss": ISS, "aud": "ingress-admin", "sub": "alice", "iat": now, "exp": now + 300, **claims}
    return jwt.encode(body, SIGNER, algorithm="RS256", headers={"kid": "k1"})


@pytest.fixture
def tenancy() -> Tenancy:
    return _tenancy()


@pytest.fixture
async def client(tenancy: Tenancy) -> AsyncIterator[Client]:
    app = create_admin_app(SETTINGS, MemoryKeyStore(), tenancy)
    app[SIGNINS].verifier.set_keys(ISS, KeySet({"keys": [{**RSAAlgorithm.to_jwk(SIGNER.public_key(), as_dict=True),
                                                         "kid": "k1"}]}))
    async with TestClient[web.Request, web.Application](TestServer(app)) as c:
        yield c


def test_only_the_console_s_files_and_its_sign_in_are_open() -> None:
    assert {route for route in _routed() if not route[1].startswith("/admin/v1/")} | {
        route for route in _routed() if route[1] == "/admin/v1/session" and route[0] in ("POST", "DELETE")} | {
        route for route in _routed() if route[1].startswith("/admin/v1/session/oidc")} == OPEN


def test_the_routes_are_the_router_s_own() -> None:
    assert len(ROUTES) > 15 and ("POST", "/admin/v1/keys:import") in ROUTES and ("HEAD", "/admin/v1/keys") in ROUTES
    assert ("DELETE", "/admin/v1/tenants/acme") in WRITES and ("GET", "/admin/v1/audit") not in WRITES


@pytest.mark.parametrize(("method", "path"), ROUTES)
@pytest.mark.parametrize("headers", [  # made when the test runs, so that each token is refused for its own reason
    lambda: {}, lambda: _auth("sk-ig-abcdefgh1234-" + "x" * 43), lambda: {"Authorization": "Basic x"},
    lambda: _auth(ADMIN[:-1] + ("A" if ADMIN[-1] != "A" else "B")), lambda: _auth(DATA), lambda: {"x-api-key": DATA},
    lambda: _auth(_token(groups=["ops"], aud="ingress")),
    lambda: _auth(_token(groups=["ops"], exp=int(time.time()) - 3600)),
    lambda: _auth(_token(groups=["ops"], iss="https://elsewhere.example"))],
    ids=["none", "unknown", "not-bearer", "wrong-secret", "data-plane-key", "data-plane-key-x-api-key",
         "data-plane-token", "expired-token", "foreign-token"])
async def test_every_route_refuses_a_caller_without_an_admin_credential(
        client: Client, method: str, path: str, headers: Callable[[], dict[str, str]]) -> None:
    async with client.request(method, path, headers=headers(), json={}) as r:
        assert r.status == 401
        assert r.headers["WWW-Authenticate"].startswith("Bearer")
        if method != "HEAD":
            assert (await r.json())["error"]["type"] == "unauthenticated"
    async with client.get("/admin/v1/audit", headers=_auth(ADMIN)) as r:
        assert (await r.json())["total"] == 0


@pytest.mark.parametrize(("method", "path"), WRITES)
# Made when the test runs: a token made at collection could expire before a long run reaches it.
@pytest.mark.parametrize("credential", [lambda: VIEWER, lambda: _token(groups=["audit"])],
                         ids=["viewer-key", "viewer-token"])
async def test_a_viewer_may_not_change_anything(client: Client, method: str, path: str,
                                                credential: Callable[[], str]) -> None:
    async with client.request(method, path, headers=_auth(credential()), json={"tenant": "acme"}) as r:
        assert r.status == 403
        assert "may only read (role viewer)" in (await r.json())["error"]["message"]
    async with client.get("/admin/v1/audit", headers=_auth(VIEWER)) as r:
        assert (await r.json())["total"] == 0


@pytest.mark.parametrize(("method", "path"), ROUTES)
async def test_a_token_of_no_role_may_not_even_read(client: Client, method: str, path: str) -> None:
    async with client.request(method, path, headers=_auth(_token(groups=["eng"])), json={}) as r:
        assert r.status == 403


async def test_an_api_key_of_the_data_plane_is_no_admin_key(client: Client) -> None:
    async with client.post("/admin/v1/keys", headers=_auth(ADMIN), json={"tenant": "acme"}) as r:
        made = await r.json()
    async with client.get("/admin/v1/keys", headers=_auth(made["key"])) as r:
        assert r.status == 401


async def test_a_key_made_changed_rotated_and_revoked_with_its_audit_trail(client: Client,
                                                                          tenancy: Tenancy) -> None:
    body = {"tenant": "acme", "models": ["gpt-4o*"], "limits": {"rpm": 60}, "metadata": {"team": "search"},
            "name": "search bot", "expires_at": 4_000_000_000}
    async with client.post("/admin/v1/keys", headers=_auth(ADMIN), json=body) as r:
        assert r.status == 201
        made = await r.json()
    key_id = made["id"]
    assert made["key"].startswith(f"sk-ig-{key_id}-") and "hash" not in made
    assert made["limits"]["rpm"] == 60 and made["metadata"] == {"team": "search"} and made["created_by"] == ADMIN_ID
    async with client.get(f"/admin/v1/keys/{key_id}", headers=_auth(VIEWER)) as r:
        shown = await r.json()
    assert "key" not in shown and "hash" not in shown and shown["tenant"] == "acme"
    change = {"limits": {"rpm": 10}, "budget": {"usd": 5.0}, "models": ["*"], "expires_at": None}
    async with client.patch(f"/admin/v1/keys/{key_id}", headers=_auth(ADMIN), json=change) as r:
        changed = await r.json()
    assert changed["limits"] == {"rpm": 10, "budget": {"usd": 5.0, "period": "month"}}
    assert changed["expires_at"] is None and changed["metadata"] == {"team": "search"}
    async with client.post(f"/admin/v1/keys/{key_id}/rotate", headers=_auth(ADMIN), json={"grace_seconds": 60}) as r:
        rotated = await r.json()
    assert rotated["key"] != made["key"] and rotated["key"].startswith(f"sk-ig-{key_id}-")
    assert rotated["rotating_until"] is not None
    await Follower(client.app[STORE], tenancy).once()
    for secret in (made["key"], rotated["key"]):  # both, during the grace
        assert tenancy.policy.keyring.find(secret) is not None
    async with client.delete(f"/admin/v1/keys/{key_id}", headers=_auth(ADMIN)) as r:
        assert (await r.json()) == {"id": key_id, "revoked": True}
    async with client.get(f"/admin/v1/keys/{key_id}", headers=_auth(ADMIN)) as r:
        assert r.status == 404
    async with client.get("/admin/v1/audit", headers=_auth(VIEWER)) as r:
        log = await r.json()
    assert [e["action"] for e in log["data"]] == ["create", "update", "rotate", "revoke"]
    assert [e["seq"] for e in log["data"]] == [1, 2, 3, 4] and log["next"] is None
    assert {e["actor"] for e in log["data"]} == {ADMIN_ID} and all(e["client"] == "127.0.0.1" for e in log["data"])
    assert log["data"][0]["before"] is None and log["data"][-1]["after"] is None
    assert log["data"][1]["before"]["limits"] == {"rpm": 60} and log["data"][1]["after"]["limits"]["rpm"] == 10
    text = str(log)
    assert made["key"] not in text and rotated["key"] not in text and "sha256:" not in text


async def test_the_audit_log_is_read_a_page_at_a_time(client: Client) -> None:
    for _ in range(5):
        async with client.post("/admin/v1/keys", headers=_auth(ADMIN), json={"tenant": "acme"}):
            pass
    seen, after = [], 0
    while after is not None:
        async with client.get(f"/admin/v1/audit?after={after}&limit=2", headers=_auth(ADMIN)) as r:
            page = await r.json()
        assert page["total"] == 5 and len(page["data"]) <= 2
        seen += [e["seq"] for e in page["data"]]
        after = page["next"]
    assert seen == [1, 2, 3, 4, 5]
    async with client.get("/admin/v1/audit?limit=100000", headers=_auth(ADMIN)) as r:
        assert r.status == 400


@pytest.mark.parametrize("body", [{"tenant": "nobody"}, {"tenant": "acme", "surprise": 1}, {"tenant": "acme",
                                   "limits": {"rpm": 0}}, {}, {"tenant": "acme", "expires_at": 1000}],
                         ids=["unknown-tenant", "unknown-field", "bad-limit", "no-tenant", "expired"])
async def test_a_bad_key_is_refused_and_nothing_is_written(client: Client,
                                                           body: dict[str, object]) -> None:
    async with client.post("/admin/v1/keys", headers=_auth(ADMIN), json=body) as r:
        assert r.status == 400
    async with client.get("/admin/v1/audit", headers=_auth(ADMIN)) as r:
        assert (await r.json())["total"] == 0


async def test_the_description_names_every_route(client: Client) -> None:
    async with client.get("/admin/v1/openapi.json", headers=_auth(VIEWER)) as r:
        description = await r.json()
    assert description["openapi"].startswith("3.1")
    routed = {(route.method.lower(), route.resource.canonical) for route in client.app.router.routes()
              if route.resource is not None and route.method != "HEAD"
              and route.resource.canonical.startswith("/admin/v1/")}  # the console's files are no API
    assert {(method, path) for path, item in description["paths"].items() for method in item} == routed


class _Down(MemoryKeyStore):
    async def get(self, key_id: str) -> Found | None:
        raise Unavailable("TimeoutError")

    async def write(self, key_id: str, before: Found | None, after: StoredKey | None, entry: AuditEntry, *,
                    tenant: str | None = None) -> int:
        raise Unavailable("ConnectionError")

    async def get_tenant(self, name: str) -> FoundTenant | None:
        raise Unavailable("TimeoutError")


@pytest.mark.parametrize(("method", "path"), WRITES)
async def test_a_store_that_does_not_answer_is_a_503_saying_so(tmp_path: Path, method: str, path: str) -> None:
    keys_file = tmp_path / "keys.toml"  # something to import
    keys_file.write_text(f'[[keys]]\nid = "{VIEWER_ID}"\ntenant = "acme"\nhash = "{VIEWER_HASH}"\n')
    tenancy = build(TenancySettings(tenants={"acme": Tenant()}, keys_file=str(keys_file)))
    settings = Admin(listen="127.0.0.1:0", keys=(AdminKey(id=ADMIN_ID, hash=ADMIN_HASH, role="admin"),))
    async with TestClient[web.Request, web.Application](TestServer(create_admin_app(settings, _Down(), tenancy))) as c:
        body = {"tenant": "acme"} if path.endswith("/keys") else {"name": "x"} if path.endswith("/tenants") else {}
        async with c.request(method, path, headers=_auth(ADMIN), json=body) as r:
            assert r.status == 503 and r.headers["Retry-After"] == "1"
            assert (await r.json())["error"]["type"] == "store_unavailable"


async def test_an_expiry_already_past_is_refused_on_update_too(client: Client) -> None:
    async with client.post("/admin/v1/keys", headers=_auth(ADMIN), json={"tenant": "acme"}) as r:
        key_id = (await r.json())["id"]
    async with client.patch(f"/admin/v1/keys/{key_id}", headers=_auth(ADMIN), json={"expires_at": 5}) as r:
        assert r.status == 400 and "already past" in (await r.json())["error"]["message"]
