"""The spend ledger end to end: a mixed run through a real edge (chat, a stream, Messages through the anthropic
SDK, a hit of the route's response cache, a fallback from a route whose service refuses connections, a model
not served), the official SDKs as clients, its access lines captured; then `/admin/v1/spend`'s totals, as JSON
and as CSV, equal the sum of those lines, by model too, and the tenant's and the key's `usd` budgets spent equal
its cost to the nano-dollar. On a real Redis and Valkey, and on the memory backend (one worker). And an edge of
two workers stopped by SIGTERM has flushed every request it served."""

from __future__ import annotations

import csv
import io
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import pytest
from fakes.processes import EdgeProcess, free_port
from fakes.upstream import FakeUpstream, refusing_url
from logcapture import captured_logs, lines
from redis.asyncio import Redis as RedisPy
from redis_servers import Server
from waiting import eventually

from ingress.admin.api import create_admin_app
from ingress.admin.settings import Admin, AdminKey
from ingress.admin.settings import Ledger as LedgerSettings
from ingress.cache.settings import RouteCache
from ingress.edge.appkeys import GATEWAY, LEDGER
from ingress.serve.app import KEYSTORE, create_app, serve_app
from ingress.settings import Endpoint, Group, Route, Settings, Timeouts
from ingress.tenancy.keys import new_key
from ingress.tenancy.ledger import API_PATHS, nanos_of
from ingress.tenancy.settings import Budget, Key, Limits, ModelPolicy, Price, Tenancy, Tenant
from ingress.tenancy.settings import Redis as RedisSettings
from ingress.tenancy.stores.store import LocalStore

GPT, CLAUDE, CHAIN, UNKNOWN = "gpt-4o", "claude-sonnet-4-6", "chain", "no-such-model"
ADMIN, ADMIN_ID, ADMIN_HASH = new_key()
KEY, KEY_ID, KEY_HASH = new_key()
TIMEOUTS = Timeouts(connect=1.0, first_byte=5.0, idle=5.0)
PRICES = {GPT: Price(input=2.5, output=10.0), CLAUDE: Price(input=3.0, output=15.0),
          CHAIN: Price(input=0.15, output=0.6)}
MEASURED = {"requests": None, "input_tokens": "prompt_tokens", "output_tokens": "completion_tokens",
            "cached_tokens": "cached_tokens", "reasoning_tokens": "reasoning_tokens",
            "cache_write_tokens": "cache_write_tokens"}


def settings(upstream: str, refusing: str, redis: RedisSettings | None) -> Settings:
    tenancy = Tenancy(backend="redis" if redis else "memory", redis=redis,
                      tenants={"acme": Tenant(limits=Limits(budget=Budget(usd=1000.0)))},
                      keys=(Key(id=KEY_ID, tenant="acme", hash=KEY_HASH, limits=Limits(budget=Budget(usd=100.0))),),
                      models={name: ModelPolicy(price=price) for name, price in PRICES.items()})
    admin = Admin(listen="127.0.0.1:0", keys=(AdminKey(id=ADMIN_ID, hash=ADMIN_HASH, role="viewer"),),
                  ledger=LedgerSettings(flush_interval=0.1))
    return Settings(groups={"svc": Group(endpoints=[Endpoint(url=upstream)]),
                            "down": Group(endpoints=[Endpoint(url=refusing)])},
                    routes=(Route(model=GPT, group="svc", cache=RouteCache(ttl=600)), Route(model=CLAUDE, group="svc"),
                            Route(model=CHAIN, group="down", fallbacks=["backup"], fallback_on=("unavailable",)),
                            Route(name="backup", group="svc", upstream_model="backup-model")),
                    timeouts=TIMEOUTS, tenancy=tenancy, admin=admin)


class Run:
    def __init__(self, edge: str, admin: str, redis: RedisSettings | None, budget: Any) -> None:
        self.edge, self.admin, self.redis, self.budget = edge, admin, redis, budget


