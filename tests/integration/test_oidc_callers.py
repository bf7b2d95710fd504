"""Callers with a JWT of an OIDC issuer, at a real edge on loopback: a real provider (oidc-provider-mock, in
its own process: tests/support/oidc_issuer.py) gives the tokens, publishes its discovery document and JWKS;
the official openai SDK sends the token as its api_key. Admitted with its claims' tenant and its subject's
limits; expired, foreign-audience, foreign-issuer, `alg: none` and key-confusion tokens each a 401 that
says nothing of why (the access line does); a rotated key fetched once, a flood of made-up kids fetching no
more than the interval allows; an issuer down at start refused clearly, then served once it is up."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack
from typing import Any

import anthropic
import jwt
import openai
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from logcapture import lines
from oidc_issuer import Issuer
from recording import recording_edge
from waiting import eventually

from ingress.exchange import Exchange
from ingress.settings import Settings
from ingress.tenancy.keys import new_key
from ingress.tenancy.policy import BAD_TOKEN
from ingress.tenancy.settings import Claims, Key, Limits, Tenancy, Tenant
from ingress.tenancy.settings import Issuer as IssuerSettings

MODEL = "ingress-demo"
KEY, KEY_ID, KEY_HASH = new_key()
HELLO: list[Any] = [{"role": "user", "content": "Say hello to the edge"}]
FORGER = rsa.generate_private_key(public_exponent=65537, key_size=2048)  # no issuer's key


def settings(issuer: Issuer, min_refresh_interval: float = 10.0) -> Settings:
    """Tenants acme and globex; a key of acme; the issuer's tokens: tenant from `org_id`, team from `groups`,
    one request a minute per subject unless its `plan` claim says "team"."""
    sso = IssuerSettings(issuer=issuer.url, audience=("ingress",), name="sso",
                         claims=Claims(tenant="org_id", team="groups", plan="plan"), limits=Limits(rpm=1),
                         plans={"team": Limits(rpm=1000)}, min_refresh_interval=min_refresh_interval,
                         fetch_timeout=2.0)
    return Settings(models=(MODEL,), workers=1, tenancy=Tenancy(
        keys=(Key(id=KEY_ID, tenant="acme", hash=KEY_HASH),), tenants={"acme": Tenant(), "globex": Tenant()},
        issuers=(sso,)))


class Edge:
    def __init__(self, stack: AsyncExitStack, url: str, exchanges: list[Exchange]) -> None:
        self.stack, self.url, self.exchanges = stack, url, exchanges

    def client(self, token: str) -> openai.AsyncOpenAI:
        client = openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key=token, max_retries=0)
        self.stack.push_async_callback(client.close)
        return client

    async def chat(self, token: str) -> Any:
        return await self.client(token).chat.completions.create(model=MODEL, messages=HELLO)


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    with Issuer().serving() as running:
        yield running


async def edge(stack: AsyncExitStack, config: Settings) -> Edge:
    url, _, exchanges = await recording_edge(stack, config)
    return Edge(stack, url, exchanges)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forged(header: dict[str, Any], claims: dict[str, Any], hmac_secret: bytes | None = None) -> str:
    """A token made by hand, as an attacker makes it: `alg: none` (no signature) or HMAC with `hmac_secret`."""
    signing = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}"
    if hmac_secret is None:
        return signing + "."
    return f"{signing}.{b64(hmac.new(hmac_secret, signing.encode(), hashlib.sha256).digest())}"


async def test_a_jwt_is_admitted_with_its_claims_tenant_and_its_subjects_limits(
        stack: AsyncExitStack, issuer: Issuer, log_stream: Any) -> None:
    e = await edge(stack, settings(issuer))
    alice = issuer.token("alice", {"org_id": "acme", "groups": ["eng", "ops"]})
    bob = issuer.token("bob", {"org_id": "globex", "plan": "team"})
    answer = await e.chat(alice)
    assert answer.choices[0].message.content
    with pytest.raises(openai.RateLimitError) as limited:  # alice's one request a minute is spent
        await e.chat(alice)
    assert limited.value.status_code == 429 and limited.value.code == "rate_limit_exceeded"
    assert "subject 'sso:alice'" in limited.value.message and "requests per minute: limit 1" in limited.value.message
    assert limited.value.response.headers["x-ratelimit-limit-requests"] == "1"
    for _ in range(3):  # bob's plan is another limit; alice's spent one is not his
        await e.chat(bob)
    await e.chat(KEY)  # keys work beside the issuer's tokens
    access = [line for line in lines(log_stream) if line.get("path") == "/v1/chat/completions"]
    assert [(a["tenant"], a.get("subject"), a.get("team"), a.get("key_id"), a["status"]) for a in access] == [
        ("acme", "sso:alice", "eng", None, 200), ("acme", "sso:alice", "eng", None, 429),
        *[("globex", "sso:bob", None, None, 200)] * 3, ("acme", None, None, KEY_ID, 200)]
    assert alice not in log_stream.getvalue()


async def test_bad_tokens_are_each_a_401_that_says_nothing_of_why(
        stack: AsyncExitStack, issuer: Issuer, log_stream: Any) -> None:
    e = await edge(stack, settings(issuer))
    good = issuer.token("alice", {"org_id": "acme"})
    claims = jwt.decode(good, options={"verify_signature": False})
    with Issuer().serving() as stranger:  # another provider: its own key, its own iss
        foreign = stranger.token("alice", {"org_id": "acme"})
    bad = {
        "expired": issuer.resigned(good, exp=int(time.time()) - 120, iat=int(time.time()) - 3720),
        "wrong audience": issuer.token("alice", {"org_id": "acme"}, client_id="another-app"),
        "wrong issuer": issuer.token("alice", {"org_id": "acme"}, host=f"127.0.0.1:{issuer.port}"),
        "alg none": forged({"alg": "none", "typ": "JWT"}, claims),
        "key confusion": forged({"alg": "HS256", "typ": "JWT"}, claims, issuer.public_pem()),
        "foreign issuer": foreign,
        "undeclared tenant": issuer.token("mallory", {"org_id": "initech"}),
    }
    await e.chat(good)  # the same claims, properly signed, pass
    for case, token in bad.items():
        with pytest.raises(openai.AuthenticationError) as refused:
            await e.chat(token)
        assert refused.value.status_code == 401, case
        assert refused.value.body == {"message": BAD_TOKEN, "type": "invalid_request_error", "param": None,
                                      "code": "invalid_api_key"}, case
    async with anthropic.AsyncAnthropic(base_url=e.url, auth_token=bad["expired"], max_retries=0) as claude:
        with pytest.raises(anthropic.AuthenticationError) as messages:  # Anthropic's envelope on /v1/messages
            await claude.messages.create(model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "hi"}])
    assert messages.value.body == {"type": "error", "error": {"type": "authentication_error", "message": BAD_TOKEN},
                                   "request_id": messages.value.request_id}
    access = [line for line in lines(log_stream) if line.get("status") == 401]
    details = [line["error_detail"] for line in access]
    assert details == ["TokenRefused: expired", "TokenRefused: wrong audience", "TokenRefused: issuer not configured",
                       "TokenRefused: algorithm 'none' not allowed", "TokenRefused: algorithm 'HS256' not allowed",
                       "TokenRefused: issuer not configured", "TokenRefused: tenant 'initech' is not declared",
                       "TokenRefused: expired"]


async def test_a_rotated_key_is_fetched_once_and_made_up_kids_fetch_no_more_than_the_interval_allows(
        stack: AsyncExitStack, issuer: Issuer) -> None:
    interval = 1.5
    e = await edge(stack, settings(issuer, min_refresh_interval=interval))
    await eventually(lambda: issuer.jwks_fetches == 1, "the edge's first fetch of the issuer's keys")
    await e.chat(issuer.token("alice", {"org_id": "acme", "plan": "team"}))
    assert issuer.jwks_fetches == 1
    await asyncio.sleep(interval)
    issuer.rotate()  # a new signing key: the edge's set lacks it
    rotated = issuer.token("alice", {"org_id": "acme", "plan": "team"})
    fetched = time.monotonic()
    await e.chat(rotated)
    await e.chat(issuer.resigned(rotated))  # the same key named by its kid: known now
    assert issuer.jwks_fetches == 2
    claims = jwt.decode(rotated, options={"verify_signature": False})
    tokens = [jwt.encode(claims, FORGER, algorithm="RS256", headers={"kid": f"made-up-{i}"}) for i in range(40)]

    async def flood() -> int:
        """The JWKS fetches 40 tokens of made-up kids, sent at once, made the edge do."""
        before = issuer.jwks_fetches
        results = await asyncio.gather(*(e.chat(t) for t in tokens), return_exceptions=True)
        assert all(isinstance(r, openai.AuthenticationError) for r in results), results
        return issuer.jwks_fetches - before

    fetches = await flood()  # within the interval since the last fetch: none (one, if this machine was that slow)
    assert fetches == 0 if time.monotonic() - fetched < interval else fetches <= 1
    await asyncio.sleep(interval)
    fetched = time.monotonic()
    assert await flood() == 1  # the interval passed: one fetch, which every request of the flood awaits
    fetches = await flood()
    assert fetches == 0 if time.monotonic() - fetched < interval else fetches <= 1


async def test_an_issuer_down_at_start_is_a_clear_refusal_then_served_once_it_is_up(
        stack: AsyncExitStack, log_stream: Any) -> None:
    down = Issuer()  # its port chosen, nothing serving it yet
    e = await edge(stack, settings(down, min_refresh_interval=0.5))
    await e.chat(KEY)  # the edge started; keys work
    now = int(time.time())
    token = jwt.encode({"iss": down.url, "aud": "ingress", "sub": "alice", "org_id": "acme", "exp": now + 60},
                       FORGER, algorithm="RS256")
    started = time.monotonic()
    with pytest.raises(openai.InternalServerError) as unavailable:
        await e.chat(token)
    assert time.monotonic() - started < 3  # no hang: refused at once, or after one bounded fetch
    assert unavailable.value.status_code == 503 and unavailable.value.code == "issuer_unavailable"
    assert down.url not in unavailable.value.message and unavailable.value.response.headers["retry-after"]
    assert any(line.get("event") == "issuer keys not fetched" for line in lines(log_stream))
    with down.serving():
        await asyncio.sleep(0.5)
        answer = await e.chat(down.token("alice", {"org_id": "acme"}))
        assert answer.choices[0].message.content
