"""Tenants through the admin API on one process's store: made, listed, changed and deleted, each change in the
audit log (before and after); a key may name a stored tenant; a tenant with keys is not deleted (409, naming
them); what the store holds is what the data plane limits with once followed. The credentials (401 and 403 on
every tenant route) are test_api.py's, whose ROUTES name them."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from ingress.admin.api import STORE, create_admin_app
from ingress.admin.keystore import MemoryKeyStore
from ingress.admin.settings import Admin, AdminKey
from ingress.admin.sync import Follower
from ingress.tenancy import Tenancy, build
from ingress.tenancy.keys import new_key
from ingress.tenancy.settings import Key, Limits, Tenant
from ingress.tenancy.settings import Tenancy as TenancySettings

ADMIN, ADMIN_ID, ADMIN_HASH = new_key()
FILE_KEY, FILE_KEY_ID, FILE_KEY_HASH = new_key()
Client = TestClient[web.Request, web.Application]
AUTH = {"Authorization": f"Bearer {ADMIN}"}


@pytest.fixture
def tenancy() -> Tenancy:
    return build(TenancySettings(tenants={"acme": Tenant(limits=Limits(rpm=600))},
                                 keys=(Key(id=FILE_KEY_ID, tenant="acme", hash=FILE_KEY_HASH),)))


@pytest.fixture
async def client(tenancy: Tenancy) -> AsyncIterator[Client]:
    settings = Admin(listen="127.0.0.1:0", keys=(AdminKey(id=ADMIN_ID, hash=ADMIN_HASH, role="admin"),))
    async with TestClient[web.Request, web.Application](TestServer(
            create_admin_app(settings, MemoryKeyStore(), tenancy))) as c:
        yield c


async def test_a_tenant_made_used_by_a_key_changed_and_deleted_with_its_audit_trail(client: Client,
                                                                                   tenancy: Tenancy) -> None:
    body = {"name": "beta", "limits": {"rpm": 1}, "models": ["small-*"], "routes": ["public-*"],
            "metadata": {"owner": "search"}}
    async with client.post("/admin/v1/tenants", headers=AUTH, json=body) as r:
        assert r.status == 201
        made = await r.json()
    assert made["limits"] == {"rpm": 1} and made["configured"] is False and made["created_by"] == ADMIN_ID
    assert made["routes"] == ["public-*"]
    async with client.post("/admin/v1/tenants", headers=AUTH, json=body) as r:
        assert r.status == 409
    async with client.post("/admin/v1/keys", headers=AUTH, json={"tenant": "beta"}) as r:  # before it is followed
        assert r.status == 201
        key = await r.json()
    await Follower(client.app[STORE], tenancy).once()
    principal = tenancy.policy.authenticate({"Authorization": f"Bearer {key['key']}"})
    assert principal.tenant.limits.rpm == 1 and principal.allows("small-1") and not principal.allows("large")
    assert principal.reaches("public-chat") and not principal.reaches("internal")

    change = {"limits": {"rpm": 100}, "budget": {"tokens": 1000, "period": "day"}, "routes": ["internal"]}
    async with client.patch("/admin/v1/tenants/beta", headers=AUTH, json=change) as r:
        changed = await r.json()
    assert changed["limits"] == {"rpm": 100, "budget": {"tokens": 1000, "period": "day"}}
    assert changed["models"] == ["small-*"] and changed["metadata"] == {"owner": "search"}
    assert changed["routes"] == ["internal"]
    async with client.get("/admin/v1/tenants", headers=AUTH) as r:
        assert [t["name"] for t in (await r.json())["data"]] == ["beta"]
    await Follower(client.app[STORE], tenancy).once()
    assert tenancy.policy.tenants["beta"].limits.rpm == 100
    principal = tenancy.policy.authenticate({"Authorization": f"Bearer {key['key']}"})
    assert principal.reaches("internal") and not principal.reaches("public-chat")

    async with client.delete("/admin/v1/tenants/beta", headers=AUTH) as r:
        assert r.status == 409
        assert key["id"] in (await r.json())["error"]["message"]
    async with client.delete(f"/admin/v1/keys/{key['id']}", headers=AUTH):
        pass
    async with client.delete("/admin/v1/tenants/beta", headers=AUTH) as r:
        assert (await r.json()) == {"name": "beta", "deleted": True}
    async with client.get("/admin/v1/tenants/beta", headers=AUTH) as r:
        assert r.status == 404
    async with client.get("/admin/v1/audit", headers=AUTH) as r:
        log = (await r.json())["data"]
    tenant_entries = [e for e in log if e["tenant"] == "beta"]
    assert [e["action"] for e in tenant_entries] == ["create", "update", "delete"]
    assert tenant_entries[0]["before"] is None and tenant_entries[-1]["after"] is None
    assert tenant_entries[1]["before"]["limits"] == {"rpm": 1} and tenant_entries[1]["after"]["limits"]["rpm"] == 100
    await Follower(client.app[STORE], tenancy).once()
    assert "beta" not in tenancy.policy.tenants


async def test_a_stored_tenant_replaces_the_configured_one_for_its_keys_until_it_is_deleted(
        client: Client, tenancy: Tenancy) -> None:
    async with client.post("/admin/v1/tenants", headers=AUTH, json={"name": "acme", "limits": {"rpm": 5}}) as r:
        assert (await r.json())["configured"] is True
    await Follower(client.app[STORE], tenancy).once()
    assert tenancy.policy.authenticate({"Authorization": f"Bearer {FILE_KEY}"}).tenant.limits.rpm == 5
    async with client.delete("/admin/v1/tenants/acme", headers=AUTH) as r:  # the configured acme takes over again
        assert r.status == 200
    await Follower(client.app[STORE], tenancy).once()
    assert tenancy.policy.tenants["acme"].limits.rpm == 600


@pytest.mark.parametrize(("method", "path", "body"), [
    ("POST", "/admin/v1/tenants", {"name": "a b"}), ("POST", "/admin/v1/tenants", {"name": "x", "surprise": 1}),
    ("POST", "/admin/v1/tenants", {"name": "x", "limits": {"rpm": 0}}), ("POST", "/admin/v1/tenants", {}),
    ("POST", "/admin/v1/tenants", {"name": "x", "models": []}),
    ("POST", "/admin/v1/tenants", {"name": "x", "routes": []}),
    ("POST", "/admin/v1/tenants", {"name": "x", "routes": "public"}), ("POST", "/admin/v1/keys", {"tenant": "nobody"})],
    ids=["bad-name", "unknown-field", "bad-limit", "no-name", "no-model", "no-route", "routes-not-a-list",
         "key-of-no-tenant"])
async def test_a_bad_tenant_is_refused_and_nothing_is_written(client: Client, method: str, path: str,
                                                             body: dict[str, object]) -> None:
    async with client.request(method, path, headers=AUTH, json=body) as r:
        assert r.status == 400
    async with client.get("/admin/v1/audit", headers=AUTH) as r:
        assert (await r.json())["total"] == 0


async def test_changing_or_deleting_a_tenant_not_stored_is_a_404(client: Client) -> None:
    for method in ("GET", "PATCH", "DELETE"):
        async with client.request(method, "/admin/v1/tenants/acme", headers=AUTH, json={}) as r:
            assert r.status == 404 and (await r.json())["error"]["type"] == "not_found"


async def test_guardrails_set_through_the_api_are_the_data_plane_s_and_one_that_does_not_compile_is_a_400(
        client: Client, tenancy: Tenancy) -> None:
    tenant = {"name": "beta", "guardrails": {"blocked_terms": ["forbidden"]}}
    async with client.post("/admin/v1/tenants", headers=AUTH, json=tenant) as r:
        assert r.status == 201 and (await r.json())["guardrails"]["blocked_terms"] == ["forbidden"]
    rule = {"patterns": [{"name": "ticket", "regex": "TICKET-[0-9]+"}]}
    async with client.post("/admin/v1/keys", headers=AUTH, json={"tenant": "beta", "guardrails": rule}) as r:
        assert r.status == 201
        key = await r.json()
    await Follower(client.app[STORE], tenancy).once()
    principal = tenancy.policy.authenticate({"Authorization": f"Bearer {key['key']}"})
    assert [guard.rules for guard in principal.guards] == [("blocked_terms",), ("patterns.ticket",)]  # tenant, key

    ahead = {"patterns": [{"name": "ahead", "regex": "a(?=b)"}]}
    for method, path, body in (("PATCH", "/admin/v1/tenants/beta", {"guardrails": ahead}),
                               ("PATCH", f"/admin/v1/keys/{key['id']}", {"guardrails": ahead}),
                               ("POST", "/admin/v1/tenants", {"name": "gamma", "guardrails": ahead}),
                               ("POST", "/admin/v1/keys", {"tenant": "beta", "guardrails": ahead}),
                               ("PATCH", "/admin/v1/tenants/beta", {"guardrails": {"blocked_trems": ["x"]}})):
        async with client.request(method, path, headers=AUTH, json=body) as r:
            assert r.status == 400, (method, path)
            message = (await r.json())["error"]["message"]
            assert message.startswith(("guardrails.patterns[0].regex: RE2 cannot compile pattern 'ahead'",
                                       "Object contains unknown field `blocked_trems`")), message

    async with client.patch(f"/admin/v1/keys/{key['id']}", headers=AUTH, json={"guardrails": None}) as r:
        assert (await r.json())["guardrails"] is None
    await Follower(client.app[STORE], tenancy).once()
    principal = tenancy.policy.authenticate({"Authorization": f"Bearer {key['key']}"})
    assert [guard.rules for guard in principal.guards] == [("blocked_terms",)]
    async with client.get("/admin/v1/audit", headers=AUTH) as r:
        log = (await r.json())["data"]
    assert [e["action"] for e in log] == ["create", "create", "update"]
    assert log[2]["before"]["guardrails"]["patterns"][0]["name"] == "ticket" and log[2]["after"]["guardrails"] is None
