"""What the edge's OpenTelemetry tracing costs a request and a streamed chunk: no [tracing], [tracing] at
sample_ratio 0.0 and at 1.0, side by side in one run.

    nice -n 10 .venv/bin/python -m bench tracing [--quick] [--rounds 8] [--seconds 4] [--connections 32]
                                                 [--streams 128] [--reps 3] [--measures request paced spans]
                                                 [--deferred] [--propagated] [--out FILE]
        -> results/tracing.json (~12 min, ~16 with --deferred; --quick ~2 min, results/tracing-quick.json)
    nice -n 10 .venv/bin/python -m bench tracing --profile [--seconds 20] [--profile-rounds 2] [--top 30]
                                                 [--profile-variant ratio1|ratio0|deferred]
        -> py-spy's samples of an untraced edge and a traced one under wrk: where the extra goes

Three edges, the same but for [tracing] (ingress/tracing.py):

- `off`: no [tracing]; the request path's one `is None` test (off against the commit before tracing:
  commits.py);
- `ratio 0.0`: [tracing] with sample_ratio 0.0: each request's server span and attempt span made, sampled
  out (non-recording), nothing exported: what a fleet sampling 1% mostly pays;
- `ratio 1.0`: every request's spans recorded and exported: the server span, admission, the attempt,
  settle (4 a request);
- with `--deferred`, `1.0 deferred`: ratio 1.0 with a queue that holds every span of the run and no flush
  due before the edge stops: what the request path pays for its spans with no export running beside it;
- with `--propagated` (non-streamed only), `off + caller tp`: the untraced edge, wrk sending a
  traceparent, which the edge carries on in the passport and the hop's header as a traced edge does.

Each is messages.py's edge: `ingress serve`, one worker, started with this checkout's code
(lib.servers.python_in; the run checks which `ingress` that imports), routing both names (gpt-4o and
llama-3.1-8b-instruct), with peers.py's [tenancy] (a key with rpm and tpm limits, never reached: admission
is a span, gpt-4o's prompt counted exactly, llama's estimated), each in front of a zero-delay mock of its
own. [tracing] names a sink on loopback as its endpoint (this file's `--serve-sink`, its own process: an
aiohttp app answering `POST /v1/traces` 200 with an empty ExportTraceServiceResponse, each body decoded
with opentelemetry-proto, its spans counted by service, name and trace) and is otherwise at its defaults
(max_queue 4096, max_batch 512, a flush every 1 s, export_timeout 5 s). The measures are messages.py's:

- non-streamed, µs/request: tenancy.py's mock; wrk -t1, `--connections` kept-alive connections,
  `--seconds` a run; the edge's CPU (its process tree, user + system, /proc) over the run per request;
- paced, µs/stream and µs/chunk: chunks.py's mock at 20 ms pacing, `--streams` concurrent streams
  (messages.py's `paced`: chunks.py's client, its steady window mid-stream for µs/chunk), `--reps` phases.

Each figure is also split by thread (/proc/PID/task): the edge's main thread (the event loop) and its others
(a traced edge's batch processor, encoding and POSTing spans), with the GC pauses the edge's /metrics
recorded over the run.

Each round starts every edge afresh (two processes of one tree differ by a few per cent: bench/README.md),
warms each with 1 s of wrk a name (a paced edge: the uncounted stream on each connection), then runs each
measure for both names, the edges back to back in A B C C B A order (which name first alternating by
round). A ratio (traced / off) and a difference (traced - off) are taken within a round; the table
gives medians over rounds and the rounds' range. After each round every traced edge's /metrics is read
(requests served, ingress_trace_spans_exported_total and _dropped_total), the edges are stopped (their
drain flushes what is queued) and the sink's counts give the spans each received: by name, per request
and per trace.

Then in process (`spans`), the calls a traced request makes to ingress/tracing.py, in the order the edge
makes them, on the data they get there, timed as bench/stages.py times a stage (thread CPU, calibrated
loops, GC off): at ratio 1.0 and 0.0 each call's cost (the difference between the sequence's prefixes
with and without it); and the export thread's work per span: the OTLP protobuf encoding of a batch of 512
such spans, and the SDK exporter's whole export of that batch to the sink (the encoding and the POST).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

from bench import messages  # noqa: E402
from bench.chunks import gc_of  # noqa: E402
from bench.lib.payloads import OPEN_MODEL, OPENAI_MODEL  # noqa: E402
from bench.lib.procs import CLK_TCK, cpu_seconds, family  # noqa: E402
from bench.lib.provenance import code_version, describe  # noqa: E402
from bench.lib.results import niced, result_path, write_result  # noqa: E402
from bench.lib.rounds import Rounds, Spread  # noqa: E402
from bench.lib.servers import ROOT, Server, free_port, python_in, start_all, stop_all  # noqa: E402
from bench.lib.tables import Table  # noqa: E402
from bench.lib.wrk import SCRIPT, Wrk, ensure_wrk  # noqa: E402
from bench.messages import HEADERS, MAX_TOKENS, PACING_MS, body, check_answer, paced  # noqa: E402
from bench.tenancy import scrape, total  # noqa: E402

PY = sys.executable
MODELS = (OPENAI_MODEL, OPEN_MODEL)
VARIANTS = ("off", "ratio0", "ratio1")
# With --deferred, a fourth edge: ratio 1.0 with its export put off past the run (a queue that holds every
# span, no flush due): what the request path pays alone, with no export thread running beside it.
DEFERRED = "deferred"
# With --propagated, another: the untraced edge sent a traceparent by its client (wrk; not the paced
# streams), which it carries on in the passport and the hop's header: what a traced edge carries too.
PROPAGATED = "propagated"
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
LABELS = {"off": "off", "ratio0": "ratio 0.0", "ratio1": "ratio 1.0", DEFERRED: "1.0 deferred",
          PROPAGATED: "off + caller tp"}
RATIOS = {"ratio0": 0.0, "ratio1": 1.0, DEFERRED: 1.0}
KINDS = ("request", "paced")  # each its own edges and mocks
MEASURES = {"request": "non-streamed, µs/request", "paced": "paced stream, µs/stream",
            "chunk": "paced stream, µs/chunk"}
CHAT = "/v1/chat/completions"
TRACES = "/v1/traces"
# The targets of the issue that made tracing: ratio 1.0 at most 10% more CPU a request, 3 µs more a chunk.
TARGET_RATIO, TARGET_CHUNK_US = 1.10, 3.0
WARM_SECONDS = 1


# wrk's script: the caller's traceparent when $BENCH_TRACEPARENT names one (lua, after wrk.py's and messages.py's)
CALLER = """
local traceparent = os.getenv("BENCH_TRACEPARENT")
if traceparent ~= nil and traceparent ~= "" then wrk.headers["traceparent"] = traceparent end
"""


# --- the sink --------------------------------------------------------------------------------------


def serve_sink(port: int) -> None:
    """An OTLP/HTTP traces receiver that keeps nothing but counts: per service.name, the POSTs, their bytes,
    the spans by name, the traces and how many spans each had. GET /counts answers them as JSON."""
    import gzip

    import uvloop
    from aiohttp import web
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    counts: dict[str, dict[str, Any]] = {}
    traces: dict[str, Counter[bytes]] = {}  # spans a trace, by trace id

    async def receive(request: web.Request) -> web.Response:
        data = await request.read()
        size = len(data)
        if request.headers.get("Content-Encoding") == "gzip":
            data = gzip.decompress(data)
        export = ExportTraceServiceRequest.FromString(data)
        for resource in export.resource_spans:
            service = next((a.value.string_value for a in resource.resource.attributes if a.key == "service.name"),
                           "")
            seen = counts.setdefault(service, {"posts": 0, "bytes": 0, "spans": {}, "traces": 0})
            seen["posts"] += 1
            seen["bytes"] += size
            ids = traces.setdefault(service, Counter())
            spans = seen["spans"]
            for scope in resource.scope_spans:
                for span in scope.spans:
                    spans[span.name] = spans.get(span.name, 0) + 1
                    ids[span.trace_id] += 1
            seen["traces"] = len(ids)
        return web.Response(body=b"", content_type="application/x-protobuf")  # an empty ExportTraceServiceResponse

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def report(_: web.Request) -> web.Response:
        for service, ids in traces.items():  # how many traces had 1, 2... spans
            counts[service]["trace_sizes"] = {str(k): v for k, v in sorted(Counter(ids.values()).items())}
        return web.json_response(counts)

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post(TRACES, receive)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/counts", report)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None, loop=uvloop.new_event_loop())


def sink_counts(sink: Server) -> dict[str, dict[str, Any]]:
    with urllib.request.urlopen(sink.url + "/counts", timeout=10) as r:
        counts: dict[str, dict[str, Any]] = json.loads(r.read())
    return counts


# --- the edges -------------------------------------------------------------------------------------


def imported_ingress() -> str:
    """Where the edges' Python finds `ingress`: started as they are (python_in this checkout, in ROOT)."""
    done = subprocess.run([*python_in(ROOT), "-c", "import ingress; print(ingress.__file__)"], capture_output=True,
                          text=True, cwd=ROOT, check=True)
    found = done.stdout.strip()
    if not Path(found).resolve().is_relative_to(ROOT.resolve()):
        raise SystemExit(f"the edges would import {found}, not this checkout's ingress ({ROOT})")
    return found


