"""The console's SSO sign-in against a provider on loopback (its discovery document, JWKS and token endpoint,
recording each token request; its ID tokens signed with a key of the test's): the start keeps a one-use flow
and binds the browser to it with a Lax cookie; the callback exchanges the code with the PKCE verifier and opens
a session as `oidc:<subject>` with the role its claims give, which then makes a key under that name. Every
callback that signs no one in (bad nonce, audience, signature or expiry; a token endpoint's refusal; no role)
is a redirect naming the reason, with no session, counted toward the sign-in limit; a provider that cannot be
reached is a redirect too, never a 500. (In a browser, with a real provider and two edges:
tests/integration/test_admin_console_oidc.py.)"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jwt
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from ingress.admin import authcode
from ingress.admin.api import SIGNINS, create_admin_app
from ingress.admin.keystore import MemoryKeyStore
from ingress.admin.session import COOKIE, FAILURES, SESSIONS, MemorySessions
from ingress.admin.settings import Admin, AdminOidc
from ingress.admin.sso import CALLBACK, FLOW_COOKIE, START, STARTS
from ingress.tenancy import build
from ingress.tenancy.settings import Tenancy as TenancySettings
from ingress.tenancy.settings import Tenant

CLIENT = "ingress-admin"
REDIRECT = "http://127.0.0.1:9090/admin/v1/session/oidc/callback"
Client = TestClient[web.Request, web.Application]
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
OTHER_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


@dataclass
class Provider:
    """What the token endpoint answers next (`claims` signed with `key`, or `status` and `body`), and the forms
    and Authorization headers it was sent."""

    url: str = ""
    claims: dict[str, Any] = field(default_factory=dict)
    key: rsa.RSAPrivateKey = KEY
    status: int = 200
    body: bytes | None = None
    seen: list[tuple[dict[str, str], str | None]] = field(default_factory=list)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/.well-known/openid-configuration", self.discovery)
        app.router.add_get("/jwks", self.jwks)
        app.router.add_post("/token", self.token)
        return app

    async def discovery(self, request: web.Request) -> web.Response:
        return web.json_response({"issuer": self.url, "jwks_uri": f"{self.url}/jwks", "authorization_endpoint":
                                  f"{self.url}/authorize", "token_endpoint": f"{self.url}/token"})

    async def jwks(self, request: web.Request) -> web.Response:
        jwk = {**RSAAlgorithm.to_jwk(KEY.public_key(), as_dict=True), "kid": "k1", "alg": "RS256", "use": "sig"}
        return web.json_response({"keys": [jwk]})

    async def token(self, request: web.Request) -> web.Response:
        self.seen.append(({k: str(v) for k, v in (await request.post()).items()}, request.headers.get("Authorization")))
        if self.body is not None or self.status != 200:
            return web.Response(status=self.status, body=self.body or b"{}", content_type="application/json")
        id_token = jwt.encode(self.claims, self.key, algorithm="RS256", headers={"kid": "k1"})
        return web.json_response({"id_token": id_token, "access_token": "at", "token_type": "Bearer"})


@pytest.fixture
async def provider() -> AsyncIterator[Provider]:
    made = Provider()
    async with TestServer(made.app()) as server:
        made.url = str(server.make_url("")).rstrip("/")
        yield made


def _admin(issuer: str) -> Admin:
    return Admin(listen="127.0.0.1:0", oidc=AdminOidc(
        issuer=issuer, audience=(CLIENT,), admin_values=("ops",), viewer_values=("audit",), redirect_uri=REDIRECT,
        scopes=("openid", "groups")))


@pytest.fixture
async def client(provider: Provider) -> AsyncIterator[Client]:
    app = create_admin_app(_admin(provider.url), MemoryKeyStore(), build(TenancySettings(tenants={"acme": Tenant()})))
    async with TestClient[web.Request, web.Application](TestServer(app)) as c:
        yield c


async def _start(client: Client) -> dict[str, str]:
    """A flow started: the authorization request's parameters."""
    async with client.get(START, allow_redirects=False) as r:
        assert r.status == 302
        location = r.headers["Location"]
        cookie = r.cookies[FLOW_COOKIE]
        assert cookie["httponly"] and cookie["samesite"] == "Lax" and cookie["path"] == START
        assert int(cookie["max-age"]) == int(authcode.FLOW_S)
    assert location.startswith(f"{client.app[SIGNINS].oidc.issuer}/authorize?")
    return {name: values[0] for name, values in parse_qs(urlsplit(location).query).items()}


def _claims(provider: Provider, asked: dict[str, str], **changes: Any) -> dict[str, Any]:
    now = int(time.time())
    return {"iss": provider.url, "aud": CLIENT, "sub": "alice", "iat": now, "exp": now + 300, "nonce": asked["nonce"],
            "groups": ["eng", "ops"], **changes}


async def _callback(client: Client, query: str) -> tuple[str, SimpleCookie]:
    async with client.get(f"{CALLBACK}?{query}", allow_redirects=False) as r:
        assert r.status == 302
        return r.headers["Location"], r.cookies


