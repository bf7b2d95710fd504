"""Two checkouts' edges side by side: the same load, rounds interleaved, CPU per request and requests/s.

    python -m bench commits --before /tmp/snap-old --after /tmp/snap-new [--rounds 6] [--seconds 4]
        -> results/commits.json

A checkout is a directory holding a copy of the project (`git archive <commit> | tar -x -C DIR`). Each
edge runs from its own directory (PYTHONPATH) with one worker, in front of one demo service of the
`--after` checkout; wrk sends the 16 KB, 11-message chat request for `--model` (ingress-demo, or a real name:
gpt-4o's prompt is counted with o200k where a limit charges it) on kept-alive connections (and, with
`--close`, a new connection each request); with `--keys`, as peers.py runs it: a key with an rpm and a tpm
limit and its tenant's tpm (memory backend), never reached, the key sent with each request; with `--fixed`,
peers.py's mock (one fixed CompletionResponse, no work a request) in the demo service's place. Rounds
alternate the order of the two edges, so a drift of the host is shared; the table gives medians over rounds
and the after/before ratio. With `--fresh`, each edge is a new process each round (two processes of one tree
differ by a few per cent: their memory layouts); with `--pin`, the edges run on CPU 1, the service and wrk on
CPU 0.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

from bench.lib.payloads import MODEL, chat_request  # noqa: E402
from bench.lib.rounds import Rounds  # noqa: E402
from bench.lib.servers import ROOT, Server, free_port, python_in, start_all, stop_all  # noqa: E402
from bench.lib.tables import Table  # noqa: E402
from bench.lib.wrk import SCRIPT, Wrk, ensure_wrk  # noqa: E402


def _check_code(checkout: Path) -> None:
    """Refuse to compare unless `checkout`'s edge imports `ingress` from `checkout`, from where the servers start."""
    done = subprocess.run([*python_in(checkout), "-c", "import ingress; print(ingress.__file__)"],
                          capture_output=True, text=True, cwd=ROOT)
    found = Path(done.stdout.strip()).resolve() if done.returncode == 0 else None
    if found is None or not found.is_relative_to(checkout.resolve()):
        raise SystemExit(f"{checkout}: its edge would import ingress from {found or done.stderr[-300:]}")


