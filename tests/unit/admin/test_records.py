"""What each change makes of a stored key, and what is shown of it: never a hash, the secret once."""

from __future__ import annotations

import msgspec
import pytest

from ingress.admin.records import (
    KeyUpdate,
    NewKey,
    NewTenant,
    Rotation,
    TenantUpdate,
    created,
    entry,
    key_imported,
    rotated,
    tenant_created,
    tenant_entry,
    tenant_updated,
    updated,
)
from ingress.tenancy.keys import Keyring, hash_of
from ingress.tenancy.settings import Budget, Key, Limits


def test_a_made_key_is_stored_as_its_hash_and_becomes_a_data_plane_key() -> None:
    secret, record = created(NewKey(tenant="acme", limits=Limits(rpm=5), expires_at=2000.0), "admin1", now=1000.0)
    assert record.hash == hash_of(secret) and secret not in msgspec.json.encode(record).decode()
    key = record.key()
    assert (key.id, key.tenant, key.limits.rpm, key.expires_at) == (record.id, "acme", 5, 2000.0)
    assert Keyring([key]).find(secret, now=1999.0) is not None and Keyring([key]).find(secret, now=2000.0) is None
    shown = record.shown()
    assert "hash" not in shown and "previous_hash" not in shown and shown["limits"] == {"rpm": 5}


def test_an_update_changes_what_it_names_and_keeps_the_rest() -> None:
    _, record = created(NewKey(tenant="acme", metadata={"a": "1"}, expires_at=5.0), "admin1", now=1.0)
    change = msgspec.json.decode(b'{"limits": {"rpm": 7}, "budget": {"tokens": 100}, "expires_at": null}',
                                 type=KeyUpdate)
    after = updated(record, change, now=2.0)
    assert after.limits == Limits(rpm=7, budget=Budget(tokens=100)) and after.expires_at is None
    assert after.metadata == {"a": "1"} and after.updated_at == 2.0 and after.hash == record.hash
    assert updated(record, KeyUpdate(), now=3.0).expires_at == 5.0  # absent: kept


def test_a_key_s_scope_is_made_changed_imported_and_reaches_the_data_plane() -> None:
    """scope = "admin" (its tenant's stored responses read too): through the API as in the keys file."""
    _, record = created(NewKey(tenant="acme"), "admin1", now=1.0)
    assert record.scope == "own" and record.key().scope == "own"
    widened = updated(record, msgspec.json.decode(b'{"scope": "admin"}', type=KeyUpdate), now=2.0)
    assert widened.key().scope == "admin" and widened.shown()["scope"] == "admin"
    assert updated(widened, KeyUpdate(), now=3.0).scope == "admin"  # absent: kept
    _, made = created(msgspec.json.decode(b'{"tenant": "acme", "scope": "admin"}', type=NewKey), "admin1")
    assert made.key().scope == "admin"
    imported = key_imported(Key(id=record.id, tenant="acme", hash=record.hash, scope="admin"), "admin1")
    assert imported.key().scope == "admin"
    with pytest.raises(msgspec.ValidationError, match="scope"):
        msgspec.json.decode(b'{"scope": "root"}', type=KeyUpdate)


def test_a_rotation_keeps_the_id_and_the_former_secret_for_its_grace() -> None:
    old, record = created(NewKey(tenant="acme"), "admin1", now=1.0)
    new, after = rotated(record, Rotation(grace_seconds=10), now=100.0)
    assert new.split("-")[2] == record.id and after.previous_hash == record.hash and after.previous_until == 110.0
    ring = Keyring([after.key()])
    assert ring.find(old, now=109.0) is not None and ring.find(old, now=110.0) is None
    assert ring.find(new, now=200.0) is not None
    newer, again = rotated(after, Rotation(grace_seconds=0), now=105.0)
    assert again.previous_hash is None and Keyring([again.key()]).find(new, now=105.0) is None
    assert Keyring([again.key()]).find(newer, now=105.0) is not None


@pytest.mark.parametrize("raw", [b'{"grace_seconds": -1}', b'{"grace_seconds": 1e9}', b'{"other": 1}'])
def test_a_rotation_s_grace_is_bounded(raw: bytes) -> None:
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(raw, type=Rotation)


def test_an_audit_entry_holds_before_and_after_without_secrets() -> None:
    secret, record = created(NewKey(tenant="acme"), "admin1", now=1.0)
    made = entry("create", "admin1", "10.0.0.9", record.id, None, record, now=2.0)
    assert made.before is None and made.after == record.shown() and made.client == "10.0.0.9"
    assert secret not in msgspec.json.encode(made).decode() and "sha256:" not in msgspec.json.encode(made).decode()


def test_a_tenant_made_and_changed_keeps_what_a_change_leaves_out() -> None:
    record = tenant_created(NewTenant(name="acme", limits=Limits(rpm=5), metadata={"team": "x"}), "a1", now=1.0)
    assert record.tenant().limits.rpm == 5 and record.tenant().models == ("*",) and record.created_by == "a1"
    changed = tenant_updated(record, TenantUpdate(budget=Budget(usd=2.0), models=("gpt-*",)), now=2.0)
    assert (changed.limits.rpm, changed.limits.budget, changed.models) == (5, Budget(usd=2.0), ("gpt-*",))
    assert changed.metadata == {"team": "x"} and changed.updated_at == 2.0 and changed.created_at == 1.0
    shown = changed.shown()
    assert shown["limits"] == {"rpm": 5, "budget": {"usd": 2.0, "period": "month"}}
    logged = tenant_entry("update", "a1", "127.0.0.1", "acme", record, changed)
    assert logged.tenant == "acme" and logged.key_id is None and logged.before == record.shown()
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(b'{"name": "a b"}', type=NewTenant)
