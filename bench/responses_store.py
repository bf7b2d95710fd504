"""What a stored response costs a request (CPU, latency, Redis commands, RSS) against `store: false`, and a
resumed stream's first-event latency, with the memory, the Redis and the sealed Redis backend side by side
in one run.

    nice -n 10 .venv/bin/python -m bench responses_store [--quick] [--rounds 5] [--requests 200] [--out FILE]
        -> results/responses_store.json (~3 min; --quick ~1.5 min, results/responses_store-quick.json)

Two edges (`ingress serve`, one worker each), each in front of its own `ingress demo-upstream` (no token
delay), with a [tenancy] key (no limits) and routes gpt-4o and llama-3.1-8b-instruct; `[responses]` keeps
stored responses in memory on one edge, in Redis on another (its tenancy's Redis, a `redis-server` this
script starts on a free loopback port, no persistence), and in Redis sealed at rest on a third (`sealed`:
`seal_key_env`, every record, item and event AES-256-GCM, ingress/state/seal.py). Requests go to `POST /v1/responses`: a
developer message and a user message of 300 words, `max_output_tokens` 16 (the demo echoes the user's words).

Part 1, side by side in interleaved rounds (a shuffled order each round), each cell `--requests` sequential
requests on one kept-alive connection: edge (memory, redis) x model x shape (whole; stream; a long stream,
`max_output_tokens` 256, first turns alone) x variant:
  false     `store: false`;
  true      `store: true` (kept: the record and, streamed, its events appended once a read);
  turn2 false  a second turn sent whole by the client (the first turn's input, its answer, a new message);
  turn2 true   the same second turn as `previous_response_id` (a first turn stored before each cell's run:
               the memory backend's LRU, 64 MiB, drops one left unread while other cells run) and the new message.
A cell's figures: the edge's CPU (its process tree, /proc) a request, requests/s (sequential, c=1), p50/p99
latency, and on the Redis edge Redis's commands a request (`INFO commandstats` before and after, less the
INFO calls; `+cmds` those beyond the baseline's, whose own are the tenancy's). The table gives each figure's
median over rounds, and the CPU over the baseline's (false; turn2 false) with its rounds' range.
A streamed chunk's cost: (CPU of the long stream - CPU of the stream) / 240 more chunks, store true and false.

Part 2, memory: two fresh edges on the memory backend a round, one sent `--stored` store:false requests
and one `--stored` store:true (whole, gpt-4o), their RSS before (after 20 warm-up requests) and after.

Part 3, resumed streams: three edges (memory, Redis, sealed) in front of a demo with 20 ms between tokens. Replay: a
completed streamed response (stored), `GET /v1/responses/{id}?stream=true&starting_after=5` on a fresh
connection, timed to its first `data:` line. Running: a background response (`background: true`, 400 tokens,
~8 s) resumed the same way while it runs. Beside them, on the same edges: a new streamed request with
`store: false` on a fresh connection, timed to its first `data:` line the same way (closed there). p50/p99
over `--resumes` of each.

Part 4, sealing itself, in this process: AES-256-GCM seal and open (ingress/state/seal.py) of a value of
each size (a stream's event, a turn's record, a long conversation's), beside what reading it costs the
store anyway (msgspec's JSON decode of the same bytes): µs a value, the median of `--rounds` rounds of
timed loops, and the sealing's share of a stored whole request's CPU on the sealed edge (part 1).
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import random
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

from bench.lib.payloads import OPEN_MODEL, OPENAI_MODEL  # noqa: E402
from bench.lib.procs import cpu_seconds, machine_busy, rss_kb  # noqa: E402
from bench.lib.provenance import code_version, describe  # noqa: E402
from bench.lib.results import niced, result_path, write_result  # noqa: E402
from bench.lib.rounds import Spread  # noqa: E402
from bench.lib.servers import Server, free_port, python_in, serving  # noqa: E402
from bench.lib.tables import Table, figure  # noqa: E402
from ingress.tenancy.keys import new_key  # noqa: E402

MODELS = (OPENAI_MODEL, OPEN_MODEL)
BACKENDS = ("memory", "redis", "sealed")  # sealed: Redis, [responses] seal_key_env
SEAL_ENV = "BENCH_STATE_SEAL_KEY"
SHAPES = ("whole", "stream", "long")
VARIANTS = ("false", "true", "turn2 false", "turn2 true")
SHORT, LONG = 16, 256
WORDS = " ".join(f"word{i}" for i in range(300))
ENDS = ("response.completed", "response.incomplete")  # 16 tokens of a longer echo: incomplete
DEVELOPER = "You are a careful assistant. Answer briefly, in the user's words."


def config(upstream: int, backend: str, key_id: str, key_hash: str, redis_url: str) -> str:
    prefix = ', prefix = "sealed"' if backend == "sealed" else ""  # its own keys beside the plain Redis edge's
    tenancy = f'backend = "redis"\nredis = {{ url = "{redis_url}"{prefix} }}\n' if backend != "memory" else ""
    store = "memory" if backend == "memory" else "redis"
    sealed = f'seal_key_env = "{SEAL_ENV}"\n' if backend == "sealed" else ""
    routes = "".join(f'[[routes]]\nmodel = "{m}"\ngroup = "demo"\n\n' for m in MODELS)
    return f"""workers = 1
