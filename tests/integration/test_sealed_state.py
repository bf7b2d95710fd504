"""Stored responses sealed at rest (ingress/state/seal.py) end to end: two edges on one real Redis, then
Valkey, with `[responses] seal_key_env`; the official `openai` SDK stores a response, a conversation and
a stream on one edge and reads them all back, and resumes the stream, on the other, while every value
the server holds (read by SCAN, whatever its type) has neither the prompt's text nor the answer's."""

from __future__ import annotations

import base64
import itertools
import os
from contextlib import AsyncExitStack

import aiohttp
import openai
import pytest
from fakes.upstream import FakeUpstream, answer
from openai.types.responses import ResponseCreatedEvent
from redis.asyncio import Redis
from redis_servers import Server
from stored_edges import sdk, serving

from ingress.settings import Settings, Timeouts
from ingress.state.settings import ResponsesSettings
from ingress.tenancy.keys import new_key
from ingress.tenancy.settings import Key, Tenancy, Tenant
from ingress.tenancy.settings import Redis as RedisSettings

MODEL = "gpt-4o"
TIMEOUTS = Timeouts(connect=1.0, first_byte=5.0, idle=5.0)
PROMPT = "the launch code is zebra-7781-orchid"
ANSWER = " ".join(f"quokka{i}" for i in range(120))  # long enough to drop and resume
_prefixes = itertools.count()


async def _values(redis: Redis, prefix: str) -> list[bytes]:
    """Every key under the prefix, and every value it holds (strings, lists, hashes), as bytes."""
    found: list[bytes | str | None] = []
    async for key in redis.scan_iter(match=f"{prefix}:*", count=500):
        found.append(key)
        kind = await redis.type(key)
        if kind == b"string":
            found.append(await redis.get(key))
        elif kind == b"list":
            found.extend(await redis.lrange(key, 0, -1))
        elif kind == b"hash":
            found.extend(v for pair in (await redis.hgetall(key)).items() for v in pair)
        else:
            raise AssertionError(f"{key!r} is a {kind!r}: read it here too")
    return [v if isinstance(v, bytes) else str(v).encode() for v in found]


@pytest.mark.redis
async def test_the_server_holds_no_prompt_and_no_answer_and_every_replica_reads_them(
        stack: AsyncExitStack, fake_upstream: FakeUpstream, limit_server: Server,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INGRESS_TEST_STATE_SEAL", base64.b64encode(os.urandom(32)).decode())
    prefix = f"sealed-test-{next(_prefixes)}"
    secret, key_id, key_hash = new_key()
    other, other_id, other_hash = new_key()
    tenancy = Tenancy(backend="redis", redis=RedisSettings(url=limit_server.url, prefix=prefix, deadline_ms=2000),
                      keys=(Key(id=key_id, tenant="acme", hash=key_hash), Key(id=other_id, tenant="globex",
                                                                              hash=other_hash)),
                      tenants={"acme": Tenant(), "globex": Tenant()})
    settings = Settings(upstream=fake_upstream.url, timeouts=TIMEOUTS, tenancy=tenancy,
                        responses=ResponsesSettings(resume_poll_ms=20, seal_key_env="INGRESS_TEST_STATE_SEAL"))
    edge_a, edge_b = await serving(stack, settings), await serving(stack, settings)
    on_a, on_b = await sdk(stack, edge_a, secret), await sdk(stack, edge_b, secret)

    fake_upstream.play(answer(ANSWER), answer(ANSWER), pace=0.01)
    whole = await on_a.responses.create(model=MODEL, input=PROMPT)
    conversation = await on_a.conversations.create(items=[{"type": "message", "role": "user", "content": PROMPT}])
    await on_a.responses.create(model=MODEL, input="and again", conversation=conversation.id)
    fake_upstream.play(answer(ANSWER), pace=0.01)
    stream = await on_a.responses.create(model=MODEL, input=PROMPT, stream=True)
    first = []
    async for event in stream:
        first.append(event)
        if len(first) == 40:
            break
    await stream.close()
    assert isinstance(first[0], ResponseCreatedEvent)
    streamed = first[0].response.id
    resumed = [e async for e in await on_b.responses.retrieve(streamed, stream=True, starting_after=39)]
    assert resumed[0].sequence_number == 40 and resumed[-1].type == "response.completed"
    text = "".join(e.delta for e in [*first, *resumed] if e.type == "response.output_text.delta")
    assert text == ANSWER

    redis = Redis.from_url(limit_server.url)
    stack.push_async_callback(redis.aclose)
    values = await _values(redis, prefix)
    kinds = {str(key, "ascii") if isinstance(key, bytes) else key for key in await redis.keys(f"{prefix}:*")}
    kinds = {key.split(":")[1] for key in kinds}
    assert {"rs", "cv", "ev"} <= kinds  # responses, conversations and stream events are all there
    for value in values:
        assert b"zebra-7781" not in value and b"quokka" not in value, value[:200]

    got = await on_b.responses.retrieve(whole.id)  # the other replica opens what the first sealed
    assert got.output_text == ANSWER
    listed = await on_b.responses.input_items.list(whole.id)
    assert PROMPT in listed.data[0].content[0].text  # type: ignore[union-attr,index]  # a message's
    items = await on_b.conversations.items.list(conversation.id, order="asc")
    assert [i.content[0].text for i in items.data if i.type == "message"][:2] == [PROMPT, "and again"]  # type: ignore[union-attr]
    assert (await on_b.responses.retrieve(streamed)).output_text == ANSWER

    # A record copied under another tenant's key does not open there: the same 404 as an unknown id.
    kept = await redis.get(f"{prefix}:rs:acme/{key_id}:{whole.id}")
    assert kept is not None
    await redis.set(f"{prefix}:rs:globex/{other_id}:{whole.id}", kept)
    async with aiohttp.ClientSession() as http:
        headers = {"Authorization": f"Bearer {other}"}
        async with http.get(f"{edge_b}/v1/responses/{whole.id}", headers=headers) as theirs, \
                http.get(f"{edge_b}/v1/responses/resp_{'0' * 32}", headers=headers) as nobody_s:
            assert theirs.status == nobody_s.status == 404
            assert (await theirs.json())["error"]["code"] == (await nobody_s.json())["error"]["code"]
    with pytest.raises(openai.NotFoundError):
        await (await sdk(stack, edge_a, other)).responses.retrieve(whole.id)