def _commit_of(checkout: Path) -> str:
    stamp = checkout / "COMMIT"
    return stamp.read_text().strip() if stamp.exists() else str(checkout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--after", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=int, default=4)
    parser.add_argument("--connections", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--close", action="store_true", help="also a run with a new connection each request")
    parser.add_argument("--keys", action="store_true", help="a key and limits on, as bench/peers.py runs the edge")
    parser.add_argument("--fixed", action="store_true",
                        help="behind the edges, peers.py's mock (one fixed answer, no work) for the demo service")
    parser.add_argument("--fresh", action="store_true",
                        help="a fresh process for each edge each round (two processes of one tree differ by a few %%)")
    parser.add_argument("--pin", action="store_true", help="the edges on CPU 1, the service and wrk on CPU 0")
    parser.add_argument("--model", default=MODEL, help="the model name each request sends (routed to the service)")
    parser.add_argument("--workers", type=int, default=1,
                        help="each edge's workers (several: their metrics in PROMETHEUS_MULTIPROC_DIR's files)")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "commits.json")
    args = parser.parse_args()
    for checkout in (args.before, args.after):
        _check_code(checkout)

    work = Path(tempfile.mkdtemp(prefix="ingress-commits-"))
    body = work / "16KB.json"
    body.write_bytes(chat_request(16 * 1024, model=args.model))
    demo_port = free_port()
    serve = (["-m", "ingress", "demo-upstream", "--port", str(demo_port)] if not args.fixed else
             ["-m", "bench.tenancy", "--serve-mock", str(demo_port), "0"])
    pin_edge, pin_rest = (["taskset", "-c", "1"], ["taskset", "-c", "0"]) if args.pin else ([], [])
    if args.pin:
        os.sched_setaffinity(0, {0})  # wrk, started from here, beside the service
    demo = Server("demo", [*pin_rest, *python_in(args.after, ROOT), *serve], demo_port, work / "demo.log")
    edges = {}
    script = SCRIPT
    if args.keys:
        from bench.peers import key_section
        from bench.tenancy import edge_config

        section, key, _ = key_section()
        script = SCRIPT + f'\nwrk.headers["Authorization"] = "Bearer {key}"\n'
    for name, checkout in (("before", args.before), ("after", args.after)):
        port = free_port()
        where = (["--config", str(edge_config(work / f"{name}.toml", port, demo.url, section, args.model))]
                 if args.keys else ["--model", args.model, "--port", str(port), "--upstream", demo.url])
        edges[name] = Server(name, [*pin_edge, *python_in(checkout), "-m", "ingress", "serve",
                                    "--workers", str(args.workers), *where],
                             port, work / f"{name}.log")
    wrk = Wrk(ensure_wrk(), work / "bench.lua")
    wrk.script.write_text(script)
    ctype = 'wrk.headers["Content-Type"]'
    closing = script.replace(ctype, f'wrk.headers["Connection"] = "close"\n{ctype}')
    cells = [(c, False) for c in args.connections] + ([(args.connections[-1], True)] if args.close else [])
    loads = {f"{c}{'/close' if close else ''}": (c, close) for c, close in cells}
    rounds = Rounds(edges, args.rounds, order="alternate", baseline="before")  # before after, after before...
    try:
        start_all(demo, *([] if args.fresh else edges.values()))
        for r, order in rounds:
            for name in order:
                edge = edges[name]
                url = f"{edge.url}/v1/chat/completions"
                if args.fresh:
                    start_all(edge)
                    wrk.script.write_text(script)
                    wrk.run(url, body, "application/json", args.connections[-1], 1, watch={name: edge.pid})  # warm
                for load, (connections, close) in loads.items():
                    wrk.script.write_text(closing if close else script)
                    result = wrk.run(url, body, "application/json", connections, args.seconds, watch={name: edge.pid})
                    if result["errors"]:
                        raise SystemExit(f"{name}: errors {result['errors']}")
                    rounds.add(name, {"rps": result["rps"], "p50_ms": result["p50_ms"], "p99_ms": result["p99_ms"],
                                      "cpu_us": result["cpu_us_per_request"][name]}, load)
                if args.fresh:
                    edge.kill()
            print(f"round {r + 1}/{args.rounds} done", flush=True)
    finally:
        stop_all(*edges.values(), demo)

    before_id, after_id = (_commit_of(args.before), _commit_of(args.after))
    setup = (("a key and limits on; " if args.keys else "") + ("the fixed mock; " if args.fixed else "")
             + ("fresh processes each round; " if args.fresh else "") + ("pinned; " if args.pin else ""))
    print(f"\nbefore = {before_id}, after = {after_id}; model {args.model}; {setup}"
          f"medians over {args.rounds} interleaved rounds of {args.seconds} s")
    printed = Table(("load", "<16"), ("edge", "<8"), ("req/s", ">9.0f"), ("p50 ms", ">9.3f"), ("p99 ms", ">9.3f"),
                    ("CPU µs/req", ">12.0f"))
    print(printed.header())
    table = []
    for load, (connections, close) in loads.items():
        med = {n: {m: rounds.median(n, m, load) for m in ("rps", "p50_ms", "p99_ms", "cpu_us")} for n in edges}
        for n in edges:
            label = f"c={connections}" + (", new conn" if close else "")
            print(printed.row(label, n, med[n]["rps"], med[n]["p50_ms"], med[n]["p99_ms"], med[n]["cpu_us"]))
        # requests/s: the ratio of the medians; CPU: the median of the rounds' ratios
        cpu = rounds.ratio("after", "cpu_us", cell=load)
        print(printed.row("", "ratio", f"{med['after']['rps'] / med['before']['rps']:.3f}", None, None,
                          f"{cpu.median:.3f}")
              + f"   (after/before; CPU ratio: median of the rounds' ratios, {cpu.range()})")
        table.append({"load": load, "median": med, "cpu_ratio": cpu.median, "cpu_ratio_range": [cpu.low, cpu.high]})
    runs = {f"{n}/{load}": rounds.runs(n, load) for n in edges for load in loads}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"before": before_id, "after": after_id, "model": args.model, "keys": args.keys,
                                    "fixed": args.fixed,
                                    "rounds": args.rounds, "fresh": args.fresh, "pin": args.pin,
                                    "seconds": args.seconds, "table": table, "runs": runs}, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
