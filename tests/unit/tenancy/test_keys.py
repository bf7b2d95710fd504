"""Virtual keys: their shape, their hash, and finding them by id with the secret checked."""

from __future__ import annotations

from ingress.tenancy.keys import PREFIX, Keyring, hash_of, id_of, matches, new_key
from ingress.tenancy.settings import Key


def test_a_new_key_has_its_id_inside_and_only_its_hash_is_kept() -> None:
    key, key_id, digest = new_key()
    assert key.startswith(f"{PREFIX}{key_id}-") and len(key) > 50
    assert id_of(key) == key_id and digest == hash_of(key) and key not in digest
    assert new_key()[0] != key


def test_the_keyring_finds_a_key_only_with_its_whole_secret() -> None:
    key, key_id, digest = new_key()
    ring = Keyring([Key(id=key_id, tenant="acme", hash=digest)])
    found = ring.find(key)
    assert found is not None and found.id == key_id
    assert ring.find(key[:-1] + ("A" if key[-1] != "A" else "B")) is None  # the secret is checked
    assert ring.find(new_key()[0]) is None  # an unknown id
    assert ring.find("sk-proj-abcdef") is None and id_of("sk-proj-abcdef") is None  # not one of ours
    assert ring.find("") is None


def test_a_key_past_its_expiry_is_not_found() -> None:
    key, key_id, digest = new_key()
    ring = Keyring([Key(id=key_id, tenant="acme", hash=digest, expires_at=1000.0)])
    assert ring.find(key, now=999.0) is not None
    assert ring.find(key, now=1000.0) is None


def test_a_rotated_key_s_former_secret_works_until_its_grace_ends() -> None:
    old, key_id, old_hash = new_key()
    new, _, new_hash = new_key(key_id)
    assert new.startswith(f"{PREFIX}{key_id}-") and new != old
    ring = Keyring([Key(id=key_id, tenant="acme", hash=new_hash, previous_hash=old_hash, previous_until=1000.0)])
    assert ring.find(old, now=999.0) is not None and ring.find(new, now=999.0) is not None
    assert ring.find(old, now=1000.0) is None and ring.find(new, now=1000.0) is not None
    assert not matches(old, new_hash) and matches(old, new_hash, old_hash, 10.0, now=5.0)
