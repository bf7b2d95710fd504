"""Resumable streams end to end (ingress/edge/resume.py, ingress/state/event_stores.py): the official
`openai` SDK as client reads part of a long scripted stream from one edge, drops, and resumes on another
edge on the same real Redis, then Valkey (`responses.retrieve(id, stream=True, starting_after=N)`); and
on one edge's memory store."""

from __future__ import annotations

import itertools
from contextlib import AsyncExitStack
from typing import Any

import aiohttp
import openai
import pytest
from fakes.upstream import FakeUpstream, answer
from metric_values import sample_value
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
WORDS = 200
TEXT = " ".join(f"w{i}" for i in range(WORDS))
_prefixes = itertools.count()






async def _read_then_drop(client: openai.AsyncOpenAI, n: int) -> tuple[str, list[Any]]:
    """The response's id and its events 0..n-1, read from a stream the client then closes."""
    stream = await client.responses.create(model=MODEL, input=TEXT, stream=True)
    seen = []
    async for event in stream:
        seen.append(event)
        if len(seen) == n:
            break
    await stream.close()
    created = seen[0]
    assert isinstance(created, ResponseCreatedEvent)
    return created.response.id, seen


async def _rest(client: openai.AsyncOpenAI, response_id: str, after: int | None = None) -> list[Any]:
    if after is None:
        stream = await client.responses.retrieve(response_id, stream=True)
    else:
        stream = await client.responses.retrieve(response_id, stream=True, starting_after=after)
    return [event async for event in stream]


def _text(events: list[Any]) -> str:
    return "".join(e.delta for e in events if e.type == "response.output_text.delta")


def _assert_whole(first: list[Any], rest: list[Any]) -> None:
    numbers = [e.sequence_number for e in [*first, *rest]]
    assert numbers == list(range(len(numbers)))  # no gap, no duplicate, in order
    assert rest[-1].type == "response.completed"
    assert _text([*first, *rest]) == TEXT


@pytest.mark.redis
async def test_a_dropped_stream_resumes_on_the_other_edge_exactly_once_in_order(
        stack: AsyncExitStack, fake_upstream: FakeUpstream, limit_server: Server) -> None:
    prefix = f"resume-test-{next(_prefixes)}"
    secret, key_id, key_hash = new_key()
    other, other_id, other_hash = new_key()
    tenancy = Tenancy(backend="redis", redis=RedisSettings(url=limit_server.url, prefix=prefix, deadline_ms=2000),
                      keys=(Key(id=key_id, tenant="acme", hash=key_hash),
                            Key(id=other_id, tenant="acme", hash=other_hash)),
                      tenants={"acme": Tenant()})
    settings = Settings(upstream=fake_upstream.url, timeouts=TIMEOUTS, tenancy=tenancy,
                        responses=ResponsesSettings(resume_poll_ms=20))
    edge_a, edge_b = await serving(stack, settings), await serving(stack, settings)
    on_a, on_b = await sdk(stack, edge_a, secret), await sdk(stack, edge_b, secret)
    fake_upstream.play(answer(), pace=0.01)  # one frame a read: about 2 s of stream
    running = sample_value("ingress_responses_resumed_total", {"backend": "redis", "running": "true"}) or 0
    response_id, first = await _read_then_drop(on_a, 51)  # events 0..50
    rest = await _rest(on_b, response_id, after=50)  # 51..end, followed while edge A still runs it
    assert rest[0].sequence_number == 51
    _assert_whole(first, rest)
    assert sample_value("ingress_responses_resumed_total", {"backend": "redis", "running": "true"}) == running + 1
    done = await on_b.responses.retrieve(response_id)  # the dropped response ran to its end, and was kept
    assert done.status == "completed" and done.output_text == TEXT
    again = await _rest(on_a, response_id)  # the whole stream, read again once it has ended
    assert [e.sequence_number for e in again] == list(range(len(first) + len(rest)))
    assert await _rest(on_b, response_id, after=len(again) - 1) == []  # after its last event: nothing more
    redis = Redis.from_url(limit_server.url)
    stack.push_async_callback(redis.aclose)
    logs = await redis.keys(f"{prefix}:ev:*")
    assert len(logs) == 1 and 0 < await redis.pttl(logs[0]) <= 30 * 86_400_000  # a TTL on the log
    async with aiohttp.ClientSession() as http:  # another key's: the same 404 as an unknown id
        headers = {"Authorization": f"Bearer {other}"}
        async with http.get(f"{edge_b}/v1/responses/{response_id}?stream=true", headers=headers) as theirs, \
                http.get(f"{edge_b}/v1/responses/resp_{'0' * 32}?stream=true", headers=headers) as nobody_s:
            assert theirs.status == nobody_s.status == 404
            assert (await theirs.json())["error"]["code"] == (await nobody_s.json())["error"]["code"]
    await on_a.responses.delete(response_id)  # its events with it, on every replica
    assert await redis.keys(f"{prefix}:ev:*") == []
    with pytest.raises(openai.NotFoundError):
        await _rest(on_b, response_id)


async def test_on_one_edge_s_memory_a_stream_resumes_and_a_whole_response_is_not_streamed(
        stack: AsyncExitStack, fake_upstream: FakeUpstream) -> None:
    url = await serving(stack, Settings(upstream=fake_upstream.url, timeouts=TIMEOUTS,
                                      responses=ResponsesSettings(resume_poll_ms=20)))
    client = await sdk(stack, url)
    fake_upstream.play(answer(), pace=0.01)
    response_id, first = await _read_then_drop(client, 51)
    rest = await _rest(client, response_id, after=50)
    _assert_whole(first, rest)
    whole = await client.responses.create(model=MODEL, input="not streamed")
    with pytest.raises(openai.BadRequestError) as refused:
        await _rest(client, whole.id)
    assert refused.value.code == "response_not_streamed"
    with pytest.raises(openai.BadRequestError) as bad:
        await _rest(client, response_id, after=-2)
    assert bad.value.param == "starting_after"
