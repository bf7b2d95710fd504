"""Tenants through the admin API on two edges sharing one real Redis (or Valkey), the official openai SDK as the
data plane's client: a tenant made on A with an rpm of 1 and a key under it; on B the key's second request
within the minute is a 429; the limit raised on B admits the key on A within a second; the tenant's allowed
models are enforced, a model outside them the same 404 as an unknown model; so are its allowed routes, in
OpenAI's and Anthropic's shapes; so are its guardrails; and the tenant is not deleted while its key exists.
Propagation is measured as test_admin_keys.py's is (the promise plus a second of slack)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import pytest
from admin_edges import Edge, admin, two_edges, within
from redis_servers import Server, running

pytestmark = pytest.mark.redis
MODEL, OTHER = "ingress-demo", "hidden-model"  # both served; the tenant allows the first only


@pytest.fixture(params=["redis", "valkey"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    with running(request.param, tmp_path) as server:
        yield server


@pytest.fixture
async def edges(tmp_path: Path, store: Server) -> AsyncIterator[tuple[Edge, Edge]]:
    async with two_edges(tmp_path, store, f'models = ["{MODEL}", "{OTHER}"]\n') as pair:
        yield pair


async def error(edge: Edge, key: str, model: str) -> dict[str, Any]:
    """The 404's error object (the SDK's `body`), for a model the key may not use."""
    client = edge.client(key)
    try:
        with pytest.raises(openai.NotFoundError) as refused:
            await client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}],
                                                 max_tokens=3)
        body = refused.value.body
        assert isinstance(body, dict)
        return body
    finally:
        await client.close()


async def test_a_tenant_s_limit_made_on_a_holds_on_b_and_raised_on_b_admits_on_a(edges: tuple[Edge, Edge]) -> None:
    a, b = edges
    async with aiohttp.ClientSession() as http:
        tenant = {"name": "beta", "limits": {"rpm": 1}, "models": [MODEL], "metadata": {"owner": "search"}}
        assert (await admin(http, "POST", f"{a.admin}/tenants", tenant, 201))["configured"] is False
        key = (await admin(http, "POST", f"{a.admin}/keys", {"tenant": "beta"}, 201))["key"]

        async def b_admits() -> bool:
            return await b.status(key) == 200  # a 401 until B installed the key (and with it the tenant)

        await within(b_admits, "the key of the tenant made on A admitted by B")
        assert await b.status(key) == 429  # the tenant's rpm of 1: the second request within the minute

        async def a_refuses() -> bool:  # once A installed the key (it polls as B does): the count is the store's
            return await a.status(key) == 429

        await within(a_refuses, "the tenant's limit reached on B refusing on A")

        await admin(http, "PATCH", f"{b.admin}/tenants/beta", {"limits": {"rpm": 100_000}})

        async def a_admits() -> bool:
            return await a.status(key) == 200

        await within(a_admits, "the limit raised on B admitting on A")

        unknown = await error(a, key, "no-such-model")
        outside = await error(b, key, OTHER)  # served, but not the tenant's
        assert outside == {**unknown, "message": unknown["message"].replace("no-such-model", OTHER)}
        assert outside["code"] == "model_not_found"

        refused = await admin(http, "DELETE", f"{a.admin}/tenants/beta", status=409)
        assert key.split("-")[2] in refused["error"]["message"]
        log = (await admin(http, "GET", f"{b.admin}/audit"))["data"]
        assert [(e["action"], e["tenant"] or e["key_id"]) for e in log] == [
            ("create", "beta"), ("create", key.split("-")[2]), ("update", "beta")]
        assert log[2]["before"]["limits"] == {"rpm": 1} and log[2]["after"]["limits"] == {"rpm": 100_000}
        assert key not in str(log) and "sha256:" not in str(log)


async def test_a_tenant_s_allowed_models_changed_on_a_are_enforced_on_b_and_it_is_deleted_once_keyless(
        edges: tuple[Edge, Edge]) -> None:
    a, b = edges
    async with aiohttp.ClientSession() as http:
        await admin(http, "POST", f"{a.admin}/tenants", {"name": "gamma"}, 201)
        made = await admin(http, "POST", f"{a.admin}/keys", {"tenant": "gamma"}, 201)
        key = made["key"]

        async def b_serves_other() -> bool:
            return await b.status(key, OTHER) == 200

        await within(b_serves_other, "the key of the tenant made on A admitted by B")
        await admin(http, "PATCH", f"{a.admin}/tenants/gamma", {"models": [MODEL]})

        async def b_hides_other() -> bool:
            return await b.status(key, OTHER) == 404

        await within(b_hides_other, "the models narrowed on A enforced on B")
        assert await b.status(key, MODEL) == 200
        await admin(http, "DELETE", f"{b.admin}/keys/{made['id']}")
        assert (await admin(http, "DELETE", f"{b.admin}/tenants/gamma")) == {"name": "gamma", "deleted": True}
        await admin(http, "GET", f"{a.admin}/tenants/gamma", status=404)


async def anthropic_error(edge: Edge, key: str, model: str) -> dict[str, Any]:
    """The 404's body as the Anthropic SDK sees it, for a model on a route the key's tenant may not take."""
    async with anthropic.AsyncAnthropic(base_url=edge.process.url, api_key=key, max_retries=0) as client:
        with pytest.raises(anthropic.NotFoundError) as refused:
            await client.messages.create(model=model, max_tokens=3, messages=[{"role": "user", "content": "hi"}])
    body = refused.value.body
    assert isinstance(body, dict)
    return body


async def test_a_tenant_s_allowed_routes_narrowed_on_a_are_enforced_on_b_as_a_model_it_cannot_see(
        edges: tuple[Edge, Edge]) -> None:
    """Every model allowed, the routes narrowed: the model whose route (under the `models` shorthand, a route is
    named by its model) the tenant may not take is refused as an unknown model is, in OpenAI's shape and in
    Anthropic's, and left out of /v1/models."""
    a, b = edges
    async with aiohttp.ClientSession() as http:
        await admin(http, "POST", f"{a.admin}/tenants", {"name": "delta"}, 201)
        key = (await admin(http, "POST", f"{a.admin}/keys", {"tenant": "delta"}, 201))["key"]

        async def b_serves_other() -> bool:
            return await b.status(key, OTHER) == 200

        await within(b_serves_other, "the key of the tenant made on A admitted by B")
        changed = await admin(http, "PATCH", f"{a.admin}/tenants/delta", {"routes": ["ingress-*"]})
        assert changed["routes"] == ["ingress-*"] and changed["models"] == ["*"]

        async def b_refuses_other() -> bool:
            return await b.status(key, OTHER) == 404

        await within(b_refuses_other, "the routes narrowed on A enforced on B")
        assert await b.status(key, MODEL) == 200
        unknown, outside = await error(b, key, "no-such-model"), await error(b, key, OTHER)
        assert outside == {**unknown, "message": unknown["message"].replace("no-such-model", OTHER)}
        assert outside["code"] == "model_not_found" and outside["param"] == "model"
        unknown, outside = await anthropic_error(b, key, "no-such-model"), await anthropic_error(b, key, OTHER)
        assert outside["error"]["type"] == unknown["error"]["type"] == "not_found_error"
        assert outside["error"]["message"] == unknown["error"]["message"].replace("no-such-model", OTHER)
        client = b.client(key)
        try:
            assert [m.id async for m in client.models.list()] == [MODEL]
        finally:
            await client.close()
        log = (await admin(http, "GET", f"{b.admin}/audit"))["data"]
        assert log[-1]["action"] == "update" and log[-1]["tenant"] == "delta"
        assert log[-1]["before"]["routes"] == ["*"] and log[-1]["after"]["routes"] == ["ingress-*"]


