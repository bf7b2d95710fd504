"""Footprint: one worker's RSS idle and after load, per config, this tree beside a baseline checkout.

    python -m bench footprint [--baseline DIR] [--runs 3] [--requests 300] [--out bench/results/footprint.json]

A checkout is a directory holding a copy of the project (`git archive <commit> | tar -x -C DIR`, as for
`bench commits`); each edge runs from its tree (cwd and PYTHONPATH) with this interpreter, in front of the
embedded demo service. The configs: `embedded` (no config: the demo model alone); `keys` (peers.py's: a key
with an rpm and a tpm limit and its tenant's tpm, memory backend, routing ingress-demo, whose prompts the
estimate counts); `keys_gpt4o` (the same routing gpt-4o: its tpm charges prompt tokens, counted with
o200k); `rpm_gpt4o` (gpt-4o, the key's rpm alone: only count_tokens counts exactly). Idle: the worker's
VmRSS `--idle` seconds after /readyz first answers 200. After load: after `--requests` chat requests (16 KB,
11 messages, the key sent), a streamed one and two /v1/messages/count_tokens, one at a time on a kept-alive
connection, then a second's rest. The two count_tokens requests are timed: where no limit counts prompts
(`rpm_gpt4o`) the first builds the vocabulary, what a worker that built nothing at start pays once.
Medians over `--runs` fresh processes, the trees interleaved, each tree byte-compiled first (a checkout
without .pyc files, under PYTHONDONTWRITEBYTECODE, compiles at every start: ~3.5 MB more). The breakdown:
RSS after each import or build step in turn, in one interpreter of each tree.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.lib.payloads import chat_request, stream_request
from bench.lib.procs import rss_kb
from bench.lib.provenance import code_version, describe
from bench.lib.results import result_path, write_result
from bench.lib.servers import ROOT, free_port

PY = sys.executable
CONFIGS = ("embedded", "keys", "keys_gpt4o", "rpm_gpt4o")
GPT4O = "gpt-4o"

# The breakdown: each step imported (or built) in turn in one interpreter; RSS after each.
STEPS = [
    ("asyncio, ssl", "import asyncio, ssl"),
    ("aiohttp (client, web)", "import aiohttp, aiohttp.web"),
    ("msgspec, structlog, prometheus_client, re2, zstandard, flatbuffers, httptools",
     "import msgspec, structlog, prometheus_client, re2, zstandard, flatbuffers, httptools"),
    ("ingress (ingress.serve.app and what it imports)", "import ingress.serve.app"),
    ("cryptography (AES-GCM: sealing)", "from cryptography.hazmat.primitives.ciphers.aead import AESGCM"),
    ("PyJWT (with cryptography's asymmetric keys)", "import jwt, jwt.algorithms"),
    ("o200k vocabulary built", "from ingress.tokens.engines import vocabulary; vocabulary('o200k').count('warm')"),
    ("cl100k vocabulary built", "from ingress.tokens.engines import vocabulary; vocabulary('cl100k').count('warm')"),
]
_BREAKDOWN = """
import json, sys, time
def rss():
    for line in open('/proc/self/status'):
        if line.startswith('VmRSS:'):
            return int(line.split()[1])
out = [['interpreter', rss(), 0.0, len(sys.modules)]]
for name, code in STEPS:
    started = time.perf_counter()
    exec(code)
    out.append([name, rss(), (time.perf_counter() - started) * 1000, len(sys.modules)])
print(json.dumps(out))
"""


def config_text(name: str, port: int, key_section: str) -> str:
    if name == "embedded":
        return f"port = {port}\n"
    if name == "rpm_gpt4o":  # the key's rpm kept, every token limit dropped
        key_section = re.sub(r", tpm = \d+ }", " }", re.sub(r"limits = \{ tpm = \d+ \}", "limits = {}", key_section))
    model = GPT4O if name.endswith("gpt4o") else "ingress-demo"
    return f'port = {port}\nworkers = 1\nupstream = "embedded:"\nmodels = ["{model}"]\n' + key_section


def _get(port: int, path: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=0.5)
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    except OSError:
        return 0
    finally:
        conn.close()


def _load(port: int, model: str, key: str, requests: int) -> tuple[float, float]:
    """`requests` chat requests, a streamed one and two count_tokens ones, each answered 200; the two
    count_tokens requests' times (ms): the first is the first exact count where no limit counted before
    (a vocabulary not built at start is built by it), the second the same request again."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}", "x-api-key": key}
    count = json.dumps({"model": model, "messages": [
        {"role": "user", "content": "How far is the river from the city?"}]}).encode()
    sends = [("/v1/chat/completions", chat_request(16384, model=model, max_tokens=16))] * requests + [
        ("/v1/chat/completions", stream_request(64, model=model)),
        ("/v1/messages/count_tokens", count), ("/v1/messages/count_tokens", count)]
    times: list[float] = []
    try:
        for path, body in sends:
            started = time.perf_counter()
            conn.request("POST", path, body, headers)
            response = conn.getresponse()
            response.read()
            times.append((time.perf_counter() - started) * 1000)
            if response.status != 200:
                raise RuntimeError(f"{path}: {response.status}")
    finally:
        conn.close()
    return times[-2], times[-1]


