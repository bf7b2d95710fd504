"""The edge's CPU per streamed chunk, and how many paced streams one worker holds, side by side in one run.

    nice -n 10 .venv/bin/python -m bench chunks [--quick] [--baseline DIR]   -> results/chunks.json
                                                       (~3.5 min; --quick ~1.5 min, results/chunks-quick.json)
    nice -n 10 .venv/bin/python -m bench chunks --profile 256 [--seconds 10]  -> py-spy's stacks, aggregated

The service is this file's `--serve-mock` (its own process): a raw asyncio Protocol on uvloop that answers a
streamed POST to /v1/complete with CompletionChunk frames in our contract (the role frame at once, then the
64 content frames `--pacing` ms apart, the last with the finish frame and the usage frame, done), and one to
/v1/chat/completions with the same answer as OpenAI's SSE (role, 64 content deltas, finish, usage, [DONE]):
every byte made once at start-up, each paced piece one HTTP chunk. Every stream's frames are due at fixed
times from its start (no drift); the mock keeps one timer per millisecond that has frames due, and writes
all of them in that one callback. With pacing 0 the whole answer goes out in one write.

Subjects, each run alone, rotated each round:

- `direct (frames)`, `direct (SSE)`: the mock itself, read by the client;
- `edge`: `ingress serve --workers 1` in front of the mock (frames → OpenAI SSE), no [tenancy];
- `edge + bridge`: the same edge with an in-process `openai` bridge endpoint in front of the mock's SSE;
- with `--baseline DIR`, `edge (base)` and `edge + bridge (base)`: the same two served by DIR's code
  (e.g. `git archive main` unpacked), for a before/after in one run.

The client is in this process: raw asyncio Protocols on uvloop (no aiohttp: at 512 streams its parsing
would cost more than the edge's), one keep-alive connection per concurrent stream, de-chunking the body
and timing every event (SSE: each blank-line-ended event; frames: each size-prefixed frame) as it arrives.
At each level N (64, 128, 256, 512): N connections each run one stream that opens the connections (not
counted), then, once all have, N counted streams started spread over one pacing interval. Figures:

- `µs/chunk (all)`: the edge's CPU (user + system, its whole process tree, /proc) over the counted phase
  divided by the content deltas delivered in it: each stream's request, head and end are in it;
- `µs/chunk (steady)`: the same over a window mid-stream (from 0.25 s after the last stream started to
  0.15 s before the first is due to end), CPU read at the window's ends and deltas counted by their
  arrival time: what one more chunk costs, without the requests;
- inter-chunk gap p50/p99/max (63 gaps a stream) and their addition over the direct mock's at the same level in
  the same round; a level is held with every stream whole, no error, and +p99 <= 5 ms;
- chunks per CPU-second (the inverse of the first figure);
- for the edges, their garbage collector over the counted phase (from their /metrics): the time paused,
  and the pauses longer than the stall margin, each of which delays every stream's next chunk at once.

Zero pacing: 32 connections running streams back to back for a few seconds, the mock writing each answer
whole: the edge's chunks per CPU-second when frames come as fast as they can. Rounds interleave subjects;
every figure is the median over rounds. Everything shares two cores with this client and the mock, and the
run renices itself to 10: compare subjects within a run.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

from bench.lib.results import niced, result_path, write_result  # noqa: E402
from bench.lib.rounds import Rounds, median  # noqa: E402
from bench.lib.tables import figure as _f  # noqa: E402

PY = sys.executable
DELTAS = 64
PACING_MS = 20.0
STALL_MS = 5.0
LEVELS = (64, 128, 256, 512)
ZERO_CONNECTIONS = 32
STEADY_FROM, STEADY_BEFORE_END = 0.25, 0.15
CHAT, COMPLETE = "/v1/chat/completions", "/v1/complete"
LABELS = {"direct_fb": "direct (frames)", "floor": "floor: a byte relay",
          "edge": "edge (frames -> SSE)", "edge_base": "edge, baseline",
          "direct_oai": "direct (SSE)", "bridge": "edge + openai bridge", "bridge_base": "edge + bridge, baseline"}
GC_SEEN = ("edge", "edge_base", "bridge", "bridge_base")  # the edges: their /metrics count GC pauses
BASELINE = {"floor": "direct_fb", "edge": "direct_fb",
            "edge_base": "direct_fb", "bridge": "direct_oai", "bridge_base": "direct_oai"}


# --- the mock service ------------------------------------------------------------------------------


def _pieces() -> dict[bytes, tuple[bytes, list[bytes]]]:
    """Per path: the response head, and the body's paced pieces (role; 64 content; the rest), each an HTTP chunk."""
    from bench.bridge import _mock_bodies
    from bench.lib.payloads import MODEL, words
    from ingress import wire

    def chunk(data: bytes) -> bytes:
        return b"%x\r\n%s\r\n" % (len(data), data)

    def head(ctype: str) -> bytes:
        return b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n\r\n" % ctype.encode()

    text = words(DELTAS, seed=3).split()
    usage = wire.Usage(prompt_tokens=4000, completion_tokens=DELTAS, total_tokens=4000 + DELTAS)
    frames = [bytes(wire.write_chunk(wire.Chunk(sequence=0, id="chatcmpl-mock", model=MODEL, created=1,
                                                role="assistant", content="")))]
    frames += [bytes(wire.write_chunk(wire.Chunk(sequence=1 + i, content=w + " "))) for i, w in enumerate(text)]
    frames.append(bytes(wire.write_chunk(wire.Chunk(sequence=DELTAS + 1, finish_reason="stop"))))
    frames.append(bytes(wire.write_chunk(wire.Chunk(sequence=DELTAS + 2, usage=usage, done=True))))
    _, sse = _mock_bodies()
    events = [e + b"\n\n" for e in sse.split(b"\n\n") if e]
    out = {}
    for path, ctype, parts in ((COMPLETE.encode(), wire.STREAM_CONTENT_TYPE, frames),
                               (CHAT.encode(), "text/event-stream", events)):
        assert len(parts) >= DELTAS + 3, len(parts)
        paced = [chunk(p) for p in parts[:DELTAS]] + [chunk(b"".join(parts[DELTAS:])) + b"0\r\n\r\n"]
        out[path] = (head(ctype), paced)
    return out


