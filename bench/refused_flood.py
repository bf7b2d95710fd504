"""RSS of a real edge under a flood of refused requests: it must stay flat (issue 10 #1).

A single-worker edge (`python -m ingress serve --workers 1`, GC tuned as in production) on loopback gets
a phase of valid requests, then one phase per kind of refusal, each of large bodies sent on fresh
connections, then an idle pause. The edge's RSS is sampled every 100 ms and printed as a table, with
each phase's start, peak and end, and the answers' status codes (a 5xx or a hang is a defect too).

    .venv/bin/python -m bench refused_flood                      # ~20 s: 40 requests a phase
    .venv/bin/python -m bench refused_flood --requests 10        # quicker
    .venv/bin/python -m bench refused_flood --source /tmp/snap   # another checkout's edge (before/after)

Bounded: loopback only, at most `--requests` x 5 requests of at most 10 MiB, `--concurrency` at a time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.lib.procs import rss_kb
from bench.lib.provenance import code_version, describe
from bench.lib.servers import ROOT, Server, free_port

MIB = 1024 * 1024
CAP = 8 * MIB  # the edge's default max_body_bytes
BODY = 7 * MIB
CHUNK = 256 * 1024
PREFIX = b'{"model":"ingress-demo","messages":[{"role":"user","content":"hi"}]'


def _padded(prefix: bytes, size: int = BODY) -> bytes:
    """`prefix`, then spaces up to `size` bytes (JSON allows whitespace between tokens)."""
    return prefix + b" " * (size - len(prefix))


@dataclass(frozen=True)
class Kind:
    name: str
    status: int  # the answer every request of the phase must get
    body: bytes | None  # None: a chunked body of `chunked` bytes, sent without a Content-Length
    chunked: int = 0


KINDS = (
    Kind("valid (answered)", 200, _padded(PREFIX + b"}")),
    Kind("invalid JSON", 400, _padded(b'{"model":"ingress-demo","messages":[')),
    Kind("unknown model", 404, _padded(b'{"model":"gpt-unknown","messages":[{"role":"user","content":"hi"}]}')),
    Kind("invalid field", 400, _padded(PREFIX + b',"temperature":5}')),
    Kind("chunked over the cap", 413, None, chunked=CAP + 2 * MIB),
)


async def _send(port: int, kind: Kind) -> int:
    """One request on a fresh connection; the answer's status (0: no answer)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        try:
            if kind.body is not None:
                writer.write(f"{head}Content-Length: {len(kind.body)}\r\nConnection: close\r\n\r\n".encode())
                writer.write(kind.body)
                await writer.drain()
            else:
                writer.write(f"{head}Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n".encode())
                piece = f"{CHUNK:x}\r\n".encode() + b" " * CHUNK + b"\r\n"
                writer.write(b"%x\r\n%s\r\n" % (len(PREFIX), PREFIX))
                for _ in range(kind.chunked // CHUNK):
                    writer.write(piece)
                    await writer.drain()
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (ConnectionResetError, BrokenPipeError):
            pass  # refused before the whole body was sent: the answer may still be there to read
        try:
            status_line = await asyncio.wait_for(reader.readline(), 30)
            await asyncio.wait_for(reader.read(), 30)
        except (ConnectionResetError, TimeoutError):
            return 0
        parts = status_line.split()
        return int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else 0
    finally:
        writer.close()


async def _flood(port: int, kind: Kind, requests: int, concurrency: int) -> Counter[int]:
    statuses: Counter[int] = Counter()
    gate = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with gate:
            statuses[await _send(port, kind)] += 1

    await asyncio.gather(*(one() for _ in range(requests)))
    return statuses


@dataclass
class Phase:
    """One kind of request sent `--requests` times: the edge's RSS around it, and the answers' statuses."""

    name: str
    start_mib: float
    peak_mib: float
    end_mib: float
    statuses: dict[int, int]
    expected: int


@dataclass
class Sampler:
    """The edge's RSS every 100 ms, each sample labelled with the phase running."""

    pid: int
    phase: str = "start"
    samples: list[tuple[float, str, int]] = field(default_factory=list)  # (seconds, phase, KiB)
    _stop: threading.Event = field(default_factory=threading.Event)

    def _run(self) -> None:
        t0 = time.perf_counter()
        while not self._stop.wait(0.1):
            self.samples.append((time.perf_counter() - t0, self.phase, rss_kb(self.pid)))

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self._run, daemon=True)
        thread.start()
        return thread

    def stop(self, thread: threading.Thread) -> None:
        self._stop.set()
        thread.join()


