"""Conversations end to end (ingress/edge/conversations.py, ingress/state/conversation*.py): the official
`openai` SDK as client for every endpoint (`conversations.create/retrieve/update/delete`,
`conversations.items.create/list/retrieve/delete`) and for `conversation` on `responses.create`; a real
edge on loopback in front of the scripted fake service, whose record of what it received shows the
conversation's earlier turns; real Redis and Valkey servers (tests/support/redis_servers.py) shared by
two edges, and keys of two tenants.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any, Literal

import aiohttp
import openai
import pytest
from fakes.upstream import FakeUpstream, answer
from metric_values import sample_value
from openai.types.conversations import ConversationItem, Message
from openai.types.responses import EasyInputMessageParam
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








def _say(text: str, role: Literal["user", "assistant"] = "user") -> EasyInputMessageParam:
    return {"type": "message", "role": role, "content": text}


def _message(item: ConversationItem) -> Message:
    assert isinstance(item, Message), item
    return item


def _id(item: ConversationItem) -> str:
    assert item.id is not None
    return item.id


def _text(item: ConversationItem) -> str:
    return "".join(getattr(part, "text", "") for part in _message(item).content)


async def _texts(client: openai.AsyncOpenAI, conversation_id: str) -> list[tuple[str, str]]:
    """The conversation's items, oldest first, as (role, text) read through every page of the SDK's list."""
    out: list[tuple[str, str]] = []
    async for item in client.conversations.items.list(conversation_id, order="asc", limit=2):
        out.append((_message(item).role, _text(item)))
    return out


# --- one edge, its memory store -------------------------------------------------------------------------


async def test_every_conversation_call_of_the_sdk(stack: AsyncExitStack, fake_upstream: FakeUpstream) -> None:
    client = await sdk(stack, await serving(stack, Settings(upstream=fake_upstream.url, timeouts=TIMEOUTS)))
    before = sample_value("ingress_conversations_created_total", {"backend": "memory"}) or 0
    made = await client.conversations.create(
        items=[_say("hello"), _say("hi there", "assistant")],
        metadata={"topic": "greetings"})
    assert made.object == "conversation" and made.id.startswith("conv_") and made.metadata == {"topic": "greetings"}
    assert sample_value("ingress_conversations_created_total", {"backend": "memory"}) == before + 1
    assert (await client.conversations.retrieve(made.id)).model_dump() == made.model_dump()
    changed = await client.conversations.update(made.id, metadata={"topic": "farewells"})
    assert changed.metadata == {"topic": "farewells"} and changed.created_at == made.created_at
    assert (await client.conversations.retrieve(made.id)).metadata == {"topic": "farewells"}

    listed = await client.conversations.items.list(made.id)  # newest first, as OpenAI's
    assert [_message(i).role for i in listed.data] == ["assistant", "user"] and not listed.has_more
    assert _message(listed.data[0]).status == "completed" and _message(listed.data[1]).content[0].type == "input_text"
    assert _message(listed.data[0]).content[0].type == "output_text"
    added = await client.conversations.items.create(made.id, items=[_say(f"note {n}") for n in range(3)])
    assert [_text(i) for i in added.data] == ["note 0", "note 1", "note 2"]
    assert added.first_id == added.data[0].id and added.last_id == added.data[-1].id
    assert await _texts(client, made.id) == [("user", "hello"), ("assistant", "hi there"), ("user", "note 0"),
                                             ("user", "note 1"), ("user", "note 2")]
    one = await client.conversations.items.retrieve(_id(added.data[1]), conversation_id=made.id)
    assert one.id == added.data[1].id and _text(one) == "note 1"
    after = await client.conversations.items.delete(_id(added.data[1]), conversation_id=made.id)
    assert after.id == made.id and after.object == "conversation"
    with pytest.raises(openai.NotFoundError):
        await client.conversations.items.retrieve(_id(added.data[1]), conversation_id=made.id)
    assert [text for _, text in await _texts(client, made.id)] == ["hello", "hi there", "note 0", "note 2"]

    gone = await client.conversations.delete(made.id)
    assert gone.id == made.id and gone.deleted and gone.object == "conversation.deleted"
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: client.conversations.retrieve(made.id), lambda: client.conversations.items.list(made.id),
        lambda: client.conversations.delete(made.id), lambda: client.conversations.update(made.id, metadata={}),
        lambda: client.conversations.items.create(made.id, items=[_say("x")])]
    for call in calls:
        with pytest.raises(openai.NotFoundError) as missing:
            await call()
        assert missing.value.code == "conversation_not_found"


async def test_responses_in_a_conversation_carry_its_items_and_add_their_turn(
        stack: AsyncExitStack, fake_upstream: FakeUpstream) -> None:
    client = await sdk(stack, await serving(stack, Settings(upstream=fake_upstream.url, timeouts=TIMEOUTS)))
    conv = await client.conversations.create(items=[_say("my name is Ada")])
    first = await client.responses.create(model=MODEL, input="the first turn", conversation=conv.id,
                                          instructions="Be brief.")
    assert first.conversation is not None and first.conversation.id == conv.id
    assert received_messages(fake_upstream, 0) == [("system", "Be brief."), ("user", "my name is Ada"),
                                           ("user", "the first turn")]
    async with client.responses.stream(model=MODEL, input="the second turn", conversation={"id": conv.id},
                                       store=False) as stream:
        second = await stream.get_final_response()
    assert second.conversation is not None and second.conversation.id == conv.id
    # the first turn's input and output, asserted where the service read it
    assert received_messages(fake_upstream, 1) == [
        ("user", "my name is Ada"), ("user", "the first turn"), ("assistant", "the first turn"),
        ("user", "the second turn")]
    assert await _texts(client, conv.id) == [
        ("user", "my name is Ada"), ("user", "the first turn"), ("assistant", "the first turn"),
        ("user", "the second turn"), ("assistant", "the second turn")]
    listed = await client.conversations.items.list(conv.id, order="asc")
    assert listed.data[2].id == first.output[0].id  # the answer's output item, by its own id
    with pytest.raises(openai.NotFoundError):
        await client.responses.retrieve(second.id)  # store: false: not kept as a response, yet in its conversation
    kept = await client.responses.input_items.list(first.id, order="asc")
    assert [getattr(i, "role", None) for i in kept.data] == ["user", "user"]

    with pytest.raises(openai.BadRequestError) as both:
        await client.responses.create(model=MODEL, input="x", conversation=conv.id, previous_response_id=first.id)
    assert both.value.param == "conversation"
    with pytest.raises(openai.NotFoundError) as unknown:
        await client.responses.create(model=MODEL, input="x", conversation="conv_" + "0" * 48)
    assert unknown.value.code == "conversation_not_found" and len(fake_upstream.received) == 2


async def test_two_responses_at_once_on_one_conversation_both_keep_their_turn(
        stack: AsyncExitStack, fake_upstream: FakeUpstream) -> None:
    client = await sdk(stack, await serving(stack, Settings(upstream=fake_upstream.url, timeouts=TIMEOUTS)))
    await _concurrent_turns(client, fake_upstream)


async def _concurrent_turns(client: openai.AsyncOpenAI, fake: FakeUpstream) -> None:
    """Two responses answered at once on one conversation: each turn's two items, together, none lost."""
    conv = await client.conversations.create()
    fake.play(answer("slow one"), answer("fast one"), pace=0.05)
    await asyncio.gather(client.responses.create(model=MODEL, input="A", conversation=conv.id),
                         client.responses.create(model=MODEL, input="B", conversation=conv.id))
    turns = await _texts(client, conv.id)
    assert sorted([turns[0:2], turns[2:4]]) == [[("user", "A"), ("assistant", "fast one")],
                                                [("user", "B"), ("assistant", "slow one")]] or \
        sorted([turns[0:2], turns[2:4]]) == [[("user", "A"), ("assistant", "slow one")],
                                             [("user", "B"), ("assistant", "fast one")]]
    assert len(turns) == 4


