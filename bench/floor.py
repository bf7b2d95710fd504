"""The floor under the edge's latency: what a proxy made of the same parts and nothing else adds.

    python bench/floor.py [--seconds 6] [--rounds 2]   -> results/floor.json

Three paths to the demo service at concurrency 1 (`wrk -t1 -c1`, 16 KB chat request), in turns:
- direct: the request already encoded as FlatBuffers, POSTed to the demo;
- floor: `python bench/floor.py --serve`: an aiohttp handler that reads the JSON body, POSTs that same
  pre-encoded FlatBuffers body through `ingress.upstream.http1` and answers a fixed JSON body. No
  decoding, encoding, verification, routing, metrics or logging: aiohttp's server and our client;
- edge: `python -m ingress serve`, the whole edge.
Added latency is a path's minus direct's, at p50, p90 and p99; beside it each proxy's CPU per request.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "floor.json"
ANSWER = b'{"id":"chatcmpl-floor","object":"chat.completion","created":1,"model":"ingress-demo","choices":[]}'


def serve(port: int, upstream: str, body_path: str) -> None:
    """The floor proxy (runs in its own process, with the edge's event loop and GC settings)."""
    import asyncio
    import gc

    import uvloop
    from aiohttp import web

    from ingress.upstream.http1 import Pool
    from ingress.wire import COMPLETE_PATH, CONTENT_TYPE

    body = Path(body_path).read_bytes()
    pool = Pool(upstream)
    headers = {"x-request-id": "floor", "Content-Type": CONTENT_TYPE}

    async def handler(request: web.Request) -> web.Response:
        await request.read()
        loop = asyncio.get_running_loop()
        response = await pool.request("POST", COMPLETE_PATH, headers, body, 5.0, loop.time() + 30)
        try:
            while await response.read(30):
                pass
        finally:
            response.close()
        return web.Response(body=ANSWER, content_type="application/json")

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


def measure(seconds: int, rounds: int, out: Path) -> None:
    from ingress.oai.codec import decode_chat_request
    from ingress.passport import RequestMeta, compute_passport
    from ingress.wire import COMPLETE_PATH, CONTENT_TYPE
    from ingress.wire.encode import encode_request
    from payloads import MODEL, chat_request
    from procs import Server, free_port
    from provenance import code_version, describe
    from wrk import Wrk, ensure_wrk

    work = Path(tempfile.mkdtemp(prefix="ingress-floor-"))
    json_body = chat_request(16 * 1024, max_tokens=64)
    request = decode_chat_request(json_body)
    fb_body = bytes(encode_request(request, "floor", compute_passport(request, RequestMeta())))
    (work / "chat.json").write_bytes(json_body)
    (work / "chat.fb").write_bytes(fb_body)
    ports = {name: free_port() for name in ("demo", "floor", "edge")}
    demo_url = f"http://127.0.0.1:{ports['demo']}"
    argv = {
        "demo": [sys.executable, "-m", "ingress", "demo-upstream", "--port", str(ports["demo"])],
        "floor": [sys.executable, str(Path(__file__)), "--serve", str(ports["floor"]), demo_url, str(work / "chat.fb")],
        "edge": [sys.executable, "-m", "ingress", "serve", "--model", MODEL, "--workers", "1",
                 "--port", str(ports["edge"]), "--upstream", demo_url],
    }
    servers = {name: Server(name, cmd, ports[name], work / f"{name}.log") for name, cmd in argv.items()}
    wrk = Wrk(ensure_wrk(), work / "post.lua")
    from wrk import SCRIPT

    wrk.script.write_text(SCRIPT)
    paths = {
        "direct": (f"{demo_url}{COMPLETE_PATH}", work / "chat.fb", CONTENT_TYPE, "demo"),
        "floor": (f"{servers['floor'].url}/v1/chat/completions", work / "chat.json", "application/json", "floor"),
        "edge": (f"{servers['edge'].url}/v1/chat/completions", work / "chat.json", "application/json", "edge"),
    }
    runs: dict[str, list[dict[str, object]]] = {name: [] for name in paths}
    try:
        for server in servers.values():
            server.start()
        for server in servers.values():
            server.wait_ready()
        for _ in range(rounds):
            for name, (url, body, ctype, proc) in paths.items():
                wrk.run(url, body, ctype, 1, 1)  # warm the path: connections, caches
                runs[name].append(wrk.run(url, body, ctype, 1, seconds, {proc: servers[proc].pid}))
    finally:
        for server in servers.values():
            server.stop()

    def pick(name: str, key: str) -> float:
        return min(float(r[key]) for r in runs[name])  # type: ignore[arg-type]  # the quietest round

    print(describe(code_version()))
    print(f"concurrency 1, 16 KB chat request, {rounds} rounds of {seconds} s per path; the best round's percentiles")
    head = f"{'path':<8}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}{'added p50':>11}{'added p90':>11}{'added p99':>11}{'CPU µs/req':>12}"
    print(head + "\n" + "-" * len(head))
    table = {}
    for name, (_, _, _, proc) in paths.items():
        row = {q: pick(name, f"{q}_ms") for q in ("p50", "p90", "p99")}
        added = {q: row[q] - pick("direct", f"{q}_ms") for q in row}
        cpu = min(float(r["cpu_us_per_request"][proc]) for r in runs[name])  # type: ignore[index]
        table[name] = {**row, **{f"added_{q}": v for q, v in added.items()}, "cpu_us_per_request": cpu}
        extra = "".join(f"{v:>11.3f}" for v in added.values()) if name != "direct" else " " * 33
        print(f"{name:<8}" + "".join(f"{row[q]:>9.3f}" for q in row) + extra + f"{cpu:>12,.0f}")
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"code": code_version(), "seconds": seconds, "rounds": rounds, "table": table,
                               "runs": runs}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    sys.path[:0] = [str(HERE), str(HERE.parent)]
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--serve", nargs=3, metavar=("PORT", "UPSTREAM", "BODY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(int(args.serve[0]), args.serve[1], args.serve[2])
    else:
        measure(args.seconds, args.rounds, args.out)
