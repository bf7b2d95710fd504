"""JWTs of the configured OIDC issuers, verified with the keys they publish (PyJWT, with cryptography): sans
I/O. The keys come in from jwks.py; a token that names a key the set does not hold raises UnknownKey, so
that the edge can refresh the set (at a bounded rate) and ask again.

What is checked, in order: the token parses; its header's `alg` is one the issuer allows (asymmetric only:
settings.Algorithm has no `none` and no HMAC); its unverified `iss` is a configured issuer; the key its
`kid` names (or the one key of that type, without a `kid`) is in the set and of the algorithm's type; then
PyJWT verifies the signature with that key bound to that one algorithm, and exp, nbf, iat (with the
issuer's leeway), iss and aud. A token that passed is remembered (by its SHA-256) until it expires, for a
bounded number of tokens: an agent sends the same token with every request for an hour.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ingress.tenancy.claims import TokenRefused
from ingress.tenancy.settings import Issuer

if TYPE_CHECKING:  # imported where a token is first read: PyJWT and cryptography's asymmetric keys are
    import jwt  # ~9 MB of a worker's memory, which an edge without [[tenancy.issuers]] never needs

_KTY = {"RS": "RSA", "PS": "RSA", "ES": "EC", "Ed": "OKP"}  # an algorithm's family: the key type it verifies with
_REMEMBERED = 4096
_REQUIRED = ["exp", "iss", "aud"]


class UnknownKey(Exception):
    """The token names a key the issuer's set does not hold (or the set is not fetched yet)."""

    def __init__(self, issuer: str) -> None:
        super().__init__(issuer)
        self.issuer = issuer


def looks_like_jwt(presented: str) -> bool:
    """A compact JWS (three dot-separated parts, a JSON header first): not a key of ours."""
    return presented.startswith("eyJ") and presented.count(".") == 2


class KeySet:
    """An issuer's published signing keys (a JWKS document), by kid; each made a PyJWK bound to an algorithm
    when first used with it."""

    def __init__(self, document: Mapping[str, Any]) -> None:
        keys = document.get("keys")
        if not isinstance(keys, list):
            raise ValueError("the JWKS has no `keys` list")
        self.jwks = [k for k in keys if isinstance(k, dict) and k.get("use", "sig") == "sig"
                     and isinstance(k.get("kty"), str)]
        self.kids = frozenset(k["kid"] for k in self.jwks if isinstance(k.get("kid"), str))
        self._bound: dict[tuple[str | None, str], jwt.PyJWK | None] = {}

    def __len__(self) -> int:
        return len(self.jwks)

    def key_for(self, kid: str | None, alg: str) -> jwt.PyJWK | None:
        """The key to verify an `alg` token naming `kid` with: None when the set has no such key (of the
        algorithm's type, and of this algorithm when the key names one). Without a kid, the set's one key of
        that type; with several, a TokenRefused (which one is not for the token to leave open)."""
        try:
            return self._bound[(kid, alg)]
        except KeyError:
            pass
        kty = _KTY.get(alg[:2])
        fitting = [k for k in self.jwks if k.get("kty") == kty and k.get("alg", alg) == alg
                   and (kid is None or k.get("kid") == kid)]
        if kid is None and len(fitting) > 1:
            raise TokenRefused("the token names no key (kid) and the issuer has several")
        bound = None
        if fitting:
            import jwt

            try:
                bound = jwt.PyJWK(fitting[0], algorithm=alg)
            except jwt.PyJWTError as exc:
                raise TokenRefused(f"the issuer's key {kid!r} is not usable: {exc}") from None
        if len(self._bound) < 256:  # kids come from tokens: a flood of made-up ones is not kept
            self._bound[(kid, alg)] = bound
        return bound


@dataclass(frozen=True, slots=True)
class Verified:
    issuer: Issuer
    claims: dict[str, Any]
    expires: float


class Verifier:
    """The issuers' key sets (set by jwks.py) and the tokens they verified."""

    def __init__(self, issuers: tuple[Issuer, ...]) -> None:
        self.issuers = {issuer.issuer: issuer for issuer in issuers}
        self.keys: dict[str, KeySet] = {}
        self._verified: dict[bytes, Verified] = {}

    def set_keys(self, issuer: str, keys: KeySet) -> None:
        """The issuer's current set; every token verified with an earlier one is verified again."""
        self.keys[issuer] = keys
        self._verified = {digest: v for digest, v in self._verified.items() if v.issuer.issuer != issuer}

    def verify(self, token: str, now: float | None = None) -> Verified:
        """The token's issuer and claims; TokenRefused (why, for operators) or UnknownKey."""
        now = time.time() if now is None else now
        digest = hashlib.sha256(token.encode()).digest()
        known = self._verified.get(digest)
        if known is not None and known.expires > now:
            return known
        import jwt

        try:
            unverified = jwt.api_jwt.decode_complete(token, options={"verify_signature": False})
        except jwt.PyJWTError as exc:
            raise TokenRefused(f"malformed token: {exc}") from None
        header, payload = unverified["header"], unverified["payload"]
        iss = payload.get("iss")
        issuer = self.issuers.get(iss) if isinstance(iss, str) else None
        if issuer is None:
            raise TokenRefused("issuer not configured")
        alg, kid = header.get("alg"), header.get("kid")
        if alg not in issuer.algorithms:
            raise TokenRefused(f"algorithm {str(alg)[:20]!r} not allowed")
        if kid is not None and not isinstance(kid, str):
            raise TokenRefused("kid is not a string")
        keys = self.keys.get(issuer.issuer)
        key = keys.key_for(kid, alg) if keys is not None else None
        if key is None:
            raise UnknownKey(issuer.issuer)
        try:
            claims = jwt.decode(token, key=key, algorithms=[alg], audience=list(issuer.audience),
                                issuer=issuer.issuer, leeway=issuer.leeway, options={"require": _REQUIRED})
        except jwt.InvalidSignatureError:
            if kid is None:  # the one key there was: the issuer may have rotated it
                raise UnknownKey(issuer.issuer) from None
            raise TokenRefused("bad signature") from None
        except jwt.ExpiredSignatureError:
            raise TokenRefused("expired") from None
        except jwt.ImmatureSignatureError:
            raise TokenRefused("not valid yet (nbf or iat in the future)") from None
        except jwt.InvalidAudienceError:
            raise TokenRefused("wrong audience") from None
        except jwt.InvalidIssuerError:
            raise TokenRefused("wrong issuer") from None
        except jwt.PyJWTError as exc:
            raise TokenRefused(f"{type(exc).__name__}: {exc}"[:200]) from None
        verified = Verified(issuer, claims, float(claims["exp"]) + issuer.leeway)
        if len(self._verified) >= _REMEMBERED:
            self._verified.clear()
        self._verified[digest] = verified
        return verified
