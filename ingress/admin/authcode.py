"""The console's OIDC sign-in by the authorization-code flow with PKCE (RFC 7636, S256), sans I/O: what a flow
starts with (its state, nonce and code verifier), the provider's authorization URL, the token request, and
what the token endpoint's answer and the ID token must hold. sso.py does the I/O.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Mapping
from typing import Literal
from urllib.parse import quote, urlencode

import msgspec

from ingress.admin.settings import AdminOidc

FLOW_S = 600.0  # s from the start to the callback: a person signing in at the provider, a second factor too
Reason = Literal["state", "denied", "exchange", "token", "no_role", "rate_limited", "unavailable"]
_MAX_STATE = 200  # a state of ours is 43 characters


class Flow(msgspec.Struct, frozen=True, kw_only=True):
    """What the callback needs of the start, kept under the state's digest until it is used (once)."""

    nonce: str
    verifier: str  # the PKCE code verifier: only its challenge went to the provider
    expires_at: float  # Unix time


class Refused(Exception):
    """A callback that signs no one in: `reason` (the console shows it: /admin/#signin-error=<reason>), and
    the detail for the log."""

    def __init__(self, reason: Reason, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


def new_flow(now: float) -> tuple[str, Flow]:
    """A fresh state (the browser's, and the key the flow is kept under) and its flow: 256 random bits each."""
    return secrets.token_urlsafe(32), Flow(nonce=secrets.token_urlsafe(32), verifier=secrets.token_urlsafe(48),
                                           expires_at=now + FLOW_S)


def challenge(verifier: str) -> str:
    """S256: the verifier's SHA-256, base64url without padding."""
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode("ascii")).digest()).rstrip(b"=").decode()


def authorization_url(endpoint: str, oidc: AdminOidc, state: str, flow: Flow) -> str:
    """Where the browser goes to sign in: the provider's endpoint with the request's parameters."""
    assert oidc.redirect_uri is not None
    query = urlencode({"response_type": "code", "client_id": oidc.client, "redirect_uri": oidc.redirect_uri,
                       "scope": " ".join(oidc.scopes), "state": state, "nonce": flow.nonce,
                       "code_challenge": challenge(flow.verifier), "code_challenge_method": "S256"})
    return f"{endpoint}{'&' if '?' in endpoint else '?'}{query}"


def token_request(code: str, flow: Flow, oidc: AdminOidc, secret: str | None) -> tuple[dict[str, str],
                                                                                      dict[str, str]]:
    """The token request's form and headers: a confidential client authenticates with HTTP Basic
    (client_secret_basic, RFC 6749 2.3.1: id and secret form-encoded first); a public one names itself in the
    form. The verifier proves the code is this flow's either way."""
    assert oidc.redirect_uri is not None
    form = {"grant_type": "authorization_code", "code": code, "redirect_uri": oidc.redirect_uri,
            "code_verifier": flow.verifier}
    headers = {"Accept": "application/json"}
    if secret is None:
        form["client_id"] = oidc.client
    else:
        pair = f"{quote(oidc.client, safe='')}:{quote(secret, safe='')}"
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
    return form, headers


def endpoint(discovery: Mapping[str, object], name: str) -> str:
    """An endpoint the discovery document names (an http(s) URL), else Refused."""
    value = discovery.get(name)
    if not isinstance(value, str) or not value.startswith(("https://", "http://")) or len(value) > 2000:
        raise Refused("unavailable", f"the provider's discovery document names no {name}")
    return value


def callback_state(query: Mapping[str, str], cookie: str | None) -> str:
    """The callback's state, which must be the one this browser's cookie holds (a flow started elsewhere and
    sent to this browser signs no one in here); else Refused."""
    state = query.get("state", "")
    if not state or len(state) > _MAX_STATE:
        raise Refused("state", "the callback has no state")
    if cookie is None or not hmac.compare_digest(state.encode(), cookie.encode()):
        raise Refused("state", "the state is not the one this browser started with")
    return state


def code_of(query: Mapping[str, str]) -> str:
    """The authorization code; Refused when the provider answered an error (the person denied, or it refused
    the request) or sent none."""
    if error := query.get("error"):
        raise Refused("denied", f"the provider answered {error[:100]!r}: {query.get('error_description', '')[:200]}")
    code = query.get("code", "")
    if not code or len(code) > 4096:
        raise Refused("exchange", "the callback has no code")
    return code


class _Tokens(msgspec.Struct):
    id_token: str


def id_token_of(status: int, body: bytes) -> str:
    """The ID token of the token endpoint's answer; Refused when it answered no 200 or no id_token."""
    if status != 200:
        raise Refused("exchange", f"the token endpoint answered {status}: {body[:300]!r}")
    try:
        return msgspec.json.decode(body, type=_Tokens).id_token
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise Refused("exchange", f"the token endpoint's answer has no id_token: {exc}") from None


def check_id_token(claims: Mapping[str, object], flow: Flow, client: str) -> None:
    """Beyond what the verifier checks (signature, issuer, audience, expiry): the token is this flow's (its
    nonce) and for this client (among several audiences, `azp` names it: OIDC Core 3.1.3.7)."""
    nonce = claims.get("nonce")
    if not isinstance(nonce, str) or not hmac.compare_digest(nonce.encode(), flow.nonce.encode()):
        raise Refused("token", "the ID token's nonce is not the flow's")
    audience = claims.get("aud")
    audiences = [audience] if isinstance(audience, str) else audience if isinstance(audience, list) else []
    if client not in audiences:
        raise Refused("token", "the ID token is not for this client (aud)")
    if len(audiences) > 1 and claims.get("azp", client) != client:
        raise Refused("token", "the ID token was issued to another party (azp)")
