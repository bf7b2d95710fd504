"""What a response-cache hit costs the edge against a miss: CPU per request and latency, through the demo
service, with the memory and the Redis backend side by side in one run.

    nice -n 10 .venv/bin/python -m bench response_cache [--rounds 5] [--requests 300] [--size 4096] [--out FILE]
        -> results/response_cache.json (~1.5 min)

Two edges (`ingress serve`, one worker each), each in front of its own `ingress demo-upstream` (a process
each, no token delay), with a [tenancy] key (no limits) and routes gpt-4o and llama-3.1-8b-instruct whose
`cache` has backend "memory" on one edge and "redis" on the other (its tenancy's Redis, a `redis-server`
this script starts). The request is payloads.py's 11-message chat request of `--size` bytes with a tool, at
temperature 0 (deterministic, so cacheable), max_tokens 64; the demo echoes the last user message.

- miss: each request's last user message carries a fresh number (the same length), so every one is looked
  up, sent to the service and its answer stored (in Redis after the answer, off its path);
- hit: the same request every time, its answer stored by one request before the timed ones.

Whole (`stream` false) and streamed (`stream` true, `include_usage`) requests. A round runs every cell (edge,
model, shape, miss or hit) once, `--requests` sequential requests on one kept-alive connection, in a
shuffled order; a cell's figures are the edge's CPU (its process tree, user + system, /proc) per request
and the median latency seen by this client, and the table gives their medians over rounds, with the range
of the rounds' hit/miss ratios. Each cell's first answer is checked (the words the demo echoes, the
x-ingress-cache header) before anything is timed.

Then, in process (thread CPU, GC off, the median of 7 loops), the cache's own stages for the same request
and a 64-token answer: the key (canonical bytes and SHA-256) beside the request's encoding; a stream's check
before it is stored (every frame verified); a hit served in its stored shape (the digest checked); and the
conversions a hit of the other shape needs (a whole answer as frames, frames as a whole answer).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

HERE = Path(__file__).resolve().parent

from bench.lib.payloads import OPEN_MODEL, OPENAI_MODEL, chat_request  # noqa: E402
from bench.lib.procs import cpu_seconds, machine_busy  # noqa: E402
from bench.lib.provenance import code_version, describe  # noqa: E402
from bench.lib.rounds import Spread  # noqa: E402
from bench.lib.servers import Server, free_port, python_in, serving  # noqa: E402
from bench.lib.tables import Table, figure  # noqa: E402
from ingress.tenancy.keys import new_key  # noqa: E402

ROOT = HERE.parent
MODELS = (OPENAI_MODEL, OPEN_MODEL)
BACKENDS = ("memory", "redis")
SHAPES = ("whole", "stream")
PATHS = ("miss", "hit")
MAX_TOKENS = 64


def config(upstream: int, backend: str, key_id: str, key_hash: str, redis_url: str | None) -> str:
    tenancy = f'backend = "redis"\nredis = {{ url = "{redis_url}" }}\n' if backend == "redis" else ""
    routes = "".join(f'[[routes]]\nmodel = "{m}"\ngroup = "demo"\ncache = {{ ttl = 3600, backend = "{backend}" }}\n\n'
                     for m in MODELS)
    return f"""workers = 1
log_level = "warning"

[groups.demo]
endpoints = [{{ url = "http://127.0.0.1:{upstream}" }}]

{routes}[tenancy]
{tenancy}
[[tenancy.keys]]
id = "{key_id}"
tenant = "bench"
hash = "{key_hash}"