def measure(tree: Path, name: str, key_section: str, key: str, args: argparse.Namespace) -> dict[str, float]:
    """One fresh edge of `tree` with config `name`: its RSS (MB) idle and after load, and start to ready (s)."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="ingress-footprint-") as work:
        config = Path(work) / "edge.toml"
        config.write_text(config_text(name, port, key_section))
        env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
        env["PYTHONPATH"] = str(tree)
        argv = [PY, "-m", "ingress", "serve", "--workers", "1", "--port", str(port), "--config", str(config)]
        started = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                start_new_session=True)
        try:
            while _get(port, "/readyz") != 200:
                if proc.poll() is not None:
                    raise RuntimeError(f"{tree} {name}: exited {proc.returncode}: "
                                       f"{proc.stderr.read()[-2000:]!r}" if proc.stderr else "exited")
                if time.perf_counter() - started > 60:
                    raise RuntimeError(f"{tree} {name}: not ready after 60 s")
                time.sleep(0.005)
            ready = time.perf_counter() - started
            time.sleep(args.idle)
            idle = rss_kb(proc.pid) / 1024
            first, second = _load(port, GPT4O if name.endswith("gpt4o") else "ingress-demo", key, args.requests)
            time.sleep(1.0)
            after = rss_kb(proc.pid) / 1024
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            if proc.stderr:
                proc.stderr.close()
    return {"idle_mb": idle, "after_load_mb": after, "ready_s": ready, "first_count_ms": first,
            "second_count_ms": second}


def breakdown(tree: Path) -> list[dict[str, Any]]:
    """RSS after each of STEPS in one interpreter of `tree` (what each adds, in this order)."""
    code = f"STEPS = {STEPS!r}\n" + _BREAKDOWN
    done = subprocess.run([PY, "-c", code], cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
                          capture_output=True, text=True, check=True)
    rows: list[dict[str, Any]] = []
    for name, kb, ms, modules in json.loads(done.stdout.strip().splitlines()[-1]):
        before = rows[-1] if rows else {"rss_mb": 0.0, "modules": 0}
        rows.append({"step": name, "rss_mb": kb / 1024, "added_mb": kb / 1024 - before["rss_mb"], "ms": ms,
                     "modules": modules, "added_modules": modules - before["modules"]})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", type=Path, help="a checkout to measure beside this tree")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--idle", type=float, default=3.0, help="seconds after ready before the idle RSS")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from bench.peers import key_section

    section, key, _ = key_section()
    trees = {"current": ROOT} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    for tree in trees.values():  # with PYTHONDONTWRITEBYTECODE a fresh checkout would compile at every start
        subprocess.run([PY, "-m", "compileall", "-q", str(tree / "ingress")], check=True, stdout=subprocess.DEVNULL)
    started = time.perf_counter()
    runs: dict[str, dict[str, list[dict[str, float]]]] = {t: {c: [] for c in CONFIGS} for t in trees}
    for _ in range(args.runs):  # the trees interleaved: a drift of the host is shared
        for config in CONFIGS:
            for tree_name, tree in trees.items():
                runs[tree_name][config].append(measure(tree, config, section, key, args))
    table = {t: {c: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for c, rs in per.items()}
             for t, per in runs.items()}
    print(f"{'config':<12}" + "".join(f"{t + ' idle':>16}{t + ' after':>16}{'1st/2nd count':>16}" for t in trees)
          + "   (MB; count_tokens ms; medians)")
    for config in CONFIGS:
        cells = [table[t][config] for t in trees]
        print(f"{config:<12}" + "".join(f"{c['idle_mb']:>16.1f}{c['after_load_mb']:>16.1f}"
                                         f"{c['first_count_ms']:>9.1f} /{c['second_count_ms']:>5.1f}" for c in cells))
    steps = {tree_name: breakdown(tree) for tree_name, tree in trees.items()}
    print("\nRSS added by each step in turn, one interpreter (MB; a step whose modules an earlier one loaded adds 0):")
    print(f"  {'step':<82}" + "".join(f"{t:>10}" for t in trees))
    for i, row in enumerate(steps["current"]):
        print(f"  {row['step']:<82}" + "".join(f"{steps[t][i]['added_mb']:>10.1f}" for t in trees))
    version = code_version()
    print(describe(version))
    write_result({
        "meta": {"code": version, "baseline": str(args.baseline) if args.baseline else None, "runs": args.runs,
                 "requests": args.requests, "idle_s": args.idle, "python": sys.version.split()[0],
                 "cpus": os.cpu_count(), "wall_s": time.perf_counter() - started,
                 "command": "python -m bench footprint " + " ".join(sys.argv[1:])},
        "table": table, "runs": runs, "breakdown": steps,
    }, result_path("footprint", out=args.out))


if __name__ == "__main__":
    main()
