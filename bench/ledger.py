"""What the spend ledger costs a request: in process, and in the edge's process with it on and off side by side,
with the Redis round trips a request.

    nice -n 10 .venv/bin/python -m bench ledger [--quick]   -> results/ledger.json (~1.5 min; --quick ~30 s,
                                                                results/ledger-quick.json)

1. In process, on the thread's CPU clock (bench/lib/budget.py's side_by_side: each pair timed back to back,
   which first alternating by round, GC off inside each loop): the access line as the middleware writes it,
   alone and with `Ledger.add` of the same record (the ledger's whole share of a request: no I/O, no task);
   `Ledger.add` alone, for a record whose rollup exists and for one of a new key (a first request this hour);
   and the CPU, in the edge, to encode one flush of 100 rollups (once a second a worker, not a request).

2. The edge's CPU per request: two `ingress serve --workers 1` with the demo service embedded, [tenancy] on a
   Redis of each one's own (tests/support/redis_servers.py: Debian's redis-server), one key, the admin API on,
   `[admin.ledger] enabled` false on one and true (a flush a second) on the other, otherwise the same. One
   keep-alive connection to each sends a small chat request N times per round (the two alternated, each first
   in turn). CPU from /proc for each edge's process tree, per request, and the difference within each round;
   each Redis's calls per request over the same requests (INFO commandstats: the commands a client sends;
   EVALSHA, the scripts of admission, settling, and the ledger's flush), and the ledger's flushes exactly (the
   marks its script sets, one a call). A round ends with 1.1 s idle, so that its requests' flush is in it.

The machine's two cores are shared: only figures of the same run are compared.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "support"))
MODEL = "ingress-demo"
RECORD: dict[str, Any] = {"method": "POST", "path": "/v1/chat/completions", "status": 200, "outcome": "ok",
                          "duration_ms": 2.5, "model": "gpt-4o", "stream": False, "upstream": "http://127.0.0.1:9000",
                          "route": "gpt-4o", "tenant": "acme", "key_id": "0c4f1e9a7b2d", "api": "chat",
                          "limit": "admitted", "ttfb_ms": 2.1, "prompt_tokens": 2000, "completion_tokens": 64,
                          "cached_tokens": 1024, "cache_write_tokens": 0, "reasoning_tokens": 0,
                          "cost_usd": 0.00564}
CLIENT_CALLS = ("evalsha", "eval", "get", "hvals", "hgetall", "zrem", "script", "auth", "select", "ping", "info")


def part1(rounds: int, budget: float) -> dict[str, Any]:
    import asyncio

    from bench.lib.budget import side_by_side
    from ingress.log import access, configure
    from ingress.tenancy.ledger import Ledger, Rollup
    from ingress.tenancy.settings import Redis
    from ingress.tenancy.stores.ledger import FLUSH, MemoryLedgerStore, RedisLedgerStore

    configure("info", stream=open(os.devnull, "w"), cache=False)  # noqa: SIM115  # lives as long as the process
    ledger = Ledger(MemoryLedgerStore(35, 400))
    keys = iter(range(10**12))

    def new_key() -> None:  # a record whose rollup is new: the dict grows (taken every 4096, as a flush would)
        n = next(keys)
        ledger.add({**RECORD, "key_id": f"k{n}"})
        if n % 4096 == 0:
            ledger.rollup.take()

    store = RedisLedgerStore(Redis(url="redis://127.0.0.1:1"), 100, 35, 400)
    rollup = Rollup()
    for n in range(100):
        rollup.add({**RECORD, "key_id": f"k{n}"})
    batch = rollup.take()

    def encode_flush() -> None:
        for keys_, args in store.calls("p:1", batch):
            FLUSH.command(keys_, args)

    pairs: dict[str, tuple[Callable[[], object] | None, Callable[[], object]]] = {
        "the access line, and Ledger.add": (lambda: access(20, dict(RECORD), "r" * 32),
                                            lambda: (access(20, record := dict(RECORD), "r" * 32), ledger.add(record))),
        "Ledger.add, its rollup there": (None, lambda: ledger.add(RECORD)),
        "Ledger.add, a new rollup": (None, new_key),
        "encode a flush of 100 rollups": (None, encode_flush),
    }
    table = side_by_side(pairs, ("off", "on"), rounds, budget)
    asyncio.run(store.close())
    return table


def _post(conn: http.client.HTTPConnection, body: bytes, auth: str) -> int:
    conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json", "Authorization": auth})
    response = conn.getresponse()
    response.read()
    return response.status


def _calls(url: str) -> dict[str, int]:
    """A Redis's calls so far, by command (INFO commandstats), and the ledger's flushes (`flushes`: the marks
    its script sets, one a call, kept a day)."""
    import redis

    with redis.Redis.from_url(url) as raw:
        stats = raw.info("commandstats")
        marks = sum(1 for _ in raw.scan_iter("{ingress}:ledger:f:*", count=1000))
    return {"flushes": marks, **{name.removeprefix("cmdstat_"): int(stat["calls"]) for name, stat in stats.items()}}


def part2(rounds: int, per_round: int, work: Path) -> dict[str, Any]:
    from redis_servers import running

    from bench.lib.procs import cpu_seconds
    from bench.lib.rounds import Rounds
    from bench.lib.servers import Server, free_port, serving
    from ingress.tenancy.keys import new_key

    key, key_id, key_hash = new_key()
    _, admin_id, admin_hash = new_key()
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "Say hello to the edge"}],
                       "max_tokens": 16}).encode()
    variants = ("ledger off", "ledger on")
    with ExitStack() as stack:
        for name in variants:
            (work / name.replace(" ", "-")).mkdir()
        stores = {name: stack.enter_context(running("redis", work / name.replace(" ", "-"))) for name in variants}
        edges: dict[str, Server] = {}
        for name in variants:
            port = free_port()
            config = work / f"{name.replace(' ', '-')}.toml"
            config.write_text(
                f'port = {port}\nworkers = 1\nmodels = ["{MODEL}"]\n\n[tenancy]\nbackend = "redis"\n'
                f'redis = {{ url = "{stores[name].url}", deadline_ms = 1000 }}\n[tenancy.tenants.acme]\n'
                f'[[tenancy.keys]]\nid = "{key_id}"\ntenant = "acme"\nhash = "{key_hash}"\n'
                f'[tenancy.models.{MODEL}]\nprice = {{ input = 2.5, output = 10.0 }}\n\n'
                f'[admin]\nlisten = "127.0.0.1:{free_port()}"\n[[admin.keys]]\nid = "{admin_id}"\n'
                f'hash = "{admin_hash}"\n[admin.ledger]\nenabled = {"true" if name == "ledger on" else "false"}\n')
            edges[name] = Server(name, [sys.executable, "-m", "ingress", "serve", "--config", str(config)], port,
                                 work / f"{name.replace(' ', '-')}.log")
        stack.enter_context(serving(*edges.values()))
        conns = {name: http.client.HTTPConnection("127.0.0.1", edge.port, timeout=10) for name, edge in edges.items()}
        for name, conn in conns.items():  # each works, and is warm
            for _ in range(200):
                if (status := _post(conn, body, f"Bearer {key}")) != 200:
                    raise RuntimeError(f"{name} answered {status}; see {edges[name].log}")

        def measure(name: str) -> dict[str, float]:
            conn, pid = conns[name], edges[name].pid
            calls, before = _calls(stores[name].url), sum(cpu_seconds(pid))
            for _ in range(per_round):
                _post(conn, body, f"Bearer {key}")
            time.sleep(1.1)  # the flush of this round's requests (a second after the last at most)
            used = sum(cpu_seconds(pid)) - before
            after = _calls(stores[name].url)
            sent = {c: after.get(c, 0) - calls.get(c, 0) for c in CLIENT_CALLS}
            return {"us": used / per_round * 1e6, "evalsha": sent["evalsha"] / per_round,
                    "round_trips": sum(sent.values()) / per_round,
                    "flushes": (after["flushes"] - calls["flushes"]) / per_round}

        measured = Rounds(variants, rounds, order="alternate", baseline="ledger off").collect(measure)
        for conn in conns.values():
            conn.close()
    return {name: {"us": measured.median(name, "us"), "runs": measured.values(name, "us"),
                   "added_us": None if name == "ledger off" else measured.added(name, "us").median,
                   "added_range": None if name == "ledger off" else measured.added(name, "us").range(1),
                   "evalsha": measured.median(name, "evalsha"), "round_trips": measured.median(name, "round_trips"),
                   "flushes": measured.median(name, "flushes")}
            for name in variants}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--requests", type=int, default=2000, help="per variant per round, part 2")
    parser.add_argument("--quick", action="store_true", help="3 rounds, shorter loops, fewer requests")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    from bench.lib.provenance import code_version, describe
    from bench.lib.results import niced, result_path, write_result
    from bench.lib.tables import Table, figure

    niced()
    rounds, budget, requests = (3, 0.05, 500) if args.quick else (args.rounds, 0.2, args.requests)
    started = time.monotonic()
    first = part1(rounds, budget)
    with tempfile.TemporaryDirectory(prefix="bench-ledger-") as work:
        second = part2(rounds, requests, Path(work))
    print(describe(code_version()))
    print(f"\n1. In process, thread CPU µs per call ({rounds} rounds, each pair back to back)")
    table = Table(("", "<34"), ("off µs", ">9"), ("on µs", ">9"), ("on - off (range)", ">32"))
    print(table.header())
    for name, row in first.items():
        print(table.row(name, figure(row["off"]["us"] if "off" in row else None, 2), figure(row["on"]["us"], 2),
                        f"{row['difference_us']:+.2f}  ({row['difference_range'][0]:+.2f} to "
                        f"{row['difference_range'][1]:+.2f})"))
    print(f"\n2. The edge's CPU µs per request (its process tree, /proc) and its Redis's calls per request, "
          f"{requests} chat requests per variant per round, {rounds} rounds, one keep-alive connection each, "
          "demo service embedded, [tenancy] on Redis")
    table = Table(("edge", "<12"), ("µs", ">9.1f"), ("added (range)", ">26"), ("Redis calls/req", ">16.4f"),
                  ("EVALSHA/req", ">12.4f"), ("ledger flushes/req", ">19.4f"))
    print(table.header())
    for name, row in second.items():
        print(table.row(name, row["us"], "" if row["added_us"] is None else
                        f"{row['added_us']:+.1f}  ({row['added_range']})", row["round_trips"], row["evalsha"],
                        row["flushes"]))
    write_result({"code": code_version(), "meta": {"rounds": rounds, "requests": requests,
                                                   "wall_s": time.monotonic() - started},
                  "in_process": first, "edge": second}, result_path("ledger", args.quick, args.out))


if __name__ == "__main__":
    main()
