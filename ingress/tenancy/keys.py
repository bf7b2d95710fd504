"""Virtual keys: `sk-ig-<id>-<secret>`. The id is public (logs, metrics, the passport); the configuration
holds only the SHA-256 of the whole key, compared in constant time; the key itself is shown once, when
made, and kept nowhere."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Iterable

from ingress.tenancy.settings import Key

PREFIX = "sk-ig-"
_SHAPE = re.compile(r"^sk-ig-(?P<id>[0-9a-z]{8,32})-[A-Za-z0-9_-]{16,128}\Z")
_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"


def hash_of(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def new_key(key_id: str | None = None) -> tuple[str, str, str]:
    """A fresh key: (key, its id, its hash). 12 id characters (62 bits) and 43 of secret (256 bits); with
    `key_id`, a new secret for that id (a rotation)."""
    key_id = key_id or "".join(secrets.choice(_ALPHABET) for _ in range(12))
    key = f"{PREFIX}{key_id}-{secrets.token_urlsafe(32)}"
    return key, key_id, hash_of(key)


def id_of(presented: str) -> str | None:
    """The public id in a presented key of our shape (None otherwise): safe to log even when it is unknown."""
    m = _SHAPE.match(presented)
    return m["id"] if m else None


_NO_HASH = "sha256:" + "0" * 64


def matches(presented: str, hash: str, previous: str | None = None, previous_until: float | None = None,
            now: float | None = None) -> bool:
    """Whether `presented` is the key of `hash`, or of `previous` before `previous_until` (a rotation's grace):
    both compared in constant time, always."""
    digest = hash_of(presented)
    current = hmac.compare_digest(digest, hash)
    former = hmac.compare_digest(digest, previous or _NO_HASH)
    in_grace = previous is not None and previous_until is not None and (
        time.time() if now is None else now) < previous_until
    return current or (former and in_grace)


class Keyring:
    """The configured keys, found by their public id, checked against their hash in constant time (and a
    rotated key's former hash, during its grace); a key past its `expires_at` is not found."""

    def __init__(self, keys: Iterable[Key]) -> None:
        self._by_id = {key.id: key for key in keys}

    def __len__(self) -> int:
        return len(self._by_id)

    def find(self, presented: str, now: float | None = None) -> Key | None:
        now = time.time() if now is None else now
        key_id = id_of(presented)
        key = self._by_id.get(key_id) if key_id is not None else None
        if key is None:  # hashed and compared either way, so that an unknown id and a wrong secret take the same time
            matches(presented, _NO_HASH, _NO_HASH, now, now)
            return None
        if not matches(presented, key.hash, key.previous_hash, key.previous_until, now):
            return None
        return key if key.expires_at is None or now < key.expires_at else None
