"""The internal hop's client side by side: aiohttp's ClientSession (used the way UpstreamClient used it)
against UpstreamClient on ingress.upstream.http1, in CPU per exchange.

A minimal server in another process (httptools, uvloop) answers every POST at once: a whole answer of
600 B with a Content-Length, or a stream of 16 frames of 40 B, chunked, each frame written on its own.
Request bodies of 1 KB, 16 KB and 128 KB; 16 exchanges in flight, on uvloop, as the edge runs. The clock
is this process's CPU time (the server's is not counted; the main thread's alone is kept too), with
the edge's GC settings; every round runs all cells in a fresh random order, and the figure is the
median over rounds.

    .venv/bin/python -m bench upstream_client [--rounds N] [--exchanges N]   -> results/upstream_client.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import aiohttp
import httptools
import uvloop

from bench.lib.rounds import Rounds
from bench.lib.servers import Server, free_port
from ingress.serve import gctune
from ingress.settings import Settings, Timeouts
from ingress.upstream.client import UpstreamClient
from ingress.wire import identifiers

SIZES = {"1 KB": 1024, "16 KB": 16 * 1024, "128 KB": 128 * 1024}
ANSWER = b"a" * 600
FRAMES = [b"f" * 40] * 16
WORKERS = 16
FIGURES = ("proc", "thread", "wall")  # µs per exchange: this process's CPU, the main thread's, the wall clock
TIMEOUTS = Timeouts(connect=5.0, first_byte=30.0, idle=30.0)
HEADERS = {stream: {"x-request-id": "bench-0001", "x-answer": "stream" if stream else "whole"}
           for stream in (False, True)}


def serve(port: int) -> None:
    whole = b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s" % (
        identifiers.CONTENT_TYPE.encode(), len(ANSWER), ANSWER)
    head = b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n\r\n" % (
        identifiers.STREAM_CONTENT_TYPE.encode())
    chunks = [b"%x\r\n%s\r\n" % (len(f), f) for f in FRAMES] + [b"0\r\n\r\n"]

    class Answering(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = cast(asyncio.Transport, transport)
            self.parser = httptools.HttpRequestParser(self)
            self.stream = False

        def data_received(self, data: bytes) -> None:
            self.parser.feed_data(data)

        def on_header(self, name: bytes, value: bytes) -> None:
            if name.lower() == b"x-answer":
                self.stream = value == b"stream"

        def on_message_complete(self) -> None:
            if self.stream:
                self.transport.write(head)
                self.write_from(0)
            else:
                self.transport.write(whole)

        def write_from(self, i: int) -> None:
            """One chunk a loop turn, so that they do not all arrive in one read."""
            self.transport.write(chunks[i])
            if i + 1 < len(chunks):
                asyncio.get_running_loop().call_soon(self.write_from, i + 1)

    async def main() -> None:
        await asyncio.get_running_loop().create_server(Answering, "127.0.0.1", port)
        await asyncio.Event().wait()

    uvloop.run(main())


async def aiohttp_exchange(session: aiohttp.ClientSession, url: str, body: bytes, stream: bool) -> int:
    """What UpstreamClient did before http1: a per-request ClientTimeout, the head within first_byte,
    then readany() with an idle timeout per read."""
    timeout = aiohttp.ClientTimeout(total=None, connect=TIMEOUTS.connect, sock_connect=TIMEOUTS.connect, sock_read=None)
    headers = {**HEADERS[stream], "Content-Type": identifiers.CONTENT_TYPE}
    async with asyncio.timeout(TIMEOUTS.first_byte):
        response = await session.post(url + identifiers.COMPLETE_PATH, data=body, headers=headers, timeout=timeout)
    size = 0
    try:
        while True:
            async with asyncio.timeout(TIMEOUTS.idle):
                data = await response.content.readany()
            if not data:
                return size
            size += len(data)
    finally:
        response.release()


async def http1_exchange(client: UpstreamClient, body: bytes, stream: bool) -> int:
    if not stream:
        return len(await client.complete(body, HEADERS[stream]))
    size = 0
    async with client.stream(body, HEADERS[stream]) as reads:
        async for data in reads:
            size += len(data)
    return size


async def run(args: argparse.Namespace, url: str) -> dict[str, object]:
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), auto_decompress=False)
    client = UpstreamClient(url, TIMEOUTS, 1 << 20)
    candidates = {
        "aiohttp": lambda body, stream: aiohttp_exchange(session, url, body, stream),
        "http1": lambda body, stream: http1_exchange(client, body, stream),
    }
    expected = {False: len(ANSWER), True: sum(len(f) for f in FRAMES)}
    cells = [(c, s, m) for c in candidates for s in SIZES for m in (False, True)]
    gctune.tune_as_served(Settings())  # as the edge runs
    bodies = {s: os.urandom(n) for s, n in SIZES.items()}
    timed = Rounds(cells, args.rounds, order="shuffle", warmup=True)  # round -1 warms up: connections, caches
    for r, order in timed:
        for name, size, stream in order:
            exchange, body = candidates[name], bodies[size]

            async def worker(n: int, exchange: Any, body: bytes, stream: bool) -> None:
                for _ in range(n):
                    assert await exchange(body, stream) == expected[stream]

            wall, proc, thread = time.perf_counter(), time.process_time(), time.thread_time()
            await asyncio.gather(*(worker(args.exchanges // WORKERS, exchange, body, stream) for _ in range(WORKERS)))
            done = args.exchanges // WORKERS * WORKERS
            if r >= 0:
                timed.add((name, size, stream), {"proc": (time.process_time() - proc) / done * 1e6,
                                                 "thread": (time.thread_time() - thread) / done * 1e6,
                                                 "wall": (time.perf_counter() - wall) / done * 1e6})
    await session.close()
    await client.close()
    results: dict[str, object] = {}
    for cell in timed.variants:
        name, size, stream = cell
        results[f"{name}|{size}|{'stream' if stream else 'whole'}"] = (
            {k: timed.median(cell, k) for k in FIGURES} | {"proc_rounds": timed.values(cell, "proc")})
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--exchanges", type=int, default=800, help="per cell and round")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        return serve(args.serve)
    port = free_port()
    server = Server("server", [sys.executable, __file__, "--serve", str(port)], port,
                    Path(tempfile.gettempdir()) / "upstream_client_server.log", health=None)  # ready once it accepts
    server.start()
    try:
        server.wait_ready(poll=0.05)
        load = os.getloadavg()
        results = uvloop.run(run(args, server.url))
    finally:
        server.kill()
    print(f"client CPU per exchange, µs (median of {args.rounds} rounds; process / main thread), load {load[0]:.2f}")
    print(f"{'body':>7} {'answer':>7} | {'aiohttp':>15} | {'http1':>15} | {'ratio':>5}")
    for size in SIZES:
        for mode in ("whole", "stream"):
            a, h = results[f"aiohttp|{size}|{mode}"], results[f"http1|{size}|{mode}"]
            print(f"{size:>7} {mode:>7} | {a['proc']:6.1f} / {a['thread']:6.1f} | {h['proc']:6.1f} / {h['thread']:6.1f}"
                  f" | {a['proc'] / h['proc']:5.1f}")
    out = Path(__file__).resolve().parent / "results" / "upstream_client.json"
    out.write_text(json.dumps({"load_before": load, "load_after": os.getloadavg(), "rounds": args.rounds,
                               "exchanges_per_cell": args.exchanges, "workers": WORKERS, "loop": "uvloop",
                               "python": sys.version.split()[0], "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
