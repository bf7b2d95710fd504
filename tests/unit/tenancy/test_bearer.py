"""JWTs verified against an issuer's key set, without I/O: what passes, and each way a token is refused
(for operators' eyes: TokenRefused's reason) or sends the edge to fetch the keys again (UnknownKey)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from ingress.tenancy.bearer import KeySet, UnknownKey, Verifier, looks_like_jwt
from ingress.tenancy.claims import TokenRefused
from ingress.tenancy.settings import Issuer

ISS = "https://sso.example.com/realms/acme"
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
OTHER_RSA = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())


def jwk(key: Any, kid: str, **more: str) -> dict[str, Any]:
    made = RSAAlgorithm.to_jwk(key.public_key(), as_dict=True) if isinstance(key, rsa.RSAPrivateKey) else \
        ECAlgorithm.to_jwk(key.public_key(), as_dict=True)
    return {**made, "kid": kid, **more}


def verifier(*keys: dict[str, Any], algorithms: tuple[str, ...] = ("RS256",), leeway: float = 30) -> Verifier:
    v = Verifier((Issuer(issuer=ISS, audience=("ingress", "other-app"), algorithms=algorithms,  # type: ignore[arg-type]
                         tenant="acme", leeway=leeway),
                  Issuer(issuer="https://login.example.org", audience=("ingress",), name="second", tenant="acme")))
    if keys:
        v.set_keys(ISS, KeySet({"keys": list(keys)}))
    return v


def token(key: Any = RSA_KEY, alg: str = "RS256", kid: str | None = "k1", **claims: Any) -> str:
    now = int(time.time())
    body = {"iss": ISS, "aud": "ingress", "sub": "alice", "iat": now, "exp": now + 300, **claims}
    return jwt.encode({k: v for k, v in body.items() if v is not None}, key, algorithm=alg,
                      headers={"kid": kid} if kid else None)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned(header: dict[str, Any], payload: dict[str, Any], secret: bytes | None = None) -> str:
    signing = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload).encode())}"
    signature = b64(hmac.new(secret, signing.encode(), hashlib.sha256).digest()) if secret is not None else ""
    return f"{signing}.{signature}"


def test_a_token_of_the_issuers_key_passes_and_is_remembered_until_it_expires() -> None:
    v = verifier(jwk(RSA_KEY, "k1"))
    t = token()
    first = v.verify(t)
    assert first.claims["sub"] == "alice" and first.issuer.issuer == ISS
    assert v.verify(t) is first  # no second signature check
    assert v.verify(t, now=first.expires + 1) is not first  # past its expiry it is not taken from memory


def test_a_remembered_token_is_checked_again_after_its_expiry_and_after_new_keys() -> None:
    v = verifier(jwk(RSA_KEY, "k1"))
    t = token(exp=int(time.time()) + 1)
    v.verify(t)
    v.set_keys(ISS, KeySet({"keys": [jwk(OTHER_RSA, "k2")]}))  # the issuer withdrew k1
    with pytest.raises(UnknownKey):
        v.verify(t)


CASES: list[tuple[str, Any, str]] = [
    ("expired", lambda: token(exp=int(time.time()) - 31, iat=int(time.time()) - 600), "expired"),
    ("not yet", lambda: token(nbf=int(time.time()) + 120), "not valid yet"),
    ("wrong audience", lambda: token(aud="someone-else"), "wrong audience"),
    ("no audience", lambda: token(aud=None), "aud"),
    ("no expiry", lambda: token(exp=None), "exp"),
    ("foreign issuer", lambda: token(iss="https://evil.example.com"), "issuer not configured"),
    ("no issuer", lambda: token(iss=None), "issuer not configured"),
    ("garbage", lambda: "eyJhbGciOi.x.y", "malformed"),
    ("alg none", lambda: unsigned({"alg": "none", "kid": "k1"}, jwt.decode(token(), options={
        "verify_signature": False})), "algorithm 'none' not allowed"),
    ("key confusion", lambda: unsigned({"alg": "HS256", "kid": "k1"}, jwt.decode(token(), options={
        "verify_signature": False}), RSA_KEY.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)), "algorithm 'HS256' not allowed"),
    ("an algorithm the issuer does not use", lambda: token(EC_KEY, "ES256"), "algorithm 'ES256' not allowed"),
    ("bad signature", lambda: token(OTHER_RSA), "bad signature"),
]


@pytest.mark.parametrize(("case", "make", "reason"), CASES, ids=[c[0] for c in CASES])
def test_each_bad_token_is_refused_with_its_reason(case: str, make: Any, reason: str) -> None:
    with pytest.raises(TokenRefused, match=reason):
        verifier(jwk(RSA_KEY, "k1")).verify(make())


def test_the_leeway_admits_a_token_just_expired() -> None:
    t = token(exp=int(time.time()) - 10)
    assert verifier(jwk(RSA_KEY, "k1")).verify(t).claims["sub"] == "alice"
    with pytest.raises(TokenRefused, match="expired"):
        verifier(jwk(RSA_KEY, "k1"), leeway=0).verify(t)


def test_a_kid_the_set_lacks_or_a_set_not_fetched_asks_for_the_keys_again() -> None:
    with pytest.raises(UnknownKey) as unknown:
        verifier(jwk(RSA_KEY, "k1")).verify(token(kid="k9"))
    assert unknown.value.issuer == ISS
    with pytest.raises(UnknownKey):
        verifier().verify(token())


def test_without_a_kid_the_one_key_of_its_type_is_used() -> None:
    v = verifier(jwk(RSA_KEY, "k1"), jwk(EC_KEY, "e1"), algorithms=("RS256", "ES256"))
    assert v.verify(token(kid=None)).claims["sub"] == "alice"
    assert v.verify(token(EC_KEY, "ES256", kid=None)).claims["sub"] == "alice"
    with pytest.raises(UnknownKey):  # the one key there was does not verify it: the issuer may have rotated
        v.verify(token(OTHER_RSA, kid=None))
    with pytest.raises(TokenRefused, match="several"):
        verifier(jwk(RSA_KEY, "k1"), jwk(OTHER_RSA, "k2")).verify(token(kid=None))


def test_a_key_is_used_only_with_its_own_algorithm_and_for_signatures() -> None:
    with pytest.raises(UnknownKey):  # the JWK says RS512: a token cannot pick RS256 for it
        verifier(jwk(RSA_KEY, "k1", alg="RS512"), algorithms=("RS256", "RS512")).verify(token())
    with pytest.raises(UnknownKey):  # an encryption key is not a signing key
        verifier(jwk(RSA_KEY, "k1", use="enc")).verify(token())
    with pytest.raises(UnknownKey):  # an RSA token never meets the EC key of the same kid
        verifier(jwk(EC_KEY, "k1"), algorithms=("RS256", "ES256")).verify(token())
    assert verifier(jwk(RSA_KEY, "k1", alg="RS512"), algorithms=("RS512",)).verify(token(alg="RS512"))


def test_a_jwks_without_keys_is_an_error_and_only_a_jwt_looks_like_one() -> None:
    with pytest.raises(ValueError, match="keys"):
        KeySet({"nope": []})
    assert looks_like_jwt(token()) and not looks_like_jwt("sk-ig-abcdefgh-xyz") and not looks_like_jwt("eyJ.a")