@pytest.mark.parametrize(("query", "param"), [("limit=0", "limit"), ("limit=101", "limit"), ("order=sideways", "order"),
                                              ("after=msg_nope", "after"), ("include=nothing.at_all", "include")])
async def test_bad_list_parameters_are_400s_naming_them(stack: AsyncExitStack, fake_upstream: FakeUpstream,
                                                        http: aiohttp.ClientSession, query: str, param: str) -> None:
    url = await serving(stack, Settings(upstream=fake_upstream.url, timeouts=TIMEOUTS))
    conv = await (await sdk(stack, url)).conversations.create(items=[_say("x")])
    async with http.get(f"{url}/v1/conversations/{conv.id}/items?{query}") as r:
        assert r.status == 400 and (await r.json())["error"]["param"] == param


async def test_items_past_the_bounds_are_refused(stack: AsyncExitStack, fake_upstream: FakeUpstream) -> None:
    settings = Settings(upstream=fake_upstream.url, timeouts=TIMEOUTS,
                        responses=ResponsesSettings(max_record_bytes=64 * 1024))
    client = await sdk(stack, await serving(stack, settings))
    with pytest.raises(openai.BadRequestError) as many:
        await client.conversations.create(items=[_say("x")] * 21)
    assert many.value.param == "items"
    conv = await client.conversations.create(items=[_say("x" * 40_000)])
    with pytest.raises(openai.APIStatusError) as full:
        await client.conversations.items.create(conv.id, items=[_say("y" * 40_000)])
    assert full.value.status_code == 413 and full.value.code == "conversation_too_large"
    with pytest.raises(openai.APIStatusError) as turn:
        await client.responses.create(model=MODEL, input="z" * 40_000, conversation=conv.id, store=False)
    assert turn.value.status_code == 413 and fake_upstream.received == []  # refused before it is sent


