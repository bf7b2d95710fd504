"""wrk, the compiled load generator: installed from Debian's packages if missing, driven by a Lua script."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.lib.procs import Watch

SCRIPT = r"""
-- POST the body in $BENCH_BODY as $BENCH_CTYPE; print one JSON summary line when done.
local f = assert(io.open(os.getenv("BENCH_BODY"), "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = os.getenv("BENCH_CTYPE")

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH {"requests":%d,"duration_us":%d,"bytes":%d,"connect":%d,"read":%d,"write":%d,"status":%d,' ..
    '"timeout":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,"p999_us":%d,"mean_us":%.1f,"max_us":%d}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9),
    latency.mean, latency.max))
end
"""


def ensure_wrk() -> str:
    """The wrk binary; installed with apt-get when missing (the package lists refreshed if need be)."""
    found = shutil.which("wrk")
    if found:
        return found
    print("wrk not found; installing it from Debian's packages (apt-get install -y wrk) ...", flush=True)
    install = ["apt-get", "install", "-y", "-q", "wrk"]
    try:
        done = subprocess.run(install, capture_output=True, text=True)
        if done.returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], capture_output=True, text=True)
            done = subprocess.run(install, capture_output=True, text=True)
        said = done.stderr.strip()[-500:]
    except FileNotFoundError:
        said = "apt-get is not available here"
    found = shutil.which("wrk")
    if not found:
        raise SystemExit(f"could not install wrk ({said}); install it and re-run")
    return found


@dataclass
class Wrk:
    binary: str
    script: Path

    def run(self, url: str, body: Path, ctype: str, connections: int, seconds: int,
            watch: dict[str, int] | None = None) -> dict[str, Any]:
        env = {**os.environ, "BENCH_BODY": str(body), "BENCH_CTYPE": ctype}
        cmd = [self.binary, "-t1", f"-c{connections}", f"-d{seconds}s", "--timeout", "10s", "-s", str(self.script), url]
        w = Watch(watch or {})
        with w.during():
            done = subprocess.run(cmd, capture_output=True, text=True, env=env)
        line = next((ln for ln in done.stdout.splitlines() if ln.startswith("BENCH ")), None)
        if done.returncode != 0 or line is None:
            raise RuntimeError(f"wrk failed ({done.returncode}): {done.stdout[-1000:]} {done.stderr[-1000:]}")
        r = json.loads(line[6:])
        seconds_run = r["duration_us"] / 1e6
        errors = {k: r[k] for k in ("connect", "read", "write", "status", "timeout") if r[k]}
        out = {
            "connections": connections, "requests": r["requests"], "rps": r["requests"] / seconds_run,
            "p50_ms": r["p50_us"] / 1000, "p90_ms": r["p90_us"] / 1000, "p99_ms": r["p99_us"] / 1000,
            "p999_ms": r["p999_us"] / 1000, "mean_ms": r["mean_us"] / 1000, "max_ms": r["max_us"] / 1000,
            "errors": errors, **w.summary(),
        }
        out["cpu_us_per_request"] = {n: c / max(1, r["requests"]) * 1e6 for n, c in w.cpu.items()}
        out["system_cpu_us_per_request"] = {n: c / max(1, r["requests"]) * 1e6 for n, c in w.sys.items()}
        return out