@pytest.fixture(params=["redis", "valkey", "memory"])
async def run(request: pytest.FixtureRequest, fake_upstream: FakeUpstream) -> AsyncIterator[Run]:
    redis = None
    if request.param != "memory":
        server: Server = request.getfixturevalue("limit_servers").get(request.param)
        redis = RedisSettings(url=server.url, prefix=f"ledger-{time.monotonic_ns()}", deadline_ms=2000)
    async with AsyncExitStack() as stack:
        refusing = stack.enter_context(refusing_url())
        app = create_app(settings(fake_upstream.url, refusing, redis))
        edge = await stack.enter_async_context(serve_app(app, "127.0.0.1", 0))
        tenancy, admin_settings = app[GATEWAY].tenancy, app[GATEWAY].settings.admin
        assert tenancy is not None and admin_settings is not None
        admin_app = create_admin_app(admin_settings, app[KEYSTORE], tenancy, app[LEDGER])
        admin = await stack.enter_async_context(serve_app(admin_app, "127.0.0.1", 0))
        yield Run(edge, f"{admin}/admin/v1/spend", redis, tenancy.limiter.store)


async def mixed_run(url: str) -> None:
    """Chat (again until a hit of the cache), a stream, Messages, a fallback and an unknown model."""
    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0) as client:
        question: dict[str, Any] = {"model": GPT, "messages": [{"role": "user", "content": "count the frames"}],
                                    "temperature": 0}
        await client.chat.completions.create(**question)

        async def hit() -> bool:  # the first answer is stored in the background
            raw = await client.chat.completions.with_raw_response.create(**question)
            return bool(raw.headers.get("x-ingress-cache") == "hit")

        await eventually(hit, "a hit of the response cache")
        stream = await client.chat.completions.create(
            model=GPT, messages=[{"role": "user", "content": "a stream of five words"}], stream=True,
            stream_options={"include_usage": True})
        usage = [chunk.usage async for chunk in stream if chunk.usage is not None]
        assert usage and usage[0].completion_tokens == 5
        fallen = await client.chat.completions.with_raw_response.create(
            model=CHAIN, messages=[{"role": "user", "content": "served by the backup"}])
        assert 'route="backup"' in fallen.headers["x-ingress-served-by"]
        with pytest.raises(openai.NotFoundError):
            await client.chat.completions.create(model=UNKNOWN, messages=[{"role": "user", "content": "x"}])
    async with anthropic.AsyncAnthropic(base_url=url, api_key=KEY, max_retries=0) as claude:
        message = await claude.messages.create(model=CLAUDE, max_tokens=64,
                                               messages=[{"role": "user", "content": "hello from messages"}])
        assert message.usage.output_tokens == 3


def summed(access: list[dict[str, Any]]) -> dict[str, int]:
    """The ledger's measures, as the sum over the access lines."""
    totals = {name: sum(1 if field is None else int(line.get(field, 0)) for line in access)
              for name, field in MEASURED.items()}
    totals["cost_nanos"] = sum(nanos_of(line["cost_usd"]) for line in access if "cost_usd" in line)
    totals["errors"] = sum(1 for line in access if line["status"] >= 400 or line["outcome"] != "ok")
    totals["cache_hits"] = sum(1 for line in access if line.get("cached") is True)
    return totals


async def spend(http: aiohttp.ClientSession, url: str, **params: str) -> Any:
    today = time.strftime("%Y-%m-%d", time.gmtime())
    async with http.get(url, params={"from": today, "to": today, **params},
                        headers={"Authorization": f"Bearer {ADMIN}"}) as r:
        assert r.status == 200, await r.text()
        return await r.json() if params.get("format") != "csv" else await r.text()


