"""The floor under the edge's latency: what a proxy made of the same parts and nothing else adds.

    python -m bench floor [--seconds 4] [--rounds 5] [--connections 1]   -> results/floor.json

Four paths to the demo service at concurrency 1 (`wrk -t1 -c1`, 16 KB chat request), in turns:
- direct: the request already encoded as FlatBuffers, POSTed to the demo;
- floor: `python -m bench floor --serve`: an aiohttp handler that reads the JSON body, POSTs that same
  pre-encoded FlatBuffers body through `ingress.upstream.http1` and answers a fixed JSON body. No
  decoding, encoding, verification, routing, metrics or logging: aiohttp's server and our client;
- stages: the same handler doing the edge's own stages inline (decode, route, count, passport, encode;
  the answer verified, read, translated and encoded as JSON; Server-Timing), without the edge's
  structure (middleware, the pipeline's layers, endpoint choice, metrics, the access line);
- edge: `python -m ingress serve`, the whole edge.
So the edge's CPU per request splits three ways: the parts (floor), its stages' work where it runs
(stages - floor; bench/stages.py times each stage alone), and its structure (edge - stages).
Added latency is a path's minus direct's in the same round, at p50, p90 and p99; the table shows medians
over rounds and how far p99 moved between rounds (the host's noise), with each proxy's CPU per request.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "floor.json"
ANSWER = b'{"id":"chatcmpl-floor","object":"chat.completion","created":1,"model":"ingress-demo","choices":[]}'


def serve(port: int, upstream: str, body_path: str, stages: bool = False) -> None:
    """The floor proxy (runs in its own process, with the edge's event loop and GC settings); with
    `stages`, doing the edge's own stages inline."""
    import asyncio
    import gc

    import uvloop
    from aiohttp import web

    from ingress.upstream.pool import ConnectionPool
    from ingress.wire import COMPLETE_PATH, CONTENT_TYPE

    body = Path(body_path).read_bytes()
    pool = ConnectionPool(upstream)
    headers = {"x-request-id": "floor", "Content-Type": CONTENT_TYPE}

    async def post(payload: bytes | bytearray, hop: dict[str, str]) -> bytes:
        loop = asyncio.get_running_loop()
        response = await pool.request("POST", COMPLETE_PATH, hop, payload, 5.0, loop.time() + 30)
        parts = []
        try:
            while part := await response.read(30):
                parts.append(part)
        finally:
            response.close()
        return b"".join(parts)

    async def handler(request: web.Request) -> web.Response:
        await request.read()
        await post(body, headers)
        return web.Response(body=ANSWER, content_type="application/json")

    if stages:
        handler = _staged(post, upstream)

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def main() -> None:
        gc.freeze()
        gc.set_threshold(10_000)
        app = web.Application()
        app.router.add_post("/v1/chat/completions", handler)
        app.router.add_get("/healthz", healthz)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        await asyncio.Event().wait()

    uvloop.run(main())


def _staged(post: Any, upstream: str) -> Any:
    """The floor's handler doing the edge's stages, as the edge calls them, and nothing else."""
    import time

    import msgspec
    from aiohttp import web

    from bench.lib.payloads import MODEL
    from ingress.edge.headers import request_id_of, server_timing
    from ingress.encoding.passport import RequestMeta, compute_passport
    from ingress.encoding.requests import encode_request
    from ingress.exchange import Exchange
    from ingress.oai.codec import decode_chat_request_forwarding
    from ingress.pipeline import Gateway
    from ingress.pipeline.prepare import counter, prepared_for, route_decoded
    from ingress.routing.budget import RetryBudget
    from ingress.routing.table import RouteTable
    from ingress.settings import Settings
    from ingress.translate.completion import translate_response
    from ingress.wire import CONTENT_TYPE
    from ingress.wire.answer import decode_answer

    settings = Settings(models=(MODEL,), upstream=upstream)
    gateway = Gateway(settings=settings, routes=RouteTable(settings.resolved()[1]), groups={},
                 budget=RetryBudget(0.2, 10, 0.0))
    encoder = msgspec.json.Encoder()

    async def handler(request: web.Request) -> web.Response:
        body = await request.read()
        exchange, meta = Exchange(request_id_of(None)), RequestMeta()
        chat, extra = decode_chat_request_forwarding(body, gateway.forwards_extras)
        match, _ = route_decoded(gateway, exchange, chat.model, False, meta)
        tokens = counter(gateway, match).chat(chat)
        passport = compute_passport(chat, meta, prompt_tokens=tokens)
        encoded = encode_request(chat, exchange.request_id, passport, match.route.provider, match.upstream_model, extra)
        prepared = prepared_for(gateway, exchange, chat, match, passport, encoded, meta, chat.max_tokens)
        answer = await post(encoded, {**prepared.headers, "Content-Type": CONTENT_TYPE})
        completion = translate_response(decode_answer(answer))
        response = web.Response(body=encoder.encode(completion), content_type="application/json")
        response.headers["Server-Timing"] = server_timing(exchange, time.perf_counter())
        return response

    return handler


def measure(seconds: int, rounds: int, out: Path, connections: int = 1) -> None:
    from bench.lib.payloads import MODEL, chat_request
    from bench.lib.provenance import code_version, describe
    from bench.lib.rounds import Rounds
    from bench.lib.servers import Server, free_port, start_all, stop_all
    from bench.lib.tables import Table
    from bench.lib.wrk import Wrk, ensure_wrk
    from ingress.encoding.passport import RequestMeta, compute_passport
    from ingress.encoding.requests import encode_request
    from ingress.oai.codec import decode_chat_request
    from ingress.wire import COMPLETE_PATH, CONTENT_TYPE

    work = Path(tempfile.mkdtemp(prefix="ingress-floor-"))
    json_body = chat_request(16 * 1024, max_tokens=64)
    request = decode_chat_request(json_body)
    fb_body = bytes(encode_request(request, "floor", compute_passport(request, RequestMeta())))
    (work / "chat.json").write_bytes(json_body)
    (work / "chat.fb").write_bytes(fb_body)
    ports = {name: free_port() for name in ("demo", "floor", "stages", "edge")}
    demo_url = f"http://127.0.0.1:{ports['demo']}"
    argv = {
        "demo": [sys.executable, "-m", "ingress", "demo-upstream", "--port", str(ports["demo"])],
        "floor": [sys.executable, "-m", "bench.floor", "--serve", str(ports["floor"]), demo_url, str(work / "chat.fb")],
        "stages": [sys.executable, "-m", "bench.floor", "--serve-stages", str(ports["stages"]), demo_url,
                   str(work / "chat.fb")],
        "edge": [sys.executable, "-m", "ingress", "serve", "--model", MODEL, "--workers", "1",
                 "--port", str(ports["edge"]), "--upstream", demo_url],
    }
    servers = {name: Server(name, cmd, ports[name], work / f"{name}.log") for name, cmd in argv.items()}
    wrk = Wrk(ensure_wrk(), work / "post.lua")
    from bench.lib.wrk import SCRIPT

    wrk.script.write_text(SCRIPT)
    paths = {
        "direct": (f"{demo_url}{COMPLETE_PATH}", work / "chat.fb", CONTENT_TYPE, "demo"),
        "floor": (f"{servers['floor'].url}/v1/chat/completions", work / "chat.json", "application/json", "floor"),
        "stages": (f"{servers['stages'].url}/v1/chat/completions", work / "chat.json", "application/json", "stages"),
        "edge": (f"{servers['edge'].url}/v1/chat/completions", work / "chat.json", "application/json", "edge"),
    }
    # Every round runs the paths back to back in the same order, each warmed just before it is measured.
    measured = Rounds(paths, rounds, order="fixed", baseline="direct")
    try:
        start_all(*servers.values())
        for _, order in measured:
            for name in order:
                url, body, ctype, proc = paths[name]
                wrk.run(url, body, ctype, connections, 1)  # warm the path: connections, caches
                measured.add(name, wrk.run(url, body, ctype, connections, seconds, {proc: servers[proc].pid}))
    finally:
        stop_all(*servers.values())

    # A path's added latency is taken against the direct run of its own round: the host's speed drifts
    # between rounds more than the paths differ.
    print(describe(code_version()))
    print(f"concurrency {connections}, 16 KB chat request, {rounds} rounds of {seconds} s per path, in turns; "
          "medians over rounds, and the range of p99 and of added p99")
    printed = Table(("path", "<8"), ("p50 ms", ">9.3f"), ("p99 ms", ">9.3f"), ("p99 range", ">15"),
                    ("added p50", ">11.3f"), ("added p99", ">11.3f"), ("added p99 range", ">17"),
                    ("CPU µs/req", ">12,.0f"))
    print(printed.header())

    def cpu(name: str, run: Any) -> float:  # the CPU per request of the path's own server
        return float(run["cpu_us_per_request"][paths[name][3]])

    table = {}
    for name in paths:
        p99 = measured.spread(name, "p99_ms")
        row: dict[str, float] = {q: measured.median(name, f"{q}_ms") for q in ("p50", "p90", "p99")}
        row.update(p99_min=p99.low, p99_max=p99.high, cpu_us_per_request=measured.median(name, cpu))
        added: tuple[object, ...] = (None, None, None)
        if name != "direct":
            for q in ("p50", "p90", "p99"):
                row[f"added_{q}"] = measured.added(name, f"{q}_ms").median
            added_p99 = measured.added(name, "p99_ms")
            row.update(added_p99_min=added_p99.low, added_p99_max=added_p99.high)
            added = (row["added_p50"], row["added_p99"], added_p99.range())
        table[name] = row
        print(printed.row(name, row["p50"], row["p99"], p99.range(), *added, row["cpu_us_per_request"]))

    # The edge's CPU split, each part a difference within a round (medians over rounds).
    split = {
        "parts (floor)": measured.median("floor", cpu),
        "stages' work (stages - floor)": measured.added("stages", cpu, baseline="floor").median,
        "structure (edge - stages)": measured.added("edge", cpu, baseline="stages").median,
        "edge / floor": measured.ratio("edge", cpu, baseline="floor").median,
    }
    print("\nthe edge's CPU per request, split (medians of the rounds' differences):")
    for part, value in split.items():
        print(f"  {part:<32}{value:>8.2f}x" if part == "edge / floor" else f"  {part:<32}{value:>8,.0f} µs")
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"code": code_version(), "seconds": seconds, "rounds": rounds, "connections": connections,
                               "table": table, "split": split, "runs": measured.by_variant()}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=1, help="wrk's -c (the latency floor is at 1)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--serve", nargs=3, metavar=("PORT", "UPSTREAM", "BODY"), help=argparse.SUPPRESS)
    parser.add_argument("--serve-stages", nargs=3, metavar=("PORT", "UPSTREAM", "BODY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve or args.serve_stages:
        port, upstream, body = args.serve or args.serve_stages
        serve(int(port), upstream, body, stages=bool(args.serve_stages))
    else:
        measure(args.seconds, args.rounds, args.out, args.connections)
