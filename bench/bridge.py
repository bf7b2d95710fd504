"""What a bridge adds, per request and per chunk: an OpenAI-compatible engine that costs nothing, reached
directly and through our bridge, side by side in one run.

    python -m bench bridge [--seconds 3] [--rounds 3]   -> results/bridge.json   (~2 min)

The engine is a zero-delay mock (`--serve-mock`, its own process): a raw asyncio Protocol on uvloop that
answers every POST with one fixed chat.completion, or, when the body holds `"stream":true` (a bytes
search, no JSON parsing), one fixed SSE body of a role delta, 64 content deltas, a finish chunk, a
usage chunk and `data: [DONE]`. Both are bytes made once at start-up, so what is measured is the bridge
and the edge, not the mock. Four paths, the same 16 KB 11-message chat request (bench/lib/payloads.py):

1. direct: wrk -> mock (the JSON request);
2. bridge: wrk POSTing that request already encoded as a CompletionRequest -> `ingress bridge openai`
   -> mock;
3. sidecar: wrk -> `ingress serve --upstream <the bridge>` -> the same bridge process -> mock;
4. in-process: wrk -> `ingress serve --config` with a `bridge = {dialect = "openai", ...}` endpoint
   (the bridge served by the edge's own process) -> mock.

Non-streamed, at each concurrency (`wrk -t1`, 1 and 32 connections): requests/s, p50/p99, the added
p50/p99 against the direct run of the same round, and the CPU time per request of each of our
processes (edge, bridge) and of the mock, from /proc. Rounds interleave the paths, as floor.py does.

Streamed (paths 2-4 and direct, bench/lib/streams.py's client; a one-message request of 64 words, answered
by the mock's fixed 64 deltas at once): time to first token and its addition over direct, the CPU per
chunk of the bridge and of the edge (a chunk = one of the engine's 64 content deltas; the role, finish,
usage and [DONE] events, and each stream's own request costs, are in the figure), and chunks per
CPU-second of our processes.

Then the bridge's sans-I/O stages (verify, build, answer; per chunk the event-stream parse, the decoder,
the frames) are timed in this process with budget.py's timer, beside its CPU from /proc.

Every process shares the machine's two cores with wrk and this client: compare paths within a run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bench.lib.rounds import Rounds

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "bridge.json"
PY = sys.executable
JSON_TYPE = "application/json"
DELTAS = 64
CONNECTIONS = (1, 32)
STREAM_LEVELS = {1: 100, 16: 20}  # concurrent streams -> streams each client runs after its warm-up stream
PATHS = ("direct", "bridge", "sidecar", "inproc")
LABELS = {"direct": "direct (mock)", "bridge": "bridge alone", "sidecar": "edge + bridge sidecar",
          "inproc": "edge + in-process bridge"}


# --- the mock engine -------------------------------------------------------------------------------


def _mock_bodies() -> tuple[bytes, bytes]:
    """The fixed chat.completion and the fixed SSE stream the mock answers, made once."""
    import msgspec

    from bench.lib.payloads import MODEL, words

    enc = msgspec.json.encode
    text = words(DELTAS, seed=3).split()
    usage = {"prompt_tokens": 4000, "completion_tokens": DELTAS, "total_tokens": 4000 + DELTAS}
    whole = enc({"id": "chatcmpl-mock", "object": "chat.completion", "created": 1, "model": MODEL,
                 "choices": [{"index": 0, "message": {"role": "assistant", "content": " ".join(text)},
                              "finish_reason": "stop"}], "usage": usage})

    def chunk(choices: list[dict[str, Any]], **extra: Any) -> bytes:
        return b"data: " + enc({"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 1,
                                "model": MODEL, "choices": choices, **extra}) + b"\n\n"

    events = [chunk([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])]
    events += [chunk([{"index": 0, "delta": {"content": w + " "}, "finish_reason": None}]) for w in text]
    events.append(chunk([{"index": 0, "delta": {}, "finish_reason": "stop"}]))
    events.append(chunk([], usage=usage))
    events.append(b"data: [DONE]\n\n")
    return whole, b"".join(events)


def serve_mock(port: int) -> None:
    """A zero-delay OpenAI-compatible engine: HTTP/1.1 keep-alive, Content-Length bodies only."""
    from bench.lib.mockhttp import Requests, response, serve

    whole, stream = _mock_bodies()
    answer, streamed = response(b"application/json", whole), response(b"text/event-stream", stream)

    class Mock(Requests):
        def answer(self, head: bytes, start: int, end: int) -> None:
            self.transport.write(streamed if self.streamed(start, end) else answer)

    serve(Mock, port)


# --- the rig ---------------------------------------------------------------------------------------


def _post(url: str, body: bytes, ctype: str) -> tuple[str, bytes]:
    import urllib.request

    req = urllib.request.Request(url, data=body, headers={"Content-Type": ctype})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200, (url, r.status)
        return str(r.headers.get("Content-Type", "")), bytes(r.read())


def _edge_config(path: Path, port: int, mock_url: str, model: str) -> None:
    path.write_text(f"""port = {port}
