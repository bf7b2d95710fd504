"""One process's key store (the Redis one is tested on real servers, tests/integration/test_admin_keys.py):
a change is all or nothing, and refused when the key changed since it was read."""

from __future__ import annotations

import pytest

from ingress.admin.keystore import Conflict, MemoryKeyStore, NoTenant, Owned
from ingress.admin.records import KeyUpdate, NewKey, NewTenant, created, entry, tenant_created, tenant_entry, updated


async def test_a_change_moves_the_version_and_appends_its_entry() -> None:
    store = MemoryKeyStore()
    _, record = created(NewKey(tenant="acme"), "a1")
    assert await store.version() == "0" and await store.get(record.id) is None
    assert await store.write(record.id, None, record, entry("create", "a1", None, record.id, None, record)) == 1
    found = await store.get(record.id)
    assert found is not None and found.record == record and await store.keys() == [record]
    with pytest.raises(Conflict):  # made again: it is there already
        await store.write(record.id, None, record, entry("create", "a1", None, record.id, None, record))
    after = updated(record, KeyUpdate(name="x"))
    await store.write(record.id, found, after, entry("update", "a1", None, record.id, record, after))
    with pytest.raises(Conflict):  # changed from what it no longer is
        await store.write(record.id, found, None, entry("revoke", "a1", None, record.id, record, None))
    entries, total = await store.audit(0, 10)
    assert total == 2 and [e.action for e in entries] == ["create", "update"] and await store.version() == "2"
    assert (await store.audit(1, 1))[0][0].action == "update"


async def test_a_tenant_s_change_shares_the_version_and_the_audit_log() -> None:
    store = MemoryKeyStore()
    record = tenant_created(NewTenant(name="acme"), "a1")
    await store.write_tenant("acme", None, record, tenant_entry("create", "a1", None, "acme", None, record))
    found = await store.get_tenant("acme")
    assert found is not None and found.record == record and await store.tenants() == [record]
    assert await store.version() == "1" and await store.keys() == []
    with pytest.raises(Conflict):
        await store.write_tenant("acme", None, record, tenant_entry("create", "a1", None, "acme", None, record))
    await store.write_tenant("acme", found, None, tenant_entry("delete", "a1", None, "acme", record, None))
    entries, total = await store.audit(0, 10)
    assert [(e.action, e.tenant) for e in entries] == [("create", "acme"), ("delete", "acme")] and total == 2
    assert await store.get_tenant("acme") is None


async def test_a_tenant_with_stored_keys_is_not_deleted_and_a_key_of_no_stored_tenant_not_made() -> None:
    store = MemoryKeyStore()
    tenant = tenant_created(NewTenant(name="beta"), "a1")
    _, key = created(NewKey(tenant="beta"), "a1")
    with pytest.raises(NoTenant):  # checked in the change itself, as the Redis script does
        await store.write(key.id, None, key, entry("create", "a1", None, key.id, None, key), tenant="beta")
    await store.write_tenant("beta", None, tenant, tenant_entry("create", "a1", None, "beta", None, tenant))
    await store.write(key.id, None, key, entry("create", "a1", None, key.id, None, key), tenant="beta")
    found = await store.get_tenant("beta")
    with pytest.raises(Owned) as owned:
        await store.write_tenant("beta", found, None, tenant_entry("delete", "a1", None, "beta", tenant, None))
    assert owned.value.args[0] == [key.id] and (await store.audit(0, 10))[1] == 2