async def test_a_flow_signs_an_admin_in_as_its_subject_who_then_makes_a_key(client: Client,
                                                                           provider: Provider) -> None:
    asked = await _start(client)
    assert asked["code_challenge_method"] == "S256" and asked["scope"] == "openid groups"
    provider.claims = _claims(provider, asked)
    location, cookies = await _callback(client, f"code=the-code&state={asked['state']}")
    assert location == "/admin/" and cookies[COOKIE]["samesite"] == "Strict" and cookies[COOKIE]["httponly"]
    assert cookies[FLOW_COOKIE].value == ""  # the flow's cookie cleared
    form, authorization = provider.seen[-1]
    assert authorization is None and form["client_id"] == CLIENT and form["code"] == "the-code"
    assert authcode.challenge(form["code_verifier"]) == asked["code_challenge"]
    async with client.get("/admin/v1/session") as r:
        who = await r.json()
    assert (who["actor"], who["role"]) == ("oidc:alice", "admin")
    assert who["expires_at"] == pytest.approx(time.time() + 8 * 3600, abs=60)
    async with client.post("/admin/v1/keys", json={"tenant": "acme"}, headers={"X-CSRF-Token": who["csrf_token"]}) as r:
        assert r.status == 201 and (await r.json())["created_by"] == "oidc:alice"
    async with client.get("/admin/v1/audit") as r:
        assert [e["actor"] for e in (await r.json())["data"]] == ["oidc:alice"]
    location, cookies = await _callback(client, f"code=the-code&state={asked['state']}")  # once only
    assert location == "/admin/#signin-error=state" and COOKIE not in cookies


@pytest.mark.parametrize(("change", "reason"), [
    ({"nonce": "another"}, "token"), ({"aud": "ingress"}, "token"), ({"exp": int(time.time()) - 3600}, "token"),
    ({"groups": ["eng"]}, "no_role"), ({"sub": ""}, "token"), ({"key": OTHER_KEY}, "token"),
    ({"status": 400, "body": b'{"error": "invalid_grant"}'}, "exchange"), ({"body": b"{}"}, "exchange")],
    ids=["nonce", "audience", "expired", "no-role", "no-subject", "signature", "refused", "no-id-token"])
async def test_a_callback_that_signs_no_one_in_says_why_and_counts(client: Client, provider: Provider,
                                                                  change: dict[str, Any], reason: str) -> None:
    asked = await _start(client)
    for name in ("key", "status", "body"):
        if name in change:
            setattr(provider, name, change.pop(name))
    provider.claims = _claims(provider, asked, **change)
    location, cookies = await _callback(client, f"code=c&state={asked['state']}")
    assert location == f"/admin/#signin-error={reason}" and COOKIE not in cookies
    count, left = await client.app[SESSIONS].failures("127.0.0.1")
    assert count == 1 and 55 <= left <= 60


async def _refused_start(client: Client) -> str:
    """A start sent back to the console: where to, with no flow cookie."""
    async with client.get(START, allow_redirects=False) as r:
        assert r.status == 302
        assert FLOW_COOKIE not in r.cookies or r.cookies[FLOW_COOKIE].value == ""
        return r.headers["Location"]


async def test_after_five_failures_the_right_flow_waits_too_and_no_other_starts(client: Client,
                                                                                provider: Provider) -> None:
    asked = await _start(client)
    for _ in range(FAILURES):
        assert (await _callback(client, "code=c&state=forged"))[0] == "/admin/#signin-error=state"
    provider.claims = _claims(provider, asked)
    location, cookies = await _callback(client, f"code=c&state={asked['state']}")
    assert location == "/admin/#signin-error=rate_limited" and COOKIE not in cookies
    assert not provider.seen  # refused unchecked: the code was not even exchanged
    assert await _refused_start(client) == "/admin/#signin-error=rate_limited"  # its callback would be refused


async def test_an_address_starts_at_most_starts_sign_ins_a_window_and_keeps_no_flow_beyond(client: Client) -> None:
    started = [await _start(client) for _ in range(STARTS)]
    flows = client.app[SESSIONS]
    assert isinstance(flows, MemorySessions)
    assert await _refused_start(client) == "/admin/#signin-error=rate_limited"
    assert await _refused_start(client) == "/admin/#signin-error=rate_limited"
    assert len(flows._flows) == STARTS  # the refused starts stored nothing
    assert await flows.failures("127.0.0.1") == (0, 0.0)  # and are no failed sign-in
    assert len({asked["state"] for asked in started}) == STARTS


async def test_an_unreachable_provider_is_a_redirect_saying_so() -> None:
    app = create_admin_app(_admin("http://127.0.0.1:9"), MemoryKeyStore(),
                           build(TenancySettings(tenants={"acme": Tenant()})))
    async with TestClient[web.Request, web.Application](TestServer(app)) as client, client.get(
            START, allow_redirects=False) as r:
        assert r.status == 302 and r.headers["Location"] == "/admin/#signin-error=unavailable"
        assert FLOW_COOKIE not in r.cookies or r.cookies[FLOW_COOKIE].value == ""


async def test_the_console_offers_sso_only_when_a_redirect_uri_is_configured(client: Client) -> None:
    async with client.get("/admin/") as r:
        assert '<body data-sso="on">' in await r.text()
    bare = Admin(listen="127.0.0.1:0", oidc=AdminOidc(issuer="http://127.0.0.1:9", audience=(CLIENT,),
                                                      admin_values=("ops",)))
    app = create_admin_app(bare, MemoryKeyStore(), build(TenancySettings(tenants={"acme": Tenant()})))
    async with TestClient[web.Request, web.Application](TestServer(app)) as plain:
        async with plain.get("/admin/") as r:
            assert "<body>" in await r.text()
        async with plain.get(START, allow_redirects=False) as r:
            assert r.status == 404  # no such route
