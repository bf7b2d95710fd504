"""The keys file imported through the admin API on one process's store: its tenants and keys copied (hashes only),
each with an `import` audit entry; the keys work from the store once the file is gone; a second import changes
nothing, nor does it undo a change made through the API since; guardrails come along, and those no replica
could compile are refused by name; no keys file, or one that does not load, is a 400."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from ingress.admin.api import STORE, create_admin_app
from ingress.admin.imports import Outcome, chosen
from ingress.admin.keystore import MemoryKeyStore
from ingress.admin.settings import Admin, AdminKey
from ingress.admin.sync import Follower
from ingress.guardrails.scanner import BLOCKED_TERMS
from ingress.tenancy import Tenancy, build
from ingress.tenancy.keys import new_key
from ingress.tenancy.policy import read_keys_file
from ingress.tenancy.settings import Tenancy as TenancySettings
from ingress.tenancy.settings import Tenant

ADMIN, ADMIN_ID, ADMIN_HASH = new_key()
ACME, ACME_ID, ACME_HASH = new_key()  # of the configured tenant acme
BETA, BETA_ID, BETA_HASH = new_key()  # of the keys file's tenant beta
GUARDED, GUARDED_ID, GUARDED_HASH = new_key()  # a key with guardrails
OF_GUARDED, OF_GUARDED_ID, OF_GUARDED_HASH = new_key()  # of a tenant with guardrails
BAD, BAD_ID, BAD_HASH = new_key()  # a key whose guardrails do not compile
AUTH = {"Authorization": f"Bearer {ADMIN}"}
Client = TestClient[web.Request, web.Application]
KEYS_FILE = f"""
[tenants.beta]
limits = {{ rpm = 7 }}
routes = ["public-*"]

[tenants.watched]
guardrails = {{ blocked_terms = ["secret"] }}

[[keys]]
id = "{ACME_ID}"
tenant = "acme"
hash = "{ACME_HASH}"
models = ["gpt-4o*"]
name = "search bot"

[[keys]]
id = "{BETA_ID}"
tenant = "beta"
hash = "{BETA_HASH}"
limits = {{ rpm = 3 }}

[[keys]]
id = "{GUARDED_ID}"
tenant = "acme"
hash = "{GUARDED_HASH}"
guardrails = {{ blocked_terms = ["secret"] }}

[[keys]]
id = "{OF_GUARDED_ID}"
tenant = "watched"
hash = "{OF_GUARDED_HASH}"
"""
BROKEN = f"""
[tenants.broken]
guardrails = {{ patterns = [{{ name = "ahead", regex = "a(?=b)" }}] }}