workers = 1

[groups.engine]
endpoints = [{{ bridge = {{ dialect = "openai", target = "{mock_url}" }} }}]

[[routes]]
model = "{model}"
group = "engine"
""")


def measure(seconds: int, rounds: int, out: Path) -> dict[str, Any]:
    import uvloop

    from bench.e2e import fb_body
    from bench.lib.payloads import MODEL, chat_request, stream_request
    from bench.lib.procs import Watch
    from bench.lib.provenance import code_version, describe
    from bench.lib.rounds import Rounds
    from bench.lib.servers import Server, free_port, start_all, stop_all
    from bench.lib.streams import analyze_streams, stream_level
    from bench.lib.wrk import SCRIPT, Wrk, ensure_wrk
    from ingress.wire import COMPLETE_PATH, CONTENT_TYPE, STREAM_CONTENT_TYPE

    started = time.perf_counter()
    load_before = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="ingress-bench-bridge-"))
    chat_json = chat_request(16 * 1024, max_tokens=64)
    stream_json = stream_request(DELTAS)
    bodies = {"chat.json": chat_json, "chat.fb": bytes(fb_body(chat_json)),
              "stream.json": stream_json, "stream.fb": bytes(fb_body(stream_json))}
    for name, data in bodies.items():
        (work / name).write_bytes(data)
    ports = {name: free_port() for name in ("mock", "bridge", "sidecar", "inproc")}
    mock_url = f"http://127.0.0.1:{ports['mock']}"
    bridge_url = f"http://127.0.0.1:{ports['bridge']}"
    _edge_config(work / "inproc.toml", ports["inproc"], mock_url, MODEL)
    argv = {
        "mock": [PY, "-m", "bench.bridge", "--serve-mock", str(ports["mock"])],
        "bridge": [PY, "-m", "ingress", "bridge", "openai", "--target", mock_url, "--port", str(ports["bridge"])],
        "sidecar": [PY, "-m", "ingress", "serve", "--model", MODEL, "--workers", "1", "--port", str(ports["sidecar"]),
                    "--upstream", bridge_url],
        "inproc": [PY, "-m", "ingress", "serve", "--config", str(work / "inproc.toml")],
    }
    servers = {name: Server(name, cmd, ports[name], work / f"{name}.log") for name, cmd in argv.items()}
    chat_url = "/v1/chat/completions"
    # path -> (URL, request body file, stream body, content type, SSE answer?)
    paths = {
        "direct": (mock_url + chat_url, "chat.json", "stream.json", JSON_TYPE, True),
        "bridge": (bridge_url + COMPLETE_PATH, "chat.fb", "stream.fb", CONTENT_TYPE, False),
        "sidecar": (servers["sidecar"].url + chat_url, "chat.json", "stream.json", JSON_TYPE, True),
        "inproc": (servers["inproc"].url + chat_url, "chat.json", "stream.json", JSON_TYPE, True),
    }
    watched = {"direct": ("mock",), "bridge": ("bridge", "mock"), "sidecar": ("sidecar", "bridge", "mock"),
               "inproc": ("inproc", "mock")}
    wrk = Wrk(ensure_wrk(), work / "post.lua")
    wrk.script.write_text(SCRIPT)
    # The paths in the same order every round; cells ("requests", connections) and ("streams", level).
    measured = Rounds(PATHS, rounds, order="fixed", baseline="direct")
    loop = uvloop.new_event_loop()
    try:
        start_all(*servers.values())
        pid = {name: s.pid for name, s in servers.items()}
        _check(paths, work, CONTENT_TYPE, STREAM_CONTENT_TYPE)
        print(describe(code_version()))
        print(f"servers up and checked in {time.perf_counter() - started:.1f} s; {rounds} rounds, paths in turn; "
              f"wrk -t1, {seconds} s a run; load average {os.getloadavg()[0]:.2f}", flush=True)
        for r, order in measured:
            for conns in CONNECTIONS:
                for name in order:
                    url, body, _, ctype, _ = paths[name]
                    if r == 0:
                        wrk.run(url, work / body, ctype, conns, 1)  # warm: connections, caches
                    watch = {p: pid[p] for p in watched[name]}
                    measured.add(name, wrk.run(url, work / body, ctype, conns, seconds, watch), ("requests", conns))
            for level, each in STREAM_LEVELS.items():
                for name in order:
                    url, _, sbody, ctype, sse = paths[name]
                    w = Watch({p: pid[p] for p in watched[name]})
                    with w.during():
                        results, wall = loop.run_until_complete(
                            stream_level(url, bodies[sbody], ctype, sse, level, each, 0.0))
                    stats = analyze_streams(results, wall, 0.0, DELTAS)
                    chunks = sum(DELTAS for x in results if x.error is None and len(x.times) >= DELTAS + 2)
                    measured.add(name, {**stats, **w.summary(), "chunks": chunks, "cpu_s": dict(w.cpu),
                                        "system_cpu_s": dict(w.sys)}, ("streams", level))
            print(f"round {r + 1}/{rounds} done at {time.perf_counter() - started:.0f} s", flush=True)
    finally:
        loop.close()
        stop_all(*servers.values())

    result: dict[str, Any] = {"meta": {
        "code": code_version(), "python": platform.python_version(), "cpus": os.cpu_count(),
        "load_average_before": load_before, "seconds": seconds, "rounds": rounds, "connections": list(CONNECTIONS),
        "stream_levels": {str(k): v for k, v in STREAM_LEVELS.items()}, "deltas": DELTAS,
        "request_bytes": len(chat_json), "request_fb_bytes": len(bodies["chat.fb"]),
        "stream_request_bytes": len(stream_json),
        "wrk": subprocess.run([wrk.binary, "-v"], capture_output=True, text=True).stdout.splitlines()[0],
        "commands": {k: " ".join(s.argv).replace(PY, "python") for k, s in servers.items()},
        "edge_config": (work / "inproc.toml").read_text(),
    }}
    shutil.rmtree(work, ignore_errors=True)  # after a failure it stays, with the servers' logs
    result["requests"] = {str(c): _request_table(measured, ("requests", c)) for c in CONNECTIONS}
    result["streams"] = {str(level): _stream_table(measured, ("streams", level)) for level in STREAM_LEVELS}
    result["runs"] = {str(c): measured.by_variant(("requests", c)) for c in CONNECTIONS}
    result["stream_runs"] = {str(level): measured.by_variant(("streams", level)) for level in STREAM_LEVELS}
    result["bridge_budget_us"] = bridge_budget(bodies["chat.fb"], bodies["stream.fb"])
    _print(result)
    result["meta"]["load_average_after"] = os.getloadavg()
    result["meta"]["wall_s"] = round(time.perf_counter() - started, 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out} in {result['meta']['wall_s']:.0f} s")
    return result


def _check(paths: dict[str, tuple[str, str, str, str, bool]], work: Path, fb_type: str, frames_type: str) -> None:
    """Every path answers as it should before anything is timed: the mock's content, through each path."""
    from ingress.wire import FrameDecoder

    marker = _mock_bodies()[0].split(b'"content":"')[1][:30]
    for name, (url, body, sbody, ctype, sse) in paths.items():
        got_type, answer = _post(url, (work / body).read_bytes(), ctype)
        if sse:
            assert b'"chat.completion"' in answer and marker in answer, (name, answer[:300])
        else:
            assert got_type.startswith(fb_type) and marker in answer, (name, got_type, answer[:300])
        got_type, answer = _post(url, (work / sbody).read_bytes(), ctype)
        if sse:
            assert answer.count(b"\n\n") >= DELTAS + 3 and answer.endswith(b"data: [DONE]\n\n"), (name, answer[-300:])
        else:
            assert got_type.startswith(frames_type), (name, got_type)
            assert len(list(FrameDecoder().feed(answer))) == DELTAS + 2, (name, answer[-300:])