log_level = "warning"

[groups.demo]
endpoints = [{{ url = "http://127.0.0.1:{upstream}" }}]

{routes}[responses]
backend = "{store}"
{sealed}
[tenancy]
{tenancy}
[[tenancy.keys]]
id = "{key_id}"
tenant = "bench"
hash = "{key_hash}"

[tenancy.tenants.bench]
"""


def first_input(tag: str) -> list[dict[str, Any]]:
    return [{"role": "developer", "content": DEVELOPER}, {"role": "user", "content": f"{tag} {WORDS}"}]


def request(model: str, shape: str, store: bool, input_: list[dict[str, Any]], previous: str | None = None,
            background: bool = False, tokens: int | None = None) -> bytes:
    fields: dict[str, Any] = {"model": model, "input": input_, "store": store,
                              "max_output_tokens": tokens or (LONG if shape == "long" else SHORT)}
    if shape != "whole":
        fields["stream"] = True
    if previous is not None:
        fields["previous_response_id"] = previous
    if background:
        fields["background"] = True
    return json.dumps(fields).encode()


def events(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in data.splitlines() if line.startswith(b"data: {")]


def answer_text(data: bytes, stream: bool) -> tuple[str, str]:
    """(the response's id, its output text)."""
    if stream:
        done = [e for e in events(data) if e.get("type") in ENDS]
        if not done:
            raise SystemExit(f"a stream without its end: {data[-300:]!r}")
        body = done[0]["response"]
    else:
        body = json.loads(data)
    text = "".join(part.get("text", "") for item in body.get("output", []) if item.get("type") == "message"
                   for part in item.get("content", []))
    return str(body["id"]), text


class Client:
    def __init__(self, port: int, key: str) -> None:
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}

    def post(self, payload: bytes) -> tuple[int, bytes]:
        self.conn.request("POST", "/v1/responses", payload, self.headers)
        r = self.conn.getresponse()
        data = r.read()
        if r.getheader("connection", "").lower() == "close":
            self.conn.close()
        return r.status, data

    def close(self) -> None:
        self.conn.close()


