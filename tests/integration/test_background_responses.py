"""Background responses end to end (`background: true`, ingress/edge/endpoints.py, ingress/edge/resume.py):
the official `openai` SDK as client creates one, polls it with `retrieve`, cancels it, and reads a
streamed one from another edge on the same real Redis, then Valkey, after dropping it; and two real
`ingress serve` processes on one Redis, the one running background responses stopped by SIGTERM."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
from fakes.processes import EdgeProcess, free_port
from fakes.upstream import FakeUpstream, answer
from openai.types.responses import ResponseCreatedEvent
from redis_servers import Server
from stored_edges import sdk, serving

from ingress.edge.appkeys import DRAIN
from ingress.serve.app import create_app, serve_app
from ingress.settings import Settings, Timeouts
from ingress.state.settings import ResponsesSettings
from ingress.tenancy.keys import new_key
from ingress.tenancy.settings import Key, Tenancy, Tenant
from ingress.tenancy.settings import Redis as RedisSettings

MODEL = "gpt-4o"
TIMEOUTS = Timeouts(connect=1.0, first_byte=5.0, idle=5.0)
TEXT = " ".join(f"w{i}" for i in range(200))
_prefixes = itertools.count()






async def _until(client: openai.AsyncOpenAI, response_id: str, *statuses: str, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while (got := await client.responses.retrieve(response_id)).status not in statuses:
        assert time.monotonic() < deadline, f"still {got.status}"
        await asyncio.sleep(0.05)
    return got


async def test_a_background_response_is_answered_queued_then_polled_to_its_end(
        stack: AsyncExitStack, fake_upstream: FakeUpstream) -> None:
    client = await sdk(stack, await serving(stack, Settings(upstream=fake_upstream.url, timeouts=TIMEOUTS)))
    fake_upstream.play(answer(), pace=0.01)
    started = time.monotonic()
    queued = await client.responses.create(model=MODEL, input=TEXT, background=True)
    assert time.monotonic() - started < 1.0  # answered before the 2 s answer is done
    assert queued.status == "queued" and queued.background is True
    done = await _until(client, queued.id, "completed")
    assert done.output_text == TEXT and done.background is True
    assert done.usage is not None and done.usage.output_tokens == 200
    with pytest.raises(openai.BadRequestError) as ended:
        await client.responses.cancel(queued.id)
    assert ended.value.code == "response_not_cancellable"
    with pytest.raises(openai.BadRequestError) as unkept:
        await client.responses.create(model=MODEL, input="x", background=True, store=False)
    assert unkept.value.param == "background"


async def test_a_background_response_is_cancelled_while_it_runs(
        stack: AsyncExitStack, fake_upstream: FakeUpstream) -> None:
    client = await sdk(stack, await serving(stack, Settings(upstream=fake_upstream.url, timeouts=TIMEOUTS)))
    fake_upstream.play(answer(), pace=0.05)  # 10 s
    queued = await client.responses.create(model=MODEL, input=TEXT, background=True)
    await _until(client, queued.id, "in_progress")
    cancelled = await client.responses.cancel(queued.id)
    assert cancelled.status == "cancelled"
    ended = await _until(client, queued.id, "cancelled", timeout=3.0)
    assert len(ended.output_text) < len(TEXT)  # what it had said when it stopped
    await fake_upstream.wait_idle(timeout=3)
    assert fake_upstream.outcomes == ["cancelled"]  # the service's stream was let go


@pytest.mark.redis
async def test_a_streamed_background_response_dropped_on_one_edge_is_read_and_cancelled_on_the_other(
        stack: AsyncExitStack, fake_upstream: FakeUpstream, limit_server: Server) -> None:
    secret, key_id, key_hash = new_key()
    tenancy = Tenancy(backend="redis", redis=RedisSettings(url=limit_server.url, prefix=f"bg-{next(_prefixes)}",
                                                           deadline_ms=2000),
                      keys=(Key(id=key_id, tenant="acme", hash=key_hash),), tenants={"acme": Tenant()})
    settings = Settings(upstream=fake_upstream.url, timeouts=TIMEOUTS, tenancy=tenancy,
                        responses=ResponsesSettings(resume_poll_ms=20))
    edge_a, edge_b = await serving(stack, settings), await serving(stack, settings)
    on_a, on_b = await sdk(stack, edge_a, secret), await sdk(stack, edge_b, secret)
    fake_upstream.play(answer(), answer(), pace=0.01)
    stream = await on_a.responses.create(model=MODEL, input=TEXT, background=True, stream=True)
    first: list[Any] = []
    async for event in stream:
        first.append(event)
        if len(first) == 51:
            break
    await stream.close()
    created = first[0]
    assert isinstance(created, ResponseCreatedEvent) and created.response.background is True
    rest = [e async for e in await on_b.responses.retrieve(created.response.id, stream=True, starting_after=50)]
    numbers = [e.sequence_number for e in [*first, *rest]]
    assert numbers == list(range(len(numbers))) and rest[-1].type == "response.completed"
    assert (await on_b.responses.retrieve(created.response.id)).status == "completed"
    fake_upstream.play(answer(), pace=0.05)
    queued = await on_a.responses.create(model=MODEL, input=TEXT, background=True)
    await _until(on_b, queued.id, "in_progress")
    assert (await on_b.responses.cancel(queued.id)).status == "cancelled"  # asked on B, run on A
    await _until(on_a, queued.id, "cancelled", timeout=3.0)


async def test_a_background_response_still_running_at_the_drain_deadline_ends_failed(
        stack: AsyncExitStack, fake_upstream: FakeUpstream) -> None:
    app = create_app(Settings(upstream=fake_upstream.url, timeouts=TIMEOUTS))
    client = await sdk(stack, await stack.enter_async_context(serve_app(app, "127.0.0.1", 0)))
    fake_upstream.play(answer(), pace=0.05)  # 10 s: past any deadline here
    queued = await client.responses.create(model=MODEL, input=TEXT, background=True)
    await _until(client, queued.id, "in_progress")
    drain = app[DRAIN]
    drain.start()
    drain.expire()  # SIGTERM's drain, at its deadline
    ended = await _until(client, queued.id, "failed", "completed", timeout=3.0)
    assert ended.status == "failed" and ended.error is not None and ended.error.code == "shutting_down"


async def _events_until(response: aiohttp.ClientResponse, kind: str | None = None) -> list[dict[str, Any]]:
    """A stream's events, up to the first of type `kind` (to its end when None)."""
    events: list[dict[str, Any]] = []
    while line := await response.content.readline():
        if line.startswith(b"data: {"):
            events.append(json.loads(line[6:]))
            if events[-1]["type"] == kind:
                break
    return events