def serve_mock(port: int, pacing_ms: float) -> None:
    from bench.lib.mockhttp import Requests, serve

    answers = _pieces()
    pacing = pacing_ms / 1000
    buckets: dict[int, list[tuple[Any, list[bytes], int, float]]] = {}

    def fire(slot: int) -> None:
        for proto, pieces, k, due in buckets.pop(slot):
            if proto.transport.is_closing():
                continue
            proto.transport.write(pieces[k])
            if k + 1 < len(pieces):
                schedule(proto, pieces, k + 1, due + pacing)

    def schedule(proto: Any, pieces: list[bytes], k: int, due: float) -> None:
        slot = int(due * 1000) + 1  # the first millisecond tick at or after `due`: never early
        bucket = buckets.get(slot)
        if bucket is None:
            bucket = buckets[slot] = []
            proto.loop.call_at(slot / 1000, fire, slot)
        bucket.append((proto, pieces, k, due))

    class Mock(Requests):
        def answer(self, head: bytes, start: int, end: int) -> None:
            path = COMPLETE.encode() if head.split(b" ", 2)[1] == COMPLETE.encode() else CHAT.encode()
            response_head, pieces = answers[path]
            if not pacing:
                self.transport.write(response_head + b"".join(pieces))
                return
            self.transport.write(response_head + pieces[0])
            schedule(self, pieces, 1, self.loop.time() + pacing)

    serve(Mock, port, backlog=4096)


