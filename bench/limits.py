"""The limit stores side by side: what one request's admission and settle cost with the memory store, and
with the Redis store (its own RESP2 client, tenancy/stores/resp.py) against a real Redis and a real Valkey on
loopback; with --baseline DIR, also DIR's Redis store (its redis.py and limits.lua, e.g. main's in a
second worktree) against the same servers, in the same rounds; when DIR's store talks through redis-py,
once with redis-py's hiredis parser and once with its pure-Python one.

One admission is a real request's plan (policy.py's checks for a key with rpm, tpm and concurrency, and
its tenant with tpm and a USD budget: 6 checks, 5 keys and the reservation in one script call), awaited
one at a time on uvloop, as the edge does; after each, its settle (the real usage, a refund) is spawned in
a task of its own, as the limiter does when a request ends. Each round runs every candidate in a fresh
random order; the figures are over all rounds:

    p50, p99     the admission's latency as the caller sees it, µs
    cpu          this process's CPU per admission and settle (the client side: building the calls, the
                 parser, asyncio), µs, until every settle of the batch has returned
    calls        script calls per request (admission and settle), from INFO commandstats
    server cpu   the server process's CPU per request (INFO cpu), µs; script: its time per script call

"the call alone" rows send only the admission's EVALSHA (the bytes the store sends for the same plan, made
before the clock starts), awaited one at a time: through resp.py's client, through redis-py's (hiredis and
its Python parser), and through a bare asyncio Protocol, the floor under any client (one write, the reply
taken as one read, its status the only thing parsed; no deadline): what is left is the kernel's loopback
and the loop's wake-up, which no client removes.

    .venv/bin/python -m bench limits [--rounds N] [--batch N] [--baseline DIR] [--no-concurrency]
                                                -> results/limits.json (limits-no-concurrency.json)

With --no-concurrency the key has no concurrency limit (5 checks): a settle that frees no slot waits up
to the store's BATCH_DELAY for others to share its call, where one that frees a slot goes at once.

Bounded: loopback only, rounds x batch admissions per candidate (20 x 250 by default, ~20 s in all).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import importlib.util
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import uvloop

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "support"))

from redis._parsers import _AsyncHiredisParser, _AsyncRESP2Parser  # noqa: E402
from redis.asyncio import Redis as Client  # noqa: E402
from redis.utils import HIREDIS_AVAILABLE  # noqa: E402
from redis_servers import running  # noqa: E402

from bench.lib.provenance import code_version, describe  # noqa: E402
from bench.lib.rounds import Rounds  # noqa: E402
from ingress.tenancy.plan import Actual, Plan, checks_of  # noqa: E402
from ingress.tenancy.settings import Budget, Limits, Price, Redis  # noqa: E402
from ingress.tenancy.stores.redis import LIMITS, RedisStore, _checks_of, record_of  # noqa: E402
from ingress.tenancy.stores.resp import Client as RespClient  # noqa: E402
from ingress.tenancy.stores.resp import address_of  # noqa: E402
from ingress.tenancy.stores.store import LocalStore, Store  # noqa: E402

KEY = Limits(rpm=10**9, tpm=10**12, concurrency=10**6)
KEY_UNCAPPED = Limits(rpm=10**9, tpm=10**12)  # --no-concurrency: no slot to free, so its settle may wait for company
TENANT = Limits(tpm=10**12, budget=Budget(usd=10**9, period="month"))
PRICE = Price(input=2.5, output=10.0)


def request_plan(now_s: float, key: Limits = KEY) -> Plan:
    checks = [*checks_of(key, "key", "3f9c2a7d1b6e", PRICE, now_s, 30_000_000, "local"),
              *checks_of(TENANT, "tenant", "acme", PRICE, now_s, 30_000_000, "local")]
    return Plan(os.urandom(12).hex(), tuple(checks), 900, 300)


async def server_stats(raw: Client) -> tuple[float, int, int]:
    """The server's CPU seconds so far, and its EVALSHA calls and microseconds."""
    cpu = await raw.info("cpu")
    stats = await raw.info("commandstats")
    evalsha = stats.get("cmdstat_evalsha", {"calls": 0, "usec": 0})
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]), int(evalsha["calls"]), int(evalsha["usec"])