def bridge_budget(chat_fb: bytes, stream_fb: bytes, min_s: float = 0.1) -> dict[str, float]:
    """The bridge's sans-I/O stages timed in this process (thread CPU µs), to set beside its /proc figures:
    per 16 KB request, and per chunk of the mock's stream (the whole stream's cost / its 64 deltas)."""
    from bench.lib.budget import cpu_us
    from ingress import wire
    from ingress.bridges.dialect import Target
    from ingress.bridges.eventstream import EventStreamParser
    from ingress.bridges.openai import DIALECT
    from ingress.bridges.service import MAX_REQUEST
    from ingress.encoding.reading import decode_request

    whole, stream = _mock_bodies()
    target = Target(url="http://127.0.0.1:9")
    call, stream_call = DIALECT.build(chat_fb, target), DIALECT.build(stream_fb, target)
    chunks = stream_call.stream().feed(stream)
    per_request = {
        "verify_request": lambda: wire.verify_request(chat_fb, max_size=MAX_REQUEST),
        "build": lambda: DIALECT.build(chat_fb, target),
        "build/wire.decode_request": lambda: decode_request(chat_fb),
        "wire.read_request_data": lambda: wire.read_request_data(chat_fb),
        "answer+write_response": lambda: wire.write_response(call.answer(whole)),
    }
    per_stream = {
        "stream/event-stream parse": lambda: EventStreamParser().feed(stream),
        "stream/decoder.feed": lambda: stream_call.stream().feed(stream),
        "stream/write_chunk": lambda: [wire.write_chunk(c) for c in chunks],
    }
    out = {name: cpu_us(fn, min_s) for name, fn in per_request.items()}
    out.update({name: cpu_us(fn, min_s) / DELTAS for name, fn in per_stream.items()})
    return out