def tracing_section(variant: str, sink: Server, service: str) -> str:
    if variant not in RATIOS:  # off, and off with the caller's traceparent
        return ""
    section = (f'\n[tracing]\nendpoint = "{sink.url}{TRACES}"\nsample_ratio = {RATIOS[variant]}\n'
               f'service_name = "{service}"\n')
    if variant == DEFERRED:
        section += "max_queue = 1000000\nmax_batch = 100000\nflush_interval = 86400\n"
    return section


def make_edges(work: Path, mocks: dict[str, Server], sink: Server, section: str, r: int,
               variants: tuple[str, ...] = VARIANTS) -> dict[tuple[str, str], Server]:
    """A fresh edge for each measure and variant, in front of that measure's mock; the traced ones name
    their service for the round, so the sink's counts tell each edge's spans apart."""
    edges = {}
    for kind, mock in mocks.items():
        for variant in variants:
            if kind == "paced" and variant == PROPAGATED:
                continue
            port = free_port()
            name = f"edge-{kind}-{variant}"
            config = work / f"{name}.toml"
            config.write_text(f'port = {port}\nworkers = 1\nupstream = "{mock.url}"\n'
                              f'models = ["{OPENAI_MODEL}", "{OPEN_MODEL}"]\n'
                              # a stop is at once, and its drain flushes the spans queued (ingress/serve/app.py)
                              '\n[drain]\ndelay = 0\ndeadline = 5\n' + section
                              + tracing_section(variant, sink, service_of(kind, variant, r)))
            edges[(kind, variant)] = Server(name, [*python_in(ROOT), "-m", "ingress", "serve", "--config",
                                                   str(config)], port, work / f"{name}-r{r}.log")
            if variant == DEFERRED:  # its drain exports the whole run's spans
                edges[(kind, variant)].stop_timeout = 30.0
    return edges


def service_of(kind: str, variant: str, r: int) -> str:
    return f"bench-{kind}-{variant}-r{r}"


def edge_spans(edge: Server) -> dict[str, float]:
    """What an edge's /metrics says: chat requests served, spans exported, and dropped by reason."""
    samples = scrape(edge.port)
    return {"requests": total(samples, "ingress_requests_total", route=CHAT),
            "ok": total(samples, "ingress_requests_total", route=CHAT, status="200"),
            "exported": total(samples, "ingress_trace_spans_exported_total"),
            "dropped_queue_full": total(samples, "ingress_trace_spans_dropped_total", reason="queue_full"),
            "dropped_export_failed": total(samples, "ingress_trace_spans_dropped_total", reason="export_failed")}


def stop_together(servers: list[Server]) -> None:
    """SIGTERM to every one at once, then each awaited (each drains and flushes its spans)."""
    for server in servers:
        if server.proc is not None and server.proc.poll() is None:
            server.proc.terminate()
    stop_all(*servers)


def threads_cpu(pid: int) -> tuple[float, float]:
    """CPU seconds so far of a process tree's main threads (an edge's event loop) and of its other threads
    (a traced edge's batch processor, exporting), user + system, from /proc/PID/task."""
    main = other = 0.0
    for process in family(pid):
        for task in Path(f"/proc/{process}/task").glob("[0-9]*"):
            try:
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # gone meanwhile
                continue
            seconds = (int(fields[11]) + int(fields[12])) / CLK_TCK
            if int(task.name) == process:
                main += seconds
            else:
                other += seconds
    return main, other


def switches(pid: int) -> tuple[int, int]:
    """A process tree's context switches so far, all its threads': (voluntary, nonvoluntary: preempted)."""
    counts = [0, 0]
    for process in family(pid):
        for task in Path(f"/proc/{process}/task").glob("[0-9]*"):
            try:
                status = (task / "status").read_text()
            except OSError:
                continue
            for line in status.splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    counts[0] += int(line.split()[1])
                elif line.startswith("nonvoluntary_ctxt_switches:"):
                    counts[1] += int(line.split()[1])
    return counts[0], counts[1]


