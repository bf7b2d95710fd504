"""Cold start: from `python -m ingress serve` being exec'd to /readyz answering 200, and import time.

Each run starts a fresh process on a free port (the embedded demo service, as `serve` runs by
default), polls /readyz every 2 ms over a new connection, and stops the process with SIGTERM (drain
delay 0, so runs do not wait on each other). With `--workers 2` the clock stops at the first 200,
i.e. when the first worker serves. The import figures come from `python -X importtime -c "import
ingress.serve.app"` (the modules a worker loads before it can serve), beside a bare interpreter start.

    .venv/bin/python -m bench cold_start [--runs 10] [--out bench/results/cold_start.json]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.lib.procs import steal_seconds
from bench.lib.provenance import code_version, describe
from bench.lib.servers import ROOT, free_port

PY = sys.executable
_IMPORTTIME = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)$")


def _ready(port: int) -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=0.5)
    try:
        conn.request("GET", "/readyz")
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


def start_to_ready(workers: int, config: Path, timeout: float = 30.0) -> float:
    """Seconds from Popen to the first /readyz 200; the process is stopped before returning."""
    port = free_port()
    argv = [PY, "-m", "ingress", "serve", "--port", str(port), "--workers", str(workers), "--config", str(config)]
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    if workers > 1:  # a directory of ours, removed with it (the supervisor leaves the one it makes)
        env["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="metrics-", dir=config.parent)
    started = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        while not _ready(port):
            if proc.poll() is not None:
                raise RuntimeError(f"the edge exited with {proc.returncode}: {proc.stderr.read()[-2000:]!r}"
                                   if proc.stderr else "the edge exited")
            if time.perf_counter() - started > timeout:
                raise RuntimeError(f"not ready after {timeout} s")
            time.sleep(0.002)
        return time.perf_counter() - started
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # its own group: workers too
            proc.wait()
        if proc.stderr:
            proc.stderr.close()


def import_profile(module: str) -> dict[str, Any]:
    """One `-X importtime` run: total microseconds for `module`, and the heaviest top-level imports."""
    done = subprocess.run([PY, "-X", "importtime", "-c", f"import {module}"], cwd=ROOT, capture_output=True,
                          text=True, check=True)
    rows = []
    for line in done.stderr.splitlines():
        m = _IMPORTTIME.match(line)
        if m:
            rows.append((int(m[1]), int(m[2]), len(m[3]) // 2, m[4]))  # self, cumulative, depth, name
    total = next(cum for _, cum, _, name in rows if name == module)
    # By package: the cumulative time of each import of a package made from outside it. The rows come
    # children first; read backwards, every row's parent comes before it.
    packages: dict[str, int] = {}
    parents: list[tuple[int, str]] = []
    for _, cum, depth, name in reversed(rows):
        top = name.split(".")[0]
        while parents and parents[-1][0] >= depth:
            parents.pop()
        if not parents or parents[-1][1] != top:
            packages[top] = packages.get(top, 0) + cum
        parents.append((depth, top))
    return {"total_us": total, "by_package_us": packages}


def wall(argv: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(argv, cwd=ROOT, check=True)
        times.append(time.perf_counter() - started)
    return float(statistics.median(times))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "cold_start.json"))
    args = parser.parse_args()

    version = code_version()
    load_before = os.getloadavg()[0]
    steal_before, wall_before = steal_seconds(), time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ingress-cold-") as work:
        config = Path(work) / "fast-stop.toml"
        config.write_text("[drain]\ndelay = 0\ndeadline = 1\n")
        start_to_ready(1, config)  # warm the page cache and __pycache__ once, untimed
        ready: dict[int, list[float]] = {1: [], 2: []}
        for _ in range(args.runs):  # interleaved, so drifting load lands on both alike
            for workers in ready:
                ready[workers].append(start_to_ready(workers, config))
    imports = [import_profile("ingress.serve.app") for _ in range(max(3, args.runs // 2))]
    interpreter = wall([PY, "-c", "pass"], 5)
    import_wall = wall([PY, "-c", "import ingress.serve.app"], 5)
    cores = os.cpu_count() or 1
    steal = (steal_seconds() - steal_before) / (time.monotonic() - wall_before)  # cores taken by other guests

    totals = [p["total_us"] / 1000 for p in imports]
    packages = {name: statistics.median(p["by_package_us"].get(name, 0) for p in imports) / 1000
                for name in imports[0]["by_package_us"]}
    heaviest = dict(sorted(((k, v) for k, v in packages.items() if k != "ingress"), key=lambda kv: -kv[1])[:10])
    result = {
        "what": "python -m ingress serve: Popen to the first /readyz 200 (ms); import time of ingress.serve.app",
        "code": version,
        "machine": {"cpus": cores, "python": platform.python_version(), "platform": platform.platform(),
                    "load_average_1m_before": load_before,
                    "steal_cores_during_run": round(steal, 3)},
        "runs": args.runs,
        "start_to_ready_ms": {
            str(w): {"median": statistics.median(v) * 1000, "p90": percentile(v, 0.9) * 1000,
                     "min": min(v) * 1000, "max": max(v) * 1000, "all": [round(x * 1000, 1) for x in v]}
            for w, v in ready.items()},
        "import_ingress_app_ms": {"median": statistics.median(totals), "min": min(totals), "max": max(totals),
                                  "heaviest_top_level_imports_ms": {k: round(v, 1) for k, v in heaviest.items()}},
        "interpreter_start_ms": interpreter * 1000,
        "python_c_import_ingress_app_wall_ms": import_wall * 1000,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")

    print(f"cold start, {describe(version)}; {cores} CPUs, load average {load_before:.2f} before the run, "
          f"{steal:.2f} cores stolen by the hypervisor during it; {args.runs} runs")
    print(f"{'':34}{'median':>9}{'p90':>9}{'min':>9}{'max':>9}")
    for w, _v in ready.items():
        row = result["start_to_ready_ms"][str(w)]
        print(f"{f'start -> /readyz 200, --workers {w}':34}"
              + "".join(f"{row[k]:>7.0f}ms" for k in ("median", "p90", "min", "max")))
    row = result["import_ingress_app_ms"]
    print(f"{'import ingress.serve.app (-X importtime)':34}{row['median']:>7.0f}ms{'':9}"
          f"{row['min']:>7.0f}ms{row['max']:>7.0f}ms")
    print(f"{'python -c pass (wall)':34}{interpreter * 1000:>7.0f}ms")
    label = 'python -c "import ingress.serve.app"'
    print(f"{label:34}{import_wall * 1000:>7.0f}ms")
    print("heaviest packages under ingress.serve.app (median ms, each including what it imports):")
    for name, ms in heaviest.items():
        print(f"  {name:30}{ms:>7.1f}ms")
    print(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