@pytest.mark.redis
async def test_sigterm_on_the_edge_running_background_responses_ends_them_before_it_exits(
        tmp_path: Path, stack: AsyncExitStack, fake_upstream: FakeUpstream, limit_server: Server) -> None:
    """Two `ingress serve` processes on one Redis; A runs a streamed and a polled background response against
    a service pacing its frames (10 s each), and is sent SIGTERM: by the time A has exited (its drain's
    deadline, 1 s), each is `failed` with its error, as read from B, never left `in_progress`."""
    secret, key_id, key_hash = new_key()
    config = tmp_path / "edge.toml"
    config.write_text(f"""
[drain]
delay = 0.2
deadline = 1.0

[responses]
resume_poll_ms = 20

[tenancy]
backend = "redis"
redis = {{ url = "{limit_server.url}", prefix = "bg-term-{next(_prefixes)}", deadline_ms = 2000 }}

[[tenancy.keys]]
id = "{key_id}"
tenant = "acme"
hash = "{key_hash}"

[tenancy.tenants.acme]
""")
    edges = []
    for name in ("a", "b"):
        edge = EdgeProcess(tmp_path, name, free_port(), ["--config", str(config), "--upstream", fake_upstream.url],
                           1, None)
        stack.callback(edge.kill)
        edges.append(edge)
    edge_a, edge_b = edges
    await asyncio.gather(edge_a.started(), edge_b.started())
    on_b = await sdk(stack, edge_b.url, secret)
    fake_upstream.play(answer(), answer(), pace=0.05)  # 200 words, 10 s each: far past A's deadline
    headers = {"Authorization": f"Bearer {secret}"}
    async with aiohttp.ClientSession() as http:
        polled = await (await sdk(stack, edge_a.url, secret)).responses.create(model=MODEL, input=TEXT,
                                                                                 background=True)
        async with http.post(f"{edge_a.url}/v1/responses", headers=headers,
                             json={"model": MODEL, "input": TEXT, "background": True, "stream": True}) as r:
            assert r.status == 200
            first = await _events_until(r, "response.output_text.delta")
            streamed = first[0]["response"]["id"]
            assert (await on_b.responses.retrieve(streamed)).status == "in_progress"  # running on A, seen on B
            await _until(on_b, polled.id, "in_progress")
            edge_a.terminate()
            rest = await _events_until(r)  # A's own client is told how it ended, in the stream
        assert [e["type"] for e in rest[-2:]] == ["error", "response.failed"] and rest[-2]["code"] == "shutting_down"
    assert await edge_a.exit_code(timeout=15) == 0
    for response_id in (streamed, polled.id):  # A is gone: what B reads now is how each ended
        ended = await on_b.responses.retrieve(response_id)
        assert ended.status == "failed" and ended.model_dump()["error"]["code"] == "shutting_down"
        assert ended.background is True and 0 < len(ended.output_text) < len(TEXT)  # what it had said
    log = [e async for e in await on_b.responses.retrieve(streamed, stream=True)]  # its log ends as it did
    assert [e.type for e in log[-2:]] == ["error", "response.failed"]
    assert [e.sequence_number for e in log] == list(range(len(log)))
    await fake_upstream.wait_idle(timeout=3)
    assert sorted(fake_upstream.outcomes) == ["cancelled", "cancelled"]  # the service's streams were let go