class Split:
    """messages.py's `paced` reads the edge's CPU (lib.procs.cpu_seconds) at each phase's start, at its
    steady window's two ends and at its end; while a Split is on, each of those readings also notes the
    edge's threads apart (`threads_cpu`), the figures `paced` computes unchanged."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.notes: list[tuple[float, float]] = []

    def __enter__(self) -> Split:
        def reading(pid: int) -> tuple[float, float]:
            if pid == self.pid:
                self.notes.append(threads_cpu(pid))
            return cpu_seconds(pid)

        messages.cpu_seconds = reading  # type: ignore[attr-defined]  # messages.py's own import of it
        return self

    def __exit__(self, *_: object) -> None:
        messages.cpu_seconds = cpu_seconds  # type: ignore[attr-defined]  # as above

    def phases(self) -> list[dict[str, float]]:
        """Per phase: the loop's and the other threads' CPU seconds over the phase and over its window."""
        notes = self.notes
        if len(notes) % 4:
            raise RuntimeError(f"{len(notes)} readings: paced() no longer reads the CPU four times a phase")
        out = []
        for start, w0, w1, end in zip(notes[0::4], notes[1::4], notes[2::4], notes[3::4], strict=True):
            out.append({"loop_s": end[0] - start[0], "threads_s": end[1] - start[1],
                        "steady_loop_s": w1[0] - w0[0], "steady_threads_s": w1[1] - w0[1]})
        return out


# --- the run ---------------------------------------------------------------------------------------


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from bench.peers import key_section  # the edge's [tenancy], as peers.py, model_names.py and messages.py set it

    started, load_before = time.perf_counter(), os.getloadavg()
    where = imported_ingress()
    work = Path(tempfile.mkdtemp(prefix="ingress-bench-tracing-"))
    files = {}
    for model in MODELS:
        for stream in (False, True):
            files[(model, stream)] = work / f"{model}-{'stream' if stream else 'json'}.json"
            files[(model, stream)].write_bytes(body("chat", model, stream))
    section, key, _ = key_section()
    kinds = [k for k in KINDS if k in args.measures]
    argv = {"request": [PY, "-m", "bench.tenancy", "--serve-mock"],
            "paced": [PY, "-m", "bench.chunks", "--serve-mock"]}
    mocks = {}
    for kind in kinds:
        port = free_port()
        mocks[kind] = Server(f"mock-{kind}", [*argv[kind], str(port), str(PACING_MS if kind == "paced" else 0)], port,
                             work / f"mock-{kind}.log")
    port = free_port()
    sink = Server("sink", [PY, "-m", "bench.tracing", "--serve-sink", str(port)], port, work / "sink.log")
    wrk = Wrk(ensure_wrk(), work / "bench.lua")
    wrk.script.write_text(SCRIPT + HEADERS + CALLER)
    os.environ["BENCH_KEY"], os.environ["BENCH_API"] = key, "chat"
    variants = (*VARIANTS, *((DEFERRED,) if args.deferred else ()), *((PROPAGATED,) if args.propagated else ()))
    rounds: Rounds[str] = Rounds(variants, args.rounds, order="alternate", baseline="off")
    spans: list[dict[str, Any]] = []
    others: list[float] = []
    loop = asyncio.new_event_loop()
    edges: dict[tuple[str, str], Server] = {}
    try:
        start_all(sink, *mocks.values())
        print(f"{describe(code_version())}; the edges import {where}; load average {load_before[0]:.2f}; "
              f"nice {os.nice(0)}", flush=True)
        for r, order in rounds:
            edges = make_edges(work, mocks, sink, section, r, variants)
            start_all(*edges.values())
            with ThreadPoolExecutor(len(edges) * len(MODELS)) as pool:  # a paced answer takes 1.3 s
                list(pool.map(lambda e: check_answer(e[0].port, "chat", e[1], e[2] == "paced", key),
                              [(edge, model, kind) for (kind, _), edge in edges.items() for model in MODELS]))
            for (kind, variant), edge in edges.items():
                for model in MODELS:
                    if kind == "request":  # warmed: 1 s of wrk a name
                        os.environ["BENCH_TRACEPARENT"] = TRACEPARENT if variant == PROPAGATED else ""
                        wrk.run(f"{edge.url}{CHAT}", files[(model, False)], "application/json", args.connections,
                                WARM_SECONDS)
            models = MODELS if r % 2 == 0 else MODELS[::-1]
            for kind in kinds:
                for m, model in enumerate(models):
                    for variant in order if m % 2 == 0 else order[::-1]:  # A B C C B A
                        subject = edges.get((kind, variant))
                        if subject is None:  # the propagated edge: non-streamed alone
                            continue
                        if kind == "paced":
                            per_stream, per_chunk = paced_run(loop, subject, files[(model, True)].read_bytes(), key,
                                                              args)
                            rounds.add(variant, per_stream, ("paced", model))
                            rounds.add(variant, per_chunk, ("chunk", model))
                        else:
                            os.environ["BENCH_TRACEPARENT"] = TRACEPARENT if variant == PROPAGATED else ""
                            run = request_run(wrk, subject, files[(model, False)], args)
                            others.append(run["others_cpu_percent"])
                            rounds.add(variant, run, ("request", model))
            seen = {k: edge_spans(e) for k, e in edges.items() if k[1] not in ("off", PROPAGATED)}
            stop_together(list(edges.values()))
            received = sink_counts(sink)
            for (kind, variant), metrics in seen.items():
                got = received.get(service_of(kind, variant, r), {"posts": 0, "bytes": 0, "spans": {}, "traces": 0})
                spans.append({"round": r, "kind": kind, "variant": variant, **metrics, **got})
            line = ", ".join(f"{kind} {model} " + "/".join(f"{rounds.runs(v, (kind, model))[-1]['us']:.1f}"
                                                          for v in variants if rounds.runs(v, (kind, model)))
                             for kind, model in cells(rounds))
            print(f"round {r + 1}/{args.rounds} ({time.perf_counter() - started:.0f} s): µs "
                  f"{'/'.join(LABELS[v] for v in variants)}: {line}",
                  flush=True)
    finally:
        loop.close()
        stop_together([*edges.values(), sink, *mocks.values()])
    shutil.rmtree(work, ignore_errors=True)
    return {
        "meta": {"code": code_version(), "edges_import": where, "models": MODELS, "measures": args.measures,
                 "rounds": args.rounds, "seconds": args.seconds, "connections": args.connections,
                 "streams": args.streams, "reps": args.reps, "pacing_ms": PACING_MS, "max_tokens": MAX_TOKENS,
                 "nice": os.nice(0), "cpus": os.cpu_count(), "load_average_before": load_before,
                 "load_average_after": os.getloadavg(),
                 "others_cpu_percent_median": statistics.median(others) if others else None,
                 "others_cpu_percent_range": [min(others), max(others)] if others else None,
                 "body_bytes": {"json": len(body("chat", OPENAI_MODEL, False)),
                                "stream": len(body("chat", OPENAI_MODEL, True))},
                 "wall_s": round(time.perf_counter() - started, 1)},
        "table": table(rounds), "spans": span_table(spans),
        "runs": {f"{cell[0]}/{cell[1]}/{v}": rounds.runs(v, cell) for cell in cells(rounds) for v in variants
                 if rounds.runs(v, cell)},
        "spans_by_round": spans,
    }


def request_run(wrk: Wrk, edge: Server, payload: Path, args: argparse.Namespace) -> dict[str, Any]:
    """wrk against the edge: its CPU per request (all of it, its event loop's, its other threads'), its GC."""
    gc0, threads0, switches0 = gc_of(edge.port), threads_cpu(edge.pid), switches(edge.pid)
    result = wrk.run(f"{edge.url}{CHAT}", payload, "application/json", args.connections, args.seconds,
                     watch={"edge": edge.pid})
    threads1, switches1 = threads_cpu(edge.pid), switches(edge.pid)
    if result["errors"]:
        raise SystemExit(f"{edge.name}: errors {result['errors']}")
    n = result["requests"]
    return {"us": result["cpu_us_per_request"]["edge"], "sys_us": result["system_cpu_us_per_request"]["edge"],
            "loop_us": (threads1[0] - threads0[0]) / n * 1e6, "threads_us": (threads1[1] - threads0[1]) / n * 1e6,
            "switches": (switches1[0] - switches0[0]) / n, "preempted": (switches1[1] - switches0[1]) / n,
            **gc_used(gc0, gc_of(edge.port), n),
            "rps": result["rps"], "p50_ms": result["p50_ms"], "p99_ms": result["p99_ms"],
            "others_cpu_percent": result["others_cpu_percent"]}


def paced_run(loop: asyncio.AbstractEventLoop, edge: Server, payload: bytes, key: str,
              args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """messages.py's paced streams through the edge: its CPU per stream and per chunk of the steady window,
    each split by thread as well; its GC per stream."""
    gc0 = gc_of(edge.port)
    with Split(edge.pid) as split:
        phases = loop.run_until_complete(paced(edge.port, "chat", payload, key, args.streams, edge.pid, args.reps,
                                               PACING_MS / 1000))
    parts = split.phases()
    chunks = sum(p["steady_chunks"] for p in phases)
    streams = sum(p["streams"] for p in phases)
    stream = {"us": sum(p["cpu_s"] for p in phases) / streams * 1e6,
              "loop_us": sum(p["loop_s"] for p in parts) / streams * 1e6,
              "threads_us": sum(p["threads_s"] for p in parts) / streams * 1e6,
              **gc_used(gc0, gc_of(edge.port), streams), "phases": phases, "threads": parts}
    chunk = {"us": sum(p["steady_cpu_s"] for p in phases) / chunks * 1e6,
             "loop_us": sum(p["steady_loop_s"] for p in parts) / chunks * 1e6,
             "threads_us": sum(p["steady_threads_s"] for p in parts) / chunks * 1e6, "chunks": chunks,
             "sys_us": statistics.median(p["sys_us_per_chunk"] for p in phases),
             "machine_busy_percent": statistics.median(p["machine_busy_percent"] for p in phases)}
    return stream, chunk


def gc_used(before: tuple[float, float, float] | None, after: tuple[float, float, float] | None,
            n: int) -> dict[str, float]:
    """The edge's GC pauses between two readings of its /metrics (recorded there each second), per request
    or stream: collections, and µs paused."""
    if before is None or after is None:
        return {}
    return {"gc_collections": (after[0] - before[0]) / n, "gc_us": (after[1] - before[1]) / n * 1e6}


def cells(rounds: Rounds[str]) -> list[tuple[str, str]]:
    return [(kind, model) for kind in MEASURES for model in MODELS if rounds.runs("off", (kind, model))]


def _signed(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:+,.{digits}f}"


def _num(value: float) -> float | None:
    """None for NaN (a figure no run gave: no GC readings over a steady window), so the JSON stays JSON."""
    return None if value != value else value


def _spread(s: Spread) -> dict[str, Any]:
    return {"median": _num(s.median), "range": [_num(s.low), _num(s.high)]}


def table(rounds: Rounds[str]) -> list[dict[str, Any]]:
    rows = []
    for kind, model in cells(rounds):
        cell = (kind, model)
        present = [v for v in rounds.variants if rounds.runs(v, cell)]
        row: dict[str, Any] = {"measure": kind, "model": model,
                               **{f"{v}_us": rounds.median(v, "us", cell) for v in present}}
        for v in present[1:]:
            row[f"{v}_ratio"] = _spread(rounds.ratio(v, "us", cell=cell))
            row[f"{v}_added_us"] = _spread(rounds.added(v, "us", cell=cell))
            for part in PARTS:  # where the difference is: the event loop, the other threads, GC pauses
                row[f"{v}_added_{part}"] = _spread(rounds.added(v, _part(part), cell=cell))
        row["ratio1_over_ratio0"] = _spread(rounds.ratio("ratio1", "us", baseline="ratio0", cell=cell))
        for v in present:
            row.update({f"{v}_{part}": _num(rounds.median(v, _part(part), cell)) for part in PARTS})
        if kind == "request":
            for figure in ("rps", "sys_us", "switches", "preempted", "p99_ms"):
                row.update({f"{v}_{figure}": _num(rounds.median(v, _part(figure), cell)) for v in present})
        rows.append(row)
    return rows


PARTS = ("loop_us", "threads_us", "gc_us")


def _part(name: str) -> Callable[[str, Any], float]:
    return lambda _, run: float(run.get(name, math.nan))


def span_table(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per traced edge, over every round: requests served, spans received (by name), exported, dropped."""
    rows = []
    for kind in KINDS:
        for variant in (*VARIANTS[1:], DEFERRED):
            mine = [s for s in spans if s["kind"] == kind and s["variant"] == variant]
            if not mine:
                continue
            by_name: Counter[str] = Counter()
            for s in mine:
                by_name.update(s["spans"])
            requests = sum(s["requests"] for s in mine)
            ok = sum(s["ok"] for s in mine)
            received = sum(by_name.values())
            traces = sum(s["traces"] for s in mine)
            sizes: Counter[str] = Counter()
            for s in mine:
                sizes.update(s.get("trace_sizes", {}))
            rows.append({"kind": kind, "variant": variant, "requests": requests, "ok": ok, "spans_received": received,
                         "spans_per_request": received / requests if requests else None,
                         "spans_per_trace": received / traces if traces else None, "traces": traces,
                         "trace_sizes": dict(sizes),
                         "by_name_per_request": {n: c / requests for n, c in sorted(by_name.items())} if requests
                         else {},
                         "exported": sum(s["exported"] for s in mine),
                         "dropped_queue_full": sum(s["dropped_queue_full"] for s in mine),
                         "dropped_export_failed": sum(s["dropped_export_failed"] for s in mine),
                         "posts": sum(s["posts"] for s in mine), "bytes": sum(s["bytes"] for s in mine)})
    return rows


