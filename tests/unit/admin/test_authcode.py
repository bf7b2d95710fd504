"""The SSO flow's pieces, sans I/O: a fresh state, nonce and verifier each time; S256 as RFC 7636 computes it;
the authorization URL and the token request a provider gets (public and confidential clients); the callback's
state bound to the browser's cookie; the provider's error, the token endpoint's answer and the ID token's
nonce, audience and authorized party refused with their reasons."""

from __future__ import annotations

import base64
from urllib.parse import parse_qs, urlsplit

import msgspec
import pytest

from ingress.admin import authcode
from ingress.admin.authcode import FLOW_S, Flow, Refused
from ingress.admin.settings import AdminOidc

OIDC = AdminOidc(issuer="https://sso.example.com", audience=("ingress-admin", "other"), admin_values=("ops",),
                 redirect_uri="https://admin.example.com/admin/v1/session/oidc/callback")
FLOW = Flow(nonce="n" * 43, verifier="v" * 64, expires_at=2e9)


def test_each_flow_is_fresh_and_lasts_its_time() -> None:
    flows = [authcode.new_flow(1000.0) for _ in range(50)]
    values = [v for state, flow in flows for v in (state, flow.nonce, flow.verifier)]
    assert len(set(values)) == len(values)
    assert all(len(state) >= 43 and 43 <= len(flow.verifier) <= 128 for state, flow in flows)  # RFC 7636 4.1
    assert {flow.expires_at for _, flow in flows} == {1000.0 + FLOW_S}


def test_the_challenge_is_s256_as_rfc_7636_appendix_b_gives_it() -> None:
    assert authcode.challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk") == (
        "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM")


@pytest.mark.parametrize("endpoint", ["https://sso.example.com/auth", "https://sso.example.com/auth?tenant=x"])
def test_the_authorization_url_asks_for_a_code_with_pkce(endpoint: str) -> None:
    url = authcode.authorization_url(endpoint, OIDC, "the-state", FLOW)
    parts = urlsplit(url)
    query = {name: values[0] for name, values in parse_qs(parts.query).items()}
    assert url.startswith(endpoint) and query.pop("tenant", "x") == "x"
    assert query == {"response_type": "code", "client_id": "ingress-admin", "redirect_uri": OIDC.redirect_uri,
                     "scope": "openid profile email", "state": "the-state", "nonce": FLOW.nonce,
                     "code_challenge": authcode.challenge(FLOW.verifier), "code_challenge_method": "S256"}
    assert FLOW.verifier not in url


def test_a_public_client_names_itself_and_a_confidential_one_authenticates() -> None:
    form, headers = authcode.token_request("the-code", FLOW, OIDC, None)
    assert form == {"grant_type": "authorization_code", "code": "the-code", "redirect_uri": OIDC.redirect_uri,
                    "code_verifier": FLOW.verifier, "client_id": "ingress-admin"}
    assert "Authorization" not in headers
    form, headers = authcode.token_request("the-code", FLOW, msgspec.structs.replace(OIDC, client_id="other"),
                                           "p@ss:w rd")
    assert "client_id" not in form and form["code_verifier"] == FLOW.verifier
    assert base64.b64decode(headers["Authorization"].removeprefix("Basic ")) == b"other:p%40ss%3Aw%20rd"


@pytest.mark.parametrize(("query", "cookie"), [
    ({}, "s"), ({"state": ""}, ""), ({"state": "s"}, None), ({"state": "s"}, "t"), ({"state": "s" * 201}, "s" * 201)])
def test_a_state_not_the_browser_s_is_refused(query: dict[str, str], cookie: str | None) -> None:
    with pytest.raises(Refused) as refused:
        authcode.callback_state(query, cookie)
    assert refused.value.reason == "state"


def test_the_browser_s_state_is_taken() -> None:
    assert authcode.callback_state({"state": "s" * 43, "code": "c"}, "s" * 43) == "s" * 43


@pytest.mark.parametrize(("query", "reason"), [
    ({"error": "access_denied", "code": "c"}, "denied"), ({}, "exchange"), ({"code": ""}, "exchange"),
    ({"code": "c" * 4097}, "exchange")])
def test_no_code_or_the_provider_s_error_is_refused(query: dict[str, str], reason: str) -> None:
    with pytest.raises(Refused) as refused:
        authcode.code_of(query)
    assert refused.value.reason == reason
    assert authcode.code_of({"code": "abc"}) == "abc"


@pytest.mark.parametrize(("status", "body"), [(400, b'{"error":"invalid_grant"}'), (200, b"{}"),
                                              (200, b"not json"), (200, b'{"id_token": 5}')])
def test_a_token_answer_without_an_id_token_is_refused(status: int, body: bytes) -> None:
    with pytest.raises(Refused) as refused:
        authcode.id_token_of(status, body)
    assert refused.value.reason == "exchange"


def test_the_id_token_is_taken_from_the_answer() -> None:
    assert authcode.id_token_of(200, b'{"id_token": "eyJ.a.b", "access_token": "x"}') == "eyJ.a.b"


@pytest.mark.parametrize(("claims", "why"), [
    ({"aud": "ingress-admin"}, "nonce"), ({"aud": "ingress-admin", "nonce": "other"}, "nonce"),
    ({"aud": "other", "nonce": FLOW.nonce}, "aud"), ({"aud": ["other", "x"], "nonce": FLOW.nonce}, "aud"),
    ({"aud": ["ingress-admin", "x"], "azp": "x", "nonce": FLOW.nonce}, "azp")])
def test_an_id_token_not_of_this_flow_or_client_is_refused(claims: dict[str, object], why: str) -> None:
    with pytest.raises(Refused) as refused:
        authcode.check_id_token(claims, FLOW, "ingress-admin")
    assert refused.value.reason == "token" and why in str(refused.value)


@pytest.mark.parametrize("claims", [{"aud": "ingress-admin"}, {"aud": ["ingress-admin", "x"]},
                                    {"aud": ["ingress-admin", "x"], "azp": "ingress-admin"}])
def test_an_id_token_of_this_flow_and_client_passes(claims: dict[str, object]) -> None:
    authcode.check_id_token({**claims, "nonce": FLOW.nonce}, FLOW, "ingress-admin")


@pytest.mark.parametrize("value", [None, 5, "ftp://x", "javascript:alert(1)", "https://" + "x" * 2000])
def test_an_endpoint_the_discovery_does_not_name_well_is_refused(value: object) -> None:
    with pytest.raises(Refused) as refused:
        authcode.endpoint({"token_endpoint": value}, "token_endpoint")
    assert refused.value.reason == "unavailable"
    assert authcode.endpoint({"token_endpoint": "https://x/t"}, "token_endpoint") == "https://x/t"
