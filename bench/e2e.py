"""End-to-end benchmark: wrk against the edge and the demo service directly, and paced streams.

Starts, as subprocesses, the demo service (fast and paced), an edge with the generated encoder and an
edge with the stock flatbuffers.Builder, all pointed at loopback, then measures:

- added latency at concurrency 1: wrk POSTing a JSON chat body through the edge, against wrk POSTing the
  same request, already encoded as a FlatBuffers CompletionRequest, straight to the demo's /v1/complete;
- requests/s at saturation for a few connection counts, the generated and the stock edge alternating
  (A B B A) in the same run, with the edge's CPU time per request read from /proc;
- streaming through a paced demo (one delta every --pacing-ms): time to first token, the latency the
  edge adds to each chunk, chunks/s, and how many concurrent streams kept every inter-chunk gap under
  twice the pacing, against the same streams read straight from the demo (each client's first stream
  opens the connections and is not counted);
- the edge's RSS at rest, under load and after;
- where the edge's CPU goes: each sans-I/O stage timed in this process (bench/lib/budget.py) beside the
  edge's CPU time per request and per chunk.

All processes share this machine's cores with wrk and the client: figures are comparisons made side by
side in one run, not capacity numbers for a server.

    .venv/bin/python -m bench e2e            # ~4 min, writes bench/results/e2e.json
    .venv/bin/python -m bench e2e --quick    # ~1 min, writes bench/results/e2e-quick.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import uvloop

from bench.lib import e2e_report as report
from bench.lib.budget import chunk_budget, request_budget
from bench.lib.payloads import MODEL, SIZES, chat_request, stream_request
from bench.lib.procs import Watch, listen_overflows, rss_kb
from bench.lib.provenance import code_version, describe
from bench.lib.rounds import Rounds
from bench.lib.servers import Server, free_port, start_all, stop_all
from bench.lib.streams import analyze_streams, stream_level
from bench.lib.wrk import SCRIPT as WRK_SCRIPT
from bench.lib.wrk import Wrk, ensure_wrk
from ingress.encoding.passport import RequestMeta, compute_passport
from ingress.encoding.requests import encode_request
from ingress.oai.codec import decode_chat_request
from ingress.wire import COMPLETE_PATH, CONTENT_TYPE

HERE = Path(__file__).resolve().parent
PY = sys.executable
JSON_TYPE = "application/json"
STREAM_WORDS = 64
MAX_TOKENS = 64  # the demo echoes at most this many words, so answers stay small whatever the prompt size


@dataclass(frozen=True)
class Profile:
    latency_sizes: tuple[str, ...]
    latency_seconds: int
    latency_reps: int
    saturation: tuple[tuple[str, int], ...]  # (payload, connections)
    saturation_seconds: int
    saturation_cycles: int  # A B B A cycles per point: short runs, often alternated, pair up the noise
    stream_levels: tuple[int, ...]
    stream_rounds: int  # measured streams each concurrent client runs back to back, after one warm-up
    stream_rounds_single: int  # the same at concurrency 1
    budget_min_s: float  # time per timed loop of each sans-I/O stage
    budget_repeats: int


QUICK = Profile(latency_sizes=("16KB",), latency_seconds=2, latency_reps=1,
                saturation=(("16KB", 32),), saturation_seconds=2, saturation_cycles=2,
                stream_levels=(1, 50, 200), stream_rounds=1, stream_rounds_single=1, budget_min_s=0.01,
                budget_repeats=5)
FULL = Profile(latency_sizes=("1KB", "16KB"), latency_seconds=4, latency_reps=2,
               saturation=(("16KB", 8), ("16KB", 32), ("16KB", 128), ("1KB", 32), ("128KB", 32)),
               saturation_seconds=2, saturation_cycles=2, stream_levels=(1, 50, 100, 150, 200), stream_rounds=3,
               stream_rounds_single=8, budget_min_s=0.03, budget_repeats=7)


# --- the rig: bodies, servers, load generator -----------------------------------------------------


def post(url: str, body: bytes, ctype: str) -> bytes:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": ctype})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200, r.status
        return bytes(r.read())


def serve_flags() -> set[str]:
    out = subprocess.run([PY, "-m", "ingress", "serve", "--help"], capture_output=True, text=True, cwd=HERE.parent)
    return {word.strip("[],") for word in out.stdout.split() if word.startswith(("--", "[--"))}


def fb_body(json_body: bytes) -> bytes:
    request = decode_chat_request(json_body)
    passport = compute_passport(request, RequestMeta(tenant_id="tenant-bench"))
    return encode_request(request, "req-bench-direct-0123456789abcdef", passport)


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(r[key] for r in runs))


@dataclass
class Rig:
    """The request bodies, the five servers and wrk, for one run."""

    profile: Profile
    pacing_ms: float
    work: Path
    bench: Wrk
    bodies: dict[str, tuple[Path, Path]] = field(default_factory=dict)  # label -> (JSON body, FlatBuffers body)
    answers: dict[str, bytes] = field(default_factory=dict)  # label -> the demo's CompletionResponse
    servers: dict[str, Server] = field(default_factory=dict)
    stream_json: bytes = b""
    stream_fb: bytes = b""
    stream_frames: bytes = b""  # the demo's whole answer to the stream request: every frame
    stock_via_cli: bool = True

    @classmethod
    def create(cls, profile: Profile, pacing_ms: float) -> Rig:
        work = Path(tempfile.mkdtemp(prefix="ingress-e2e-"))
        (work / "post.lua").write_text(WRK_SCRIPT)
        rig = cls(profile, pacing_ms, work, Wrk(ensure_wrk(), work / "post.lua"))
        for label in {*profile.latency_sizes, *(size for size, _ in profile.saturation)}:
            body = chat_request(SIZES[label], max_tokens=MAX_TOKENS)
            (work / f"{label}.json").write_bytes(body)
            (work / f"{label}.fb").write_bytes(fb_body(body))
            rig.bodies[label] = (work / f"{label}.json", work / f"{label}.fb")
        rig.stream_json = stream_request(STREAM_WORDS)
        rig.stream_fb = fb_body(rig.stream_json)
        rig._plan_servers()
        return rig

    def _plan_servers(self) -> None:
        flags = serve_flags()
        self.stock_via_cli = "--encoder" in flags
        # One worker process per edge (the CLI defaults to one per CPU): CPU per request is then one
        # process's, and the two edges compare like for like.
        serve = [PY, "-m", "ingress", "serve", "--model", MODEL] + (["--workers", "1"] if "--workers" in flags else [])
        stock = [*serve, "--encoder", "stock"] if self.stock_via_cli else [
            PY, "-m", "bench.lib.edge_launcher", "--model", MODEL, "--encoder", "stock"]
        ports = {name: free_port() for name in ("demo", "paced", "edge", "stock", "edge_paced")}
        demo, paced = f"http://127.0.0.1:{ports['demo']}", f"http://127.0.0.1:{ports['paced']}"
        argv = {
            "demo": [PY, "-m", "ingress", "demo-upstream", "--port", str(ports["demo"])],
            "paced": [PY, "-m", "ingress", "demo-upstream", "--port", str(ports["paced"]),
                      "--delay-ms", str(self.pacing_ms)],
            "edge": [*serve, "--port", str(ports["edge"]), "--upstream", demo],
            "stock": [*stock, "--port", str(ports["stock"]), "--upstream", demo],
            "edge_paced": [*serve, "--port", str(ports["edge_paced"]), "--upstream", paced],
        }
        self.servers = {name: Server(name, cmd, ports[name], self.work / f"{name}.log") for name, cmd in argv.items()}

    def url(self, name: str) -> str:
        """Where to POST: the edges' chat endpoint, the demo services' /v1/complete."""
        path = COMPLETE_PATH if name in ("demo", "paced") else "/v1/chat/completions"
        return self.servers[name].url + path

    def pid(self, name: str) -> int:
        return self.servers[name].pid

    def start(self) -> None:
        start_all(*self.servers.values())
        # Every path answers 200 with the expected body before anything is timed.
        for label, (jpath, fpath) in self.bodies.items():
            for name in ("edge", "stock"):
                answer = post(self.url(name), jpath.read_bytes(), JSON_TYPE)
                assert b'"chat.completion"' in answer, answer[:300]
            self.answers[label] = post(self.url("demo"), fpath.read_bytes(), CONTENT_TYPE)
        self.stream_frames = post(self.url("demo"), self.stream_fb, CONTENT_TYPE)  # unpaced: every frame at once
        assert b"data: [DONE]" in post(self.url("edge"), self.stream_json, JSON_TYPE)

    def stop(self) -> None:
        stop_all(*self.servers.values())

    def remove_files(self) -> None:
        shutil.rmtree(self.work, ignore_errors=True)


# --- the phases -----------------------------------------------------------------------------------


def measure_latency(rig: Rig) -> dict[str, Any]:
    """Concurrency 1: the demo directly, the generated edge and the stock edge, in turn."""
    profile, latency = rig.profile, {}
    watch = {"edge": rig.pid("edge"), "stock": rig.pid("stock"), "demo": rig.pid("demo")}
    targets = (("direct", "demo", 1, CONTENT_TYPE), ("edge", "edge", 0, JSON_TYPE), ("stock", "stock", 0, JSON_TYPE))
    for label in profile.latency_sizes:
        runs: dict[str, Any] = {name: [] for name, *_ in targets}
        if profile.latency_reps > 1:  # a quick run relies on the requests that checked each path
            for _, server, which, ctype in targets:
                rig.bench.run(rig.url(server), rig.bodies[label][which], ctype, 1, 1)
        for _ in range(profile.latency_reps):
            for name, server, which, ctype in targets:
                runs[name].append(rig.bench.run(rig.url(server), rig.bodies[label][which], ctype, 1,
                                                profile.latency_seconds, watch))
        direct_p50, direct_p99 = _median(runs["direct"], "p50_ms"), _median(runs["direct"], "p99_ms")
        for name in ("edge", "stock"):
            runs[f"{name}_added_p50_ms"] = _median(runs[name], "p50_ms") - direct_p50
            runs[f"{name}_added_p99_ms"] = _median(runs[name], "p99_ms") - direct_p99
            runs[f"{name}_cpu_us_per_request"] = statistics.median(r["cpu_us_per_request"][name] for r in runs[name])
        latency[label] = runs
    return latency


def measure_saturation(rig: Rig) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Generated and stock edge alternating, A B B A; then the demo alone at the first point."""
    profile, points = rig.profile, []
    watch = {"edge": rig.pid("edge"), "stock": rig.pid("stock"), "demo": rig.pid("demo")}
    warmed: set[tuple[str, str]] = set()
    for label, conns in profile.saturation:
        body = rig.bodies[label][0]
        # Rounds of the two edges alternating, edge stock then stock edge: the A B B A cycles.
        edges = Rounds(("edge", "stock"), 2 * profile.saturation_cycles, order="alternate", baseline="stock")
        for _, order in edges:
            for name in order:
                if (name, label) not in warmed:
                    rig.bench.run(rig.url(name), body, JSON_TYPE, conns, 1)
                    warmed.add((name, label))
                edges.add(name, rig.bench.run(rig.url(name), body, JSON_TYPE, conns, profile.saturation_seconds,
                                              watch))
        gen, stock = edges.runs("edge"), edges.runs("stock")

        def cpu(name: str, r: Any) -> float:  # the edge's own CPU per request
            return float(r["cpu_us_per_request"][name])

        points.append({
            "body": label, "connections": conns, "generated": gen, "stock": stock,
            "rps_generated": edges.median("edge", "rps"), "rps_stock": edges.median("stock", "rps"),
            "cpu_us_per_req_generated": edges.median("edge", cpu),
            "cpu_us_per_req_stock": edges.median("stock", cpu),
            "system_cpu_us_per_req_generated": edges.median("edge", ("system_cpu_us_per_request", "edge")),
            "edge_cpu_percent_generated": edges.median("edge", ("cpu_percent", "edge")),
            "edge_cpu_percent_stock": edges.median("stock", ("cpu_percent", "stock")),
            "demo_cpu_percent": statistics.median(r["cpu_percent"]["demo"] for r in gen + stock),
            "others_cpu_percent": statistics.median(r["others_cpu_percent"] for r in gen + stock),
            "p99_ms_generated": edges.median("edge", "p99_ms"), "p99_ms_stock": edges.median("stock", "p99_ms"),
            "errors": [r["errors"] for r in gen + stock if r["errors"]],
            # Ratios between runs made back to back (A B, then B A), their median reported.
            "rps_ratio": edges.ratio("edge", "rps").median,
            "cpu_ratio": edges.ratio("stock", cpu, baseline="edge").median,
        })
    label, conns = profile.saturation[0]
    direct = rig.bench.run(rig.url("demo"), rig.bodies[label][1], CONTENT_TYPE, conns, profile.saturation_seconds,
                           {"demo": rig.pid("demo")})
    return points, {"body": label, **direct}


