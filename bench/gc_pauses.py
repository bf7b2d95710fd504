"""GC under load: collections and pause times in the edge, default settings vs frozen + tuned thresholds.

The edge and the embedded demo run in this process with gc.callbacks timing every collection; a load
generator in a separate process sends the same requests to each configuration in turn.

    python -m bench gc_pauses [--requests 20000] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import sys
import textwrap
import time
from pathlib import Path

import msgspec

from ingress.log import configure
from ingress.serve import gctune
from ingress.serve.app import create_app, serve_app
from ingress.settings import Settings

RESULTS = Path(__file__).resolve().parent / "results" / "gc_pauses.json"
CONFIGS = [  # name, gc thresholds 0 and 1, freeze
    ("default (700, no freeze)", 700, 10, False),
    ("freeze, 700", 700, 10, True),
    ("freeze, 2000 x 100", 2_000, 100, True),  # the edge's default
    ("freeze, 10000", 10_000, 10, True),
    ("freeze, 50000", 50_000, 10, True),
]

LOADER = textwrap.dedent('''
    import asyncio, sys, aiohttp
    url, body, total, conc = sys.argv[1], sys.argv[2].encode(), int(sys.argv[3]), int(sys.argv[4])
    async def main():
        left = total
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=conc)) as s:
            async def worker():
                nonlocal left
                while left > 0:
                    left -= 1
                    async with s.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
                        await r.read()
                        assert r.status == 200, r.status
            await asyncio.gather(*(worker() for _ in range(conc)))
    asyncio.run(main())
''')


def _body() -> str:
    messages = [{"role": "system", "content": "You are helpful. " * 20}]
    for i in range(10):
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": "lorem ipsum dolor sit amet " * 60})
    return msgspec.json.encode({"model": "ingress-demo", "messages": messages}).decode()


async def _run(threshold0: int, threshold1: int, freeze: bool, requests: int, concurrency: int) -> dict[str, object]:
    gc.unfreeze()
    gc.collect()
    gc.set_threshold(700, 10, 10)
    async with serve_app(create_app(Settings()), "127.0.0.1", 0) as url:
        gctune.tune(threshold0, threshold1, freeze=freeze)
        stats = gctune.GcStats().install()
        started = time.perf_counter()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", LOADER, f"{url}/v1/chat/completions", _body(), str(requests), str(concurrency))
        code = await proc.wait()
        elapsed = time.perf_counter() - started
        stats.remove()
    if code != 0:
        raise SystemExit(f"load generator failed with {code}")
    pauses = sorted(stats.pauses_s)
    return {
        "requests_per_s": requests / elapsed,
        "collections": stats.collections,
        "pause_total_ms": [round(p * 1000, 3) for p in stats.pause_total_s],
        "pause_max_ms": round(max(stats.pause_max_s) * 1000, 3),
        "pause_p99_ms": round(pauses[int(len(pauses) * 0.99)] * 1000, 3) if pauses else 0.0,
        "pause_median_ms": round(statistics.median(pauses) * 1000, 4) if pauses else 0.0,
        "gc_share_of_wall": sum(stats.pause_total_s) / elapsed,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    configure("info", stream=open(os.devnull, "w"), cache=False)  # noqa: SIM115  # the access lines, as in production, unread
    results = {}
    for name, threshold0, threshold1, freeze in CONFIGS:
        results[name] = await _run(threshold0, threshold1, freeze, args.requests, args.concurrency)
    head = (f"{'configuration':<26}{'req/s':>8}{'gen0':>7}{'gen1':>6}{'gen2':>6}"
            f"{'GC ms':>9}{'p99 ms':>9}{'max ms':>9}{'GC %':>7}")
    print(f"GC in the edge process, {args.requests} requests (16 KB, 11 messages), concurrency {args.concurrency}")
    print(head)
    print("-" * len(head))
    for name, r in results.items():
        c = r["collections"]
        print(f"{name:<26}{r['requests_per_s']:>8.0f}{c[0]:>7}{c[1]:>6}{c[2]:>6}"  # type: ignore[index]
              f"{sum(r['pause_total_ms']):>9.1f}{r['pause_p99_ms']:>9.3f}{r['pause_max_ms']:>9.3f}"  # type: ignore[arg-type]
              f"{100 * r['gc_share_of_wall']:>6.2f}%")  # type: ignore[operator]
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({"requests": args.requests, "concurrency": args.concurrency, "results": results},
                                  indent=2))
    print(f"saved {RESULTS}")


if __name__ == "__main__":
    try:
        import uvloop
        uvloop.run(main())
    except ImportError:
        asyncio.run(main())