class Candidate:
    def __init__(self, name: str, store: Store, raw: Client | None, key: Limits = KEY) -> None:
        self.name, self.store, self.raw, self.key = name, store, raw, key
        self.reset()

    def reset(self) -> None:
        self.latencies: list[float] = []
        self.cpu = 0.0
        self.server_cpu = 0.0
        self.script_us = 0
        self.script_calls = 0
        self.admissions = 0
        self.degraded = 0

    async def batch(self, n: int) -> None:
        plans = [request_plan(time.time(), self.key) for _ in range(n)]
        used = Actual(900, 100)
        before = await server_stats(self.raw) if self.raw is not None else None
        settles: set[asyncio.Task[None]] = set()
        cpu0 = time.process_time()
        for p in plans:
            t0 = time.perf_counter()
            decision = await self.store.admit(p)
            self.latencies.append(time.perf_counter() - t0)
            self.degraded += decision.degraded is not None or not decision.admitted
            settle = asyncio.get_running_loop().create_task(self.store.settle(p.ticket, used))
            settles.add(settle)
            settle.add_done_callback(settles.discard)
        while settles:
            await asyncio.wait(list(settles))
        self.cpu += time.process_time() - cpu0
        await self.counted(before, n)

    async def counted(self, before: tuple[float, int, int] | None, n: int) -> None:
        """A batch of `n` is done: the admissions, and the server's CPU and script calls since `before`."""
        if self.raw is not None and before is not None:
            after = await server_stats(self.raw)
            self.server_cpu += after[0] - before[0]
            self.script_calls += after[1] - before[1]
            self.script_us += after[2] - before[2]
        self.admissions += n

    def figures(self) -> dict[str, Any]:
        us = sorted(x * 1e6 for x in self.latencies)
        out: dict[str, Any] = {
            "admissions": self.admissions, "degraded_or_refused": self.degraded,
            "p50_us": round(statistics.median(us), 1), "p99_us": round(us[int(len(us) * 0.99)], 1),
            "cpu_us": round(self.cpu / self.admissions * 1e6, 1)}
        if self.raw is not None:
            out["calls_per_request"] = round(self.script_calls / self.admissions, 2)
            out["server_cpu_us"] = round(self.server_cpu / self.admissions * 1e6, 1)
            out["script_us"] = round(self.script_us / max(self.script_calls, 1), 1)
        return out


class Caller(Candidate):
    """The admission's own call alone, the command the store sends, through one client (no store around it):
    what the client costs an admission."""

    def __init__(self, name: str, call: Callable[[list[str], list[Any]], Awaitable[Any]],
                 close: Callable[[], Awaitable[None]], raw: Client, key: Limits = KEY) -> None:
        super().__init__(name, LocalStore(), raw, key)
        self.call, self.close = call, close

    async def batch(self, n: int) -> None:
        calls = [admission_call(request_plan(time.time(), self.key)) for _ in range(n)]
        before = await server_stats(self.raw) if self.raw is not None else None
        cpu0 = time.process_time()
        for keys, args in calls:
            t0 = time.perf_counter()
            reply = await self.call(keys, args)
            self.latencies.append(time.perf_counter() - t0)
            self.degraded += reply[0] != 1
        self.cpu += time.process_time() - cpu0
        await self.counted(before, n)


def admission_call(plan: Plan, prefix: str = "{bench}:") -> tuple[list[str], list[Any]]:
    """The keys and arguments of the store's admission EVALSHA for `plan` (as RedisStore.admit makes them)."""
    keys = [prefix + c.key for c in plan.checks]
    return ([f"{prefix}r:{plan.ticket}", f"{prefix}s:{plan.ticket}", *keys],
            ["admit", plan.ticket, record_of(keys, plan), *_checks_of(plan)])