# --- in process ------------------------------------------------------------------------------------


def span_calls(ratio: float, tracer: Any) -> list[tuple[str, Callable[[dict[str, Any]], object]]]:
    """The calls a traced chat request makes to ingress/tracing.py, in the edge's order, each on the data it
    gets there (state passed along in a dict): what middleware, endpoints, prepare, admit, send and the end
    of the request call, and nothing else."""
    from multidict import CIMultiDict

    from ingress import wire
    from ingress.edge.middleware import begin_trace
    from ingress.edge.spans import end_trace
    from ingress.encoding.passport import RequestMeta, compute_passport
    from ingress.encoding.requests import encode_request
    from ingress.exchange import Exchange
    from ingress.oai.codec import decode_chat_request
    from ingress.pipeline.gateway import hop_headers
    from ingress.usage import usage_record

    tracer.ratio = ratio
    request = decode_chat_request(body("chat", OPENAI_MODEL, False))
    headers = CIMultiDict({"Authorization": "Bearer sk-bench", "Content-Type": "application/json"})
    fake = type("Request", (), {"headers": headers})()
    usage = wire.Usage(prompt_tokens=4000, completion_tokens=64, total_tokens=4064)
    url = "http://127.0.0.1:8000"

    def begin(s: dict[str, Any]) -> None:
        s["ex"] = exchange = Exchange("0123456789abcdef0123456789abcdef")
        exchange.trace = begin_trace(tracer, fake)  # a stand-in: begin_trace reads its headers

    def meta(s: dict[str, Any]) -> None:  # endpoints.request_meta: the passport carries the server span's context
        trace = s["ex"].trace
        if trace is None:  # not sampled: no span, the passport says so
            return
        s["meta"] = RequestMeta(tenant_id="bench", key_id="key", traceparent=trace.traceparent,
                                tracestate=trace.tracestate)

    template = Exchange("0123456789abcdef0123456789abcdef")  # the access line's record, made whether traced or not
    template.routed.model, template.answer.usage, template.attempts.upstream = OPENAI_MODEL, usage, url
    record = usage_record(template, "POST", CHAT, 200, "ok", time.perf_counter())
    passport = compute_passport(request, RequestMeta(traceparent="00-" + "1" * 32 + "-" + "2" * 16 + "-01"))
    encoded = encode_request(request, "0123456789abcdef0123456789abcdef", passport)

    def prepared(s: dict[str, Any]) -> None:  # prepare.prepared_for: the hop's buffer and headers, what was asked
        exchange = s["ex"]
        exchange.routed.model, exchange.routed.stream = OPENAI_MODEL, False
        s["headers"] = hop = hop_headers(exchange.request_id, passport)
        if exchange.trace is not None:
            exchange.trace.hop(encoded, hop)
            exchange.trace.asked(request, "openai")

    def admitted(s: dict[str, Any]) -> None:  # admit: the admission's span from its marks
        exchange = s["ex"]
        asked = time.perf_counter()
        exchange.admitted.at = time.perf_counter()
        exchange.admitted.outcome = "admitted"
        if exchange.trace is not None:
            exchange.trace.child("admission", asked, exchange.admitted.at, {"ingress.limit.outcome": "admitted",
                                                                            "ingress.tenant": "bench"})

    def attempt(s: dict[str, Any]) -> None:  # send: the attempt's span, its id written into the hop
        exchange = s["ex"]
        attempts = exchange.attempts
        attempts.count, attempts.group, attempts.upstream = 1, "default", url
        attempts.sent = time.perf_counter()
        if exchange.trace is not None:
            exchange.trace.attempt("default", url, 1)

    def settled(s: dict[str, Any]) -> None:  # the middleware's end: settle's span, then the server span's end
        exchange = s["ex"]
        exchange.attempts.head = exchange.answer.done = time.perf_counter()
        exchange.answer.usage = usage
        settling = time.perf_counter()
        now = time.perf_counter()
        if exchange.trace is not None:
            exchange.trace.child("settle", settling, now)
            end_trace(exchange, CHAT, 200, "ok", record)

    return [("begin (the server span)", begin), ("traceparent for the passport", meta),
            ("hop + asked (prepare)", prepared), ("admission's child span", admitted),
            ("attempt's span (send)", attempt), ("settle's child span + the end", settled)]


