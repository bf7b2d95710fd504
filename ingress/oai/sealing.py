"""What the edge gives a client to hold and send back, sealed (sans-I/O): a reasoning item's text
(`include: ["reasoning.encrypted_content"]` with `store: false`, as Codex CLI sends every turn) and a
compacted conversation, as the Responses API's opaque `encrypted_content`.

A sealed blob is `ingress:1:<key id>:<base64url of nonce + AES-256-GCM ciphertext>`; the associated data
binds the blob's kind and key id, and the plaintext says which provider and model wrote it, so a route
change never gives one provider another's reasoning as its own. Keys rotate: the first of `[sealing]
keys` seals, every one opens. A blob that is not the edge's own (a provider's, e.g. OpenAI's) is not
opened (`Sealer.open` returns None); one that is the edge's but does not open (modified, cut, or sealed
with a key this edge does not hold) is the client's error, a 400 naming the item.
"""

from __future__ import annotations

import base64
import binascii
import os
from typing import TYPE_CHECKING, Literal

import msgspec

from ingress.errors import InvalidRequest

if TYPE_CHECKING:  # imported by the first seal or open: cryptography is ~6 MB of a worker's memory
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

PREFIX = "ingress:1:"
KEY_BYTES = 32
NONCE_BYTES = 12
Kind = Literal["reasoning", "compaction"]


class Sealed(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A sealed blob's contents: the text, and who wrote it (the route's provider and the model that served)."""

    text: str
    provider: str = ""
    model: str = ""


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Sealed)


class Sealer:
    """Seals with the first key of `keys` (id → 32 bytes), opens with any of them. The ciphers are made by
    the first seal or open (an edge that serves no Responses reasoning never loads cryptography)."""

    def __init__(self, keys: list[tuple[str, bytes]]) -> None:
        if not keys:
            raise ValueError("a sealer needs at least one key")
        for key_id, key in keys:
            if len(key) != KEY_BYTES or ":" in key_id:
                raise ValueError(f"sealing key {key_id!r}: {KEY_BYTES} bytes and an id without ':' are needed")
        self._current = keys[0][0]
        self._raw = dict(keys)
        self._ciphers: dict[str, AESGCM] | None = None

    def _keys(self) -> dict[str, AESGCM]:
        if self._ciphers is None:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            self._ciphers = {key_id: AESGCM(key) for key_id, key in self._raw.items()}
        return self._ciphers

    def seal(self, kind: Kind, sealed: Sealed) -> str:
        nonce = os.urandom(NONCE_BYTES)
        data = self._keys()[self._current].encrypt(nonce, _encoder.encode(sealed), _bound(kind, self._current))
        return f"{PREFIX}{self._current}:{base64.urlsafe_b64encode(nonce + data).decode()}"

    def open(self, kind: Kind, blob: str, param: str) -> Sealed | None:
        """A blob's contents; None for a blob that is not the edge's own. InvalidRequest naming `param` for
        one that is but does not open."""
        if not blob.startswith(PREFIX):
            return None
        key_id, _, body = blob[len(PREFIX):].partition(":")
        aead = self._keys().get(key_id)
        if aead is None:
            raise InvalidRequest(f"{param} was sealed with a key this edge does not hold (key id "
                                 f"'{key_id[:32]}'): every replica needs the same [sealing] keys.", param=param,
                                 code="invalid_encrypted_content")
        from cryptography.exceptions import InvalidTag

        try:
            raw = base64.urlsafe_b64decode(body)
            plain = aead.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], _bound(kind, key_id))
            return _decoder.decode(plain)
        except (binascii.Error, ValueError, InvalidTag, msgspec.DecodeError):
            raise InvalidRequest(f"{param} was modified or cut: it does not open as the edge sealed it.",
                                 param=param, code="invalid_encrypted_content") from None


def _bound(kind: Kind, key_id: str) -> bytes:
    return f"{kind}:{key_id}".encode()


def new_key() -> bytes:
    return os.urandom(KEY_BYTES)


def parse_key(text: str, where: str) -> bytes:
    """A key as configured: 32 bytes in base64 (standard or URL-safe)."""
    try:
        key = base64.b64decode(text.strip().replace("-", "+").replace("_", "/"), validate=True)
    except binascii.Error:
        key = b""
    if len(key) != KEY_BYTES:
        raise ValueError(f"{where}: a sealing key is {KEY_BYTES} bytes in base64 "
                         "(`python -c 'import os,base64;print(base64.b64encode(os.urandom(32)).decode())'`)")
    return key