def _table(sampler: Sampler, every: float) -> list[str]:
    rows = ["   t (s)  phase                    RSS (MiB)"]
    next_at, previous = 0.0, ""
    for i, (t, phase, kib) in enumerate(sampler.samples):
        last = i == len(sampler.samples) - 1
        if t >= next_at or last or phase != previous:
            rows.append(f"{t:8.1f}  {phase:<24} {kib / 1024:9.1f}")
            next_at, previous = t + every, phase
    return rows


def _snapshot_commit(source: Path) -> str:
    """The commit another checkout holds: its git HEAD, or the COMMIT file of a `git archive` snapshot."""
    done = subprocess.run(["git", "-C", str(source), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    if done.returncode == 0:
        return f"commit {done.stdout.strip()}"
    marker = source / "COMMIT"
    return f"commit {marker.read_text().strip()} (snapshot)" if marker.exists() else "commit unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=40, help="requests a phase (default 40)")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--idle", type=float, default=3.0, help="seconds of idle after the flood")
    parser.add_argument("--source", type=Path, default=ROOT, help="the checkout whose edge to run")
    parser.add_argument("--out", type=Path, default=None, help="write the samples and summary as JSON")
    args = parser.parse_args()
    source = args.source.resolve()

    port = free_port()
    server = Server("edge", [sys.executable, "-m", "ingress", "serve", "--workers", "1", "--port", str(port)],
                    port, Path("/tmp/refused_flood_edge.log"), cwd=source,  # the chosen checkout first on the path
                    env={"PYTHONPATH": str(source)})
    server.start()
    phases: list[Phase] = []
    try:
        server.wait_ready()
        sampler = Sampler(server.pid)
        thread = sampler.start()
        time.sleep(0.5)
        for kind in KINDS:
            sampler.phase = kind.name
            start_kib = rss_kb(server.pid)
            statuses = asyncio.run(_flood(port, kind, args.requests, args.concurrency))
            peak_kib = max((kib for _, p, kib in sampler.samples if p == kind.name), default=start_kib)
            phases.append(Phase(kind.name, start_kib / 1024, peak_kib / 1024, rss_kb(server.pid) / 1024,
                                dict(statuses), kind.status))
        sampler.phase = "idle"
        time.sleep(args.idle)
        sampler.stop(thread)
    finally:
        server.stop()

    measured = describe(code_version()) if source == ROOT else _snapshot_commit(source)
    print(f"refused-request flood: the edge of {source} ({measured})")
    print(f"{args.requests} requests a phase, {args.concurrency} at a time, bodies of {BODY // MIB} MiB "
          f"(chunked: {(CAP + 2 * MIB) // MIB} MiB, over the {CAP // MIB} MiB cap)\n")
    print("\n".join(_table(sampler, every=0.5)))
    print(f"\n{'phase':<24} {'start':>7} {'peak':>7} {'end':>7}  (MiB)  statuses")
    for ph in phases:
        print(f"{ph.name:<24} {ph.start_mib:7.1f} {ph.peak_mib:7.1f} {ph.end_mib:7.1f}  {ph.statuses}")
    wrong = sum(n for ph in phases for status, n in ph.statuses.items() if status != ph.expected)
    first, after = sampler.samples[0][2] / 1024, sampler.samples[-1][2] / 1024
    print(f"\nRSS before the flood {first:.1f} MiB, after {args.idle:.0f} s idle {after:.1f} MiB "
          f"({after - first:+.1f} MiB); answers other than expected: {wrong}")
    if args.out is not None:
        record = {"code": measured, "source": str(source), "phases": [asdict(ph) for ph in phases],
                  "samples": sampler.samples}
        args.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0 if wrong == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
