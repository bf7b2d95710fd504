"""Identical misses in flight (ingress/cache/flight.py): a burst of identical cacheable requests against a
burst of distinct ones, side by side in one run: how many reach the service, the edge's CPU per request,
and what the clients wait (time to first token for a stream, the answer for a whole request).

    nice -n 10 .venv/bin/python -m bench cache_flights [--rounds 5] [--burst 16] [--bursts 8] [--size 4096]
        [--out FILE] -> results/cache_flights.json

One edge (`ingress serve`, one worker) in front of `ingress demo-upstream` with a prefill time (`--prefill-us`
per prompt token) and a pause between streamed tokens (`--delay-ms`), so that an answer takes as long as a
small model's; routes gpt-4o and llama-3.1-8b-instruct with a memory `cache`. The request is payloads.py's
11-message chat request of `--size` bytes with a tool, at temperature 0, max_tokens 64.

A burst is `--burst` requests sent at once, each on its own connection:
- identical: the same request (a fresh one each burst, so that no stored entry answers it): one of them
  leads, the others find it in flight and are answered with its answer (a stream tails its frames);
- distinct: each request's last user message carries its own number (the same length): every one is a miss.

A cell (model, shape, burst kind: `--bursts` bursts) runs once a round, in a shuffled order. Its figures, per
burst: requests that reached the service (the edge's `ingress_response_cache_lookups_total{outcome="miss"}`),
coalesced requests (`ingress_cache_coalesced_total`); the edge's CPU (its process, user + system, /proc) per
request; the median client-side wait, the slowest of a burst, a burst's length. The table gives medians over
rounds, and identical/distinct ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
from prometheus_client.parser import text_string_to_metric_families

HERE = Path(__file__).resolve().parent

from bench.lib.payloads import OPEN_MODEL, OPENAI_MODEL, chat_request  # noqa: E402
from bench.lib.procs import cpu_seconds, machine_busy  # noqa: E402
from bench.lib.provenance import code_version, describe  # noqa: E402
from bench.lib.rounds import Spread  # noqa: E402
from bench.lib.servers import Server, free_port, python_in, serving  # noqa: E402
from bench.lib.tables import Table, figure  # noqa: E402

ROOT = HERE.parent
MODELS = (OPENAI_MODEL, OPEN_MODEL)
SHAPES = ("whole", "stream")
KINDS = ("identical", "distinct")
MAX_TOKENS = 64


def config(upstream: int) -> str:
    routes = "".join(f'[[routes]]\nmodel = "{m}"\ngroup = "demo"\ncache = {{ ttl = 3600 }}\n\n' for m in MODELS)
    return f"""workers = 1
log_level = "warning"

[groups.demo]
endpoints = [{{ url = "http://127.0.0.1:{upstream}" }}]

{routes}"""


def body(model: str, size: int, stream: bool, tag: str) -> bytes:
    """The request, its last user message starting with `tag` (the same length for every tag)."""
    fields = msgspec.json.decode(chat_request(size, max_tokens=MAX_TOKENS, model=model))
    fields["temperature"] = 0
    users = [m for m in fields["messages"] if m["role"] == "user"]
    users[-1]["content"] = tag + users[-1]["content"][len(tag):]
    if stream:
        fields["stream"] = True
    return msgspec.json.encode(fields)


def counters(url: str) -> dict[str, float]:
    """The edge's misses (requests sent to the service) and coalesced hits so far, over every route."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:
        text = r.read().decode()
    got = {"miss": 0.0, "coalesced": 0.0}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "ingress_response_cache_lookups_total" and s.labels.get("outcome") == "miss":
                got["miss"] += s.value
            elif s.name == "ingress_cache_coalesced_total":
                got["coalesced"] += s.value
    return got


