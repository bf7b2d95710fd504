"""Stored responses end to end (ingress/state, ingress/pipeline/stored.py): the official `openai` SDK as
client (`store`, `retrieve`, `delete`, `input_items.list`, `previous_response_id`), a real edge on loopback
in front of the scripted fake service, whose record of what it received shows the whole conversation on
a continued turn; real Redis and Valkey servers (tests/support/redis_servers.py) shared by two edges.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

import aiohttp
import openai
import pytest
from fakes.upstream import FakeUpstream
from metric_values import sample_value
from redis.asyncio import Redis
from redis_servers import Server
from stored_edges import received_messages, sdk, serving

from ingress.settings import Settings, Timeouts
from ingress.state.settings import ResponsesSettings
from ingress.tenancy.keys import new_key
from ingress.tenancy.settings import Key, Tenancy, Tenant
from ingress.tenancy.settings import Redis as RedisSettings

MODEL = "gpt-4o"
TIMEOUTS = Timeouts(connect=1.0, first_byte=5.0, idle=5.0)
_prefixes = itertools.count()








# --- one edge, its memory store -------------------------------------------------------------------------


async def test_a_response_is_kept_read_back_listed_continued_and_deleted(
        stack: AsyncExitStack, fake_upstream: FakeUpstream) -> None:
    url = await serving(stack, Settings(upstream=fake_upstream.url, timeouts=TIMEOUTS))
    client = await sdk(stack, url)
    before = sample_value("ingress_responses_stored_total", {"backend": "memory"}) or 0
    first = await client.responses.create(model=MODEL, input="the first turn", instructions="Be brief.", store=True)
    assert first.model_extra is not None and first.model_extra["store"] is True
    assert sample_value("ingress_responses_stored_total", {"backend": "memory"}) == before + 1
    again = await client.responses.retrieve(first.id)
    assert again.model_dump() == first.model_dump()
    second = await client.responses.create(model=MODEL, input="the second turn", previous_response_id=first.id)
    assert second.previous_response_id == first.id and second.instructions is None  # not carried over
    assert received_messages(fake_upstream, 1) == [  # the whole conversation, asserted where the service read it
        ("user", "the first turn"), ("assistant", "the first turn"), ("user", "the second turn")]
    assert received_messages(fake_upstream, 0)[0] == ("system", "Be brief.")
    async with client.responses.stream(model=MODEL, input="the third turn", previous_response_id=second.id,
                                       instructions="Now in French.") as stream:
        async for _ in stream:
            pass
        third = await stream.get_final_response()
    assert received_messages(fake_upstream, 2) == [
        ("system", "Now in French."), ("user", "the first turn"), ("assistant", "the first turn"),
        ("user", "the second turn"), ("assistant", "the second turn"), ("user", "the third turn")]
    assert (await client.responses.retrieve(third.id)).output_text == "the third turn"  # kept once complete
    listed = await client.responses.input_items.list(third.id)  # newest first, as OpenAI's
    assert [getattr(i, "role", None) for i in listed.data] == ["user", "assistant", "user", "assistant", "user"]
    extra = listed.model_extra or {}  # OpenAI's list object, beside the SDK's page fields
    assert extra["first_id"] == listed.data[0].id and extra["last_id"] == listed.data[-1].id and not listed.has_more
    page = await client.responses.input_items.list(third.id, order="asc", limit=2)
    assert page.has_more and [i.id for i in page.data] == [i.id for i in listed.data[::-1][:2]]
    rest = await client.responses.input_items.list(third.id, order="asc", after=page.data[-1].id)
    assert [i.id for i in rest.data] == [i.id for i in listed.data[::-1][2:]]
    await client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        await client.responses.retrieve(first.id)
    with pytest.raises(openai.BadRequestError) as gone:
        await client.responses.create(model=MODEL, input="x", previous_response_id=first.id)
    assert gone.value.code == "previous_response_not_found"
    assert (await client.responses.retrieve(second.id)).id == second.id  # its own record holds its conversation


async def test_store_false_is_answered_and_not_kept(stack: AsyncExitStack, fake_upstream: FakeUpstream) -> None:
    url = await serving(stack, Settings(upstream=fake_upstream.url, timeouts=TIMEOUTS))
    client = await sdk(stack, url)
    answer = await client.responses.create(model=MODEL, input="forget me", store=False)
    assert answer.model_extra is not None and answer.model_extra["store"] is False
    with pytest.raises(openai.NotFoundError):
        await client.responses.retrieve(answer.id)


@pytest.mark.parametrize(("query", "param"), [("limit=0", "limit"), ("limit=101", "limit"), ("order=sideways", "order"),
                                              ("after=msg_nope", "after")])
async def test_bad_list_parameters_are_400s_naming_them(stack: AsyncExitStack, fake_upstream: FakeUpstream,
                                                        http: aiohttp.ClientSession, query: str, param: str) -> None:
    url = await serving(stack, Settings(upstream=fake_upstream.url, timeouts=TIMEOUTS))
    kept = await (await sdk(stack, url)).responses.create(model=MODEL, input="list me")
    async with http.get(f"{url}/v1/responses/{kept.id}/input_items?{query}") as r:
        assert r.status == 400 and (await r.json())["error"]["param"] == param


async def test_a_conversation_too_large_to_keep_is_a_413_before_it_is_sent(
        stack: AsyncExitStack, fake_upstream: FakeUpstream) -> None:
    settings = Settings(upstream=fake_upstream.url, timeouts=TIMEOUTS,
                        responses=ResponsesSettings(max_record_bytes=64 * 1024))
    client = await sdk(stack, await serving(stack, settings))
    with pytest.raises(openai.APIStatusError) as refused:
        await client.responses.create(model=MODEL, input="x" * 70_000)
    assert refused.value.status_code == 413 and refused.value.code == "response_too_large"
    assert fake_upstream.received == []
    assert (await client.responses.create(model=MODEL, input="x" * 70_000, store=False)).output_text


# --- two edges on one Redis (and on one Valkey), keys of two tenants -------------------------------------


def _tenancy(server: Server, prefix: str) -> tuple[Tenancy, dict[str, str]]:
    """Keys a1, a2 of tenant acme and b1 of globex on `server`, and an admin-scope key of each, a9 and b9;
    their secrets by name."""
    keys, secrets = [], {}
    for name, tenant in (("a1", "acme"), ("a2", "acme"), ("b1", "globex"), ("a9", "acme"), ("b9", "globex")):
        secret, key_id, key_hash = new_key()
        keys.append(Key(id=key_id, tenant=tenant, hash=key_hash, scope="admin" if name.endswith("9") else "own"))
        secrets[name] = secret
    return Tenancy(backend="redis", redis=RedisSettings(url=server.url, prefix=prefix, deadline_ms=2000),
                   keys=tuple(keys), tenants={"acme": Tenant(), "globex": Tenant()}), secrets


async def _two_edges(stack: AsyncExitStack, fake: FakeUpstream, server: Server,
                     **responses: Any) -> tuple[str, str, dict[str, str], str]:
    prefix = f"rs-test-{next(_prefixes)}"
    tenancy, secrets = _tenancy(server, prefix)
    settings = Settings(upstream=fake.url, timeouts=TIMEOUTS, tenancy=tenancy,
                        responses=ResponsesSettings(**responses))
    return await serving(stack, settings), await serving(stack, settings), secrets, prefix


@pytest.mark.redis
async def test_a_response_made_on_one_edge_is_read_continued_and_listed_on_the_other_at_once(
        stack: AsyncExitStack, fake_upstream: FakeUpstream, limit_server: Server) -> None:
    edge_a, edge_b, secrets, prefix = await _two_edges(stack, fake_upstream, limit_server)
    on_a, on_b = await sdk(stack, edge_a, secrets["a1"]), await sdk(stack, edge_b, secrets["a1"])
    first = await on_a.responses.create(model=MODEL, input=f"remember {limit_server.kind}")
    assert (await on_b.responses.retrieve(first.id)).output_text == f"remember {limit_server.kind}"
    second = await on_b.responses.create(model=MODEL, input="and now?", previous_response_id=first.id)
    assert received_messages(fake_upstream, 1) == [
        ("user", f"remember {limit_server.kind}"), ("assistant", f"remember {limit_server.kind}"), ("user", "and now?")]
    async with on_a.responses.stream(model=MODEL, input="streamed on A", previous_response_id=second.id) as stream:
        third = await stream.get_final_response()
    listed = await on_b.responses.input_items.list(third.id, order="asc")
    assert [getattr(i, "role", None) for i in listed.data] == ["user", "assistant", "user", "assistant", "user"]
    redis = Redis.from_url(limit_server.url)
    stack.push_async_callback(redis.aclose)
    keys = await redis.keys(f"{prefix}:rs:*")
    ttls = [await redis.pttl(k) for k in keys]
    assert len(keys) == 3 and all(0 < ttl <= 30 * 86_400_000 for ttl in ttls)  # each expires
    assert all((k.decode() if isinstance(k, bytes) else k).startswith(f"{prefix}:rs:acme/") for k in keys)
    await on_b.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        await on_a.responses.retrieve(first.id)


@pytest.mark.redis
async def test_another_key_s_response_is_the_same_404_as_an_unknown_id(
        stack: AsyncExitStack, fake_upstream: FakeUpstream, limit_server: Server,
        http: aiohttp.ClientSession) -> None:
    edge_a, edge_b, secrets, _ = await _two_edges(stack, fake_upstream, limit_server)
    mine = await (await sdk(stack, edge_a, secrets["a1"])).responses.create(model=MODEL, input="private")
    unknown = "resp_" + "0" * 32
    for name in ("b1", "a2"):  # another tenant's key, and another key of the same tenant (scope = "key")
        headers = {"Authorization": f"Bearer {secrets[name]}"}
        for path in ("", "/input_items"):
            async with http.get(f"{edge_b}/v1/responses/{mine.id}{path}", headers=headers) as theirs, \
                    http.get(f"{edge_b}/v1/responses/{unknown}{path}", headers=headers) as nobody_s:
                assert theirs.status == nobody_s.status == 404
                assert (await theirs.text()).replace(mine.id, unknown) == await nobody_s.text()
        async with http.delete(f"{edge_b}/v1/responses/{mine.id}", headers=headers) as r:
            assert r.status == 404
        async with http.post(f"{edge_b}/v1/responses", headers=headers,
                             json={"model": MODEL, "input": "x", "previous_response_id": mine.id}) as r:
            assert r.status == 400 and (await r.json())["error"]["code"] == "previous_response_not_found"
    assert (await (await sdk(stack, edge_b, secrets["a1"])).responses.retrieve(mine.id)).id == mine.id


@pytest.mark.redis
async def test_an_admin_scope_key_reads_its_tenant_s_responses_and_conversations_and_changes_none(
        stack: AsyncExitStack, fake_upstream: FakeUpstream, limit_server: Server,
        http: aiohttp.ClientSession) -> None:
    edge_a, edge_b, secrets, _ = await _two_edges(stack, fake_upstream, limit_server, resume_poll_ms=20)
    on_a = await sdk(stack, edge_a, secrets["a1"])
    mine = await on_a.responses.create(model=MODEL, input="private")
    async with on_a.responses.stream(model=MODEL, input="streamed", previous_response_id=mine.id) as stream:
        streamed = await stream.get_final_response()
    conversation = await on_a.conversations.create(items=[{"type": "message", "role": "user", "content": "kept"}])
    admin = await sdk(stack, edge_b, secrets["a9"])  # acme's admin-scope key, on the other edge
    read = await admin.responses.retrieve(mine.id)
    assert read.model_dump() == (await on_a.responses.retrieve(mine.id)).model_dump()
    listed = await admin.responses.input_items.list(streamed.id, order="asc")
    assert [getattr(i, "role", None) for i in listed.data] == ["user", "assistant", "user"]
    events = [e async for e in await admin.responses.retrieve(streamed.id, stream=True, starting_after=0)]
    assert events[0].sequence_number == 1 and events[-1].type == "response.completed"
    assert (await admin.conversations.retrieve(conversation.id)).id == conversation.id
    items = await admin.conversations.items.list(conversation.id)
    assert [i.content[0].text for i in items.data] == ["kept"]  # type: ignore[union-attr,index]  # a message's
    item_id = items.data[0].id
    assert item_id is not None
    assert (await admin.conversations.items.retrieve(item_id, conversation_id=conversation.id)).id == item_id
    unknown = "resp_" + "0" * 32
    for name in ("a2", "b9"):  # another key of acme (scope "own"), and globex's admin-scope key
        headers = {"Authorization": f"Bearer {secrets[name]}"}
        for path in ("", "/input_items", "?stream=true"):
            async with http.get(f"{edge_b}/v1/responses/{mine.id}{path}", headers=headers) as theirs, \
                    http.get(f"{edge_b}/v1/responses/{unknown}{path}", headers=headers) as nobody_s:
                assert theirs.status == nobody_s.status == 404
                assert (await theirs.text()).replace(mine.id, unknown) == await nobody_s.text()
        async with http.get(f"{edge_b}/v1/conversations/{conversation.id}", headers=headers) as theirs:
            assert theirs.status == 404
    with pytest.raises(openai.NotFoundError):  # it reads; it does not delete, change or continue another's
        await admin.responses.delete(mine.id)
    with pytest.raises(openai.NotFoundError):
        await admin.conversations.delete(conversation.id)
    with pytest.raises(openai.NotFoundError):
        await admin.conversations.update(conversation.id, metadata={"k": "v"})
    with pytest.raises(openai.BadRequestError):
        await admin.responses.create(model=MODEL, input="x", previous_response_id=mine.id)
    own = await admin.responses.create(model=MODEL, input="the admin's own")  # its own stay its own
    with pytest.raises(openai.NotFoundError):
        await on_a.responses.retrieve(own.id)
    assert (await on_a.responses.retrieve(mine.id)).id == mine.id


@pytest.mark.redis
async def test_a_tenant_scope_shares_responses_between_its_keys_only(
        stack: AsyncExitStack, fake_upstream: FakeUpstream, limit_server: Server) -> None:
    edge_a, edge_b, secrets, _ = await _two_edges(stack, fake_upstream, limit_server, scope="tenant")
    mine = await (await sdk(stack, edge_a, secrets["a1"])).responses.create(model=MODEL, input="ours")
    assert (await (await sdk(stack, edge_b, secrets["a2"])).responses.retrieve(mine.id)).id == mine.id
    with pytest.raises(openai.NotFoundError):
        await (await sdk(stack, edge_b, secrets["b1"])).responses.retrieve(mine.id)


@pytest.mark.redis
async def test_a_stopped_store_is_a_503_for_stateful_calls_only(
        stack: AsyncExitStack, fake_upstream: FakeUpstream, own_limit_server: Server) -> None:
    edge_a, _, secrets, _ = await _two_edges(stack, fake_upstream, own_limit_server, timeout_ms=300)
    client = await sdk(stack, edge_a, secrets["a1"])
    kept = await client.responses.create(model=MODEL, input="before")
    own_limit_server.stop()
    errors = sample_value("ingress_response_store_errors_total", {"backend": "redis", "call": "put"}) or 0
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: client.responses.create(model=MODEL, input="kept?"),
        lambda: client.responses.retrieve(kept.id),
        lambda: client.responses.create(model=MODEL, input="on", previous_response_id=kept.id, store=False)]
    for call in calls:
        with pytest.raises(openai.InternalServerError) as down:
            await call()
        assert down.value.status_code == 503 and down.value.code == "response_store_unavailable"
        assert down.value.response.headers["Retry-After"] == "1"
    assert (sample_value("ingress_response_store_errors_total", {"backend": "redis", "call": "put"}) or 0) > errors
    answer = await client.responses.create(model=MODEL, input="stateless", store=False)  # never asks the store
    assert answer.output_text == "stateless"
    with pytest.raises(openai.InternalServerError) as streamed:  # the breaker is open: refused before it is sent
        async with client.responses.stream(model=MODEL, input="kept stream?") as stream:
            await stream.get_final_response()
    assert streamed.value.status_code == 503 and streamed.value.code == "response_store_unavailable"