def span_costs(args: argparse.Namespace, sink_url: str) -> dict[str, Any]:
    """Each call's thread CPU µs, as the difference between the sequence's prefixes, at ratio 1.0 and 0.0;
    and the export thread's µs per span for 512 of ratio 1.0's spans (encoding, and encoding + POST)."""
    import http.client
    import urllib.parse

    from bench.lib.budget import cpu_us
    from ingress import log
    from ingress.settings import Tracing
    from ingress.tracing import Tracer, otlp

    log.configure("info", open(os.devnull, "w"))  # noqa: SIM115  # for the process

    # A tracer whose exporter is stopped: the spans the sequence makes stay queued, to be timed here.
    tracer = Tracer(Tracing(endpoint=sink_url + TRACES, max_queue=1_000_000, max_batch=1_000_000,
                            flush_interval=86_400))
    tracer.flush(1.0)
    out: dict[str, Any] = {}
    # the edge's own work on the request, to run the sequence amid: chat's prepare (decode, route, count,
    # passport, encode) as messages.py times it
    work = messages.stage_pairs()[f"request: prepare, {OPENAI_MODEL}"][0]
    assert work is not None
    for ratio in (1.0, 0.0):
        calls = span_calls(ratio, tracer)

        def prefix(k: int, calls: list[Any] = calls) -> Callable[[], object]:
            def run() -> None:
                state: dict[str, Any] = {}
                for _, fn in calls[:k]:
                    fn(state)

            return run

        timed: list[list[float]] = [[] for _ in range(len(calls) + 1)]
        for _ in range(args.stage_rounds):
            for k in range(len(calls) + 1):
                timed[k].append(cpu_us(prefix(k), args.stage_budget, repeats=3))
        amid = []  # (prepare, then the whole sequence) - prepare alone, back to back, which first alternating
        whole = prefix(len(calls))

        def both(whole: Callable[[], object] = whole) -> None:
            work()
            whole()

        for r in range(args.stage_rounds):
            if r % 2 == 0:
                alone = cpu_us(work, args.stage_budget, repeats=3)
                paired = cpu_us(both, args.stage_budget, repeats=3)
            else:
                paired = cpu_us(both, args.stage_budget, repeats=3)
                alone = cpu_us(work, args.stage_budget, repeats=3)
            amid.append(paired - alone)
        medians = [statistics.median(t) for t in timed]
        out[f"ratio {ratio}"] = {"whole_us": medians[-1] - medians[0],
                                 "amid_prepare_us": statistics.median(amid), "amid_range": [min(amid), max(amid)],
                                 "calls_us": {name: medians[k + 1] - medians[k] for k, (name, _) in enumerate(calls)},
                                 "whole_range": [min(b - a for a, b in zip(timed[0], timed[-1], strict=True)),
                                                 max(b - a for a, b in zip(timed[0], timed[-1], strict=True))]}
    # the export thread's work: 512 spans (128 requests' 4), as one batch
    batch = list(tracer._queue)[:512]
    if len(batch) < 512:
        raise SystemExit(f"only {len(batch)} spans were kept to time their export")
    prefix = tracer._prefix
    sink = urllib.parse.urlsplit(sink_url)
    connection = http.client.HTTPConnection(sink.hostname or "127.0.0.1", sink.port, timeout=10)

    def post() -> None:
        connection.request("POST", TRACES, otlp.export_encoded(prefix, batch),
                           {"Content-Type": "application/x-protobuf"})
        connection.getresponse().read()

    encode = [cpu_us(lambda: otlp.export_encoded(prefix, batch), args.stage_budget, repeats=3)
              for _ in range(args.stage_rounds)]
    export = [cpu_us(post, args.stage_budget, repeats=3) for _ in range(args.stage_rounds)]
    connection.close()
    # the spans are encoded as they end (in the calls above); the thread assembles a request and POSTs it
    out["export_per_span_us"] = {"assemble": statistics.median(encode) / len(batch),
                                 "export (assemble + POST)": statistics.median(export) / len(batch),
                                 "batch_bytes": len(otlp.export_encoded(prefix, batch)), "spans": len(batch)}
    return out