async def one(session: aiohttp.ClientSession, url: str, payload: bytes, stream: bool) -> tuple[float, str]:
    """(seconds to the first token of a stream, or to a whole answer; the answer's text), checked whole."""
    started = time.perf_counter()
    first = None
    text = []
    async with session.post(f"{url}/v1/chat/completions", data=payload,
                            headers={"Content-Type": "application/json"}) as r:
        if r.status != 200:
            raise SystemExit(f"HTTP {r.status}: {(await r.read())[:300]!r}")
        if not stream:
            doc = await r.json()
            return time.perf_counter() - started, doc["choices"][0]["message"]["content"]
        done = False
        async for line in r.content:
            if line.startswith(b"data: {"):
                event = json.loads(line[6:])
                piece = event["choices"][0]["delta"].get("content") if event["choices"] else None
                if piece:
                    first = first or time.perf_counter() - started
                    text.append(piece)
            elif line.startswith(b"data: [DONE]"):
                done = True
        if not done or first is None:
            raise SystemExit("a stream ended incomplete")
    return first, "".join(text)


async def burst(url: str, model: str, size: int, shape: str, kind: str, n: int, fresh: int) -> list[tuple[float, str]]:
    stream = shape == "stream"
    payloads = [body(model, size, stream, f"b{fresh:08d}{'' if kind == 'identical' else f'-{i:04d}'} ")
                for i in range(n)]
    connector = aiohttp.TCPConnector(limit=0, force_close=True)  # each request on its own connection
    async with aiohttp.ClientSession(connector=connector) as session:
        return await asyncio.gather(*(one(session, url, p, stream) for p in payloads))