def redis_calls(port: int) -> int:
    """Every command Redis has run so far, less its INFO calls (INFO commandstats)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"INFO commandstats\r\n")
        data = b""
        while True:
            data += s.recv(65536)
            head, _, rest = data.partition(b"\r\n")
            if head.startswith(b"$") and len(rest) >= int(head[1:]):
                break
    total = 0
    for line in data.decode().splitlines():
        if line.startswith("cmdstat_") and not line.startswith("cmdstat_info:"):
            total += int(line.split("calls=")[1].split(",")[0])
    return total


class Cell:
    """One (edge, model, shape, variant)'s payloads: a first turn, or a second turn after a stored one."""

    def __init__(self, client: Client, model: str, shape: str, variant: str) -> None:
        self.client, self.model, self.shape, self.variant = client, model, shape, variant
        self.store = variant.endswith("true")
        self.payload = b""

    def prepare(self) -> None:
        """The cell's request, and a check that it is answered (and kept or not) as it should be."""
        if not self.variant.startswith("turn2"):
            self.payload = request(self.model, self.shape, self.store, first_input("first"))
        else:
            self.refresh()
        status, data = self.client.post(self.payload)
        if status != 200:
            raise SystemExit(f"{self.model} {self.shape} {self.variant}: {status} {data[:300]!r}")
        rid, text = answer_text(data, self.shape != "whole")
        if not text:
            raise SystemExit(f"{self.model} {self.shape} {self.variant}: no answer {data[:300]!r}")
        self.client.conn.request("GET", f"/v1/responses/{rid}", headers=self.client.headers)
        r = self.client.conn.getresponse()
        r.read()
        if r.status != (200 if self.store else 404):
            raise SystemExit(f"{self.variant}: retrieving {rid} gave {r.status}")


    def refresh(self) -> None:
        """A second turn's first, stored again: the memory backend's LRU may have dropped the last one while
        other cells ran (it is bounded by `memory_bytes`)."""
        first = first_input("first")
        status, data = self.client.post(request(self.model, "whole", True, first, tokens=SHORT))
        if status != 200:
            raise SystemExit(f"first turn: {status} {data[:300]!r}")
        rid, text = answer_text(data, False)
        second = {"role": "user", "content": "second and the last question"}
        if self.store:
            self.payload = request(self.model, self.shape, True, [second], previous=rid)
        else:
            whole = [*first, {"role": "assistant", "content": [{"type": "output_text", "text": text}]}, second]
            self.payload = request(self.model, self.shape, False, whole)