async def test_the_ledger_equals_the_access_lines_and_the_budgets(run: Run, http: aiohttp.ClientSession) -> None:
    with captured_logs() as stream:
        await mixed_run(run.edge)
        access = [line for line in lines(stream) if line.get("event") == "request"
                  and line["path"].startswith(API_PATHS)]
    expected = summed(access)
    assert expected["cache_hits"] >= 1 and expected["errors"] >= 1
    assert {line["path"] for line in access} == {"/v1/chat/completions", "/v1/messages"}
    assert any(line.get("fell_back") for line in access) and expected["cost_nanos"] > 0

    async def flushed() -> bool:
        return bool((await spend(http, run.admin, group_by=""))["total"]["requests"] == len(access))

    await eventually(flushed, "the ledger flushed", timeout=10)
    answer = await spend(http, run.admin, group_by="")
    total = answer["total"]
    assert {name: total[name] for name in expected} == expected
    assert total["cost_usd"] == f"{expected['cost_nanos'] // 10**9}.{expected['cost_nanos'] % 10**9:09d}"

    by_model = await spend(http, run.admin, group_by="model,key,tenant")
    for row in by_model["data"]:
        ours = [line for line in access if line.get("model") == row["model"]]
        assert {name: row[name] for name in expected} == summed(ours), row["model"]
        assert (row["tenant"], row["key"]) == ("acme", KEY_ID)
    assert {row["model"] for row in by_model["data"]} == {GPT, CLAUDE, CHAIN, UNKNOWN}

    table = list(csv.DictReader(io.StringIO(await spend(http, run.admin, group_by="route", format="csv",
                                                        granularity="hour"))))
    assert {name: sum(int(row[name]) for row in table) for name in expected} == expected
    assert {row["route"] for row in table} == {GPT, CLAUDE, CHAIN, ""}  # the unknown model had no route

    month = time.strftime("%Y-%m", time.gmtime())

    async def spent(check: str) -> int:
        if run.redis is None:
            assert isinstance(run.budget, LocalStore)
            return run.budget.memory._quota[check][0]  # what the memory store has spent and holds
        async with RedisPy.from_url(run.redis.url) as raw:
            return int(await raw.get(f"{{{run.redis.prefix}}}:{check}") or 0)

    for check in (f"t:acme:busd:{month}", f"k:{KEY_ID}:busd:{month}"):
        async def settled(check: str = check) -> bool:  # settles are sent off the response path too
            return bool(await spent(check) == total["cost_nanos"])

        await eventually(settled, f"the budget {check} spent what the ledger holds", timeout=10)


async def test_a_clean_stop_flushes_what_the_workers_added(tmp_path: Path, limit_server: Server) -> None:
    """Two workers that would flush once a minute: their requests are in the ledger once SIGTERM's drain ends."""
    prefix = f"stop-{time.monotonic_ns()}"
    config = tmp_path / "edge.toml"
    config.write_text(f"""models = ["ingress-demo"]
[tenancy]
backend = "redis"
redis = {{ url = "{limit_server.url}", prefix = "{prefix}", deadline_ms = 2000 }}
[tenancy.tenants.acme]
[[tenancy.keys]]
id = "{KEY_ID}"
tenant = "acme"
hash = "{KEY_HASH}"
[admin]
listen = "127.0.0.1:{free_port()}"
[[admin.keys]]
id = "{ADMIN_ID}"
hash = "{ADMIN_HASH}"
[admin.ledger]
flush_interval = 60.0
""")
    edge = EdgeProcess(tmp_path, "edge", free_port(), ["--config", str(config)], 2, None)
    try:
        await edge.started()
        async with openai.AsyncOpenAI(base_url=f"{edge.url}/v1", api_key=KEY, max_retries=0) as client:
            for _ in range(12):
                await client.chat.completions.create(model="ingress-demo", max_tokens=3,
                                                     messages=[{"role": "user", "content": "hi"}])
        edge.terminate()
        assert await edge.exit_code(timeout=15) == 0
    finally:
        edge.kill()
    served = [line for line in edge.events("request") if line.get("path") == "/v1/chat/completions"]
    assert len(served) == 12
    day = time.strftime("%Y-%m-%d", time.gmtime())
    async with RedisPy.from_url(limit_server.url) as raw:
        stored = {(k.decode() if isinstance(k, bytes) else str(k)): int(v)
                  for k, v in (await raw.hgetall(f"{{{prefix}}}:ledger:d:{day}")).items()}
    assert sum(value for field, value in stored.items() if field.startswith("0:")) == 12  # requests
    assert sum(value for field, value in stored.items() if field.startswith("2:")) == sum(  # output tokens
        line["completion_tokens"] for line in served)