async def test_a_tenant_s_guardrails_set_on_a_block_on_b_and_a_rule_no_replica_could_compile_is_refused(
        edges: tuple[Edge, Edge]) -> None:
    a, b = edges
    async with aiohttp.ClientSession() as http:
        await admin(http, "POST", f"{a.admin}/tenants", {"name": "epsilon"}, 201)
        key = (await admin(http, "POST", f"{a.admin}/keys", {"tenant": "epsilon"}, 201))["key"]
        client = b.client(key)

        async def blocked() -> bool:
            try:
                await client.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": "the project codename is bluebird"}],
                    max_tokens=3)
                return False
            except openai.AuthenticationError:  # not installed on B yet
                return False
            except openai.BadRequestError as exc:
                assert exc.code == "prompt_blocked", exc
                return True

        try:
            await admin(http, "PATCH", f"{a.admin}/tenants/epsilon", {"guardrails": {"blocked_terms": ["bluebird"]}})
            await within(blocked, "the guardrails set on A blocking on B")
            assert await b.status(key) == 200  # what holds no blocked term passes
            bad = await admin(http, "PATCH", f"{b.admin}/tenants/epsilon", {"guardrails": {"patterns": [
                {"name": "ahead", "regex": "a(?=b)"}]}}, 400)
            assert bad["error"]["message"].startswith("guardrails.patterns[0].regex: RE2 cannot compile")
            assert await blocked()  # the rules in force are the ones before the refused change
        finally:
            await client.close()