def measure_streaming(rig: Rig, loop: asyncio.AbstractEventLoop) -> list[dict[str, Any]]:
    """Each level against the paced demo directly, then through the edge in front of it."""
    profile, pacing_s, levels = rig.profile, rig.pacing_ms / 1000, []
    watch = {"edge": rig.pid("edge_paced"), "demo": rig.pid("paced")}
    paths = (("direct", "paced", rig.stream_fb, CONTENT_TYPE, False),
             ("edge", "edge_paced", rig.stream_json, JSON_TYPE, True))
    for level in profile.stream_levels:
        rounds = profile.stream_rounds_single if level == 1 else profile.stream_rounds
        point: dict[str, Any] = {"concurrency": level}
        for which, server, body, ctype, sse in paths:
            w = Watch(watch)
            overflows = listen_overflows()
            with w.during():
                results, wall = loop.run_until_complete(
                    stream_level(rig.url(server), body, ctype, sse, level, rounds, pacing_s))
            stats = analyze_streams(results, wall, pacing_s, STREAM_WORDS)
            events = max(1, stats["events"])
            point[which] = {**stats, **w.summary(), "listen_overflows": listen_overflows() - overflows,
                            "edge_cpu_us_per_event": w.cpu["edge"] / events * 1e6,
                            "edge_system_cpu_us_per_event": w.sys["edge"] / events * 1e6}
        e, d = point["edge"], point["direct"]
        point["added_ttft_p50_ms"] = e["ttft_p50_ms"] - d["ttft_p50_ms"]
        point["added_chunk_p50_ms"] = e["lateness_p50_ms"] - d["lateness_p50_ms"]
        point["added_chunk_p99_ms"] = e["lateness_p99_ms"] - d["lateness_p99_ms"]
        levels.append(point)
    return levels


