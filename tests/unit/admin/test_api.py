"""The admin API on one process's store: every route refuses a caller without an admin key (401) and a viewer's
change (403); each change is made, answered without a hash, and written to the audit log by whom, from where."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from ingress.admin.api import STORE, create_admin_app
from ingress.admin.keystore import Found, FoundTenant, MemoryKeyStore, Unavailable
from ingress.admin.records import AuditEntry, StoredKey
from ingress.admin.settings import Admin, AdminKey
from ingress.admin.sync import Follower
from ingress.tenancy import Tenancy, build
from ingress.tenancy.keys import new_key
from ingress.tenancy.settings import Tenancy as TenancySettings
from ingress.tenancy.settings import Tenant

ADMIN, ADMIN_ID, ADMIN_HASH = new_key()
VIEWER, VIEWER_ID, VIEWER_HASH = new_key()
ROUTES = [("POST", "/admin/v1/keys"), ("GET", "/admin/v1/keys"), ("GET", "/admin/v1/keys/abcdefgh1234"),
          ("PATCH", "/admin/v1/keys/abcdefgh1234"), ("POST", "/admin/v1/keys/abcdefgh1234/rotate"),
          ("DELETE", "/admin/v1/keys/abcdefgh1234"), ("POST", "/admin/v1/tenants"), ("GET", "/admin/v1/tenants"),
          ("GET", "/admin/v1/tenants/acme"), ("PATCH", "/admin/v1/tenants/acme"), ("DELETE", "/admin/v1/tenants/acme"),
          ("GET", "/admin/v1/audit"), ("GET", "/admin/v1/spend"), ("GET", "/admin/v1/openapi.json"),
          ("GET", "/admin/v1/nothing-here")]
Client = TestClient[web.Request, web.Application]
WRITES = [(method, path) for method, path in ROUTES if method not in ("GET", "HEAD")]


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def tenancy() -> Tenancy:
    return build(TenancySettings(tenants={"acme": Tenant()}))


@pytest.fixture
async def client(tenancy: Tenancy) -> AsyncIterator[Client]:
    settings = Admin(listen="127.0.0.1:0", keys=(AdminKey(id=ADMIN_ID, hash=ADMIN_HASH, role="admin"),
                                                  AdminKey(id=VIEWER_ID, hash=VIEWER_HASH, role="viewer")))
    app = create_admin_app(settings, MemoryKeyStore(), tenancy)
    async with TestClient[web.Request, web.Application](TestServer(app)) as c:
        yield c


@pytest.mark.parametrize(("method", "path"), ROUTES)
@pytest.mark.parametrize("headers", [{}, _auth("sk-ig-abcdefgh1234-" + "x" * 43), {"Authorization": "Basic x"},
                                     _auth(ADMIN[:-1] + ("A" if ADMIN[-1] != "A" else "B"))],
                         ids=["none", "unknown", "not-bearer", "wrong-secret"])
async def test_every_route_refuses_a_caller_without_an_admin_key(client: Client, method: str,
                                                                 path: str, headers: dict[str, str]) -> None:
    async with client.request(method, path, headers=headers, json={}) as r:
        assert r.status == 401
        assert r.headers["WWW-Authenticate"].startswith("Bearer")
        assert (await r.json())["error"]["type"] == "unauthenticated"


@pytest.mark.parametrize(("method", "path"), WRITES)
async def test_a_viewer_may_not_change_anything(client: Client, method: str, path: str) -> None:
    async with client.request(method, path, headers=_auth(VIEWER), json={"tenant": "acme"}) as r:
        assert r.status == 403
    async with client.get("/admin/v1/audit", headers=_auth(VIEWER)) as r:
        assert (await r.json())["total"] == 0


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
    assert set(description["paths"]) == {path for _, path in ROUTES if "nothing" not in path} - {
        "/admin/v1/keys/abcdefgh1234", "/admin/v1/keys/abcdefgh1234/rotate", "/admin/v1/tenants/acme"} | {
        "/admin/v1/keys/{key_id}", "/admin/v1/keys/{key_id}/rotate", "/admin/v1/tenants/{name}"}


class _Down(MemoryKeyStore):
    async def get(self, key_id: str) -> Found | None:
        raise Unavailable("TimeoutError")

    async def write(self, key_id: str, before: Found | None, after: StoredKey | None, entry: AuditEntry, *,
                    tenant: str | None = None) -> int:
        raise Unavailable("ConnectionError")

    async def get_tenant(self, name: str) -> FoundTenant | None:
        raise Unavailable("TimeoutError")


@pytest.mark.parametrize(("method", "path"), WRITES)
async def test_a_store_that_does_not_answer_is_a_503_saying_so(tenancy: Tenancy, method: str, path: str) -> None:
    settings = Admin(listen="127.0.0.1:0", keys=(AdminKey(id=ADMIN_ID, hash=ADMIN_HASH, role="admin"),))
    async with TestClient[web.Request, web.Application](TestServer(create_admin_app(settings, _Down(), tenancy))) as c:
        body = {"tenant": "acme"} if path.endswith("/keys") else {"name": "x"} if path.endswith("/tenants") else {}
        async with c.request(method, path, headers=_auth(ADMIN), json=body) as r:
            assert r.status == 503
            assert "did not answer" in (await r.json())["error"]["message"]


async def test_an_expiry_already_past_is_refused_on_update_too(client: Client) -> None:
    async with client.post("/admin/v1/keys", headers=_auth(ADMIN), json={"tenant": "acme"}) as r:
        key_id = (await r.json())["id"]
    async with client.patch(f"/admin/v1/keys/{key_id}", headers=_auth(ADMIN), json={"expires_at": 5}) as r:
        assert r.status == 400 and "already past" in (await r.json())["error"]["message"]