def run_cell(edge: Server, cell: Cell, requests: int, redis_port: int | None) -> dict[str, float]:
    if cell.variant.startswith("turn2"):
        cell.refresh()  # untimed
    latencies = []
    calls0 = redis_calls(redis_port) if redis_port else 0
    before = sum(cpu_seconds(edge.pid))
    started = time.perf_counter()
    for _ in range(requests):
        t0 = time.perf_counter()
        status, data = cell.client.post(cell.payload)
        latencies.append(time.perf_counter() - t0)
        if status != 200:
            raise SystemExit(f"{cell.model} {cell.shape} {cell.variant}: {status} {data[:200]!r}")
    wall = time.perf_counter() - started
    cpu = sum(cpu_seconds(edge.pid)) - before
    calls = (redis_calls(redis_port) - calls0) / requests if redis_port else float("nan")
    latencies.sort()
    return {"cpu_us": cpu / requests * 1e6, "rps": requests / wall, "p50_ms": statistics.median(latencies) * 1e3,
            "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1e3, "redis_calls": calls}


def edges(work: Path, py: list[str], key_id: str, key_hash: str, redis_url: str, delay_ms: int, tag: str,
          backends: tuple[str, ...] = BACKENDS) -> tuple[list[Server], dict[str, Server]]:
    upstreams, servers = [], {}
    for i, backend in enumerate(backends):
        up = free_port()
        argv = [*py, "-m", "ingress", "demo-upstream", "--port", str(up), "--log-level", "warning"]
        if delay_ms:
            argv += ["--delay-ms", str(delay_ms)]
        upstreams.append(Server(f"demo-{tag}{i}", argv, up, work / f"demo-{tag}{i}.log", health=None))
        path = work / f"{tag}{i}.toml"
        path.write_text(config(up, backend, key_id, key_hash, redis_url))
        port = free_port()
        servers[f"{backend}{i}" if backends.count(backend) > 1 else backend] = Server(
            f"edge-{tag}{i}", [*py, "-m", "ingress", "serve", "--config", str(path), "--port", str(port)], port,
            work / f"edge-{tag}{i}.log")
    return upstreams, servers


def memory_phase(work: Path, py: list[str], key: str, key_id: str, key_hash: str, redis_url: str, rounds: int,
                 stored: int) -> list[dict[str, float]]:
    """RSS of a fresh memory edge after `stored` store:true requests, beside one sent store:false."""
    out = []
    for r in range(rounds):
        upstreams, servers = edges(work, py, key_id, key_hash, redis_url, 0, f"rss{r}-", ("memory", "memory"))
        with serving(*upstreams, *servers.values()):
            sides = {"false": servers["memory0"], "true": servers["memory1"]}
            clients = {s: Client(e.port, key) for s, e in sides.items()}
            for s, c in clients.items():
                for i in range(20):
                    c.post(request(OPENAI_MODEL, "whole", s == "true", first_input(f"warm{i}")))
            time.sleep(0.2)
            before = {s: rss_kb(e.pid) for s, e in sides.items()}
            order = list(sides) if r % 2 == 0 else list(sides)[::-1]
            for start in range(0, stored, 100):  # interleaved in batches of 100
                for s in order:
                    for i in range(start, min(stored, start + 100)):
                        status, data = clients[s].post(request(OPENAI_MODEL, "whole", s == "true",
                                                               first_input(f"n{i}")))
                        if status != 200:
                            raise SystemExit(f"rss phase: {status} {data[:200]!r}")
            time.sleep(0.2)
            after = {s: rss_kb(e.pid) for s, e in sides.items()}
            for c in clients.values():
                c.close()
        out.append({"false_before_mb": before["false"] / 1024, "false_after_mb": after["false"] / 1024,
                    "true_before_mb": before["true"] / 1024, "true_after_mb": after["true"] / 1024,
                    "kb_per_stored": ((after["true"] - before["true"]) - (after["false"] - before["false"]))
                    / stored})
        print(f"memory round {r + 1}/{rounds} done", file=sys.stderr)
    return out


def first_event_ms(port: int, key: str, rid: str, after: int) -> float:
    """A fresh connection's GET of a stored stream from `after`+1, timed to its first `data:` line."""
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", f"/v1/responses/{rid}?stream=true&starting_after={after}",
                 headers={"Authorization": f"Bearer {key}"})
    r = conn.getresponse()
    if r.status != 200:
        raise SystemExit(f"resume {rid}: {r.status} {r.read()[:300]!r}")
    while True:
        line = r.fp.readline()
        if not line:
            raise SystemExit(f"resume {rid}: no event")
        if line.startswith(b"data: "):
            break
    took = (time.perf_counter() - t0) * 1e3
    conn.close()
    return took