def cpu_budget(rig: Rig, saturation: list[dict[str, Any]], streaming: list[dict[str, Any]]) -> dict[str, Any]:
    """The sans-I/O stages timed here (servers stopped), beside the edge's CPU per request and per chunk."""
    profile, requests = rig.profile, {}
    for point in saturation:
        label = point["body"]
        if label in requests:
            continue
        stages = request_budget(rig.bodies[label][0].read_bytes(), rig.answers[label], profile.budget_min_s,
                                profile.budget_repeats)
        shared = sum(stages[k] for k in
                     ("decode", "passport", "answer_decode_translate", "answer_json_encode", "log_line"))
        kernel = point["system_cpu_us_per_req_generated"]
        requests[label] = {"stages_us": stages, "edge_cpu_us_per_request_generated": point["cpu_us_per_req_generated"],
                           "edge_cpu_us_per_request_stock": point["cpu_us_per_req_stock"],
                           "kernel_us_generated": kernel,
                           "rest_us_generated": (point["cpu_us_per_req_generated"] - shared
                                                 - stages["encode_generated"] - kernel)}
    busiest = max(streaming, key=lambda p: p["concurrency"])
    chunks = chunk_budget(rig.stream_frames, MODEL, profile.budget_min_s, profile.budget_repeats)
    return {"requests": requests, "streaming": {**chunks, "concurrency": busiest["concurrency"],
                                                "edge_cpu_us_per_event": busiest["edge"]["edge_cpu_us_per_event"],
                                                "edge_system_cpu_us_per_event":
                                                    busiest["edge"]["edge_system_cpu_us_per_event"]}}


