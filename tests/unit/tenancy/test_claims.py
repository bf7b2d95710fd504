"""A token's claims as a tenant, a subject, a team and a plan: a table of what providers send, and properties
of the mapping over any claims."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ingress.tenancy.claims import Identity, TokenRefused, claim, identity_of
from ingress.tenancy.settings import Claims, Issuer

ISSUER = "https://sso.example.com/realms/acme"


def issuer(**claims: str | None) -> Issuer:
    return Issuer(issuer=ISSUER, audience=("ingress",), claims=Claims(**claims))  # type: ignore[arg-type]


KEYCLOAK: dict[str, Any] = {"sub": "f3b1c0de-1111-2222-3333-444455556666", "org_id": "acme",
                            "groups": ["/eng", "/ops"], "realm_access": {"roles": ["heavy", "offline_access"]}}
OKTA: dict[str, Any] = {"sub": "00u1abcdEFGH2345", "org_id": "acme", "groups": ["Everyone", "eng"],
                        "ingress_plan": "heavy"}
ENTRA: dict[str, Any] = {"sub": "AAAAAAAAAAAAAAAAAAAAAIkzqFVrSaSaFHy782bbtaQ",
                         "oid": "00000000-0000-0000-66f3-3332eca7ea81",
                         "tid": "9188040d-6c67-4c5b-b112-36a304b66dad", "roles": ["Ingress.Heavy"]}

TABLE: list[tuple[dict[str, Any], dict[str, str | None], Identity]] = [
    (KEYCLOAK, {"tenant": "org_id", "team": "groups", "plan": "realm_access.roles"},
     Identity("acme", KEYCLOAK["sub"], "/eng", "heavy")),
    (OKTA, {"tenant": "org_id", "team": "groups", "plan": "ingress_plan"},
     Identity("acme", "00u1abcdEFGH2345", "Everyone", "heavy")),
    (ENTRA, {"tenant": "tid", "subject": "oid", "plan": "roles"},
     Identity(ENTRA["tid"], ENTRA["oid"], None, "Ingress.Heavy")),
    ({"sub": "alice", "org_id": "acme"}, {"tenant": "org_id", "team": "groups", "plan": "plan"},
     Identity("acme", "alice", None, None)),  # team and plan are read only when there
    ({"sub": 42, "org": {"id": "acme"}}, {"tenant": "org.id"}, Identity("acme", "42", None, None)),
    ({"sub": "a", "https://example.com/org": "acme"}, {"tenant": "https://example.com/org"},
     Identity("acme", "a", None, None)),  # a URL-named claim (Auth0's namespaced claims), found whole
]


@pytest.mark.parametrize(("claims", "mapping", "expected"), TABLE)
def test_what_providers_send_maps_to_who_is_calling(claims: dict[str, Any], mapping: dict[str, str | None],
                                                    expected: Identity) -> None:
    assert identity_of(claims, issuer(**mapping)) == expected


REFUSED: list[tuple[dict[str, Any], dict[str, str | None], str]] = [
    ({"sub": "a"}, {"tenant": "org_id"}, "missing"),  # no tenant claim: not the default tenant
    ({"sub": "a", "org_id": ["acme", "other"]}, {"tenant": "org_id"}, "missing"),  # a list is no tenant
    ({"sub": "a", "org_id": "acme corp"}, {"tenant": "org_id"}, "not a valid tenant"),
    ({"sub": "a", "org_id": True}, {"tenant": "org_id"}, "missing"),
    ({"org_id": "acme"}, {"tenant": "org_id"}, "subject"),
    ({"sub": "", "org_id": "acme"}, {"tenant": "org_id"}, "not a valid subject"),
    ({"sub": "a\r\nb", "org_id": "acme"}, {"tenant": "org_id"}, "not a valid subject"),
    ({"sub": "x" * 257, "org_id": "acme"}, {"tenant": "org_id"}, "not a valid subject"),
    ({"sub": "a", "org_id": "acme", "plan": {"x": 1}}, {"tenant": "org_id", "plan": "plan"}, "plan"),
    ({"sub": "a", "org_id": "acme", "groups": [7.5]}, {"tenant": "org_id", "team": "groups"}, "team"),
]


@pytest.mark.parametrize(("claims", "mapping", "reason"), REFUSED)
def test_claims_that_do_not_say_who_is_calling_are_refused(claims: dict[str, Any], mapping: dict[str, str | None],
                                                           reason: str) -> None:
    with pytest.raises(TokenRefused, match=reason):
        identity_of(claims, issuer(**mapping))


def test_without_a_tenant_claim_every_token_has_the_issuers_tenant() -> None:
    fixed = Issuer(issuer=ISSUER, audience=("ingress",), tenant="acme")
    assert identity_of({"sub": "a", "org_id": "other"}, fixed) == Identity("acme", "a", None, None)


scalars = (st.sampled_from(["acme", "alice", "eng", "a b", "", "\n", "é", "x" * 300]) | st.none() | st.booleans()
           | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=4), inner, max_size=2), max_leaves=5)


@given(st.dictionaries(st.sampled_from(["sub", "org_id", "groups", "plan", "org"]), json_values))
def test_any_claims_map_to_a_valid_identity_or_are_refused(claims: dict[str, Any]) -> None:
    """Whatever a token holds, the mapping answers an identity of valid names, or refuses: it never raises
    anything else, and what it answers is what the claims say (a number, as its text)."""
    try:
        who = identity_of(claims, issuer(tenant="org_id", team="groups", plan="plan"))
    except TokenRefused:
        return
    assert who.tenant == str(claims["org_id"]) and str(claims["sub"]) == who.subject
    assert 1 <= len(who.subject) <= 256 and who.subject.isascii() and who.subject.isprintable()
    if who.team is not None:
        team = claims["groups"]
        assert who.team == str(team[0] if isinstance(team, list) else team)


@given(st.text(alphabet="abc.", min_size=1, max_size=12), json_values)
def test_a_dotted_path_reads_nested_objects(path: str, value: Any) -> None:
    nested: Any = value
    for step in reversed(path.split(".")):
        nested = {step: nested}
    found = claim(nested, path)
    assert found == value or path in nested  # a claim named with the dots themselves is found whole first
