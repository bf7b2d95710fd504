"""Admins signed in with a real OIDC provider (oidc-provider-mock in its own process: tests/support/oidc_issuer.py)
at the admin API of real edge processes on one real Redis: a token whose `groups` claim holds the admin value
makes a key, and the audit log names its subject; a viewer's reads and is refused a change (403); a token of no
role is a 403; expired, data-plane-audience, foreign-issuer and unsigned tokens are each a 401; an admin key
works beside the tokens."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import pytest
from admin_edges import ADMIN, ADMIN_ID, Edge, two_edges
from oidc_issuer import Issuer
from redis_servers import Server, running

pytestmark = pytest.mark.redis
AUDIENCE = "ingress-admin"  # the admin API's own client id at the provider


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    with Issuer().serving() as serving:
        yield serving


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Server]:
    with running("redis", tmp_path) as server:
        yield server


@pytest.fixture
async def edge(tmp_path: Path, store: Server, issuer: Issuer) -> AsyncIterator[Edge]:
    oidc = f"""[tenancy.tenants.acme]
[admin.oidc]
issuer = "{issuer.url}"
audience = ["{AUDIENCE}"]
role_claim = "groups"
admin_values = ["ingress-admins"]
viewer_values = ["ingress-viewers"]
"""
    async with two_edges(tmp_path, store, oidc) as (a, _):
        yield a


async def call(http: aiohttp.ClientSession, method: str, url: str, credential: str,
               body: dict[str, Any] | None = None) -> tuple[int, Any]:
    async with http.request(method, url, json=body, headers={"Authorization": f"Bearer {credential}"}) as r:
        return r.status, await r.json()


def unsigned(token: str) -> str:
    """The token's claims under `alg: none`, as a forger sends them."""
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(jwt.decode(token, options={'verify_signature': False}))}."


async def test_an_admin_signed_in_makes_a_key_a_viewer_reads_and_no_role_nor_bad_token_passes(
        edge: Edge, issuer: Issuer) -> None:
    admin = issuer.token("alice", {"groups": ["eng", "ingress-admins"]}, client_id=AUDIENCE)
    viewer = issuer.token("vera", {"groups": ["ingress-viewers"]}, client_id=AUDIENCE)
    nobody = issuer.token("ned", {"groups": ["eng"]}, client_id=AUDIENCE)
    now = int(time.time())
    bad = {
        "expired": issuer.resigned(admin, exp=now - 120, iat=now - 3720),
        "data-plane audience": issuer.token("alice", {"groups": ["ingress-admins"]}, client_id="ingress"),
        "foreign issuer": issuer.token("alice", {"groups": ["ingress-admins"]}, client_id=AUDIENCE,
                                       host=f"127.0.0.1:{issuer.port}"),
        "unsigned": unsigned(admin),
    }
    async with aiohttp.ClientSession() as http:
        status, made = await call(http, "POST", f"{edge.admin}/keys", admin, {"tenant": "acme"})
        assert status == 201 and made["created_by"] == "oidc:alice"
        status, listed = await call(http, "GET", f"{edge.admin}/keys", viewer)
        assert status == 200 and [k["id"] for k in listed["data"]] == [made["id"]]
        status, refused = await call(http, "DELETE", f"{edge.admin}/keys/{made['id']}", viewer)
        assert status == 403 and "oidc:vera" in refused["error"]["message"]
        status, refused = await call(http, "GET", f"{edge.admin}/keys", nobody)
        assert status == 403 and "'oidc:ned' has no admin role" in refused["error"]["message"]
        for case, token in bad.items():
            async with http.get(f"{edge.admin}/keys", headers={"Authorization": f"Bearer {token}"}) as r:
                assert r.status == 401, case
                assert r.headers["WWW-Authenticate"].startswith("Bearer"), case
                assert (await r.json())["error"]["type"] == "unauthenticated", case
        status, _ = await call(http, "POST", f"{edge.admin}/keys/{made['id']}/rotate", ADMIN, {})
        assert status == 200  # an admin key beside the tokens
        status, log = await call(http, "GET", f"{edge.admin}/audit", viewer)
        assert [(e["action"], e["actor"]) for e in log["data"]] == [("create", "oidc:alice"), ("rotate", ADMIN_ID)]
        assert admin not in str(log)