def _request_table(measured: Rounds[str], cell: tuple[str, int]) -> dict[str, Any]:
    """Medians over rounds; a path's added latency is taken against the direct run of its own round."""
    table: dict[str, Any] = {}
    for name in PATHS:
        rs = measured.runs(name, cell)
        p99 = measured.spread(name, "p99_ms", cell)
        row: dict[str, Any] = {
            "rps": measured.median(name, "rps", cell), "p50_ms": measured.median(name, "p50_ms", cell),
            "p99_ms": p99.median, "p99_range_ms": [p99.low, p99.high],
            "cpu_us_per_request": {proc: measured.median(name, ("cpu_us_per_request", proc), cell)
                                   for proc in rs[0]["cpu_us_per_request"]},
            "others_cpu_percent": measured.median(name, "others_cpu_percent", cell),
            "errors": [r["errors"] for r in rs if r["errors"]],
        }
        if name != "direct":
            for q in ("p50", "p99"):
                added = measured.added(name, f"{q}_ms", cell=cell)
                row[f"added_{q}_ms"] = added.median
                row[f"added_{q}_range_ms"] = [added.low, added.high]
        table[name] = row
    return table


def _stream_table(measured: Rounds[str], cell: tuple[str, int]) -> dict[str, Any]:
    """Chunks and CPU summed over rounds; times the medians over rounds, TTFT's addition against direct's."""
    table: dict[str, Any] = {}
    for name in PATHS:
        rs = measured.runs(name, cell)
        chunks = sum(r["chunks"] for r in rs)
        cpu = {proc: sum(r["cpu_s"][proc] for r in rs) for proc in rs[0]["cpu_s"]}
        ours = sum(v for proc, v in cpu.items() if proc != "mock")
        row: dict[str, Any] = {
            "streams": sum(r["streams"] for r in rs), "completed": sum(r["completed"] for r in rs),
            "errors": sum(r["errors"] + r["warmup_errors"] for r in rs),
            "ttft_p50_ms": measured.median(name, "ttft_p50_ms", cell),
            "ttft_p99_ms": measured.median(name, "ttft_p99_ms", cell),
            "chunks_per_s": measured.median(name, "chunks_per_s", cell), "chunks": chunks,
            "cpu_us_per_chunk": {proc: v / max(1, chunks) * 1e6 for proc, v in cpu.items()},
            "system_cpu_us_per_chunk": {proc: sum(r["system_cpu_s"][proc] for r in rs) / max(1, chunks) * 1e6
                                        for proc in cpu},
            "chunks_per_cpu_second": chunks / ours if ours else None,
            "others_cpu_percent": measured.median(name, "others_cpu_percent", cell),
        }
        if name != "direct":
            added = measured.added(name, "ttft_p50_ms", cell=cell)
            row["added_ttft_p50_ms"] = added.median
            row["added_ttft_p50_range_ms"] = [added.low, added.high]
        table[name] = row
    return table


def _edge_bridge(cpu: dict[str, float], name: str) -> tuple[str, str]:
    """The edge's and the bridge's figure of a path, as table cells (the in-process bridge is the edge's)."""
    edge = cpu.get("sidecar", cpu.get("inproc"))
    bridge = cpu.get("bridge")
    return (f"{edge:,.0f}" if edge is not None else "-",
            f"{bridge:,.0f}" if bridge is not None else ("(in edge)" if name == "inproc" else "-"))