def callers(kind: str, url: str, raw: Client, key: Limits) -> list[Candidate]:
    """The admission's call through resp.py's client, and through redis-py's with each of its parsers."""
    resp_client = RespClient(url, connect_timeout=1.0)

    async def through_resp(keys: list[str], args: list[Any]) -> Any:
        return await resp_client.evalsha(LIMITS, keys, args, asyncio.get_running_loop().time() + 1.0)

    found: list[Candidate] = [Caller(f"{kind}, the call alone, resp.py", through_resp, resp_client.close, raw, key)]
    bare = Bare(url)
    found.append(Caller(f"{kind}, the call alone, bare Protocol (floor)", bare.call, bare.close, raw, key))
    parsers = [("hiredis", _AsyncHiredisParser)] if HIREDIS_AVAILABLE else []
    for parser_name, parser in [*parsers, ("python parser", _AsyncRESP2Parser)]:
        client = Client.from_url(url, socket_timeout=1.0, protocol=2, parser_class=parser)

        async def through_redis_py(keys: list[str], args: list[Any], client: Client = client) -> Any:
            return await client.evalsha(LIMITS.sha, len(keys), *keys, *args)

        found.append(Caller(f"{kind}, the call alone, redis-py {parser_name}", through_redis_py, client.aclose, raw,
                            key))
    return found


