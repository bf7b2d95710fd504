"""A fleet: several `ingress serve` processes sharing one real Redis (or Valkey) for their limits.

The fleet admits a limit once, not once per edge; concurrent bursts through every edge cannot overshoot a
token limit; a SIGKILLed edge's concurrency lease frees within its TTL; with the store gone the edges
keep serving under the degraded policy, and say so."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack
from pathlib import Path

import aiohttp
import pytest
from fakes.processes import EdgeProcess, free_port
from fakes.upstream import FakeUpstream, answer, slow_head
from redis_servers import Server, running
from waiting import eventually

from ingress.tenancy.keys import new_key

pytestmark = pytest.mark.redis
CHAT = "/v1/chat/completions"
KEY, KEY_ID, KEY_HASH = new_key()


def _config(tmp_path: Path, store: Server, limits: str, *, upstream: str | None = None, lease_ttl: float = 30.0,
            deadline_ms: int = 2000) -> Path:
    """A deadline far above a loaded machine's round trips: these tests are about sharing, and a call
    that missed it would be decided by the degraded policy (each edge its share) instead."""
    config = tmp_path / "ingress.toml"
    head = f'upstream = "{upstream}"\nmodels = ["ingress-demo"]\n' if upstream else ""
    config.write_text(f"""{head}
[tenancy]
backend = "redis"
redis = {{ url = "{store.url}", deadline_ms = {deadline_ms} }}
lease_ttl = {lease_ttl}

[tenancy.tenants.acme]

[[tenancy.keys]]
id = "{KEY_ID}"
tenant = "acme"
hash = "{KEY_HASH}"
limits = {limits}
""")
    return config


@pytest.fixture(params=["redis", "valkey"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    with running(request.param, tmp_path) as server:
        yield server


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as s:
        yield s


async def _fleet(tmp_path: Path, config: Path, count: int = 3) -> list[EdgeProcess]:
    edges = [EdgeProcess(tmp_path, f"edge{i}", free_port(), ["--config", str(config)], 1, None) for i in range(count)]
    for edge in edges:
        await edge.started()
    return edges


async def _chat(http: aiohttp.ClientSession, edge: EdgeProcess, *, max_tokens: int = 5, stream: bool = False) -> int:
    body = {"model": "ingress-demo", "messages": [{"role": "user", "content": "hi"}], "max_tokens": max_tokens,
            "stream": stream}
    async with http.post(edge.url + CHAT, json=body, headers={"Authorization": f"Bearer {KEY}"}) as r:
        await r.read()
        return r.status


async def test_the_fleet_admits_the_limit_once_not_once_an_edge(tmp_path: Path, store: Server) -> None:
    edges = await _fleet(tmp_path, _config(tmp_path, store, "{ rpm = 30 }"))
    try:
        async with aiohttp.ClientSession() as http:
            started = time.monotonic()
            statuses = await asyncio.gather(*(_chat(http, edges[i % 3]) for i in range(90)))
            elapsed = time.monotonic() - started
        admitted = statuses.count(200)
        assert set(statuses) == {200, 429}
        # An edge writes its access lines at its loop's next turn: the last may land just after its answer.
        await eventually(lambda: sum(len(e.events("request")) for e in edges) == 90, "every request logged")
        assert {e["limit"] for edge in edges for e in edge.events("request")} == {"admitted", "limited"}
        # 30 at once, and one every 2 s after: what the burst's own duration refilled, never 3 x 30.
        assert 30 <= admitted <= 30 + int(elapsed / 2) + 1, (admitted, elapsed)
        assert all(len(e.events("request")) == 30 for e in edges)  # every edge took its third
    finally:
        for edge in edges:
            edge.kill()


async def test_concurrent_bursts_through_every_edge_cannot_overshoot_the_token_limit(
        tmp_path: Path, store: Server, stack: AsyncExitStack) -> None:
    fake = FakeUpstream(default=slow_head(2.0))  # nothing settles, so nothing is refunded, during the burst
    upstream = await stack.enter_async_context(fake.running())
    edges = await _fleet(tmp_path, _config(tmp_path, store, "{ tpm = 3000 }", upstream=upstream))
    try:
        async with aiohttp.ClientSession() as http:
            statuses = await asyncio.gather(*(_chat(http, edges[i % 3], max_tokens=300) for i in range(45)))
        await eventually(lambda: sum(len(e.events("request")) for e in edges) == 45, "every request logged")
        reserved = [e for edge in edges for e in edge.events("request") if e.get("status") == 200]
        assert statuses.count(200) == len(reserved)
        # Each reserves its prompt's count (a few tokens) and 300: at most 9 of them fit in 3000.
        assert 8 <= statuses.count(200) <= 9, statuses
    finally:
        for edge in edges:
            edge.kill()


async def test_a_killed_edges_lease_frees_within_its_ttl(tmp_path: Path, store: Server, stack: AsyncExitStack) -> None:
    fake = FakeUpstream()
    upstream = await stack.enter_async_context(fake.running())
    fake.play(answer(" ".join(["word"] * 200)), pace=0.2)  # a long stream, held by the first edge
    edges = await _fleet(tmp_path, _config(tmp_path, store, "{ concurrency = 1 }", upstream=upstream,
                                           lease_ttl=1.0), count=2)
    try:
        async with aiohttp.ClientSession() as http:
            body = {"model": "ingress-demo", "messages": [{"role": "user", "content": "hi"}], "stream": True}
            async with http.post(edges[0].url + CHAT, json=body, headers={"Authorization": f"Bearer {KEY}"}) as r:
                assert r.status == 200
                await r.content.readline()  # the stream has begun: the slot is held
                await asyncio.sleep(1.5)  # longer than the lease's TTL: it is being renewed
                assert await _chat(http, edges[1]) == 429
                edges[0].kill()  # SIGKILL: no settle, no release
            killed = time.monotonic()

            async def admitted() -> bool:
                return await _chat(http, edges[1]) == 200

            await eventually(admitted, "the dead edge's lease expired", timeout=10, interval=0.1)
            assert time.monotonic() - killed < 3 * 1.0 + 1  # within its TTL (and a renewal period), generously
    finally:
        for edge in edges:
            edge.kill()


async def test_with_the_store_gone_the_fleet_serves_under_the_degraded_policy(tmp_path: Path, store: Server) -> None:
    (edge,) = await _fleet(tmp_path, _config(tmp_path, store, "{ rpm = 1000 }", deadline_ms=100), count=1)
    try:
        async with aiohttp.ClientSession() as http:
            assert await _chat(http, edge) == 200
            store.stop()
            started = time.monotonic()
            assert [await _chat(http, edge) for _ in range(5)] == [200] * 5
            assert time.monotonic() - started < 5 * 3 * 0.1 + 2  # each admission waits at most about its deadline
            store.start()
        await eventually(lambda: len(edge.events("request")) == 6, "every request logged")
        limits = [e.get("limit") for e in edge.events("request")]
        assert limits[0] == "admitted" and "degraded_local" in limits[1:]
    finally:
        edge.kill()
