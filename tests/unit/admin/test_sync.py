"""A replica installs the stored keys when the version moved, and keeps the keys in use while the store is down."""

from __future__ import annotations

import asyncio
import contextlib

from ingress.admin.keystore import MemoryKeyStore, Unavailable
from ingress.admin.records import NewKey, NewTenant, created, entry, tenant_created, tenant_entry
from ingress.admin.sync import Follower
from ingress.tenancy import build
from ingress.tenancy.settings import Limits, Tenancy, Tenant


async def test_the_keys_are_installed_when_their_version_moves() -> None:
    store, tenancy = MemoryKeyStore(), build(Tenancy(tenants={"acme": Tenant()}))
    follower = Follower(store, tenancy)
    assert await follower.once() and not await follower.once()  # the first look installs, the second has nothing
    secret, record = created(NewKey(tenant="acme"), "a1")
    await store.write(record.id, None, record, entry("create", "a1", None, record.id, None, record))
    assert tenancy.policy.keyring.find(secret) is None
    assert await follower.once() and tenancy.policy.keyring.find(secret) is not None


class _Down(MemoryKeyStore):
    async def version(self) -> str:
        raise Unavailable("TimeoutError")


async def test_a_store_that_does_not_answer_leaves_the_keys_in_use() -> None:
    tenancy = build(Tenancy(tenants={"acme": Tenant()}))
    policy = tenancy.policy
    task = asyncio.get_running_loop().create_task(Follower(_Down(), tenancy).forever(0.05))
    await asyncio.sleep(0.2)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert tenancy.policy is policy


async def test_the_stored_tenants_are_installed_with_the_keys() -> None:
    store, tenancy = MemoryKeyStore(), build(Tenancy(tenants={"acme": Tenant()}))
    follower = Follower(store, tenancy)
    await follower.once()
    record = tenant_created(NewTenant(name="beta", limits=Limits(rpm=3)), "a1")
    await store.write_tenant("beta", None, record, tenant_entry("create", "a1", None, "beta", None, record))
    assert "beta" not in tenancy.policy.tenants
    assert await follower.once() and tenancy.policy.tenants["beta"].limits.rpm == 3
    tenancy.reload()  # a SIGHUP keeps them
    assert tenancy.policy.tenants["beta"].limits.rpm == 3
