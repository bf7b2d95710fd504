"""Slowloris against a real edge on loopback: connections and RSS stay bounded and flat.

Starts `python -m ingress serve --workers 1` with short client deadlines, then holds `--connections`
connections that each send a request head one byte every `--gap` seconds, never finishing it, and
reopen as soon as the edge closes them (as the attack does). Every second it prints what the
client holds open, what the kernel shows for the edge's port (established connections, and those
waiting in the listen backlog because the worker is at `max_connections`), how many connections
the edge has closed so far, the edge's RSS, and how long a fresh `GET /healthz` took. It stops by
itself after `--seconds`; loopback only.

    .venv/bin/python -m bench slowloris                  # 200 connections, 25 s
    .venv/bin/python -m bench slowloris --connections 400 --max-connections 100 --seconds 40
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

from bench.lib.procs import rss_kb
from bench.lib.servers import Server, free_port

HOST = "127.0.0.1"
HEAD = b"GET /healthz HTTP/1.1\r\nHost: edge\r\nUser-Agent: slowloris\r\n" + b"X-Slow: " + b"s" * 4000


def _port_state(port: int) -> tuple[int, int]:
    """(established connections to `port`, connections waiting in its accept queue), from /proc/net/tcp."""
    established = backlog = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, state, queues = fields[1], fields[3], fields[4]
        if int(local.split(":")[1], 16) != port:
            continue
        if state == "01":
            established += 1
        elif state == "0A":  # LISTEN: rx_queue is the accept queue's length
            backlog = int(queues.split(":")[1], 16)
    return established, backlog


class Attack:
    def __init__(self, port: int, gap: float) -> None:
        self.port, self.gap = port, gap
        self.open = 0
        self.closed_by_edge = 0
        self.answers_408 = 0

    async def one(self, until: float) -> None:
        while time.monotonic() < until:
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(HOST, self.port), timeout=5)
            except (OSError, TimeoutError):
                await asyncio.sleep(0.5)
                continue
            self.open += 1
            try:
                for byte in HEAD:
                    if time.monotonic() >= until:
                        return
                    writer.write(bytes([byte]))
                    await writer.drain()
                    try:
                        data = await asyncio.wait_for(reader.read(4096), timeout=self.gap)
                    except TimeoutError:
                        continue  # still open: send the next byte
                    if data.startswith(b"HTTP/1.1 408"):
                        self.answers_408 += 1
                    self.closed_by_edge += 1
                    break
            except OSError:
                self.closed_by_edge += 1
            finally:
                self.open -= 1
                writer.close()


async def _probe(port: int) -> str:
    """How long a fresh GET /healthz takes (it waits in the backlog while the worker is at its cap)."""
    started = time.perf_counter()
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(HOST, port), timeout=1)
        try:
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: edge\r\nConnection: close\r\n\r\n")
            line = await asyncio.wait_for(reader.readline(), timeout=1)
        finally:
            writer.close()
    except (OSError, TimeoutError):
        return "> 1 s"
    return f"{(time.perf_counter() - started) * 1000:.1f} ms" if line.startswith(b"HTTP/1.1 200") else "error"


async def _run(args: argparse.Namespace, edge: Server) -> None:
    attack = Attack(edge.port, args.gap)
    until = time.monotonic() + args.seconds
    tasks = [asyncio.ensure_future(attack.one(until)) for _ in range(args.connections)]
    print(f"{args.connections} slowloris connections, a byte every {args.gap:g} s; edge: header_timeout "
          f"{args.header_timeout:g} s, keepalive {args.keepalive:g} s, max_connections {args.max_connections}\n")
    print(f"{'t (s)':>6} {'client open':>11} {'established':>11} {'in backlog':>10} {'closed by edge':>14} "
          f"{'408s':>6} {'edge RSS MiB':>12} {'GET /healthz':>12}")
    started = time.monotonic()
    while time.monotonic() < until:
        await asyncio.sleep(1.0)
        established, backlog = _port_state(edge.port)
        probe = await _probe(edge.port)
        print(f"{time.monotonic() - started:6.0f} {attack.open:11d} {established:11d} {backlog:10d} "
              f"{attack.closed_by_edge:14d} {attack.answers_408:6d} {rss_kb(edge.pid) / 1024:12.1f} {probe:>12}",
              flush=True)
    await asyncio.gather(*tasks, return_exceptions=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=25.0)
    parser.add_argument("--gap", type=float, default=1.0, help="seconds between two bytes of a head")
    parser.add_argument("--header-timeout", type=float, default=5.0)
    parser.add_argument("--keepalive", type=float, default=10.0)
    parser.add_argument("--max-connections", type=int, default=150)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="slowloris-") as tmp:
        config = Path(tmp) / "edge.toml"
        config.write_text(f"[client]\nheader_timeout = {args.header_timeout}\nkeepalive_timeout = {args.keepalive}\n"
                          f"max_connections = {args.max_connections}\n[drain]\ndelay = 0.1\ndeadline = 1.0\n")
        port = free_port()
        edge = Server("edge", [sys.executable, "-m", "ingress", "serve", "--workers", "1", "--host", HOST,
                               "--port", str(port), "--config", str(config)], port, Path(tmp) / "edge.log")
        edge.start()
        try:
            edge.wait_ready()
            asyncio.run(_run(args, edge))
        finally:
            edge.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
