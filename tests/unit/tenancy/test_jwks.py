"""The issuers' keys fetched from a discovery document and a JWKS served on loopback: at most one fetch per
interval however many tokens ask, one fetch shared by concurrent askers, and an issuer down, slow, lying
about its name or answering too much refused as unavailable (a 503), never a hang."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from ingress.errors import IssuerUnavailable
from ingress.tenancy.bearer import Verifier
from ingress.tenancy.jwks import KeySets
from ingress.tenancy.settings import Issuer

KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
JWK = {**RSAAlgorithm.to_jwk(KEY.public_key(), as_dict=True), "kid": "k1"}


class Provider:
    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        self.delay = 0.0
        self.named: str | None = None  # the issuer its discovery document names (None: its own)
        self.jwks: Any = {"keys": [JWK]}
        self.url = ""

    async def discovery(self, request: web.Request) -> web.Response:
        self.hits["discovery"] += 1
        return web.json_response({"issuer": self.named or self.url, "jwks_uri": f"{self.url}/jwks"})

    async def keys(self, request: web.Request) -> web.Response:
        self.hits["jwks"] += 1
        await asyncio.sleep(self.delay)
        return web.json_response(self.jwks)


@pytest.fixture
async def provider() -> AsyncIterator[Provider]:
    p = Provider()
    app = web.Application()
    app.router.add_get("/.well-known/openid-configuration", p.discovery)
    app.router.add_get("/jwks", p.keys)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    p.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    yield p
    await runner.cleanup()


def keysets(url: str, **options: Any) -> KeySets:
    return KeySets(Verifier((Issuer(issuer=url, audience=("ingress",), tenant="acme", **options),)))


async def test_discovery_names_the_jwks_and_its_keys_go_to_the_verifier(provider: Provider) -> None:
    sets = keysets(provider.url)
    try:
        await sets.warm()
        assert sets.verifier.keys[provider.url].kids == {"k1"}
        assert provider.hits == {"discovery": 1, "jwks": 1}
    finally:
        await sets.close()


async def test_the_discovery_document_is_kept_from_the_key_fetch_or_read_once(provider: Provider) -> None:
    sets = keysets(provider.url)
    try:
        await sets.warm()
        assert (await sets.discovery(provider.url))["jwks_uri"] == f"{provider.url}/jwks"
        assert provider.hits["discovery"] == 1  # the key fetch's own
    finally:
        await sets.close()
    named = keysets(provider.url, jwks_uri=f"{provider.url}/jwks")  # keys fetched without discovery
    try:
        await named.warm()
        assert provider.hits["discovery"] == 1
        for _ in range(2):
            assert (await named.discovery(provider.url))["issuer"] == provider.url
        assert provider.hits["discovery"] == 2
    finally:
        await named.close()


async def test_refreshes_are_at_most_one_per_interval_and_shared(provider: Provider) -> None:
    sets = keysets(provider.url, min_refresh_interval=0.3)
    try:
        await sets.warm()
        await asyncio.gather(*(sets.refresh(provider.url) for _ in range(50)))  # within the interval: none
        assert provider.hits["jwks"] == 1
        await asyncio.sleep(0.35)
        provider.delay = 0.1
        await asyncio.gather(*(sets.refresh(provider.url) for _ in range(50)))  # one fetch, all await it
        assert provider.hits["jwks"] == 2 and sets.fetches(provider.url) == 2
        assert provider.hits["discovery"] == 1  # the jwks_uri is kept
    finally:
        await sets.close()


async def test_an_issuer_down_is_unavailable_at_once_and_then_until_the_interval_passes() -> None:
    sets = keysets("http://127.0.0.1:9", min_refresh_interval=5)  # the discard port: nothing listens
    try:
        started = time.monotonic()
        await sets.warm()  # logged, not raised: the edge starts
        with pytest.raises(IssuerUnavailable) as down:
            await sets.refresh("http://127.0.0.1:9")
        assert down.value.status == 503 and 1 <= (down.value.retry_after or 0) <= 5
        assert time.monotonic() - started < 2 and sets.fetches("http://127.0.0.1:9") == 1
    finally:
        await sets.close()


@pytest.mark.parametrize("fault", ["slow", "misnamed", "huge", "no keys", "not json"])
async def test_an_issuer_that_answers_wrong_gives_no_keys(provider: Provider, fault: str) -> None:
    sets = keysets(provider.url, fetch_timeout=0.2)
    if fault == "slow":
        provider.delay = 1.0
    elif fault == "misnamed":
        provider.named = "https://evil.example.com"
    elif fault == "huge":
        provider.jwks = {"keys": [JWK], "padding": "x" * (1 << 21)}
    elif fault == "no keys":
        provider.jwks = {"keys": [{"kty": "RSA", "use": "enc"}]}
    else:
        provider.jwks = ["not", "a", "jwks"]
    try:
        started = time.monotonic()
        with pytest.raises(IssuerUnavailable):
            await sets.refresh(provider.url)
        assert provider.url not in sets.verifier.keys and time.monotonic() - started < 1.5
    finally:
        await sets.close()


async def test_an_issuer_down_later_keeps_the_keys_it_gave(provider: Provider) -> None:
    sets = keysets(provider.url, min_refresh_interval=0.1)
    try:
        await sets.warm()
        provider.jwks = {"error": "down"}
        await asyncio.sleep(0.15)
        await sets.refresh(provider.url)  # failed, logged; the set stands
        assert sets.verifier.keys[provider.url].kids == {"k1"} and provider.hits["jwks"] == 2
    finally:
        await sets.close()
