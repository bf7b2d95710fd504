"""Admins' sign-in tokens without I/O: the role a claim gives (a string or a list; admin before viewer; none),
who the audit log names, and each token refused as a 401 (the key set given by hand: jwks.py fetches it in
tests/integration/test_admin_oidc.py)."""

from __future__ import annotations

import time
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from ingress.admin.oidc import Actor, NoSignIn, Role, SignIns, actor_of, held, role_held, role_of
from ingress.admin.settings import AdminOidc
from ingress.tenancy.bearer import KeySet
from ingress.tenancy.claims import TokenRefused

ISS = "https://sso.example.com/realms/ops"
OIDC = AdminOidc(issuer=ISS, audience=("ingress-admin",), role_claim="realm_access.roles",
                 admin_values=("ingress-admins",), viewer_values=("ingress-viewers", "auditors"))
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
STRANGER = rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.mark.parametrize(("roles", "role"), [
    (["ingress-viewers", "ingress-admins"], "admin"), (["auditors"], "viewer"), ("ingress-admins", "admin"),
    (["eng"], None), ([], None), (None, None), ({"ingress-admins": True}, None), ([1, "auditors"], "viewer")])
def test_the_role_claim_gives_the_role(roles: object, role: Role | None) -> None:
    claims: dict[str, Any] = {"sub": "alice", "realm_access": {"roles": roles}}
    assert role_of(claims, OIDC) == role
    assert actor_of(claims, OIDC) == Actor("oidc:alice", role)
    assert role_held(held(claims, OIDC), OIDC) == role  # what a console session keeps gives the same role
    assert held(claims, OIDC) <= {"ingress-admins", "ingress-viewers", "auditors"}  # none of the rest kept


@pytest.mark.parametrize("subject", [None, "", 7, "a\nb", "x" * 257])
def test_a_token_without_a_subject_names_no_one(subject: object) -> None:
    with pytest.raises(TokenRefused):
        actor_of({"sub": subject, "realm_access": {"roles": ["ingress-admins"]}}, OIDC)


def _token(key: Any = KEY, **claims: Any) -> str:
    now = int(time.time())
    body = {"iss": ISS, "aud": "ingress-admin", "sub": "alice", "iat": now, "exp": now + 300,
            "realm_access": {"roles": ["ingress-admins"]}, **claims}
    return jwt.encode(body, key, algorithm="RS256", headers={"kid": "k1"})


async def test_a_token_of_the_provider_s_key_signs_in_and_the_rest_are_each_a_401() -> None:
    signins = SignIns(OIDC)
    signins.verifier.set_keys(ISS, KeySet({"keys": [{**RSAAlgorithm.to_jwk(KEY.public_key(), as_dict=True),
                                                      "kid": "k1"}]}))
    assert await signins.actor(_token()) == Actor("oidc:alice", "admin")
    now = int(time.time())
    for bad in (_token(exp=now - 100, iat=now - 400), _token(aud="ingress"), _token(iss="https://elsewhere.example"),
                _token(STRANGER), _token(sub=None)):
        with pytest.raises(NoSignIn) as refused:
            await signins.actor(bad)
        assert refused.value.status == 401