def verdict(result: dict[str, Any]) -> dict[str, Any]:
    """The generated-vs-stock figures at the first saturation body, across its connection counts."""
    label = result["saturation"][0]["body"]
    points = [p for p in result["saturation"] if p["body"] == label]
    rps_ratio = statistics.median(p["rps_ratio"] for p in points)
    out = {"body": label, "connections": [p["connections"] for p in points], "value": rps_ratio,
           "cpu_ratio": statistics.median(p["cpu_ratio"] for p in points), "target": ">= 1.5", "met": rps_ratio >= 1.5}
    c1 = result["latency_c1"].get(label)
    if c1 is not None:
        out["c1_added_p50_ms_stock_minus_generated"] = c1["stock_added_p50_ms"] - c1["edge_added_p50_ms"]
        out["c1_cpu_ratio"] = c1["stock_cpu_us_per_request"] / c1["edge_cpu_us_per_request"]
    return out


def run(profile: Profile, pacing_ms: float, out_path: Path) -> dict[str, Any]:
    started = time.perf_counter()
    rig = Rig.create(profile, pacing_ms)
    result: dict[str, Any] = {"meta": {
        "code": code_version(), "python": platform.python_version(), "aiohttp": aiohttp.__version__,
        "cpus": os.cpu_count(), "load_average_before": os.getloadavg(),
        "wrk": subprocess.run([rig.bench.binary, "-v"], capture_output=True, text=True).stdout.splitlines()[0],
        "stock_edge_started_by": "CLI --encoder stock" if rig.stock_via_cli else "bench/lib/edge_launcher.py",
        "commands": {k: " ".join(s.argv).replace(PY, "python") for k, s in rig.servers.items()},
        "pacing_ms": pacing_ms, "stream_words": STREAM_WORDS, "max_tokens": MAX_TOKENS, "profile": profile.__dict__,
    }}
    edges = ("edge", "stock", "edge_paced")
    loop = uvloop.new_event_loop()
    try:
        rig.start()
        result["rss_at_rest_kb"] = rest = {name: rss_kb(rig.pid(name)) for name in edges}
        print(f"{describe(result['meta']['code'])}; model {MODEL} (the estimate counts its prompts)")
        print(f"servers up in {time.perf_counter() - started:.1f} s; edge RSS at rest {rest['edge'] / 1024:.1f} MiB"
              f" (stock edge {rest['stock'] / 1024:.1f} MiB); stock edge via {result['meta']['stock_edge_started_by']}",
              flush=True)

        result["latency_c1"] = measure_latency(rig)
        report.print_latency(result["latency_c1"])
        result["saturation"], result["direct_saturation"] = measure_saturation(rig)
        report.print_saturation(result["saturation"], result["direct_saturation"], profile.saturation_cycles,
                                profile.saturation_seconds)
        result["streaming"] = measure_streaming(rig, loop)
        held = [p["concurrency"] for p in result["streaming"] if p["edge"]["held_fraction"] >= 0.99]
        result["streams_held_without_stalls"] = max(held, default=0)
        report.print_streaming(result["streaming"], STREAM_WORDS, pacing_ms, result["streams_held_without_stalls"])
        result["rss_after_kb"] = {name: rss_kb(rig.pid(name)) for name in edges}
    finally:
        loop.close()
        rig.stop()

    try:
        result["cpu_budget"] = cpu_budget(rig, result["saturation"], result["streaming"])
    finally:
        rig.remove_files()
    report.print_budget(result["cpu_budget"])
    sat_runs = [r for p in result["saturation"] for r in p["generated"] + p["stock"]]
    result["rss_under_load_kb"] = {
        "edge_saturation_peak": max(r["peak_rss_kb"]["edge"] for r in sat_runs),
        "stock_saturation_peak": max(r["peak_rss_kb"]["stock"] for r in sat_runs),
        "edge_streaming_peak": max(p["edge"]["peak_rss_kb"]["edge"] for p in result["streaming"]),
    }
    report.print_rss(result["rss_at_rest_kb"], result["rss_under_load_kb"], result["rss_after_kb"])
    result["target_rps_ratio"] = verdict(result)
    report.print_verdict(result["target_rps_ratio"])

    result["meta"]["load_average_after"] = os.getloadavg()
    result["meta"]["seconds"] = time.perf_counter() - started
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {out_path} in {result['meta']['seconds']:.0f} s total")
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller run, under a minute")
    parser.add_argument("--pacing-ms", type=float, default=20.0, help="the paced demo's delay between deltas")
    parser.add_argument("--out", type=Path, help="default: results/e2e.json, or results/e2e-quick.json with --quick")
    args = parser.parse_args()
    out = args.out or HERE / "results" / ("e2e-quick.json" if args.quick else "e2e.json")
    run(QUICK if args.quick else FULL, args.pacing_ms, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