[[keys]]
id = "{BAD_ID}"
tenant = "acme"
hash = "{BAD_HASH}"
guardrails = {{ patterns = [{{ name = "ahead", regex = "a(?=b)" }}] }}
"""


def _settings(keys_file: Path | None) -> TenancySettings:
    return TenancySettings(tenants={"acme": Tenant()}, keys_file=str(keys_file) if keys_file else None)


@pytest.fixture
def keys_file(tmp_path: Path) -> Path:
    path = tmp_path / "keys.toml"
    path.write_text(KEYS_FILE)
    return path


async def _client(tenancy: Tenancy, store: MemoryKeyStore) -> Client:
    settings = Admin(listen="127.0.0.1:0", keys=(AdminKey(id=ADMIN_ID, hash=ADMIN_HASH, role="admin"),))
    return TestClient[web.Request, web.Application](TestServer(create_admin_app(settings, store, tenancy)))


@pytest.fixture
async def client(keys_file: Path) -> AsyncIterator[Client]:
    async with await _client(build(_settings(keys_file)), MemoryKeyStore()) as c:
        yield c


async def test_the_keys_file_is_imported_once_and_its_keys_then_work_without_it(client: Client,
                                                                               keys_file: Path) -> None:
    keys_file.write_text(KEYS_FILE + BROKEN)  # edited since the edge read it: no edge would load it as it is
    async with client.post("/admin/v1/keys:import", headers=AUTH) as r:
        assert r.status == 200
        first = await r.json()
    assert first["source"] == str(keys_file)
    assert first["imported"] == {"tenants": ["beta", "watched"], "keys": [ACME_ID, BETA_ID, GUARDED_ID, OF_GUARDED_ID]}
    assert first["stored"] == {"tenants": [], "keys": []}
    refused = {(item.get("tenant") or item.get("key_id")): item["reason"] for item in first["refused"]}
    assert set(refused) == {"broken", BAD_ID}  # guardrails no replica could compile: refused, and said
    assert refused["broken"].startswith("guardrails.patterns[0].regex: RE2 cannot compile pattern 'ahead'")
    assert refused[BAD_ID] == refused["broken"]

    async with client.get(f"/admin/v1/keys/{ACME_ID}", headers=AUTH) as r:
        shown = await r.json()
    assert (shown["tenant"], shown["models"], shown["name"], shown["created_by"]) == (
        "acme", ["gpt-4o*"], "search bot", ADMIN_ID)
    async with client.get("/admin/v1/audit", headers=AUTH) as r:
        log = (await r.json())["data"]
    assert [(e["action"], e["tenant"] or e["key_id"]) for e in log] == [
        ("import", "beta"), ("import", "watched"), ("import", ACME_ID), ("import", BETA_ID), ("import", GUARDED_ID),
        ("import", OF_GUARDED_ID)]
    assert "sha256:" not in str(log)

    # The file gone, the keys and the tenant live on in the store, with their secrets as they were
    without_file = build(_settings(None))
    await Follower(client.app[STORE], without_file).once()
    beta = without_file.policy.authenticate({"Authorization": f"Bearer {BETA}"})
    assert (beta.tenant_name, beta.limits.rpm, beta.tenant.limits.rpm) == ("beta", 3, 7)
    assert beta.reaches("public-chat") and not beta.reaches("internal")
    assert without_file.policy.authenticate({"Authorization": f"Bearer {ACME}"}).allows("gpt-4o-mini")
    for guarded in (GUARDED, OF_GUARDED):  # the guardrails came along, the key's and the tenant's
        guards = without_file.policy.authenticate({"Authorization": f"Bearer {guarded}"}).guards
        assert [g.rules for g in guards] == [(BLOCKED_TERMS,)]

    # Changed through the API since, a key is not put back as the file has it; a second import writes nothing
    async with client.patch(f"/admin/v1/keys/{BETA_ID}", headers=AUTH, json={"limits": {"rpm": 50}}) as r:
        assert r.status == 200
    async with client.post("/admin/v1/keys:import", headers=AUTH, json={}) as r:
        again = await r.json()
    assert again["imported"] == {"tenants": [], "keys": []}
    assert again["stored"] == {"tenants": ["beta", "watched"], "keys": [ACME_ID, BETA_ID, GUARDED_ID, OF_GUARDED_ID]}
    async with client.get(f"/admin/v1/keys/{BETA_ID}", headers=AUTH) as r:
        assert (await r.json())["limits"] == {"rpm": 50}
    async with client.get("/admin/v1/audit", headers=AUTH) as r:
        assert (await r.json())["total"] == 7  # the six imports and the change


async def test_without_a_keys_file_or_with_one_that_does_not_load_nothing_is_written(keys_file: Path) -> None:
    store = MemoryKeyStore()
    async with await _client(build(_settings(None)), store) as client, client.post("/admin/v1/keys:import",
                                                                                     headers=AUTH) as r:
        assert r.status == 400 and "tenancy.keys_file is not configured" in (await r.json())["error"]["message"]
    tenancy = build(_settings(keys_file))
    keys_file.write_text("[[keys]]\nid = 'short'\n")
    async with await _client(tenancy, store) as client:
        async with client.post("/admin/v1/keys:import", headers=AUTH) as r:
            assert r.status == 400 and "tenancy.keys_file: " in (await r.json())["error"]["message"]
        async with client.post("/admin/v1/keys:import", headers=AUTH, json={"dry_run": True}) as r:
            assert r.status == 400  # an unknown field, as everywhere
    assert await store.version() == "0"


def test_the_stored_and_the_uncompilable_are_left_out_and_said(keys_file: Path) -> None:
    keys_file.write_text(KEYS_FILE + BROKEN)
    file = read_keys_file(str(keys_file))
    outcome = Outcome()
    tenants, keys = chosen(file, {"beta"}, {ACME_ID}, outcome)
    assert [name for name, _ in tenants] == ["watched"] and [k.id for k in keys] == [BETA_ID, GUARDED_ID, OF_GUARDED_ID]
    assert outcome.stored == {"tenants": ["beta"], "keys": [ACME_ID]}
    assert [item.get("tenant") or item.get("key_id") for item in outcome.refused] == ["broken", BAD_ID]