def new_stream_first_event_ms(port: int, key: str, model: str) -> float:
    """A fresh connection's new streamed request (store: false), timed to its first `data:` line, then closed."""
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", "/v1/responses", request(model, "stream", False, first_input("new"), tokens=16),
                 {"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    r = conn.getresponse()
    if r.status != 200:
        raise SystemExit(f"new stream: {r.status} {r.read()[:300]!r}")
    while not r.fp.readline().startswith(b"data: "):
        pass
    took = (time.perf_counter() - t0) * 1e3
    conn.close()
    return took


def resume_phase(work: Path, py: list[str], key: str, key_id: str, key_hash: str, redis_url: str,
                 resumes: int) -> dict[str, dict[str, list[float]]]:
    """First-event latency of a resumed stream, completed (replay) and running, beside a new store:false
    stream's, on each backend."""
    upstreams, servers = edges(work, py, key_id, key_hash, redis_url, 20, "resume-")
    got: dict[str, dict[str, list[float]]] = {b: {"new, store false": [], "completed": [], "running": []}
                                              for b in BACKENDS}
    with serving(*upstreams, *servers.values()):
        for backend, edge in servers.items():
            client = Client(edge.port, key)
            done = []
            for model in MODELS:
                status, data = client.post(request(model, "stream", True, first_input("replay"), tokens=64))
                if status != 200:
                    raise SystemExit(f"resume setup: {status} {data[:200]!r}")
                done.append(answer_text(data, True)[0])
            client.close()
            first_event_ms(edge.port, key, done[0], 5)  # warm-up
            new_stream_first_event_ms(edge.port, key, MODELS[0])
            for i in range(resumes):  # a completed response, replayed, and a new stream, alternately
                got[backend]["completed"].append(first_event_ms(edge.port, key, done[i % len(done)], 5))
                got[backend]["new, store false"].append(new_stream_first_event_ms(edge.port, key,
                                                                                  MODELS[i % len(MODELS)]))
            model_at = 0
            while len(got[backend]["running"]) < resumes:
                client = Client(edge.port, key)
                model = MODELS[model_at % len(MODELS)]
                model_at += 1
                status, data = client.post(request(model, "whole", True, first_input("running"), background=True,
                                                   tokens=400))
                client.close()
                if status != 200:
                    raise SystemExit(f"background: {status} {data[:200]!r}")
                rid = json.loads(data)["id"]
                time.sleep(0.5)  # its first events are in the store
                deadline = time.monotonic() + 5.0  # well before its ~8 s end
                while time.monotonic() < deadline and len(got[backend]["running"]) < resumes:
                    got[backend]["running"].append(first_event_ms(edge.port, key, rid, 5))
                    time.sleep(0.02)
                cancel = http.client.HTTPConnection("127.0.0.1", edge.port, timeout=10)
                cancel.request("POST", f"/v1/responses/{rid}/cancel", headers={"Authorization": f"Bearer {key}"})
                cancel.getresponse().read()
                cancel.close()
    return got


SEAL_SIZES = {"event, 200 B": 200, "record, 6 KB": 6 * 1024, "record, 64 KB": 64 * 1024, "record, 1 MB": 1 << 20}


def _timed(call: Any, n: int) -> float:
    started = time.perf_counter()
    for _ in range(n):
        call()
    return (time.perf_counter() - started) / n * 1e6


def sealing_phase(rounds: int) -> dict[str, dict[str, list[float]]]:
    """µs to seal, to open, and to JSON-decode a value of each size, `rounds` times, sizes interleaved."""
    import msgspec

    from ingress.state.seal import AtRest

    sealer = AtRest([os.urandom(32)])
    got: dict[str, dict[str, list[float]]] = {k: {"seal": [], "open": [], "json": []} for k in SEAL_SIZES}
    values = {k: json.dumps({"input": [{"type": "message", "role": "user", "content": "w " * (n // 2 - 40)}]})
              .encode() for k, n in SEAL_SIZES.items()}
    for r in range(rounds + 1):  # the first a warm-up
        for name, value in values.items():
            n = max(20, (4 << 20) // len(value))  # about 4 MB of values a loop
            sealed = sealer.seal("response", "bench/k", "resp_1", value)
            figures = {"seal": _timed(lambda v=value: sealer.seal("response", "bench/k", "resp_1", v), n),
                       "open": _timed(lambda b=sealed: sealer.open("response", "bench/k", "resp_1", b), n),
                       "json": _timed(lambda v=value: msgspec.json.decode(v), n)}
            if r:
                for k, v in figures.items():
                    got[name][k].append(v)
    return got


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="3 rounds of 60 requests, 2 memory rounds of 1,000")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--stored", type=int, default=3000, help="part 2: responses kept by the memory edge")
    parser.add_argument("--resumes", type=int, default=200, help="part 3: resumptions a cell")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.requests, args.stored, args.resumes = 3, 60, 1000, 60
    niced()
    version = code_version()
    run_started = time.perf_counter()
    key, key_id, key_hash = new_key()
    os.environ[SEAL_ENV] = base64.b64encode(os.urandom(32)).decode()  # the sealed edges' key, in their environment
    work = Path(tempfile.mkdtemp(prefix="bench-rstore-"))
    redis_port = free_port()
    redis_url = f"redis://127.0.0.1:{redis_port}/0"
    redis = Server("redis", ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no"], redis_port, work / "redis.log", health=None)
    py = python_in(ROOT)
    upstreams, servers = edges(work, py, key_id, key_hash, redis_url, 0, "main-")
    cells_keys = [(b, m, s, v) for b in BACKENDS for m in MODELS for s in SHAPES for v in VARIANTS
                  if s != "long" or not v.startswith("turn2")]  # a long stream: a first turn's chunks alone
    figures: dict[tuple[str, str, str, str], list[dict[str, float]]] = {c: [] for c in cells_keys}
    load_before = os.getloadavg()
    with serving(redis):
        with serving(*upstreams, *servers.values()):
            clients = {b: Client(servers[b].port, key) for b in BACKENDS}
            cells = {c: Cell(clients[c[0]], c[1], c[2], c[3]) for c in cells_keys}
            for cell in cells.values():
                cell.prepare()
            busy0, _ = machine_busy()
            ours0 = sum(sum(cpu_seconds(s.pid)) for s in (redis, *upstreams, *servers.values()))
            own0 = time.process_time()
            started = time.perf_counter()
            rng = random.Random(45)
            for r in range(args.rounds):
                order = cells_keys[:]
                rng.shuffle(order)
                for c in order:
                    figures[c].append(run_cell(servers[c[0]], cells[c], args.requests,
                                               redis_port if c[0] != "memory" else None))
                print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
            wall = time.perf_counter() - started
            busy1, _ = machine_busy()
            ours1 = sum(sum(cpu_seconds(s.pid)) for s in (redis, *upstreams, *servers.values()))
            others = ((busy1 - busy0) - (ours1 - ours0) - (time.process_time() - own0)) / wall * 100
            for cl in clients.values():
                cl.close()
        memory = memory_phase(work, py, key, key_id, key_hash, redis_url, 2 if args.quick else 3, args.stored)
        resumed = resume_phase(work, py, key, key_id, key_hash, redis_url, args.resumes)
    sealing = sealing_phase(args.rounds)

    table = Table(("backend", "<8"), ("model", "<23"), ("shape", "<7"), ("variant", "<12"), ("µs/req", ">8"),
                  ("/false", ">7"), ("(range)", ">11"), ("req/s", ">7"), ("p50 ms", ">8"), ("p99 ms", ">8"),
                  ("redis cmds", ">11"), ("+cmds", ">7"))
    lines = ["Part 1: a request, store false against true (turn2: sent whole against previous_response_id); "
             "sealed: Redis, sealed at rest",
             table.header()]
    summary: dict[str, Any] = {}
    for b in BACKENDS:
        for m in MODELS:
            for s in SHAPES:
                for v in VARIANTS:
                    if (b, m, s, v) not in figures:
                        continue
                    runs = figures[(b, m, s, v)]
                    base = figures[(b, m, s, "turn2 false" if v.startswith("turn2") else "false")]
                    ratio = Spread.of([a["cpu_us"] / z["cpu_us"] if z["cpu_us"] else float("nan")
                                       for a, z in zip(runs, base, strict=True)])
                    med = {k: Spread.of(x[k] for x in runs).median for k in runs[0]}
                    added = med["redis_calls"] - Spread.of(x["redis_calls"] for x in base).median
                    lines.append(table.row(b, m, s, v, figure(med["cpu_us"]), f"{ratio.median:.2f}", ratio.range(),
                                           figure(med["rps"]), f"{med['p50_ms']:.2f}", f"{med['p99_ms']:.2f}",
                                           "-" if b == "memory" else f"{med['redis_calls']:.2f}",
                                           "-" if b == "memory" else f"{added:+.2f}"))
                    summary[f"{b}/{m}/{s}/{v}"] = {**med, "cpu_over_false": ratio.median,
                                                    "cpu_over_false_range": [ratio.low, ratio.high], "rounds": runs}
    chunk = Table(("backend", "<8"), ("model", "<23"), ("store", "<7"), ("µs a chunk", ">11"), ("(range)", ">14"))
    lines += ["", f"A streamed chunk: (long - stream) CPU / {LONG - SHORT} more chunks", chunk.header()]
    chunks: dict[str, Any] = {}
    for b in BACKENDS:
        for m in MODELS:
            for v in ("false", "true"):
                per = Spread.of([(lo["cpu_us"] - st["cpu_us"]) / (LONG - SHORT) for lo, st in
                                 zip(figures[(b, m, "long", v)], figures[(b, m, "stream", v)], strict=True)])
                chunks[f"{b}/{m}/{v}"] = {"us_per_chunk": per.median, "range": [per.low, per.high]}
                lines.append(chunk.row(b, m, v, figure(per.median), f"{per.low:.1f} to {per.high:.1f}"))
    rss = Table(("memory backend", "<22"), ("false MB", ">9"), ("after", ">8"), ("true MB", ">9"), ("after", ">8"),
                ("KB a stored response", ">21"))
    lines += ["", f"Part 2: RSS after {args.stored:,} whole responses, fresh edges a round", rss.header()]
    for i, m_ in enumerate(memory):
        lines.append(rss.row(f"round {i + 1}", figure(m_["false_before_mb"]), figure(m_["false_after_mb"]),
                             figure(m_["true_before_mb"]), figure(m_["true_after_mb"]), f"{m_['kb_per_stored']:.2f}"))
    res = Table(("first event", "<26"), ("p50 ms", ">8"), ("p99 ms", ">8"), ("n", ">5"))
    lines += ["", "Part 3: a resumed stream's first event (starting_after=5, a fresh connection), beside a new "
              "store:false stream's", res.header()]
    for b in BACKENDS:
        for k in ("new, store false", "completed", "running"):
            vals = resumed[b][k]
            lines.append(res.row(f"{b}, {k}", f"{statistics.median(vals):.2f}", f"{pct(vals, 0.99):.2f}",
                                 f"{len(vals)}"))
    seal = Table(("value", "<15"), ("seal µs", ">9"), ("open µs", ">9"), ("JSON decode µs", ">15"),
                 ("(seal+open)/decode", ">19"))
    lines += ["", "Part 4: AES-256-GCM sealing at rest, in process, beside a JSON decode of the same bytes",
              seal.header()]
    for name, f in sealing.items():
        med = {k: statistics.median(v) for k, v in f.items()}
        lines.append(seal.row(name, f"{med['seal']:.2f}", f"{med['open']:.2f}", f"{med['json']:.2f}",
                              f"{(med['seal'] + med['open']) / med['json']:.2f}"))
    whole = summary.get(f"sealed/{OPENAI_MODEL}/whole/true", {}).get("cpu_us", float("nan"))
    record = statistics.median(sealing["record, 6 KB"]["seal"])
    lines.append(f"a 6 KB record's seal: {record / whole * 100:.2f}% of a stored whole request's CPU on the "
                 f"sealed edge ({figure(whole)} µs)")
    text = "\n".join(lines)
    note = (f"{describe(version)}; {args.rounds} rounds x {args.requests} sequential requests a cell; "
            f"others {others:.0f}% of a core during part 1; load average {load_before[0]:.2f} before")
    print(text)
    print(note)
    write_result({"code": version, "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "argv": sys.argv[1:],
                  "rounds": args.rounds, "requests_per_cell": args.requests, "others_cpu_percent": others,
                  "load_average_before": load_before, "cells": summary, "chunks": chunks, "memory": memory,
                  "resumed": resumed, "sealing": sealing, "table": text, "note": note,
                  "meta": {"wall_s": time.perf_counter() - run_started}},
                 result_path("responses_store", args.quick, args.out))


if __name__ == "__main__":
    main()