def _print(result: dict[str, Any]) -> None:
    meta = result["meta"]
    print(f"\n== Non-streamed: {meta['request_bytes']:,} B chat request ({meta['request_fb_bytes']:,} B as "
          f"FlatBuffers for the bridge alone); medians over {meta['rounds']} rounds of {meta['seconds']} s ==")
    head = (f"{'conns':>5}  {'path':<25}{'req/s':>8}{'p50 ms':>8}{'p99 ms':>8}{'+p50 ms':>9}{'+p99 ms':>9}"
            f"{'edge µs/req':>13}{'bridge µs/req':>15}{'ours µs/req':>13}{'mock µs/req':>13}{'others %':>10}")
    print(head + "\n" + "-" * len(head))
    for conns, table in result["requests"].items():
        for name, row in table.items():
            cpu = row["cpu_us_per_request"]
            edge, bridge = _edge_bridge(cpu, name)
            ours = sum(v for proc, v in cpu.items() if proc != "mock")
            added = (f"{row['added_p50_ms']:>9.3f}{row['added_p99_ms']:>9.3f}" if name != "direct" else " " * 18)
            print(f"{conns:>5}  {LABELS[name]:<25}{row['rps']:>8,.0f}{row['p50_ms']:>8.3f}{row['p99_ms']:>8.3f}{added}"
                  f"{edge:>13}{bridge:>15}{(f'{ours:,.0f}' if name != 'direct' else '-'):>13}"
                  f"{cpu['mock']:>13,.0f}{row['others_cpu_percent']:>10.0f}")
    print("+p50/+p99: the path's minus direct's in the same round, median over rounds; "
          "ours = edge + bridge (CPU from /proc)")

    print(f"\n== Streamed: {meta['deltas']} deltas a stream, zero delay; a chunk = one content delta ==")
    head = (f"{'streams':>7}  {'path':<25}{'done':>9}{'TTFT p50':>10}{'p99':>8}{'+TTFT p50':>11}{'chunks/s':>10}"
            f"{'edge µs/chunk':>15}{'bridge µs/chunk':>17}{'chunks/CPU-s':>14}{'others %':>10}")
    print(head + "\n" + "-" * len(head))
    for level, table in result["streams"].items():
        for name, row in table.items():
            edge, bridge = _edge_bridge(row["cpu_us_per_chunk"], name)
            added = f"{row['added_ttft_p50_ms']:>11.2f}" if name != "direct" else " " * 11
            per_cpu = f"{row['chunks_per_cpu_second']:,.0f}" if row["chunks_per_cpu_second"] else "-"
            print(f"{level:>7}  {LABELS[name]:<25}{row['completed']:>5}/{row['streams']:<3}{row['ttft_p50_ms']:>10.2f}"
                  f"{row['ttft_p99_ms']:>8.2f}{added}{row['chunks_per_s']:>10,.0f}{edge:>15}{bridge:>17}"
                  f"{per_cpu:>14}{row['others_cpu_percent']:>10.0f}")
    print("TTFT in ms, from the request to the first content delta; chunks/CPU-s: chunks over the CPU "
          "seconds of our processes (edge + bridge)")

    b = result["bridge_budget_us"]
    alone = result["requests"][str(CONNECTIONS[-1])]["bridge"]["cpu_us_per_request"]["bridge"]
    level = str(max(STREAM_LEVELS))
    alone_chunk = result["streams"][level]["bridge"]["cpu_us_per_chunk"]["bridge"]
    print("\n== Where the bridge's CPU goes: its sans-I/O stages timed in this process, thread CPU µs ==")
    rows = [
        ("per 16 KB request: verify the CompletionRequest (wire.verify_request)", b["verify_request"]),
        ("  dialect.build: the engine's JSON request", b["build"]),
        ("    of which decode_request (to OpenAI's request)", b["build/wire.decode_request"]),
        ("    (beside it: wire.read_request_data, the generated reader, every field)", b["wire.read_request_data"]),
        ("  call.answer(the mock's JSON) + wire.write_response", b["answer+write_response"]),
        (f"  the bridge's CPU per request from /proc (bridge alone, c={CONNECTIONS[-1]})", alone),
        ("per chunk: the event-stream parse (EventStreamParser.feed)", b["stream/event-stream parse"]),
        ("  decoder.feed: parse + engine JSON + our chunks", b["stream/decoder.feed"]),
        ("  wire.write_chunk (the frames)", b["stream/write_chunk"]),
        (f"  the bridge's CPU per chunk from /proc (bridge alone, {level} streams)", alone_chunk),
    ]
    for label, value in rows:
        print(f"{label:<80}{value:>9,.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=3, help="one wrk run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--serve-mock", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_mock:
        serve_mock(args.serve_mock)
    else:
        measure(args.seconds, args.rounds, args.out)
