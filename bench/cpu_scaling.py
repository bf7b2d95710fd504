"""CPU scaling: requests/s through `serve --workers 1` and `serve --workers 2`.

Two set-ups, each with an edge of one worker and an edge of two (a supervisor and its workers):

- `process`: both edges in front of one `demo-upstream` process, which takes its own share of the cores;
- `embedded`: each edge with the demo service embedded (the default `serve`), so every worker carries
  its own upstream and the edge processes do all the work but wrk's.

Each set-up checks that both edges answer, warms them up, then runs wrk (one thread, `--connections`,
`--seconds`) against the two edges in A B B A order for `--cycles`, so that drifting load from the rest
of the machine lands on both alike. Every run records requests/s, latency percentiles, and from /proc
the CPU time of each edge (its whole process tree), of the demo process and of wrk.

With two cores, the edge shares them with wrk (and the demo process): the figures to read are the ratio
of requests/s and the cores each edge actually used, beside how busy the machine was.

    .venv/bin/python -m bench cpu_scaling [--setup process|embedded|both] [--seconds 5] [--cycles 2]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.lib.payloads import MODEL, SIZES, chat_request
from bench.lib.procs import family, steal_seconds
from bench.lib.provenance import code_version, describe
from bench.lib.rounds import Rounds
from bench.lib.servers import ROOT, Server, free_port, serving
from bench.lib.wrk import SCRIPT as WRK_SCRIPT
from bench.lib.wrk import Wrk, ensure_wrk
from bench.peers import key_section

PY = sys.executable
JSON_TYPE = "application/json"
CHAT = "/v1/chat/completions"
MAX_TOKENS = 64  # the demo echoes at most this many words: answers stay small
WORKERS = (1, 2)


def check(url: str, body: bytes, auth: dict[str, str]) -> None:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": JSON_TYPE, **auth})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200 and b'"chat.completion"' in r.read(), url


def wait_for_workers(server: Server, workers: int) -> list[int]:
    """Every process of the edge once its workers run (a supervisor also has a resource tracker)."""
    expected = 1 if workers == 1 else workers + 2
    deadline = time.monotonic() + 20
    while len(pids := family(server.pid)) < expected:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{server.name}: {len(pids)} of {expected} processes running")
        time.sleep(0.1)
    return pids


def measure(setup: str, args: argparse.Namespace, bench: Wrk, work: Path, auth: dict[str, str]) -> dict[str, Any]:
    body = work / "body.json"
    demo: Server | None = None
    upstream: list[str] = []
    if setup == "process":
        port = free_port()
        demo = Server("demo", [PY, "-m", "ingress", "demo-upstream", "--port", str(port)], port, work / "demo.log",
                      env={"PROMETHEUS_MULTIPROC_DIR": None})
        upstream = ["--upstream", f"http://127.0.0.1:{port}", "--model", args.model]
    edges: dict[int, Server] = {}
    for workers in WORKERS:
        port = free_port()
        name = f"{setup}-{workers}w"
        # A metrics directory of ours for each supervisor, removed with `work` (a supervisor leaves the one
        # it makes itself behind); none for a single worker.
        metrics_dir = work / f"{name}-metrics" if workers > 1 else None
        if metrics_dir is not None:
            metrics_dir.mkdir()
        edges[workers] = Server(name, [
            PY, "-m", "ingress", "serve", "--port", str(port), "--workers", str(workers),
            "--config", str(work / "edge.toml"), *upstream], port, work / f"{name}.log",
            env={"PROMETHEUS_MULTIPROC_DIR": str(metrics_dir) if metrics_dir is not None else None})
    servers = ([demo] if demo else []) + list(edges.values())

    rounds = Rounds(WORKERS, 2 * args.cycles, order="alternate")
    started: list[int] = []
    with serving(*servers):
        for workers, server in edges.items():
            started += wait_for_workers(server, workers)
            check(server.url + CHAT, body.read_bytes(), auth)
            bench.run(server.url + CHAT, body, JSON_TYPE, args.connections, 1)  # warm-up, untimed
        total = len(WORKERS) * 2 * args.cycles
        for r, order in rounds:  # 1 2, then 2 1: the A B B A cycles
            for i, workers in enumerate(order, len(WORKERS) * r + 1):
                watch = {"edge": edges[workers].pid} | ({"demo": demo.pid} if demo else {})  # process trees
                run = bench.run(edges[workers].url + CHAT, body, JSON_TYPE, args.connections, args.seconds, watch)
                rounds.add(workers, run)
                print(f"  {setup} run {i}/{total}: --workers {workers}: {run['rps']:,.0f} req/s"
                      f"{'  errors ' + str(run['errors']) if run['errors'] else ''}", flush=True)
    for pid in started:  # a worker its supervisor did not take down with it
        with contextlib.suppress(OSError):
            if b"multiprocessing" in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(pid, signal.SIGKILL)

    summary: dict[str, Any] = {}
    for workers, rs in rounds.by_variant().items():

        def cores(key: str | tuple[str, ...], workers: int = workers) -> float:  # CPU seconds per wall second
            return rounds.median(workers, key) / 100

        summary[str(workers)] = {
            "rps_median": rounds.median(workers, "rps"),
            "rps_all": [round(r["rps"], 1) for r in rs],
            "p50_ms": rounds.median(workers, "p50_ms"),
            "p99_ms": rounds.median(workers, "p99_ms"),
            "edge_cores": cores(("cpu_percent", "edge")),
            "edge_cpu_us_per_request": rounds.median(workers, ("cpu_us_per_request", "edge")),
            "demo_cores": cores(("cpu_percent", "demo")) if demo else 0.0,
            "wrk_cores": cores("wrk_cpu_percent"),
            "machine_busy_cores": cores("machine_busy_percent"),
            "others_cores": cores("others_cpu_percent"),
            "errors": [r["errors"] for r in rs if r["errors"]],
        }
    one, two = summary["1"], summary["2"]
    return {
        "upstream": "one demo-upstream process" if demo else "the demo embedded in every worker",
        "workers": summary,
        "scaling_ratio_rps": two["rps_median"] / one["rps_median"],
        "scaling_ratio_edge_cores": two["edge_cores"] / one["edge_cores"],
        "runs": {str(w): rs for w, rs in rounds.by_variant().items()},
    }


def print_table(setup: str, result: dict[str, Any]) -> None:
    print(f"\n{setup}: {result['upstream']}")
    head = ["workers", "req/s", "p50 ms", "p99 ms", "edge cores", "edge µs/req", "demo cores", "wrk cores",
            "others", "machine"]
    print("".join(f"{h:>12}" for h in head))
    for workers, row in result["workers"].items():
        cells = [workers, f"{row['rps_median']:,.0f}", f"{row['p50_ms']:.2f}", f"{row['p99_ms']:.2f}",
                 f"{row['edge_cores']:.2f}", f"{row['edge_cpu_us_per_request']:.0f}", f"{row['demo_cores']:.2f}",
                 f"{row['wrk_cores']:.2f}", f"{row['others_cores']:.2f}", f"{row['machine_busy_cores']:.2f}"]
        print("".join(f"{c:>12}" for c in cells))
    print(f"scaling: {result['scaling_ratio_rps']:.2f}x requests/s with 2 workers; "
          f"the edge used {result['scaling_ratio_edge_cores']:.2f}x the cores")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setup", choices=("process", "embedded", "both"), default="both")
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--cycles", type=int, default=2, help="A B B A cycles")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--size", choices=sorted(SIZES), default="1KB", help="chat request body size")
    parser.add_argument("--model", default=MODEL, help="the model name each request sends (gpt-4o: counted with o200k)")
    parser.add_argument("--keys", action="store_true", help="a key and limits on (memory backend), as peers.py runs it")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "cpu_scaling.json"))
    args = parser.parse_args()

    version = code_version()
    load_before = os.getloadavg()[0]
    steal_before, wall_before = steal_seconds(), time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="ingress-scaling-"))
    try:
        (work / "body.json").write_bytes(chat_request(SIZES[args.size], max_tokens=MAX_TOKENS, model=args.model))
        auth: dict[str, str] = {}
        script, config = WRK_SCRIPT, "[drain]\ndelay = 0\ndeadline = 2\n"  # SIGTERM stops at once
        if args.keys:  # as peers.py and commits.py run the edge: a key, its limits and its tenant's, never reached
            section, key, _ = key_section()
            script += f'\nwrk.headers["Authorization"] = "Bearer {key}"\n'
            auth = {"Authorization": f"Bearer {key}"}
            config = section.lstrip("\n") + "\n" + config
        (work / "post.lua").write_text(script)
        (work / "edge.toml").write_text(config)
        bench = Wrk(ensure_wrk(), work / "post.lua")
        setups = ("process", "embedded") if args.setup == "both" else (args.setup,)
        results = {setup: measure(setup, args, bench, work, auth) for setup in setups}
    finally:
        shutil.rmtree(work, ignore_errors=True)

    cores = os.cpu_count() or 1
    steal = (steal_seconds() - steal_before) / (time.monotonic() - wall_before)  # cores taken by other guests
    out = {
        "what": f"wrk -t1 -c{args.connections} -d{args.seconds}s, POST {args.size} chat JSON for {args.model}"
                f"{', a key and limits on' if args.keys else ''}; "
                f"serve --workers 1 vs 2, A B B A x{args.cycles}; cores = CPU seconds per wall second",
        "code": version,
        "machine": {"cpus": cores, "python": platform.python_version(), "platform": platform.platform(),
                    "load_average_1m_before": load_before,
                    "steal_cores_during_run": round(steal, 3)},
        "setups": results,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"\nCPU scaling, {describe(version)}; {cores} CPUs, load average {load_before:.2f} before the run, "
          f"{steal:.2f} cores stolen by the hypervisor during it")
    print(f"wrk -t1 -c{args.connections}, {args.seconds} s runs, {args.size} chat requests, median of "
          f"{2 * args.cycles} runs each; cores = CPU seconds per wall second")
    for setup, result in results.items():
        print_table(setup, result)
    print(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