def serve_relay(port: int, target: int) -> None:
    """The floor: a byte relay of the same parts (uvloop, one Protocol a side, no parsing): each client
    connection gets its own connection to the mock, and every read on either side is one write on the other.
    What one read and one write per chunk cost a Python process here, before any work on the chunk."""
    import gc

    import uvloop

    class Upstream(asyncio.Protocol):
        def __init__(self, client: asyncio.Transport) -> None:
            self.client = client

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport

        def data_received(self, data: bytes) -> None:
            self.client.write(data)

        def connection_lost(self, exc: Exception | None) -> None:
            self.client.close()

    class Relay(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport
            self.pending: list[bytes] = []  # what came before the connection to the mock was made
            self.upstream: Any = None
            self.task = asyncio.get_running_loop().create_task(self.connect())

        async def connect(self) -> None:
            loop = asyncio.get_running_loop()
            _, self.upstream = await loop.create_connection(lambda: Upstream(self.transport), "127.0.0.1", target)
            for data in self.pending:
                self.upstream.transport.write(data)

        def data_received(self, data: bytes) -> None:
            if data.startswith(b"GET "):
                self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            elif self.upstream is None:
                self.pending.append(data)
            else:
                self.upstream.transport.write(data)

        def connection_lost(self, exc: Exception | None) -> None:
            if self.upstream is not None:
                self.upstream.transport.close()

    async def main() -> None:
        gc.freeze()
        server = await asyncio.get_running_loop().create_server(Relay, "127.0.0.1", port, backlog=4096)
        async with server:
            await server.serve_forever()

    uvloop.run(main())


# --- the client ------------------------------------------------------------------------------------


@dataclass
class Stream:
    started: float
    times: list[float] = field(default_factory=list)  # arrival of each event (SSE) or frame
    error: str | None = None


class Client(asyncio.Protocol):
    """One keep-alive connection running streams one after another: the response head, the chunked body
    de-chunked, each event timed on arrival."""

    def __init__(self, request: bytes, sse: bool) -> None:
        self.request, self.sse = request, sse
        self.transport: asyncio.Transport | None = None
        self.done: asyncio.Future[Stream] | None = None
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.done is not None and not self.done.done():
            self.stream.error = "connection lost"
            self.done.set_result(self.stream)

    def run(self) -> asyncio.Future[Stream]:
        loop = asyncio.get_running_loop()
        self.done = loop.create_future()
        self.stream = Stream(time.perf_counter())
        self.raw = bytearray()
        self.body = bytearray()
        self.head = True
        self.scanned = 0
        if self.lost or self.transport is None:
            self.stream.error = "connection lost"
            self.done.set_result(self.stream)
        else:
            self.transport.write(self.request)
        return self.done

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        raw = self.raw
        raw += data
        if self.head:
            end = raw.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(raw[:end]).lower()
            del raw[:end + 4]
            self.head = False
            if not head.startswith(b"http/1.1 200") or b"transfer-encoding: chunked" not in head:
                return self._end(f"answered {head.split(b' ', 2)[1].decode()}")
        body, pos, ended = self.body, 0, False
        while True:
            line = raw.find(b"\r\n", pos)
            if line < 0:
                break
            size = int(raw[pos:line], 16)
            if len(raw) < line + 2 + size + 2:
                break
            if size == 0:
                ended = True
                pos = line + 4
                break
            body += raw[line + 2:line + 2 + size]
            pos = line + 2 + size + 2
        del raw[:pos]
        times = self.stream.times
        if self.sse:
            n = body.count(b"\n\n", max(0, self.scanned - 1))
            self.scanned = len(body)
            times.extend([now] * n)
        else:
            at = self.scanned
            while len(body) - at >= 4:
                end = at + 4 + int.from_bytes(body[at:at + 4], "little")
                if end > len(body):
                    break
                times.append(now)
                at = end
            self.scanned = at
        if ended:
            self._end(None)

    def _end(self, error: str | None) -> None:
        stream = self.stream
        if error is None:
            if self.sse and (not self.body.endswith(b"data: [DONE]\n\n") or b'"error"' in self.body):
                error = "in-band error" if b'"error"' in self.body else "no [DONE]"
            elif len(stream.times) < DELTAS + 3:
                error = f"{len(stream.times)} events"
        stream.error = error
        if error is not None and self.transport is not None:
            self.transport.close()
            self.lost = True
        assert self.done is not None
        if not self.done.done():
            self.done.set_result(stream)


def cpu_of(pid: int | None) -> float:
    if pid is None:
        return 0.0
    from bench.lib.procs import cpu_seconds

    return sum(cpu_seconds(pid))


def gc_of(port: int) -> tuple[float, float, float] | None:
    """The edge's garbage-collector pauses so far, from its /metrics (`ingress_gc_pause_seconds`): their
    count, their seconds, and how many were longer than STALL_MS (one of the histogram's bounds)."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return None
    got = {(s.name, s.labels.get("le")): s.value for family in text_string_to_metric_families(text)
           if family.name == "ingress_gc_pause_seconds" for s in family.samples}
    count, seconds = got.get(("ingress_gc_pause_seconds_count", None)), got.get(("ingress_gc_pause_seconds_sum", None))
    below = got.get(("ingress_gc_pause_seconds_bucket", str(STALL_MS / 1000)))
    if count is None or seconds is None or below is None:
        return None
    return count, seconds, count - below


def sys_of(pid: int | None) -> float:
    """The kernel's share of cpu_of: syscalls, and on loopback the peer's receive path that a send runs."""
    if pid is None:
        return 0.0
    from bench.lib.procs import cpu_seconds

    return cpu_seconds(pid)[1]


async def paced_level(port: int, path: str, body: bytes, sse: bool, n: int, pid: int | None,
                      pacing: float, mock_pid: int | None = None) -> dict[str, Any]:
    """N connections: one uncounted stream each, then the N counted streams, starts spread over one pacing."""
    loop = asyncio.get_running_loop()
    request = (b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s"
               % (path.encode(), b"application/json" if path == CHAT or sse else b"application/x-flatbuffers",
                  len(body), body))
    clients = [Client(request, sse) for _ in range(n)]
    await asyncio.gather(*(loop.create_connection(lambda c=c: c, "127.0.0.1", port) for c in clients))

    async def one(i: int, c: Client) -> Stream:
        await asyncio.sleep(i / n * pacing)
        return await c.run()

    await asyncio.wait_for(asyncio.gather(*(one(i, c) for i, c in enumerate(clients))), 60)
    readings: list[tuple[float, float]] = []
    t0 = time.perf_counter()
    last_start = t0 + pacing
    window = (last_start + STEADY_FROM, t0 + DELTAS * pacing - STEADY_BEFORE_END)

    def read_cpu() -> None:
        readings.append((time.perf_counter(), cpu_of(pid)))

    for at in window:
        loop.call_later(at - t0, read_cpu)
    cpu0, mock0, self0, sys0 = cpu_of(pid), cpu_of(mock_pid), time.process_time(), sys_of(pid)
    gc.disable()  # a collection in this client would show as everyone's stall
    try:
        streams = await asyncio.wait_for(asyncio.gather(*(one(i, c) for i, c in enumerate(clients))),
                                         10 + 4 * DELTAS * pacing)
    except TimeoutError:
        streams = [c.stream for c in clients]
        for c in clients:
            if c.done is not None and not c.done.done():
                c.stream.error = "timed out"
    finally:
        gc.enable()
    cpu = cpu_of(pid) - cpu0
    wall = time.perf_counter() - t0
    for c in clients:
        if c.transport is not None:
            c.transport.close()
    out = stats(streams, cpu, wall, readings, pid is not None)
    out["mock_cpu_percent"] = (cpu_of(mock_pid) - mock0) / wall * 100
    if pid is not None and out["chunks"]:
        out["sys_us_per_chunk"] = (sys_of(pid) - sys0) / out["chunks"] * 1e6
    out["client_cpu_percent"] = (time.process_time() - self0) / wall * 100
    return out


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def stats(streams: list[Stream], cpu: float, wall: float, readings: list[tuple[float, float]],
          measured: bool) -> dict[str, Any]:
    ok = [s for s in streams if s.error is None]
    content = [s.times[1:DELTAS + 1] for s in streams]
    delivered = sum(len(ts) for ts in content)
    gaps = [b - a for s in ok for a, b in itertools.pairwise(s.times[1:DELTAS + 1])]
    ms = 1000.0
    out: dict[str, Any] = {
        "streams": len(streams), "errors": len(streams) - len(ok),
        "error_kinds": dict(Counter(s.error for s in streams if s.error is not None)),
        "gap_p50_ms": _pct(gaps, 50) * ms, "gap_p99_ms": _pct(gaps, 99) * ms,
        "gap_max_ms": max(gaps, default=float("nan")) * ms,
        "ttft_p50_ms": _pct([s.times[1] - s.started for s in ok], 50) * ms, "wall_s": wall,
        "chunks": delivered,
    }
    if len(readings) == 2:
        (w0, _), (w1, _) = readings
        steady = [b - a for s in ok for a, b in itertools.pairwise(s.times[1:DELTAS + 1]) if w0 <= a and b < w1]
        out["steady_gap_p99_ms"] = _pct(steady, 99) * ms
    if measured:
        out["cpu_s"] = cpu
        out["us_per_chunk"] = cpu / delivered * 1e6 if delivered else float("nan")
        out["chunks_per_cpu_s"] = delivered / cpu if cpu else float("nan")
        if len(readings) == 2:
            (w0, c0), (w1, c1) = readings
            inside = sum(1 for ts in content for t in ts if w0 <= t < w1)
            out["steady_us_per_chunk"] = (c1 - c0) / inside * 1e6 if inside else float("nan")
            out["steady_window_s"] = w1 - w0
            out["steady_chunks"] = inside
    return out


async def zero_pacing(port: int, path: str, body: bytes, sse: bool, pid: int | None, seconds: float) -> dict[str, Any]:
    """ZERO_CONNECTIONS connections running whole answers back to back for `seconds`."""
    loop = asyncio.get_running_loop()
    request = (b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s"
               % (path.encode(), b"application/json" if sse else b"application/x-flatbuffers", len(body), body))
    clients = [Client(request, sse) for _ in range(ZERO_CONNECTIONS)]
    await asyncio.gather(*(loop.create_connection(lambda c=c: c, "127.0.0.1", port) for c in clients))
    await asyncio.gather(*(c.run() for c in clients))  # opens the edge's connections too
    delivered, errors = 0, 0
    cpu0, t0 = cpu_of(pid), time.perf_counter()
    stop = t0 + seconds

    async def loop_one(c: Client) -> None:
        nonlocal delivered, errors
        while time.perf_counter() < stop:
            s = await c.run()
            delivered += len(s.times[1:DELTAS + 1])
            if s.error is not None:
                errors += 1
                return

    await asyncio.gather(*(loop_one(c) for c in clients))
    cpu, wall = cpu_of(pid) - cpu0, time.perf_counter() - t0
    for c in clients:
        if c.transport is not None:
            c.transport.close()
    out: dict[str, Any] = {"chunks": delivered, "errors": errors, "wall_s": wall, "chunks_per_s": delivered / wall}
    if pid is not None:
        out.update(cpu_s=cpu, us_per_chunk=cpu / delivered * 1e6 if delivered else float("nan"),
                   chunks_per_cpu_s=delivered / cpu if cpu else float("nan"))
    return out


# --- the subjects ----------------------------------------------------------------------------------


def _edge_toml(path: Path, port: int, mock_url: str, bridge: bool) -> Path:
    from bench.lib.payloads import MODEL

    endpoint = (f'{{ bridge = {{ dialect = "openai", target = "{mock_url}" }} }}' if bridge
                else f'{{ url = "{mock_url}" }}')
    path.write_text(f'port = {port}\nworkers = 1\n\n[groups.engine]\nendpoints = [{endpoint}]\n\n'
                    f'[[routes]]\nmodel = "{MODEL}"\ngroup = "engine"\n')
    return path


def start_subjects(work: Path, baseline: Path | None, pacing_ms: float) -> tuple[dict[str, Any], Any, Any]:
    from bench.lib.servers import Server, free_port, start_all

    port = free_port()
    paced = Server("mock", [PY, "-m", "bench.chunks", "--serve-mock", str(port), str(pacing_ms)], port,
                   work / "mock.log")
    port = free_port()
    whole = Server("mock0", [PY, "-m", "bench.chunks", "--serve-mock", str(port), "0"], port, work / "mock0.log")
    edges: dict[str, Any] = {}
    for mock, tag in ((paced, ""), (whole, "0")):
        port = free_port()
        edges[f"floor{tag}"] = Server(f"floor{tag}", [PY, "-m", "bench.chunks", "--serve-relay", str(port),
                                                      str(mock.port)], port, work / f"floor{tag}.log")
    for code, suffix in ((None, ""), (baseline, "_base")):
        if code is None and suffix:
            continue
        for kind, bridge in (("edge", False), ("bridge", True)):
            for mock, tag in ((paced, ""), (whole, "0")):
                port = free_port()
                name = f"{kind}{suffix}{tag}"
                toml = _edge_toml(work / f"{name}.toml", port, mock.url, bridge)
                edges[name] = Server(name, [PY, "-m", "ingress", "serve", "--config", str(toml), "--workers", "1"],
                                     port, work / f"{name}.log")
                if code is not None:  # DIR's code: started in DIR, which `python -m` puts first on sys.path
                    edges[name].cwd, edges[name].env = code, {"PYTHONPATH": str(code)}
    start_all(paced, whole, *edges.values())
    return edges, paced, whole


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import uvloop

    from bench.e2e import fb_body
    from bench.lib.payloads import stream_request
    from bench.lib.provenance import code_version
    from bench.lib.servers import stop_all

    started = time.perf_counter()
    load_before = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="ingress-bench-chunks-"))
    json_body = stream_request(DELTAS)
    fb = bytes(fb_body(json_body))
    pacing = PACING_MS / 1000
    edges, paced, whole = start_subjects(work, args.baseline, PACING_MS)
    subjects = ["direct_fb", "floor", "edge", "direct_oai", "bridge"]
    if args.baseline:
        subjects[2:2] = ["edge_base"]
        subjects.append("bridge_base")
    loop = uvloop.new_event_loop()
    levels: dict[str, dict[int, list[dict[str, Any]]]] = {s: defaultdict(list) for s in subjects}
    zero: dict[str, list[dict[str, Any]]] = {s: [] for s in subjects}

    def target(name: str, zero_: bool) -> tuple[int, str, bytes, bool, int | None]:
        mock = whole if zero_ else paced
        if name == "direct_fb":
            return mock.port, COMPLETE, fb, False, None
        if name == "direct_oai":
            return mock.port, CHAT, json_body, True, None
        if name == "floor":
            relay = edges["floor" + ("0" if zero_ else "")]
            return relay.port, COMPLETE, fb, False, relay.pid
        edge = edges[name + ("0" if zero_ else "")]
        return edge.port, CHAT, json_body, True, edge.pid

    try:
        print(f"{code_version()}; baseline {args.baseline or 'none'}; {args.rounds} round(s), levels {args.levels}; "
              f"load average {load_before[0]:.2f}; nice {os.nice(0)}", flush=True)
        for r, order in Rounds(subjects, args.rounds):  # rotated: each subject first in turn
            # the direct mocks first at each level: the edges' added gaps are against them
            order = [s for s in order if s.startswith("direct")] + [s for s in order if not s.startswith("direct")]
            stalled: set[str] = set()
            for n in args.levels:
                said = []
                for name in order:
                    if name in stalled:
                        continue
                    port, path, body, sse, pid = target(name, False)
                    gc0 = gc_of(port) if name in GC_SEEN else None
                    st = loop.run_until_complete(paced_level(port, path, body, sse, n, pid, pacing, paced.pid))
                    gc1 = gc_of(port) if gc0 is not None else None
                    if gc0 is not None and gc1 is not None:
                        st["gc_pauses"], st["gc_ms"], st["gc_over_stall"] = (gc1[0] - gc0[0],
                                                                             (gc1[1] - gc0[1]) * 1000, gc1[2] - gc0[2])
                    if name in BASELINE:
                        base = levels[BASELINE[name]][n][-1]
                        st["added_gap_p99_ms"] = st["gap_p99_ms"] - base["gap_p99_ms"]
                        st["added_gap_p50_ms"] = st["gap_p50_ms"] - base["gap_p50_ms"]
                        st["added_gap_max_ms"] = st["gap_max_ms"] - base["gap_max_ms"]
                        st["held"] = st["errors"] == 0 and st["added_gap_p99_ms"] <= STALL_MS
                        if not st["held"]:
                            stalled.add(name)
                    levels[name][n].append(st)
                    cost = f" {st['us_per_chunk']:.0f}/{st.get('steady_us_per_chunk', float('nan')):.0f} µs" \
                        f" (sys {st.get('sys_us_per_chunk', float('nan')):.0f})" \
                        if "us_per_chunk" in st else ""
                    if "gc_ms" in st:
                        cost += (f" GC {st['gc_pauses']:.0f}: {st['gc_ms']:.0f} ms, "
                                 f"{st['gc_over_stall']:.0f} over {STALL_MS:.0f} ms")
                    said.append(f"{name} p99 {st['gap_p99_ms']:.1f}{cost} (mock {st['mock_cpu_percent']:.0f}%, "
                                f"client {st['client_cpu_percent']:.0f}%)"
                                + ("" if st.get("held", True) else " STALL") + (f" {st['error_kinds']}"
                                                                                  if st["errors"] else ""))
                print(f"  round {r + 1} n={n}: " + ", ".join(said), flush=True)
            for name in order:
                port, path, body, sse, pid = target(name, True)
                zero[name].append(loop.run_until_complete(zero_pacing(port, path, body, sse, pid, args.zero_seconds)))
            print(f"  round {r + 1} zero pacing: " + ", ".join(
                f"{n} {zero[n][-1].get('chunks_per_cpu_s', zero[n][-1]['chunks_per_s']):,.0f}" for n in order)
                + f"  ({time.perf_counter() - started:.0f} s)", flush=True)
        rss = {name: s.pid for name, s in edges.items()}
        from bench.lib.procs import rss_kb
        rss_mb = {name: rss_kb(pid) / 1024 for name, pid in rss.items()}
    finally:
        loop.close()
        stop_all(paced, whole, *edges.values())
    shutil.rmtree(work, ignore_errors=True)
    return {
        "meta": {"code": code_version(), "baseline": str(args.baseline) if args.baseline else None,
                 "rounds": args.rounds, "levels": list(args.levels), "pacing_ms": PACING_MS, "deltas": DELTAS,
                 "zero_connections": ZERO_CONNECTIONS, "zero_seconds": args.zero_seconds, "cpus": os.cpu_count(),
                 "nice": os.nice(0), "load_average_before": load_before, "load_average_after": os.getloadavg(),
                 "wall_s": round(time.perf_counter() - started, 1), "rss_mb_after": rss_mb},
        "levels": {name: {str(n): runs for n, runs in by.items()} for name, by in levels.items()},
        "zero": zero,
        "table": table(levels, zero),
    }


def table(levels: dict[str, dict[int, list[dict[str, Any]]]], zero: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for name, by in levels.items():
        rows[name] = {}
        for n, runs in by.items():
            row = {k: median([r[k] for r in runs if k in r]) for k in (
                "gap_p50_ms", "gap_p99_ms", "gap_max_ms", "added_gap_p50_ms", "added_gap_p99_ms", "added_gap_max_ms",
                "steady_gap_p99_ms", "ttft_p50_ms", "us_per_chunk",
                "steady_us_per_chunk", "chunks_per_cpu_s", "gc_ms", "gc_over_stall")}
            row["errors"] = sum(r["errors"] for r in runs)
            row["held"] = all(r.get("held", True) for r in runs) if name in BASELINE else None
            row["runs"] = len(runs)
            rows[name][str(n)] = row
        zs = zero.get(name, [])
        if zs:
            rows[name]["zero"] = {k: median([z[k] for z in zs if k in z]) for k in
                                  ("us_per_chunk", "chunks_per_cpu_s", "chunks_per_s")}
        rows[name]["held"] = max([int(n) for n, row in rows[name].items() if n.isdigit() and row["held"]], default=0) \
            if name in BASELINE else None
    return rows


def print_table(result: dict[str, Any]) -> None:
    rows = result["table"]
    print(f"\npaced streams: {DELTAS} deltas {PACING_MS:.0f} ms apart; held = every stream whole and inter-chunk "
          f"p99 within {STALL_MS:.0f} ms of the direct mock's")
    print(f"{'subject':<26} {'streams':>7} {'gap p50':>8} {'gap p99':>8} {'max':>6} {'+p50':>6} {'+p99':>6} "
          f"{'TTFT':>6} "
          f"{'steady p99':>10} {'µs/chunk':>9} {'steady':>7} {'chunks/CPU-s':>12} {'GC ms':>6} "
          f"{f'>{STALL_MS:.0f} ms':>5} {'errors':>6}  held")
    for name, by in rows.items():
        for n, row in by.items():
            if not n.isdigit():
                continue
            held = "" if row["held"] is None else ("yes" if row["held"] else "STALL")
            print(f"{LABELS[name]:<26} {n:>7} {_f(row['gap_p50_ms'])} {_f(row['gap_p99_ms']):>8} "
                  f"{_f(row['gap_max_ms']):>6} {_f(row['added_gap_p50_ms'], 2):>6} {_f(row['added_gap_p99_ms']):>6} "
                  f"{_f(row['ttft_p50_ms']):>6} {_f(row['steady_gap_p99_ms']):>10} "
                  f"{_f(row['us_per_chunk']):>9} {_f(row['steady_us_per_chunk']):>7} "
                  f"{_f(row['chunks_per_cpu_s'], 0):>12} {_f(row['gc_ms']):>6} {_f(row['gc_over_stall'], 0):>5} "
                  f"{row['errors']:>6}  {held}")
    print(f"\nzero pacing ({ZERO_CONNECTIONS} connections, whole answers back to back):")
    print(f"{'subject':<26} {'chunks/s':>9} {'µs/chunk':>9} {'chunks/CPU-s':>12}")
    for name, by in rows.items():
        z = by.get("zero")
        if z:
            print(f"{LABELS[name]:<26} {_f(z['chunks_per_s'], 0):>9} {_f(z['us_per_chunk']):>9} "
                  f"{_f(z['chunks_per_cpu_s'], 0):>12}")
    print("\nheld without a stall: " + ", ".join(f"{LABELS[n]} {by['held']}" for n, by in rows.items()
                                                if by["held"] is not None))


# --- profiling -------------------------------------------------------------------------------------


def profile(args: argparse.Namespace) -> None:
    """One edge (frames -> SSE) at `--profile N` paced streams for `--seconds`, recorded by py-spy; the
    collapsed stacks aggregated: self and inclusive samples per function."""
    import uvloop

    from bench.lib.payloads import stream_request
    from bench.lib.servers import stop_all

    pyspy = str(Path(PY).parent / "py-spy")  # the dev extra's, beside this interpreter
    if not Path(pyspy).exists():
        pyspy = shutil.which("py-spy") or ""
    if not pyspy:
        raise SystemExit("--profile needs py-spy: .venv/bin/pip install -e '.[dev]' (or pip install py-spy)")
    work = Path(tempfile.mkdtemp(prefix="ingress-bench-chunks-prof-"))
    json_body = stream_request(DELTAS)
    edges, paced, whole = start_subjects(work, None, PACING_MS)
    name = "bridge" if args.bridge else "edge"
    edge = edges[name]
    from bench.lib.procs import family

    pid = family(edge.pid)[-1]  # the worker
    loop = uvloop.new_event_loop()
    raw = work / "stacks.txt"
    try:
        loop.run_until_complete(paced_level(edge.port, CHAT, json_body, True, args.profile, edge.pid, PACING_MS / 1000))
        spy = subprocess.Popen([pyspy, "record", "-r", "400", "-f", "raw", "-o", str(raw), "-p", str(pid), "-d",
                                str(round(args.seconds)), "--nonblocking"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.perf_counter() + args.seconds
        cpu = []
        while time.perf_counter() < deadline:
            st = loop.run_until_complete(paced_level(edge.port, CHAT, json_body, True, args.profile, edge.pid,
                                                     PACING_MS / 1000))
            cpu.append(st["us_per_chunk"])
            print(f"  {args.profile} streams: gap p99 {st['gap_p99_ms']:.1f} ms, {st['us_per_chunk']:.0f} µs/chunk "
                  f"(steady {st.get('steady_us_per_chunk', float('nan')):.0f})", flush=True)
        _, said = spy.communicate(timeout=60)
        if not raw.exists():
            raise RuntimeError(f"py-spy wrote nothing: {said.decode(errors='replace')[-800:]}")
    finally:
        loop.close()
        stop_all(paced, whole, *edges.values())
    self_: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        n = int(count)
        frames = [f.split(" (")[0] + " (" + f.split(" (")[1].split(":")[0].rsplit("/", 1)[-1] + ")" if " (" in f else f
                  for f in stack.split(";")]
        total += n
        self_[frames[-1]] += n
        for f in set(frames):
            incl[f] += n
    print(f"\n{total} samples; self:")
    for f, n in self_.most_common(args.top):
        print(f"  {n / total * 100:5.1f}%  {f}")
    print("inclusive:")
    for f, n in incl.most_common(args.top):
        print(f"  {n / total * 100:5.1f}%  {f}")
    if args.keep:
        shutil.copy(raw, args.keep)
    shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="~1.5 min: one round")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--levels", type=int, nargs="*")
    parser.add_argument("--baseline", type=Path, help="another checkout whose edge runs beside this one")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--profile", type=int, metavar="N", help="py-spy one edge at N paced streams")
    parser.add_argument("--bridge", action="store_true", help="with --profile: the bridge edge")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--keep", type=Path, help="with --profile: keep the raw stacks here")
    parser.add_argument("--serve-mock", nargs=2, metavar=("PORT", "PACING_MS"), help=argparse.SUPPRESS)
    parser.add_argument("--serve-relay", nargs=2, metavar=("PORT", "TARGET"), type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_mock:
        return serve_mock(int(args.serve_mock[0]), float(args.serve_mock[1]))
    if args.serve_relay:
        return serve_relay(*args.serve_relay)
    niced()
    if args.profile:
        return profile(args)
    args.rounds = args.rounds or (1 if args.quick else 2)
    args.levels = tuple(args.levels or LEVELS)
    args.zero_seconds = 2.0 if args.quick else 3.0
    args.baseline = args.baseline.resolve() if args.baseline else None
    out = result_path("chunks", args.quick, args.out)
    result = measure(args)
    print_table(result)
    write_result(result, out)


if __name__ == "__main__":
    main()
