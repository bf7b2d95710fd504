"""Virtual keys: `sk-ig-<id>-<secret>`. The id is public (logs, metrics, the passport); the configuration
holds only the SHA-256 of the whole key, compared in constant time; the key itself is shown once, when
made, and kept nowhere."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable

from ingress.tenancy.settings import Key

PREFIX = "sk-ig-"
_SHAPE = re.compile(r"^sk-ig-(?P<id>[0-9a-z]{8,32})-[A-Za-z0-9_-]{16,128}\Z")
_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"


def hash_of(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def new_key() -> tuple[str, str, str]:
    """A fresh key: (key, its id, its hash). 12 id characters (62 bits) and 43 of secret (256 bits)."""
    key_id = "".join(secrets.choice(_ALPHABET) for _ in range(12))
    key = f"{PREFIX}{key_id}-{secrets.token_urlsafe(32)}"
    return key, key_id, hash_of(key)


def id_of(presented: str) -> str | None:
    """The public id in a presented key of our shape (None otherwise): safe to log even when it is unknown."""
    m = _SHAPE.match(presented)
    return m["id"] if m else None


class Keyring:
    """The configured keys, found by their public id, checked against their hash in constant time."""

    def __init__(self, keys: Iterable[Key]) -> None:
        self._by_id = {key.id: key for key in keys}

    def __len__(self) -> int:
        return len(self._by_id)

    def find(self, presented: str) -> Key | None:
        key_id = id_of(presented)
        key = self._by_id.get(key_id) if key_id is not None else None
        # Hash either way, so that an unknown id and a wrong secret take the same time.
        digest = hash_of(presented)
        return key if key is not None and hmac.compare_digest(digest, key.hash) else None