# --- two edges on one Redis (and on one Valkey), keys of two tenants -------------------------------------


async def _two_edges(stack: AsyncExitStack, fake: FakeUpstream, server: Server,
                     **responses: Any) -> tuple[str, str, dict[str, str], str]:
    """Two edges on `server`, keys a1, a2 of tenant acme and b1 of globex (their secrets by name)."""
    keys, secrets = [], {}
    for name, tenant in (("a1", "acme"), ("a2", "acme"), ("b1", "globex")):
        secret, key_id, key_hash = new_key()
        keys.append(Key(id=key_id, tenant=tenant, hash=key_hash))
        secrets[name] = secret
    prefix = f"cv-test-{next(_prefixes)}"
    tenancy = Tenancy(backend="redis", redis=RedisSettings(url=server.url, prefix=prefix, deadline_ms=2000),
                      keys=tuple(keys), tenants={"acme": Tenant(), "globex": Tenant()})
    settings = Settings(upstream=fake.url, timeouts=TIMEOUTS, tenancy=tenancy, responses=ResponsesSettings(**responses))
    return await serving(stack, settings), await serving(stack, settings), secrets, prefix


@pytest.mark.redis
async def test_a_conversation_made_on_one_edge_is_used_on_the_other(
        stack: AsyncExitStack, fake_upstream: FakeUpstream, limit_server: Server) -> None:
    edge_a, edge_b, secrets, prefix = await _two_edges(stack, fake_upstream, limit_server)
    on_a, on_b = await sdk(stack, edge_a, secrets["a1"]), await sdk(stack, edge_b, secrets["a1"])
    conv = await on_a.conversations.create(items=[_say(f"on {limit_server.kind}")], metadata={"k": "v"})
    assert (await on_b.conversations.retrieve(conv.id)).metadata == {"k": "v"}
    await on_b.responses.create(model=MODEL, input="turn on B", conversation=conv.id)
    async with on_a.responses.stream(model=MODEL, input="turn on A", conversation=conv.id) as stream:
        await stream.get_final_response()
    assert received_messages(fake_upstream, 1) == [(("user", f"on {limit_server.kind}")), ("user", "turn on B"),
                                           ("assistant", "turn on B"), ("user", "turn on A")]
    assert [t for _, t in await _texts(on_b, conv.id)] == [
        f"on {limit_server.kind}", "turn on B", "turn on B", "turn on A", "turn on A"]
    await on_a.conversations.update(conv.id, metadata={"k": "w"})
    assert (await on_b.conversations.retrieve(conv.id)).metadata == {"k": "w"}
    added = await on_b.conversations.items.create(conv.id, items=[_say("added on B")])
    assert (await on_a.conversations.items.retrieve(_id(added.data[0]), conversation_id=conv.id)).id == added.data[0].id
    await on_a.conversations.items.delete(_id(added.data[0]), conversation_id=conv.id)
    assert len(await _texts(on_b, conv.id)) == 5
    redis = Redis.from_url(limit_server.url)
    stack.push_async_callback(redis.aclose)
    # <prefix>:cv:{<owner>:<id>} and its :items, under one hash tag
    keys = sorted(k.decode() if isinstance(k, bytes) else k for k in await redis.keys(f"{prefix}:cv:*"))
    assert len(keys) == 2 and keys[1] == f"{keys[0]}:items"
    assert keys[0].startswith(f"{prefix}:cv:{{acme/") and keys[0].endswith(f":{conv.id}}}")
    assert all(0 < ttl <= 30 * 86_400_000 for ttl in [await redis.pttl(k) for k in keys])  # each expires
    await _concurrent_turns(on_a, fake_upstream)
    await on_b.conversations.delete(conv.id)
    assert await redis.keys(f"{prefix}:cv:*{conv.id}*") == []
    with pytest.raises(openai.NotFoundError):
        await on_a.conversations.retrieve(conv.id)