[tenancy.tenants.bench]
"""


def body(model: str, size: int, stream: bool, number: int | None) -> bytes:
    """The request; `number` (a miss) makes its last user message unique, at the same length."""
    fields = msgspec.json.decode(chat_request(size, max_tokens=MAX_TOKENS, model=model))
    fields["temperature"] = 0
    users = [m for m in fields["messages"] if m["role"] == "user"]
    tag = f"r{number:09d} " if number is not None else "same-text "
    users[-1]["content"] = tag + users[-1]["content"][len(tag):]
    if stream:
        fields["stream"] = True
        fields["stream_options"] = {"include_usage": True}
    return msgspec.json.encode(fields)


class Client:
    def __init__(self, port: int, key: str) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}

    def post(self, payload: bytes) -> tuple[int, str | None, bytes]:
        self.conn.request("POST", "/v1/chat/completions", payload, self.headers)
        r = self.conn.getresponse()
        return r.status, r.getheader("x-ingress-cache"), r.read()

    def close(self) -> None:
        self.conn.close()


def check(client: Client, payload: bytes, stream: bool, expected: str) -> None:
    status, header, data = client.post(payload)
    if status != 200 or header != expected:
        raise SystemExit(f"expected a 200 {expected}, got {status} {header}: {data[:300]!r}")
    if stream:
        if not data.rstrip().endswith(b"data: [DONE]") or b'"usage":{' not in data:
            raise SystemExit(f"an incomplete stream: {data[-300:]!r}")
    elif not json.loads(data)["choices"][0]["message"]["content"]:
        raise SystemExit(f"no answer: {data[:300]!r}")


def run_cell(edge: Server, client: Client, model: str, size: int, shape: str, path: str, requests: int,
             numbers: list[int]) -> dict[str, float]:
    stream = shape == "stream"
    payloads = []
    for _ in range(requests):
        if path == "miss":
            numbers[0] += 1
        payloads.append(body(model, size, stream, numbers[0] if path == "miss" else None))
    latencies = []
    before = sum(cpu_seconds(edge.pid))
    for payload in payloads:
        started = time.perf_counter()
        status, header, _ = client.post(payload)
        latencies.append(time.perf_counter() - started)
        if status != 200 or header != path:
            raise SystemExit(f"{model} {shape} {path}: {status} {header}")
    cpu = sum(cpu_seconds(edge.pid)) - before
    return {"cpu_us": cpu / requests * 1e6, "latency_ms": statistics.median(latencies) * 1000,
            "p90_ms": sorted(latencies)[int(len(latencies) * 0.9)] * 1000}


def _timed(fn: Any, loops: int) -> float:
    """µs a call: the median of 7 loops of thread CPU, GC off."""
    import gc

    runs = []
    gc.disable()
    try:
        for _ in range(7):
            started = time.thread_time()
            for _ in range(loops):
                fn()
            runs.append((time.thread_time() - started) / loops * 1e6)
    finally:
        gc.enable()
    return statistics.median(runs)


def stages(size: int) -> dict[str, dict[str, float]]:
    """The cache's own work for one request, in process."""
    from ingress.cache.entries import STREAM, WHOLE, entry, served
    from ingress.cache.lookup import entry_key
    from ingress.encoding.requests import encode_request
    from ingress.oai.codec import decode_chat_request
    from ingress.wire import Choice, Chunk, Response, Usage, write_chunk, write_response
    from ingress.wire.canonical import canonical
    from ingress.wire.passport import Passport

    out: dict[str, dict[str, float]] = {}
    usage = Usage(prompt_tokens=900, completion_tokens=MAX_TOKENS)
    for model in MODELS:
        request = decode_chat_request(body(model, size, False, None))
        encoded = bytes(encode_request(request, "0" * 32, Passport(prompt_tokens_estimate=900), "openai", model))
        text = " ".join(f"word{i}" for i in range(MAX_TOKENS))
        whole = bytes(write_response(Response(id="chatcmpl-x", model=model, created=1, usage=usage,
                                              choices=[Choice(content=text, finish_reason="stop")])))
        frames = b"".join(bytes(write_chunk(Chunk(sequence=0, id="chatcmpl-x", model=model, role="assistant",
                                                  content=""))) for _ in range(1))
        frames += b"".join(bytes(write_chunk(Chunk(sequence=i, content=f" word{i}"))) for i in range(1, MAX_TOKENS + 1))
        frames += bytes(write_chunk(Chunk(sequence=MAX_TOKENS + 1, finish_reason="stop", usage=usage, done=True)))
        whole_entry, stream_entry = entry(WHOLE, whole, (model, model)), entry(STREAM, frames, (model, model))
        assert whole_entry is not None and stream_entry is not None

        def encode(r: Any = request, m: str = model) -> object:
            return encode_request(r, "0" * 32, Passport(), "openai", m)

        def key(e: bytes = encoded, m: str = model) -> object:
            return entry_key(canonical(e).data, m, m, "tenant:bench")

        out[model] = {
            "encode_request_us": _timed(encode, 300),
            "key_us": _timed(key, 300),
            "store_check_stream_us": _timed(lambda f=frames, m=model: entry(STREAM, f, (m, m)), 100),
            "hit_same_shape_us": _timed(lambda v=stream_entry: served(v, STREAM), 300),
            "whole_as_stream_us": _timed(lambda v=whole_entry: served(v, STREAM), 300),
            "stream_as_whole_us": _timed(lambda v=stream_entry: served(v, WHOLE), 100),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "response_cache.json")
    args = parser.parse_args()
    version = code_version()
    key, key_id, key_hash = new_key()
    work = Path(tempfile.mkdtemp(prefix="bench-rcache-"))
    redis_port = free_port()
    redis = Server("redis", ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no"], redis_port, work / "redis.log", health=None)
    servers: dict[str, Server] = {}
    upstreams = []
    py = python_in(ROOT)
    for backend in BACKENDS:
        up = free_port()
        upstreams.append(Server(f"demo-{backend}", [*py, "-m", "ingress", "demo-upstream", "--port", str(up),
                                                    "--log-level", "warning"], up, work / f"demo-{backend}.log",
                                health=None))
        path = work / f"{backend}.toml"
        path.write_text(config(up, backend, key_id, key_hash, f"redis://127.0.0.1:{redis_port}/0"))
        port = free_port()
        servers[backend] = Server(f"edge-{backend}", [*py, "-m", "ingress", "serve", "--config", str(path),
                                                      "--port", str(port)], port, work / f"edge-{backend}.log")
    cells = [(b, m, s, p) for b in BACKENDS for m in MODELS for s in SHAPES for p in PATHS]
    figures: dict[tuple[str, str, str, str], list[dict[str, float]]] = {c: [] for c in cells}
    load_before = os.getloadavg()
    with serving(redis), serving(*upstreams), serving(*servers.values()):
        clients = {b: Client(servers[b].port, key) for b in BACKENDS}
        numbers = [random.randrange(10**8)]
        for backend, model, shape, path in cells:  # each path answers correctly, and each hit's entry is stored
            stream = shape == "stream"
            if path == "hit":  # stored by the first (the whole and the streamed request share one entry)
                check(clients[backend], body(model, args.size, stream, None), stream, "hit" if stream else "miss")
                time.sleep(0.05)  # a Redis store happens after the answer
                check(clients[backend], body(model, args.size, stream, None), stream, "hit")
            else:
                numbers[0] += 1
                check(clients[backend], body(model, args.size, stream, numbers[0]), stream, "miss")
        busy0, _ = machine_busy()
        ours0 = sum(sum(cpu_seconds(s.pid)) for s in (redis, *upstreams, *servers.values()))
        own0 = time.process_time()
        started = time.perf_counter()
        rng = random.Random(11)
        for r in range(args.rounds):
            order = cells[:]
            rng.shuffle(order)
            for cell in order:
                backend, model, shape, path = cell
                figures[cell].append(run_cell(servers[backend], clients[backend], model, args.size, shape, path,
                                              args.requests, numbers))
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
        wall = time.perf_counter() - started
        busy1, _ = machine_busy()
        ours1 = sum(sum(cpu_seconds(s.pid)) for s in (redis, *upstreams, *servers.values()))
        others = ((busy1 - busy0) - (ours1 - ours0) - (time.process_time() - own0)) / wall * 100
        for c in clients.values():
            c.close()
    table = Table(("backend", "<8"), ("model", "<23"), ("shape", "<7"), ("miss µs/req", ">12"), ("hit µs/req", ">11"),
                  ("hit/miss", ">9"), ("(range)", ">12"), ("miss ms", ">9"), ("hit ms", ">8"), ("hit/miss", ">9"))
    lines = [table.header()]
    summary: dict[str, Any] = {}
    for backend in BACKENDS:
        for model in MODELS:
            for shape in SHAPES:
                miss, hit = figures[(backend, model, shape, "miss")], figures[(backend, model, shape, "hit")]
                cpu_ratio = Spread.of([h["cpu_us"] / m["cpu_us"] for h, m in zip(hit, miss, strict=True)])
                lat_ratio = Spread.of([h["latency_ms"] / m["latency_ms"] for h, m in zip(hit, miss, strict=True)])
                miss_cpu, hit_cpu = (Spread.of(x["cpu_us"] for x in f) for f in (miss, hit))
                miss_ms, hit_ms = (Spread.of(x["latency_ms"] for x in f) for f in (miss, hit))
                lines.append(table.row(backend, model, shape, figure(miss_cpu.median), figure(hit_cpu.median),
                                       f"{cpu_ratio.median:.2f}", cpu_ratio.range(), f"{miss_ms.median:.2f}",
                                       f"{hit_ms.median:.2f}", f"{lat_ratio.median:.2f}"))
                summary[f"{backend}/{model}/{shape}"] = {
                    "miss_cpu_us_per_request": miss_cpu.median, "hit_cpu_us_per_request": hit_cpu.median,
                    "hit_over_miss_cpu": cpu_ratio.median, "hit_over_miss_cpu_range": [cpu_ratio.low, cpu_ratio.high],
                    "miss_latency_ms_median": miss_ms.median, "hit_latency_ms_median": hit_ms.median,
                    "hit_over_miss_latency": lat_ratio.median,
                    "rounds": {"miss": miss, "hit": hit}}
    staged = stages(args.size)
    inner = Table(("in process, µs", "<23"), ("encode", ">8"), ("key", ">8"), ("store check", ">12"),
                  ("hit as stored", ">14"), ("whole→stream", ">13"), ("stream→whole", ">13"))
    lines += ["", inner.header()]
    for model, st in staged.items():
        lines.append(inner.row(model, figure(st["encode_request_us"]), figure(st["key_us"]),
                               figure(st["store_check_stream_us"]), figure(st["hit_same_shape_us"]),
                               figure(st["whole_as_stream_us"]), figure(st["stream_as_whole_us"])))
    text = "\n".join(lines)
    note = (f"{describe(version)}; {args.rounds} rounds x {args.requests} sequential requests a cell, {args.size}-byte "
            f"chat requests, max_tokens {MAX_TOKENS}; others {others:.0f}% of a core; load average "
            f"{load_before[0]:.2f} before")
    print(text)
    print(note)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "code": version, "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "argv": sys.argv[1:],
        "requests_per_cell": args.requests, "rounds": args.rounds, "size": args.size,
        "others_cpu_percent": others, "load_average_before": load_before, "cells": summary, "stages": staged,
        "table": text,
        "note": note}, indent=1) + "\n")


if __name__ == "__main__":
    main()