# --- tables ----------------------------------------------------------------------------------------


def print_result(result: dict[str, Any]) -> None:
    meta = result["meta"]
    others = meta.get("others_cpu_percent_range")
    if "rounds" in meta:
        print(f"\n{describe(meta['code'])}; one worker a subject, fresh each round; a key with rpm and tpm limits "
              f"(never reached: admission is a span); medians over {meta['rounds']} interleaved rounds"
              + (f"; the rest of the machine at {meta['others_cpu_percent_median']:.0f}% of a core during the wrk "
                 f"runs (median; {others[0]:.0f}-{others[1]:.0f})" if others else "")
              + f"; load average {meta['load_average_before'][0]:.2f} before, {meta['load_average_after'][0]:.2f} "
              "after")
        print(f"the 16 KB, 11-message chat request with a tool ({meta['body_bytes']['json']:,} B); wrk -t1 "
              f"-c{meta['connections']}, {meta['seconds']} s a run; paced: {meta['streams']} streams of 64 deltas "
              f"{meta['pacing_ms']:.0f} ms apart, {meta['reps']} phase(s) a round")
    if result["table"]:
        t = Table(("measure", "<26"), ("model", "<23"), ("off", ">8"), ("0.0", ">8"), ("1.0", ">8"),
                  ("0.0/off", ">9"), ("rounds", ">11"), ("1.0/off", ">9"), ("rounds", ">11"), ("1.0-off", ">9"),
                  ("rounds", ">15"))
        print(t.header())
        for row in result["table"]:
            digits = 1 if row["measure"] == "chunk" else 0
            r0, r1, added = row["ratio0_ratio"], row["ratio1_ratio"], row["ratio1_added_us"]
            print(t.row(MEASURES[row["measure"]], row["model"],
                        *(f"{row[f'{v}_us']:,.{digits}f}" for v in VARIANTS),
                        f"{r0['median']:.3f}", f"{r0['range'][0]:.2f}-{r0['range'][1]:.2f}",
                        f"{r1['median']:.3f}", f"{r1['range'][0]:.2f}-{r1['range'][1]:.2f}",
                        f"{added['median']:+.{digits}f}",
                        f"{added['range'][0]:+.{digits}f}..{added['range'][1]:+.{digits}f}"))
        print("\nwhere the difference goes (traced - off, µs, medians of the rounds' differences): the edge's event "
              "loop (its main thread), its other threads (the batch processor: encoding, POSTing), and of the loop's "
              "share the GC pauses its /metrics recorded")
        t = Table(("measure", "<26"), ("model", "<23"), ("edge", "<16"), ("x off", ">7"), ("rounds", ">11"),
                  ("all", ">9"), ("loop", ">9"), ("threads", ">9"), ("GC", ">7"))
        print(t.header())
        for row in result["table"]:
            digits = 1 if row["measure"] == "chunk" else 0
            for v in (v for v in LABELS if v != "off" and f"{v}_ratio" in row):
                ratio = row[f"{v}_ratio"]
                print(t.row(MEASURES[row["measure"]], row["model"], LABELS[v], f"{ratio['median']:.3f}",
                            f"{ratio['range'][0]:.2f}-{ratio['range'][1]:.2f}",
                            *(_signed(row[f"{v}_added_{part}"]["median"], digits) for part in ("us", *PARTS))))
        requests = [row for row in result["table"] if row["measure"] == "request" and row.get("off_sys_us")]
        if requests:
            print("\nnon-streamed, a request (medians): requests/s, the kernel's share of the edge's CPU, its threads' "
                  "context switches (voluntary, and preempted), wrk's p99")
            t = Table(("model", "<23"), ("edge", "<16"), ("req/s", ">7"), ("sys µs", ">8"), ("switches", ">9"),
                      ("preempted", ">10"), ("p99 ms", ">8"))
            print(t.header())
            for row in requests:
                for v in (v for v in LABELS if f"{v}_rps" in row):
                    print(t.row(row["model"], LABELS[v], f"{row[f'{v}_rps']:,.0f}", f"{row[f'{v}_sys_us']:,.0f}",
                                f"{row[f'{v}_switches']:.2f}", f"{row[f'{v}_preempted']:.2f}",
                                f"{row[f'{v}_p99_ms']:.1f}"))
        print("\ntargets (ratio 1.0 against off):")
        for row in result["table"]:
            if row["measure"] == "request":
                value, ok = row["ratio1_ratio"]["median"], row["ratio1_ratio"]["median"] <= TARGET_RATIO
                print(f"  CPU a request, {row['model']:<23} {value:.3f}x  <= {TARGET_RATIO:.2f}x  "
                      f"{'met' if ok else 'not met'}")
            elif row["measure"] == "chunk":
                value, ok = row["ratio1_added_us"]["median"], row["ratio1_added_us"]["median"] <= TARGET_CHUNK_US
                print(f"  CPU a chunk,   {row['model']:<23} {value:+.1f} µs <= +{TARGET_CHUNK_US:.0f} µs  "
                      f"{'met' if ok else 'not met'}")
    if result["spans"]:
        print("\nspans the sink received (every round's edges, stopped and flushed before the sink was read):")
        t = Table(("edge", "<13"), ("measure", "<9"), ("requests", ">9"), ("200", ">8"), ("spans", ">8"),
                  ("/request", ">9"), ("/trace", ">7"), ("exported", ">9"), ("dropped", ">8"),
                  ("  traces by spans", "<22"), ("  by name, per request", "<40"))
        print(t.header())
        for row in result["spans"]:
            names = ", ".join(f"{n} {c:.2f}" for n, c in row["by_name_per_request"].items())
            per = row["spans_per_request"]
            print(t.row(LABELS[row["variant"]], row["kind"], f"{row['requests']:,.0f}", f"{row['ok']:,.0f}",
                        f"{row['spans_received']:,}",
                        "-" if per is None else f"{per:.3f}",
                        "-" if row["spans_per_trace"] is None else f"{row['spans_per_trace']:.2f}",
                        f"{row['exported']:,.0f}", f"{row['dropped_queue_full'] + row['dropped_export_failed']:,.0f}",
                        "  " + (", ".join(f"{k}: {n:,}" for k, n in sorted(row["trace_sizes"].items())) or "-"),
                        "  " + (names or "-")))
    costs = result.get("in_process")
    if costs:
        print(f"\nin process, thread CPU µs a request (median of {meta['stage_rounds']} rounds; each call: the "
              "difference between the prefixes of the sequence with and without it):")
        t = Table(("call", "<34"), ("ratio 1.0", ">10"), ("ratio 0.0", ">10"))
        print(t.header())
        one, zero = costs["ratio 1.0"], costs["ratio 0.0"]
        for name, us in one["calls_us"].items():
            print(t.row(name, f"{us:.1f}", f"{zero['calls_us'][name]:.1f}"))
        print(t.row("the whole sequence", f"{one['whole_us']:.1f}", f"{zero['whole_us']:.1f}"))
        if "amid_prepare_us" in one:
            print(t.row("the same, each after a prepare", f"{one['amid_prepare_us']:.1f}",
                        f"{zero['amid_prepare_us']:.1f}"))
        e = costs["export_per_span_us"]
        print(f"the export thread, per span ({e['spans']} spans a batch, {e['batch_bytes']:,} B; each encoded "
              f"as it ended, in the calls above): assembling the request {e['assemble']:.1f} µs, with its POST "
              f"{e['export (assemble + POST)']:.1f} µs; x4 a request: {4 * e['export (assemble + POST)']:.0f} µs")