@pytest.mark.redis
async def test_another_key_s_conversation_is_the_same_404_as_an_unknown_id(
        stack: AsyncExitStack, fake_upstream: FakeUpstream, limit_server: Server,
        http: aiohttp.ClientSession) -> None:
    edge_a, edge_b, secrets, _ = await _two_edges(stack, fake_upstream, limit_server)
    mine = await (await sdk(stack, edge_a, secrets["a1"])).conversations.create(items=[_say("private")])
    item = _id((await (await sdk(stack, edge_a, secrets["a1"])).conversations.items.list(mine.id)).data[0])
    unknown = "conv_" + "0" * 48
    for name in ("b1", "a2"):  # another tenant's key, and another key of the same tenant (scope = "key")
        headers = {"Authorization": f"Bearer {secrets[name]}"}
        for method, path in (("GET", ""), ("POST", ""), ("DELETE", ""), ("GET", "/items"), ("POST", "/items"),
                             ("GET", f"/items/{item}"), ("DELETE", f"/items/{item}")):
            body: dict[str, object] = {"metadata": {}} if path == "" else {"items": [_say("x")]}
            async with http.request(method, f"{edge_b}/v1/conversations/{mine.id}{path}", headers=headers,
                                    json=body if method == "POST" else None) as theirs, \
                    http.request(method, f"{edge_b}/v1/conversations/{unknown}{path}", headers=headers,
                                 json=body if method == "POST" else None) as nobody_s:
                assert theirs.status == nobody_s.status == 404, (method, path)
                assert (await theirs.text()).replace(mine.id, unknown) == await nobody_s.text()
        async with http.post(f"{edge_b}/v1/responses", headers=headers,
                             json={"model": MODEL, "input": "x", "conversation": mine.id}) as r:
            assert r.status == 404 and (await r.json())["error"]["code"] == "conversation_not_found"
    assert fake_upstream.received == []
    assert [t for _, t in await _texts(await sdk(stack, edge_b, secrets["a1"]), mine.id)] == ["private"]


@pytest.mark.redis
async def test_a_stopped_store_is_a_503_for_conversation_calls(
        stack: AsyncExitStack, fake_upstream: FakeUpstream, own_limit_server: Server) -> None:
    edge_a, _, secrets, _ = await _two_edges(stack, fake_upstream, own_limit_server, timeout_ms=300)
    client = await sdk(stack, edge_a, secrets["a1"])
    conv = await client.conversations.create()
    own_limit_server.stop()
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: client.conversations.retrieve(conv.id), lambda: client.conversations.create(),
        lambda: client.conversations.items.list(conv.id),
        lambda: client.responses.create(model=MODEL, input="x", conversation=conv.id, store=False)]
    for call in calls:
        with pytest.raises(openai.InternalServerError) as down:
            await call()
        assert down.value.status_code == 503 and down.value.code == "response_store_unavailable"
        assert down.value.response.headers["Retry-After"] == "1"
    assert (await client.responses.create(model=MODEL, input="stateless", store=False)).output_text == "stateless"