def run_cell(edge: Server, model: str, size: int, shape: str, kind: str, n: int, bursts: int,
             fresh: list[int]) -> dict[str, float]:
    """`bursts` bursts of `n` requests (each burst a fresh request): per burst, what reached the service and
    was coalesced; per request, the edge's CPU; the median wait, the median burst's slowest, its length."""
    before, cpu0 = counters(edge.url), sum(cpu_seconds(edge.pid))
    waits, slowest, lengths = [], [], []
    for _ in range(bursts):
        fresh[0] += 1
        started = time.perf_counter()
        answers = asyncio.run(burst(edge.url, model, size, shape, kind, n, fresh[0]))
        lengths.append(time.perf_counter() - started)
        if kind == "identical" and len({text for _, text in answers}) != 1:
            raise SystemExit(f"{model} {shape}: identical requests answered differently")
        waits += [wait for wait, _ in answers]
        slowest.append(max(wait for wait, _ in answers))
    cpu, after = sum(cpu_seconds(edge.pid)) - cpu0, counters(edge.url)
    return {"sent": (after["miss"] - before["miss"]) / bursts,
            "coalesced": (after["coalesced"] - before["coalesced"]) / bursts,
            "cpu_us": cpu / (n * bursts) * 1e6, "wait_ms": statistics.median(waits) * 1000,
            "slowest_ms": statistics.median(slowest) * 1000, "burst_ms": statistics.median(lengths) * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--burst", type=int, default=16)
    parser.add_argument("--bursts", type=int, default=8, help="bursts a cell, each a fresh request")
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--prefill-us", type=float, default=200.0, help="the demo's prefill, per prompt token")
    parser.add_argument("--delay-ms", type=float, default=5.0, help="the demo's pause between streamed tokens")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "cache_flights.json")
    args = parser.parse_args()
    version = code_version()
    work = Path(tempfile.mkdtemp(prefix="bench-flights-"))
    py = python_in(ROOT)
    up = free_port()
    demo = Server("demo", [*py, "-m", "ingress", "demo-upstream", "--port", str(up), "--log-level", "warning",
                           "--delay-ms", str(args.delay_ms), "--prefill-us-per-token", str(args.prefill_us)],
                  up, work / "demo.log", health=None)
    (work / "edge.toml").write_text(config(up))
    port = free_port()
    edge = Server("edge", [*py, "-m", "ingress", "serve", "--config", str(work / "edge.toml"), "--port", str(port)],
                  port, work / "edge.log")
    cells = [(m, s, k) for m in MODELS for s in SHAPES for k in KINDS]
    figures: dict[tuple[str, str, str], list[dict[str, float]]] = {c: [] for c in cells}
    load_before = os.getloadavg()
    fresh = [random.randrange(10**7)]
    with serving(demo, edge):
        for model, shape, kind in cells:  # a warm-up burst each, checked, not counted
            run_cell(edge, model, args.size, shape, kind, args.burst, 1, fresh)
        busy0, _ = machine_busy()
        ours0 = sum(sum(cpu_seconds(s.pid)) for s in (demo, edge))
        own0 = time.process_time()
        started = time.perf_counter()
        rng = random.Random(7)
        for r in range(args.rounds):
            order = cells[:]
            rng.shuffle(order)
            for cell in order:
                model, shape, kind = cell
                figures[cell].append(run_cell(edge, model, args.size, shape, kind, args.burst, args.bursts, fresh))
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
        wall = time.perf_counter() - started
        busy1, _ = machine_busy()
        ours1 = sum(sum(cpu_seconds(s.pid)) for s in (demo, edge))
        others = ((busy1 - busy0) - (ours1 - ours0) - (time.process_time() - own0)) / wall * 100
    table = Table(("model", "<23"), ("shape", "<7"), ("burst", "<10"), ("sent", ">6"), ("coalesced", ">10"),
                  ("µs/req", ">8"), ("wait ms", ">8"), ("slowest ms", ">11"), ("burst ms", ">9"))
    lines = [table.header()]
    ratios = Table(("identical / distinct", "<31"), ("sent", ">6"), ("µs/req", ">8"), ("(range)", ">11"),
                   ("wait", ">6"), ("(range)", ">11"), ("burst", ">7"))
    ratio_lines = [ratios.header()]
    summary: dict[str, Any] = {}
    for model in MODELS:
        for shape in SHAPES:
            spreads = {}
            for kind in KINDS:
                f = figures[(model, shape, kind)]
                spreads[kind] = {name: Spread.of(x[name] for x in f)
                                 for name in ("sent", "coalesced", "cpu_us", "wait_ms", "slowest_ms", "burst_ms")}
                s = spreads[kind]
                lines.append(table.row(model, shape, kind, figure(s["sent"].median, 0),
                                       figure(s["coalesced"].median, 0), figure(s["cpu_us"].median),
                                       figure(s["wait_ms"].median), figure(s["slowest_ms"].median),
                                       figure(s["burst_ms"].median)))
            same, apart = figures[(model, shape, "identical")], figures[(model, shape, "distinct")]
            cpu = Spread.of(a["cpu_us"] / b["cpu_us"] for a, b in zip(same, apart, strict=True))
            wait = Spread.of(a["wait_ms"] / b["wait_ms"] for a, b in zip(same, apart, strict=True))
            whole = Spread.of(a["burst_ms"] / b["burst_ms"] for a, b in zip(same, apart, strict=True))
            sent = spreads["identical"]["sent"].median / spreads["distinct"]["sent"].median
            ratio_lines.append(ratios.row(f"{model} {shape}", f"{sent:.2f}", f"{cpu.median:.2f}", cpu.range(),
                                          f"{wait.median:.2f}", wait.range(), f"{whole.median:.2f}"))
            summary[f"{model}/{shape}"] = {
                "identical": {k: v.median for k, v in spreads["identical"].items()},
                "distinct": {k: v.median for k, v in spreads["distinct"].items()},
                "sent_ratio": sent, "cpu_ratio": cpu.median, "cpu_ratio_range": [cpu.low, cpu.high],
                "wait_ratio": wait.median, "wait_ratio_range": [wait.low, wait.high], "burst_ratio": whole.median,
                "rounds": {"identical": same, "distinct": apart}}
    text = "\n".join([*lines, "", *ratio_lines])
    note = (f"{describe(version)}; {args.rounds} rounds x {args.bursts} bursts of {args.burst} concurrent requests "
            f"a cell, "
            f"{args.size}-byte chat requests, max_tokens {MAX_TOKENS}, demo prefill {args.prefill_us:g} µs/token "
            f"and {args.delay_ms:g} ms between streamed tokens; others {others:.0f}% of a core; load average "
            f"{load_before[0]:.2f} before")
    print(text)
    print(note)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "code": version, "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "argv": sys.argv[1:], "burst": args.burst,
        "bursts": args.bursts,
        "rounds": args.rounds, "size": args.size, "others_cpu_percent": others, "load_average_before": load_before,
        "cells": summary, "table": text, "note": note}, indent=1) + "\n")


if __name__ == "__main__":
    main()