# --- profiling -------------------------------------------------------------------------------------


def profile(args: argparse.Namespace) -> None:
    """An edge with no [tracing] and a traced one (ratio 1.0, or --profile-variant's) under wrk (gpt-4o,
    --connections, --seconds a run, --profile-rounds rounds, the two alternating), each run recorded by
    py-spy, every thread; the samples of both summed per edge and read as CPU: each function's share of an
    edge's samples times the edge's CPU per request (/proc). Where the traced edge's extra goes: in
    tracing's code (ingress/tracing.py, ingress/edge/spans.py and the OpenTelemetry packages, from their
    first frame down), by thread and by function, and how much the rest of the event loop's work moved."""
    from bench.peers import key_section

    pyspy = str(Path(PY).parent / "py-spy")
    if not Path(pyspy).exists():
        pyspy = shutil.which("py-spy") or ""
    if not pyspy:
        raise SystemExit("--profile needs py-spy: .venv/bin/pip install -e '.[dev]' (or pip install py-spy)")
    where = imported_ingress()
    work = Path(tempfile.mkdtemp(prefix="ingress-bench-tracing-prof-"))
    section, key, _ = key_section()
    port = free_port()
    mock = Server("mock", [PY, "-m", "bench.tenancy", "--serve-mock", str(port), "0"], port, work / "mock.log")
    port = free_port()
    sink = Server("sink", [PY, "-m", "bench.tracing", "--serve-sink", str(port)], port, work / "sink.log")
    variants = ("off", args.profile_variant)
    edges = make_edges(work, {"request": mock}, sink, section, 0, variants)
    payload = work / "body.json"
    payload.write_bytes(body("chat", OPENAI_MODEL, False))
    wrk = Wrk(ensure_wrk(), work / "bench.lua")
    wrk.script.write_text(SCRIPT + HEADERS)
    os.environ["BENCH_KEY"], os.environ["BENCH_API"] = key, "chat"
    stacks = {v: Stacks() for v in variants}
    cpu = {v: [0.0, 0] for v in variants}  # CPU seconds, requests
    try:
        start_all(sink, mock, *edges.values())
        print(f"{describe(code_version())}; the edges import {where}; nice {os.nice(0)}", flush=True)
        for edge in edges.values():
            wrk.run(f"{edge.url}{CHAT}", payload, "application/json", args.connections, 2)
        for r, order in Rounds(variants, args.profile_rounds, order="alternate"):
            for variant in order:
                edge = edges[("request", variant)]
                raw = work / f"stacks-{variant}-{r}.txt"
                spy = subprocess.Popen([pyspy, "record", "-r", str(SAMPLE_HZ), "-f", "raw", "--threads",
                                        "--full-filenames", "-o", str(raw), "-p", str(edge.pid), "-d",
                                        str(round(args.seconds)), "--nonblocking"],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                time.sleep(0.5)  # py-spy attached
                result = wrk.run(f"{edge.url}{CHAT}", payload, "application/json", args.connections,
                                 round(args.seconds) - 1, watch={"edge": edge.pid})
                _, said = spy.communicate(timeout=120)
                if not raw.exists():
                    raise RuntimeError(f"py-spy wrote nothing: {said.decode(errors='replace')[-800:]}")
                stacks[variant].read(raw)
                cpu[variant][0] += result["cpu_us_per_request"]["edge"] * result["requests"] / 1e6
                cpu[variant][1] += result["requests"]
                print(f"  {LABELS[variant]}: {result['rps']:,.0f} req/s, {result['cpu_us_per_request']['edge']:.0f} "
                      f"µs CPU a request, the rest of the machine {result['others_cpu_percent']:.0f}% of a core",
                      flush=True)
                if args.keep:
                    shutil.copy(raw, args.keep.with_name(f"{args.keep.name}-{variant}-{r}"))
    finally:
        stop_together([*edges.values(), sink, mock])
    shutil.rmtree(work, ignore_errors=True)
    per = {v: cpu[v][0] / cpu[v][1] * 1e6 for v in variants}  # CPU µs a request over every run
    summarize(stacks, per, args.top)


SAMPLE_HZ = 250
TRACING_FILES = ("/ingress/tracing/", "/ingress/edge/spans.py", "/opentelemetry/")
LOOP = "MainThread"


class Stacks:
    """py-spy's raw stacks of one edge (`thread (TID): NAME;frame;...;frame count`, the outermost frame
    first), summed: samples by thread; by function, inclusive, for each thread; and of those the samples
    under tracing's code, from its first frame down (`entered`: the frames above it, and its first)."""

    def __init__(self) -> None:
        self.samples = 0
        self.threads: Counter[str] = Counter()
        self.traced: Counter[str] = Counter()
        self.inclusive: dict[str, Counter[str]] = {}
        self.entered: dict[str, Counter[str]] = {}  # a function's samples with tracing's code below it
        self.tracing: dict[str, Counter[str]] = {}  # tracing's own functions, inclusive
        self.leaf: dict[str, Counter[str]] = {}  # ...and self

    def read(self, raw: Path) -> None:
        for line in raw.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            n = int(count)
            head, _, rest = stack.partition(";")
            thread = head.split(": ", 1)[-1]
            frames = [_short(f) for f in rest.split(";")]
            self.samples += n
            self.threads[thread] += n
            for f in set(frames):
                self.inclusive.setdefault(thread, Counter())[f] += n
            at = next((i for i, f in enumerate(rest.split(";")) if any(p in f for p in TRACING_FILES)), None)
            if at is None:
                continue
            self.traced[thread] += n
            for f in set(frames[:at + 1]):
                self.entered.setdefault(thread, Counter())[f] += n
            for f in set(frames[at:]):
                self.tracing.setdefault(thread, Counter())[f] += n
            self.leaf.setdefault(thread, Counter())[frames[-1]] += n


def summarize(stacks: dict[str, Stacks], cpu_us: dict[str, float], top: int) -> None:
    """Each edge's CPU a request by thread, and tracing's share, as py-spy's samples split it; the event
    loop's heaviest functions off and traced; then tracing's own functions, by thread."""
    name = next(v for v in stacks if v != "off")  # the traced edge
    traced, off = stacks[name], stacks["off"]

    def us(st: Stacks, n: float, variant: str) -> float:  # samples as CPU µs a request
        return n / st.samples * cpu_us[variant] if st.samples else math.nan

    print(f"\nCPU µs a request (/proc), split as py-spy's samples split ({off.samples:,} and {traced.samples:,} "
          f"samples at {SAMPLE_HZ} Hz; a preempted thread is sampled too):")
    t = Table(("edge", "<11"), ("all", ">8"), ("loop", ">8"), ("tracing", ">9"), ("the rest", ">10"),
              ("threads", ">9"), ("tracing", ">9"))
    print(t.header())
    for variant, st in (("off", off), (name, traced)):
        loop = st.threads[LOOP]
        others = st.samples - loop
        print(t.row(LABELS[variant], f"{cpu_us[variant]:,.0f}", f"{us(st, loop, variant):,.0f}",
                    f"{us(st, st.traced[LOOP], variant):,.0f}", f"{us(st, loop - st.traced[LOOP], variant):,.0f}",
                    f"{us(st, others, variant):,.0f}",
                    f"{us(st, sum(st.traced.values()) - st.traced[LOOP], variant):,.0f}"))
    print("\nthe event loop's heaviest functions, inclusive, CPU µs a request (tracing: the traced edge's "
          "samples with tracing's code below):")
    t = Table(("function", "<64"), ("off", ">7"), (LABELS[name].removeprefix("ratio "), ">7"), ("tracing", ">8"),
              ("rest +", ">8"))
    print(t.header())
    loop1, loop0 = traced.inclusive.get(LOOP, Counter()), off.inclusive.get(LOOP, Counter())
    entered = traced.entered.get(LOOP, Counter())
    shown = 0
    for f, n in loop1.most_common():
        if any(p in f for p in ("(otel:", "(ingress/tracing.py", "(edge/spans.py")) or shown >= top:
            continue
        shown += 1
        a, b, c = us(off, loop0[f], "off"), us(traced, n, name), us(traced, entered[f], name)
        print(t.row(f[:63], f"{a:,.0f}", f"{b:,.0f}", f"{c:,.0f}", f"{b - c - a:+,.0f}"))
    for thread in traced.tracing:
        print(f"\nthe traced edge's {thread}, tracing's functions, CPU µs a request, inclusive:")
        for f, n in traced.tracing[thread].most_common(top):
            print(f"  {us(traced, n, name):7.1f}  {f}")
        print("self:")
        for f, n in traced.leaf[thread].most_common(top):
            print(f"  {us(traced, n, name):7.1f}  {f}")


def _short(frame: str) -> str:
    """`name (/path/to/file.py:line)` as `name (file.py)` with its package: otel:sdk/trace/__init__.py."""
    name, _, where = frame.partition(" (")
    where = where.rstrip(")").rsplit(":", 1)[0]
    if "/opentelemetry/" in where:
        return f"{name} (otel:{where.split('/opentelemetry/', 1)[1]})"
    if "/site-packages/" in where:
        return f"{name} ({where.split('/site-packages/', 1)[1]})"
    return f"{name} ({'/'.join(where.rsplit('/', 2)[-2:])})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="~2.5 min: 2 rounds of 2 s, one paced phase")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--seconds", type=int, help="a wrk run (with --profile: how long py-spy records; 20)")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--streams", type=int, default=128, help="concurrent paced streams")
    parser.add_argument("--reps", type=int, help="paced phases a round")
    parser.add_argument("--measures", nargs="+", choices=[*KINDS, "spans"], default=[*KINDS, "spans"],
                        help="request: wrk; paced: µs/stream and µs/chunk; spans: the in-process timings")
    parser.add_argument("--stage-rounds", type=int, help="rounds of the in-process timings (7; --quick 3)")
    parser.add_argument("--deferred", action="store_true",
                        help="a fourth edge: ratio 1.0 with no export during the run (the request path alone)")
    parser.add_argument("--propagated", action="store_true",
                        help="another untraced edge, its wrk clients sending a traceparent (non-streamed only)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--profile", action="store_true", help="py-spy the ratio-1.0 edge under wrk")
    parser.add_argument("--profile-rounds", type=int, default=2, help="with --profile: runs of each edge")
    parser.add_argument("--profile-variant", choices=["ratio1", "ratio0", DEFERRED], default="ratio1",
                        help="with --profile: the traced edge set beside the untraced one")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--keep", type=Path, help="with --profile: keep py-spy's raw stacks (PATH-edge-round)")
    parser.add_argument("--serve-sink", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_sink:
        return serve_sink(args.serve_sink)
    niced()
    if args.profile:
        args.seconds = args.seconds or 20
        return profile(args)
    args.rounds = args.rounds or (2 if args.quick else 8)
    args.seconds = args.seconds or (2 if args.quick else 4)
    args.reps = args.reps or (1 if args.quick else 3)
    args.stage_rounds = args.stage_rounds or (3 if args.quick else 7)
    args.stage_budget = 0.02 if args.quick else 0.05
    out = result_path("tracing", args.quick, args.out)
    result: dict[str, Any] = {"meta": {}, "table": [], "spans": []}
    if any(k in args.measures for k in KINDS):
        result = measure(args)
    if "spans" in args.measures:
        print("in process: a traced request's calls, and the export of its spans ...", flush=True)
        port, logs = free_port(), Path(tempfile.mkdtemp(prefix="ingress-bench-tracing-sink-"))
        with Server("sink", [PY, "-m", "bench.tracing", "--serve-sink", str(port)], port, logs / "sink.log") as sink:
            result["in_process"] = span_costs(args, sink.url)
        shutil.rmtree(logs, ignore_errors=True)
        result["meta"].setdefault("code", code_version())
        result["meta"].setdefault("load_average_before", os.getloadavg())
        result["meta"].setdefault("load_average_after", os.getloadavg())
        result["meta"]["stage_rounds"] = args.stage_rounds
    print_result(result)
    write_result(result, out)


if __name__ == "__main__":
    main()
