"""What the response store keeps, sealed at rest (sans-I/O): a stored response's record, a conversation's
object and items, a stream's events, each AES-256-GCM with a key from the environment, so that the
server they live on (a Redis shared with other services, its backups, its replicas) holds no prompt
and no answer in the clear.

A sealed value is `MAGIC + key id (8 bytes) + nonce (12 bytes) + ciphertext and tag`. Its associated
data binds it to its place: its kind, its owner and its id (a response's, a conversation's), so that a
value copied under another owner's key, or another response's, does not open. The key id is a digest
of the key: the first key seals, every one opens, so a new key is rolled in first and an old one is
dropped once `retention` has passed. A value that does not open (another place's, modified, cut, or
sealed with a key this edge no longer holds, or a value kept before sealing was turned on) is not the
caller's: the store reads it as no value at all (store.py).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # imported by the first seal or open: cryptography is ~6 MB of a worker's memory
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from ingress.state.settings import ResponsesSettings

MAGIC = b"\x00is1"  # no JSON value begins with a NUL byte: a sealed value is never read as a plain one
KEY_BYTES = 32
KEY_ID_BYTES = 8
NONCE_BYTES = 12
TAG_BYTES = 16
OVERHEAD = len(MAGIC) + KEY_ID_BYTES + NONCE_BYTES + TAG_BYTES  # what sealing adds to each value
Kind = Literal["response", "conversation", "item", "event"]


def key_id(key: bytes) -> bytes:
    """The id a key seals under: a digest of it (one way; it names the key, it does not reveal it)."""
    return hashlib.sha256(b"ingress state key id\x00" + key).digest()[:KEY_ID_BYTES]


class AtRest:
    """Seals with the first of `keys` (each 32 bytes), opens with any of them. The ciphers are made by the
    first seal or open."""

    def __init__(self, keys: list[bytes]) -> None:
        if not keys or any(len(key) != KEY_BYTES for key in keys):
            raise ValueError(f"sealing at rest needs one or more keys of {KEY_BYTES} bytes")
        self._raw = {key_id(key): key for key in reversed(keys)}  # the first key wins a (digest) tie
        self._current = key_id(keys[0])
        self._ciphers: dict[bytes, AESGCM] | None = None

    def _keys(self) -> dict[bytes, AESGCM]:
        if self._ciphers is None:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            self._ciphers = {kid: AESGCM(key) for kid, key in self._raw.items()}
        return self._ciphers

    def seal(self, kind: Kind, owner: str, ident: str, data: bytes) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        head = MAGIC + self._current
        return head + nonce + self._keys()[self._current].encrypt(nonce, data, _bound(head, kind, owner, ident))

    def open(self, kind: Kind, owner: str, ident: str, blob: bytes) -> bytes | None:
        """The value as it was sealed for this place; None for one that does not open here."""
        if len(blob) < OVERHEAD or not blob.startswith(MAGIC):
            return None
        head = blob[:len(MAGIC) + KEY_ID_BYTES]
        aead = self._keys().get(head[len(MAGIC):])
        if aead is None:
            return None
        from cryptography.exceptions import InvalidTag

        view, at = memoryview(blob), len(head)  # a record of megabytes is not copied to be opened
        try:
            return aead.decrypt(view[at:at + NONCE_BYTES], view[at + NONCE_BYTES:], _bound(head, kind, owner, ident))
        except InvalidTag:
            return None


def _bound(head: bytes, kind: Kind, owner: str, ident: str) -> bytes:
    """The associated data: the value's header, kind, owner and id (owners and ids hold no NUL byte)."""
    return b"\x00".join((head, kind.encode(), owner.encode(), ident.encode()))


def parse_keys(text: str, where: str) -> list[bytes]:
    """Keys as configured: 32 bytes each in base64 (standard or URL-safe), separated by commas or spaces."""
    keys = []
    for part in text.replace(",", " ").split():
        try:
            key = base64.b64decode(part.replace("-", "+").replace("_", "/"), validate=True)
        except binascii.Error:
            key = b""
        if len(key) != KEY_BYTES:
            raise ValueError(f"{where}: a key to seal stored responses with is {KEY_BYTES} bytes in base64 "
                             "(`python -c 'import os,base64;print(base64.b64encode(os.urandom(32)).decode())'`)")
        keys.append(key)
    return keys


def responses_problem(settings: ResponsesSettings, has_redis: bool, environ: Mapping[str, str]) -> str | None:
    """What is wrong with `[responses]` (config.py's message), if anything: a Redis backend needs the tenancy's
    Redis, and the sealing keys must be in the environment at start."""
    if settings.backend == "redis" and not has_redis:
        return ("responses.backend: \"redis\" keeps responses in the [tenancy] store's Redis; configure [tenancy] "
                "redis = { url = \"redis://...\" }, or use backend = \"memory\"")
    try:
        at_rest(settings, environ)
    except ValueError as exc:
        return str(exc)
    return None


def at_rest(settings: ResponsesSettings, environ: Mapping[str, str]) -> AtRest | None:
    """The keys `[responses] seal_key_env` and `seal_old_keys_env` name, read from the environment at start;
    None when sealing is not configured. ValueError names the variable that is missing or wrong."""
    if settings.seal_key_env is None:
        return None
    current = parse_keys(environ.get(settings.seal_key_env, ""), f"[responses] seal_key_env (${settings.seal_key_env})")
    if len(current) != 1:
        raise ValueError(f"[responses] seal_key_env: ${settings.seal_key_env} must hold one key (32 bytes in base64)")
    old = []
    if settings.seal_old_keys_env is not None:
        old = parse_keys(environ.get(settings.seal_old_keys_env, ""),
                         f"[responses] seal_old_keys_env (${settings.seal_old_keys_env})")
    return AtRest(current + old)