class Bare(asyncio.Protocol):
    """The floor under any client: the same bytes written once, the reply taken as one read (no parsing, no
    deadline), the next call after it."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.transport: asyncio.Transport | None = None
        self.reply: asyncio.Future[bytes] | None = None

    def data_received(self, data: bytes) -> None:
        if self.reply is not None and not self.reply.done():
            self.reply.set_result(data)

    async def call(self, keys: list[str], args: list[Any]) -> Any:
        loop = asyncio.get_running_loop()
        if self.transport is None:
            address = address_of(self.url)
            transport, _ = await loop.create_connection(lambda: self, address.host, address.port)
            self.transport = transport
            self.transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.reply = loop.create_future()
            self.transport.write(LIMITS.load)
            await self.reply
        command = LIMITS.command(keys, args)
        self.reply = loop.create_future()
        self.transport.write(command)
        data = await self.reply
        return [int(data.split(b"\r\n", 2)[1][1:])]  # the status alone

    async def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


def stores_of(root: Path) -> Path:
    """Where another checkout keeps its Redis store: tenancy/stores/, or tenancy/ itself before the stores moved."""
    stores = root / "ingress" / "tenancy" / "stores"
    return stores if stores.is_dir() else stores.parent


def baseline_store_class(root: Path) -> type[RedisStore]:
    """The RedisStore of another checkout (its redis.py, with its own limits.lua), beside this one's."""
    spec = importlib.util.spec_from_file_location("baseline_redis", stores_of(root) / "redis.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    script = (stores_of(root) / "limits.lua").read_text()
    setattr(module, "SCRIPT", script)  # noqa: B010 (its own script, not this checkout's)
    setattr(module, "SHA", hashlib.sha1(script.encode()).hexdigest())  # noqa: B010
    cls: type[RedisStore] = getattr(module, "RedisStore")  # noqa: B009
    return cls


def redis_store(url: str, cls: type[RedisStore] = RedisStore, parser: type | None = None) -> RedisStore:
    """A store on `url`; a redis-py client's parser replaced by `parser` (DIR's store, if it uses redis-py)."""
    store = cls(Redis(url=url, deadline_ms=1000, prefix="bench"), workers=1)
    if parser is not None:
        client: Any = store.client
        setattr(store, "client", Client.from_url(  # noqa: B010 (DIR's store's client is redis-py's, not resp.py's)
            url, retry=client.get_retry(), socket_timeout=store.deadline, socket_connect_timeout=store.deadline,
            protocol=2, parser_class=parser))
    return store


def uses_redis_py(root: Path) -> bool:
    """Whether another checkout's store talks through redis-py's client."""
    return "from redis.asyncio import" in (stores_of(root) / "redis.py").read_text()


async def run(args: argparse.Namespace, servers: dict[str, str]) -> dict[str, Any]:
    key = KEY_UNCAPPED if args.no_concurrency else KEY
    candidates = [Candidate("memory", LocalStore(), None, key)]
    baseline = baseline_store_class(args.baseline) if args.baseline else None
    raws: list[Client] = []
    versions = {}
    for kind, url in servers.items():
        raw = Client.from_url(url)
        raws.append(raw)
        info = await raw.info("server")
        versions[kind] = f"{kind} {info.get('valkey_version') or info['redis_version']}"
        candidates.append(Candidate(f"{kind}, resp.py", redis_store(url), raw, key))
        candidates += callers(kind, url, raw, key)
        if baseline is None:
            continue
        if not uses_redis_py(args.baseline):
            candidates.append(Candidate(f"{kind}, baseline", redis_store(url, baseline), raw, key))
            continue
        parsers = [("hiredis", _AsyncHiredisParser)] if HIREDIS_AVAILABLE else []
        for parser_name, parser in [*parsers, ("python parser", _AsyncRESP2Parser)]:
            candidates.append(Candidate(f"{kind}, baseline, redis-py {parser_name}",
                                        redis_store(url, baseline, parser), raw, key))
    for c in candidates:  # warm up: connections open, the script loaded
        await c.batch(20)
        c.reset()
    for _, order in Rounds(candidates, args.rounds, order="shuffle"):  # a fresh random order each round
        for c in order:
            await c.batch(args.batch)
    for c in candidates:
        await (c.close() if isinstance(c, Caller) else c.store.close())
    for raw in raws:
        await raw.aclose()
    return {"servers": versions, "results": {c.name: c.figures() for c in candidates}}


def table(results: dict[str, dict[str, Any]]) -> str:
    memory = results["memory"]
    rows = ["| store | admit p50 µs | admit p99 µs | cpu µs/request | vs memory (cpu) | calls/request | "
            "server cpu µs | script µs/call |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in results.items():
        ratio = r["cpu_us"] / memory["cpu_us"]
        rows.append(f"| {name} | {r['p50_us']} | {r['p99_us']} | {r['cpu_us']} | {ratio:.1f}x | "
                    f"{r.get('calls_per_request', '')} | {r.get('server_cpu_us', '')} | {r.get('script_us', '')} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--batch", type=int, default=250)
    parser.add_argument("--baseline", type=Path, help="another checkout whose Redis store runs beside this one's")
    parser.add_argument("--no-concurrency", action="store_true", help="the key without its concurrency limit")
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as work, running("redis", Path(work)) as r, running("valkey", Path(work)) as v:
        started = time.monotonic()
        found = uvloop.run(run(args, {"redis": r.url, "valkey": v.url}))
        seconds = time.monotonic() - started
    results, versions = found["results"], found["servers"]
    version = code_version()
    print(f"{describe(version)}; load average before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f}; "
          f"{args.rounds} rounds x {args.batch} admissions per store in {seconds:.0f} s; "
          f"{'no ' if args.no_concurrency else ''}concurrency limit; "
          f"{', '.join(versions.values())}")
    print(table(results))
    out = HERE / "results" / ("limits-no-concurrency.json" if args.no_concurrency else "limits.json")
    out.write_text(json.dumps({"code": version, "load_before": load_before, "load_after": os.getloadavg(),
                               "rounds": args.rounds, "batch": args.batch, "python": sys.version.split()[0],
                               "baseline": str(args.baseline) if args.baseline else None,
                               "concurrency_limit": not args.no_concurrency,
                               "servers": versions, "hiredis": HIREDIS_AVAILABLE, "results": results},
                              indent=1) + "\n")


if __name__ == "__main__":
    main()
