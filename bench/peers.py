"""The edge beside the gateways users would otherwise pick: LiteLLM's proxy and Portkey's gateway, one run.

    nice -n 10 .venv/bin/python bench/peers.py [--quick]   -> results/peers.json (~5 min; --quick ~2 min,
                                                              results/peers-quick.json)

Installs, outside the work tree under ~/.cache/ingress/peers/ (each into a temporary directory renamed into
place when it is complete, then reused): LiteLLM's proxy (PyPI `litellm[proxy]`, LITELLM below) in its own
virtualenv, and Portkey's gateway (npm `@portkey-ai/gateway`, PORTKEY below), run with the machine's `node`.
A peer that cannot be installed or started is reported with the reason, and the run goes on without it.

Five subjects, one process each, side by side with rounds interleaved (a different one first each round):

- `mock (OpenAI)`: bridge.py's zero-delay mock (a raw asyncio Protocol on uvloop) answering every POST with
  one fixed chat.completion JSON made once at start-up; called directly with the JSON request;
- `mock (ours)`: tenancy.py's zero-delay mock answering every POST with one fixed CompletionResponse (the
  same 64 words and usage, in our contract); called directly with the request already encoded as FlatBuffers;
- `LiteLLM`: `litellm --config` with one model pointing at the OpenAI mock (`openai/` provider, `api_base`),
  one worker, a master key (sent by the client; no database, so nothing else is checked), no callbacks,
  no retries, no cache, no spend logs, the local model-cost map (no fetch at start-up), log level ERROR;
- `Portkey`: `node build/start-server.js --headless` (NODE_ENV=production: no log console), one process,
  each request's `x-portkey-config` header naming the OpenAI mock as an `openai` provider with a
  `custom_host`; no retries, no cache (both its defaults when the config names none);
- `edge`: `ingress serve --workers 1` in front of the FlatBuffers mock with `[tenancy]` on: the memory
  backend, one key with rpm and tpm limits and its tenant with a tpm limit, all far above what a run
  reaches (3 checks a request, nothing refused), the key sent by the client.

The same 16 KB, 11-message request (bench/payloads.py, max_tokens 64) to every subject, `wrk -t1` at 1 and 32
connections: requests/s, p50/p99, the added p99 against the direct mock of the same round (the peers against
the OpenAI mock, the edge against ours), the CPU seconds per request of the gateway's whole process tree
(user + system, /proc), and its RSS after the load. The ratios (edge over peer) are medians of per-round
ratios.

Every process shares the machine's two cores with wrk and this client, and the run renices itself to 10:
compare subjects within one run, not across runs.
"""

from __future__ import annotations

import argparse
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

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]
PY = sys.executable
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ingress" / "peers"
LITELLM = "1.106.12"  # newer ones need `litellm-proxy` or -extras releases this registry does not serve
PORTKEY = "1.15.2"
JSON_TYPE = "application/json"
CHAT = "/v1/chat/completions"
CONNECTIONS = (1, 32)
SUBJECTS = ("mock_oai", "mock_fb", "litellm", "portkey", "edge")
LABELS = {"mock_oai": "mock (OpenAI JSON), direct", "mock_fb": "mock (CompletionResponse), direct",
          "litellm": f"LiteLLM {LITELLM}", "portkey": f"Portkey {PORTKEY}", "edge": "edge (ingress)"}
BASELINE = {"litellm": "mock_oai", "portkey": "mock_oai", "edge": "mock_fb"}
GATEWAYS = ("litellm", "portkey", "edge")
MASTER_KEY = "sk-bench-litellm-master"
FAR = {"rpm": 10**9, "tpm": 10**12}  # never reached: nothing is refused
HEADERS_SCRIPT = """
local extra = os.getenv("BENCH_HEADERS")
if extra then
  for line in extra:gmatch("[^\\n]+") do
    local name, value = line:match("^([^:]+):%s*(.*)$")
    if name then wrk.headers[name] = value end
  end
end
"""


class Unavailable(Exception):
    """A peer that cannot be installed or started here; its message says why."""


# --- installing the peers --------------------------------------------------------------------------


def _run(cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> None:
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        said = "\n".join(ln for ln in (done.stderr + done.stdout).splitlines() if "ignored: it is neither" not in ln)
        raise Unavailable(f"`{' '.join(cmd)}` exited with {done.returncode}: {said.strip()[-1200:]}")


def _install(name: str, build: Any) -> Path:
    """CACHE/name, built by `build(tmp)` into a temporary directory renamed into place once it is complete
    (a run stopped half-way leaves only a *.tmp-* directory, removed by the next run)."""
    final = CACHE / name
    if (final / ".complete").exists():
        return final
    CACHE.mkdir(parents=True, exist_ok=True)
    for stale in CACHE.glob(f"{name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = CACHE / f"{name}.tmp-{os.getpid()}"
    print(f"installing {name} into {final} ...", flush=True)
    t0 = time.perf_counter()
    try:
        build(tmp)
        (tmp / ".complete").write_text(f"{time.time():.0f}\n")
        shutil.rmtree(final, ignore_errors=True)
        os.rename(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"  installed in {time.perf_counter() - t0:.0f} s", flush=True)
    return final


def install_litellm() -> Path:
    """The virtualenv's python (run as `python -m litellm...`, so that the venv's scripts' shebangs, which
    name the temporary directory, are never used)."""
    def build(tmp: Path) -> None:
        _run([sys.executable, "-m", "venv", str(tmp)])  # from a venv's python too: on the base interpreter
        _run([str(tmp / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
              f"litellm[proxy]=={LITELLM}"])

    return _install(f"litellm-{LITELLM}", build) / "bin" / "python"


def install_portkey() -> Path:
    """The gateway's start-server.js."""
    node = shutil.which("node")
    if node is None:
        raise Unavailable("no `node` on this machine (Debian's `nodejs` package provides it)")

    def build(tmp: Path) -> None:
        tmp.mkdir(parents=True)
        (tmp / "package.json").write_text('{"name": "ingress-bench-peers", "private": true}\n')
        _run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", f"@portkey-ai/gateway@{PORTKEY}"],
             cwd=tmp)

    return _install(f"portkey-{PORTKEY}", build) / "node_modules" / "@portkey-ai" / "gateway" / "build" / \
        "start-server.js"


# --- the subjects ----------------------------------------------------------------------------------


@dataclass
class Subject:
    name: str
    argv: list[str]
    port: int
    log: Path
    path: str  # the URL path wrk POSTs to
    body: str  # the request file in the work directory
    ctype: str
    headers: dict[str, str] = field(default_factory=dict)
    health: str = "/healthz"
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> None:
        from procs import ROOT

        with open(self.log, "wb") as err:
            self.proc = subprocess.Popen(self.argv, stdout=err, stderr=subprocess.STDOUT, cwd=ROOT,
                                         env={**os.environ, **self.env}, start_new_session=True)

    def wait_ready(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise Unavailable(f"{self.name} exited with {self.proc.returncode}: "
                                  f"{self.log.read_text(errors='replace')[-1500:]}")
            try:
                with urllib.request.urlopen(self.url + self.health, timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        said = self.log.read_text(errors="replace")[-1500:]
        raise Unavailable(f"{self.name} was not ready in {timeout:.0f} s: {said}")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

    def post(self, work: Path) -> tuple[int, bytes]:
        req = urllib.request.Request(self.url + self.path, data=(work / self.body).read_bytes(),
                                     headers={"Content-Type": self.ctype, **self.headers})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, bytes(r.read())
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()


def litellm_config(path: Path, mock_url: str) -> Path:
    from payloads import MODEL

    path.write_text(f"""model_list:
  - model_name: {MODEL}
    litellm_params:
      model: openai/{MODEL}
      api_base: {mock_url}/v1
      api_key: sk-mock
litellm_settings:
  num_retries: 0
  request_timeout: 30
  cache: false
  callbacks: []
  success_callback: []
  failure_callback: []
  telemetry: false
  turn_off_message_logging: true
  set_verbose: false
router_settings:
  num_retries: 0
  allowed_fails: 1000000
general_settings:
  master_key: {MASTER_KEY}
  disable_spend_logs: true
  disable_error_logs: true
  disable_adding_master_key_hash_to_db: true
  allow_requests_on_db_unavailable: true
""")
    return path


LITELLM_ENV = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR", "LITELLM_TELEMETRY": "False",
               "DISABLE_SCHEMA_UPDATE": "True", "USE_PRISMA_MIGRATE": "False"}


def portkey_config(mock_url: str) -> str:
    return json.dumps({"provider": "openai", "custom_host": f"{mock_url}/v1", "api_key": "sk-mock"},
                      separators=(",", ":"))


def _med(values: list[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def _versions(litellm_py: Path | None, node_script: Path | None) -> dict[str, str]:
    out = {"python": platform.python_version()}
    if litellm_py is not None:
        out["litellm"] = subprocess.run([str(litellm_py), "-c", "import importlib.metadata as m; "
                                         "print(m.version('litellm'), m.version('uvicorn'), m.version('fastapi'))"],
                                        capture_output=True, text=True).stdout.strip()
        out["litellm_python"] = subprocess.run([str(litellm_py), "-V"], capture_output=True, text=True).stdout.strip()
    if node_script is not None:
        pkg = json.loads((node_script.parent.parent / "package.json").read_text())
        out["portkey"] = pkg["version"]
        out["node"] = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    out["wrk"] = subprocess.run(["wrk", "-v"], capture_output=True, text=True).stdout.splitlines()[0]
    return out


# --- the run ---------------------------------------------------------------------------------------


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from e2e import fb_body
    from payloads import chat_request
    from procs import free_port, rss_kb
    from provenance import code_version, describe
    from tenancy import edge_config, tenancy_section
    from wrk import SCRIPT, Wrk, ensure_wrk

    from ingress.tenancy.keys import new_key
    from ingress.wire import COMPLETE_PATH, CONTENT_TYPE

    started = time.perf_counter()
    load_before = os.getloadavg()
    unavailable: dict[str, str] = {}
    litellm_py = node_script = None
    for peer in args.without:
        unavailable[peer] = "left out by --without"
    try:
        litellm_py = None if "litellm" in args.without else install_litellm()
    except Unavailable as exc:
        unavailable["litellm"] = str(exc)
    try:
        node_script = None if "portkey" in args.without else install_portkey()
    except Unavailable as exc:
        unavailable["portkey"] = str(exc)
    versions = _versions(litellm_py, node_script)
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()), flush=True)

    work = Path(tempfile.mkdtemp(prefix="ingress-bench-peers-"))
    body = chat_request(16 * 1024, max_tokens=64)
    (work / "chat.json").write_bytes(body)
    (work / "chat.fb").write_bytes(bytes(fb_body(body)))
    ports = {name: free_port() for name in SUBJECTS}
    oai_url, fb_url = (f"http://127.0.0.1:{ports[n]}" for n in ("mock_oai", "mock_fb"))
    key, key_id, key_hash = new_key()
    keys = [(key_id, key_hash, "bench", f"{{ rpm = {FAR['rpm']}, tpm = {FAR['tpm']} }}")]
    section = tenancy_section("memory", "", "bench", keys, {"bench": f"{{ tpm = {FAR['tpm']} }}"}, 50)
    edge_toml = edge_config(work / "edge.toml", ports["edge"], fb_url, section)
    subjects = {
        "mock_oai": Subject("mock_oai", [PY, str(HERE / "bridge.py"), "--serve-mock", str(ports["mock_oai"])],
                            ports["mock_oai"], work / "mock_oai.log", CHAT, "chat.json", JSON_TYPE),
        "mock_fb": Subject("mock_fb", [PY, str(HERE / "tenancy.py"), "--serve-mock", str(ports["mock_fb"]), "0"],
                           ports["mock_fb"], work / "mock_fb.log", COMPLETE_PATH, "chat.fb", CONTENT_TYPE),
        "edge": Subject("edge", [PY, "-m", "ingress", "serve", "--config", str(edge_toml), "--workers", "1"],
                        ports["edge"], work / "edge.log", CHAT, "chat.json", JSON_TYPE,
                        {"Authorization": f"Bearer {key}"}),
    }
    if litellm_py is not None:
        subjects["litellm"] = Subject(
            "litellm", [str(litellm_py), "-m", "litellm.proxy.proxy_cli", "--config",
                        str(litellm_config(work / "litellm.yaml", oai_url)), "--host", "127.0.0.1",
                        "--port", str(ports["litellm"]), "--num_workers", "1"],
            ports["litellm"], work / "litellm.log", CHAT, "chat.json", JSON_TYPE,
            {"Authorization": f"Bearer {MASTER_KEY}"}, "/health/liveliness", LITELLM_ENV)
    if node_script is not None:
        subjects["portkey"] = Subject(
            "portkey", ["node", str(node_script), f"--port={ports['portkey']}", "--headless"],
            ports["portkey"], work / "portkey.log", CHAT, "chat.json", JSON_TYPE,
            {"x-portkey-config": portkey_config(oai_url)}, "/", {"NODE_ENV": "production"})
    wrk = Wrk(ensure_wrk(), work / "post.lua")
    wrk.script.write_text(SCRIPT + HEADERS_SCRIPT)
    runs: dict[int, dict[str, list[dict[str, Any]]]] = {c: {s: [] for s in SUBJECTS} for c in CONNECTIONS}
    rss_after: dict[str, float] = {}
    marker = b"chatcmpl-mock"
    try:
        for s in subjects.values():
            s.start()
        for name in list(subjects):
            try:
                subjects[name].wait_ready()
                status, answer = subjects[name].post(work)
                if status != 200 or (name != "mock_fb" and marker not in answer):
                    raise Unavailable(f"{name} answered {status}: {answer[:500]!r}")
            except Unavailable as exc:
                if name not in GATEWAYS[:2]:
                    raise
                unavailable[name] = str(exc)
                subjects.pop(name).stop()
        for name, why in unavailable.items():
            print(f"{LABELS[name]}: left out: {why}", flush=True)
        present = [s for s in SUBJECTS if s in subjects]
        print(f"{describe(code_version())}; {len(present)} subjects up and checked in "
              f"{time.perf_counter() - started:.0f} s; {args.rounds} rounds, wrk -t1 {args.seconds} s a run at "
              f"c={' and c='.join(map(str, CONNECTIONS))}; load average {os.getloadavg()[0]:.2f}; nice {os.nice(0)}",
              flush=True)
        for r in range(args.rounds):
            order = present[r % len(present):] + present[:r % len(present)]
            for conns in CONNECTIONS:
                for name in order:
                    s = subjects[name]
                    os.environ["BENCH_HEADERS"] = "\n".join(f"{k}: {v}" for k, v in s.headers.items())
                    url = s.url + s.path
                    if r == 0:
                        wrk.run(url, work / s.body, s.ctype, conns, 1)  # warm: connections, caches, JITs
                    watch = {"gateway": s.pid} if name in GATEWAYS else {}
                    watch["mock"] = subjects[BASELINE[name]].pid if name in BASELINE else s.pid
                    runs[conns][name].append(wrk.run(url, work / s.body, s.ctype, conns, args.seconds, watch))
            print(f"  round {r + 1}/{args.rounds} at {time.perf_counter() - started:.0f} s", flush=True)
        for name in present:
            rss_after[name] = rss_kb(subjects[name].pid) / 1024
        commands = {n: " ".join(s.argv).replace(PY, "python") for n, s in subjects.items()}
    finally:
        for s in subjects.values():
            s.stop()
    result: dict[str, Any] = {
        "meta": {"code": code_version(), "versions": versions, "cpus": os.cpu_count(), "nice": os.nice(0),
                 "quick": args.quick, "rounds": args.rounds, "seconds": args.seconds,
                 "connections": list(CONNECTIONS), "request_bytes": len(body),
                 "request_fb_bytes": (work / "chat.fb").stat().st_size, "load_average_before": load_before,
                 "commands": commands, "unavailable": unavailable,
                 "edge_config": edge_toml.read_text().replace(key_hash, "<hash>"),
                 "litellm_config": (work / "litellm.yaml").read_text() if litellm_py else None,
                 "litellm_env": LITELLM_ENV, "portkey_headers": {"x-portkey-config": portkey_config("<mock>")}},
        "tables": {str(c): table(runs[c], rss_after) for c in CONNECTIONS},
        "runs": {str(c): runs[c] for c in CONNECTIONS},
    }
    shutil.rmtree(work, ignore_errors=True)  # after a failure it stays, with the servers' logs
    result["meta"]["load_average_after"] = os.getloadavg()
    result["meta"]["wall_s"] = round(time.perf_counter() - started, 1)
    return result


def table(runs: dict[str, list[dict[str, Any]]], rss_after: dict[str, float]) -> dict[str, Any]:
    """Per subject, medians over rounds; added p99 against its own round's direct mock; edge/peer ratios as
    medians of per-round ratios."""
    rows: dict[str, Any] = {}
    for name, rs in runs.items():
        if not rs:
            continue
        row: dict[str, Any] = {
            "rps": _med([r["rps"] for r in rs]), "p50_ms": _med([r["p50_ms"] for r in rs]),
            "p99_ms": _med([r["p99_ms"] for r in rs]),
            "errors": sum(sum(r["errors"].values()) for r in rs), "requests": sum(r["requests"] for r in rs),
            "others_cpu_percent": _med([r["others_cpu_percent"] for r in rs]),
            "rss_after_mb": rss_after.get(name),
        }
        if name in GATEWAYS:
            base = runs[BASELINE[name]]
            row["added_p50_ms"] = _med([r["p50_ms"] - b["p50_ms"] for r, b in zip(rs, base, strict=True)])
            row["added_p99_ms"] = _med([r["p99_ms"] - b["p99_ms"] for r, b in zip(rs, base, strict=True)])
            row["cpu_us_per_request"] = _med([r["cpu_us_per_request"]["gateway"] for r in rs])
            row["cpu_percent"] = _med([r["cpu_percent"]["gateway"] for r in rs])
            row["peak_rss_mb"] = max(r["peak_rss_kb"]["gateway"] for r in rs) / 1024
        else:
            row["cpu_us_per_request"] = _med([r["cpu_us_per_request"]["mock"] for r in rs])
        rows[name] = row
    edge = runs.get("edge") or []
    for peer in ("litellm", "portkey"):
        if runs.get(peer) and edge:
            pairs = list(zip(edge, runs[peer], strict=True))
            rows[f"edge/{peer}"] = {
                "rps_ratio": _med([e["rps"] / p["rps"] for e, p in pairs]),
                "cpu_ratio": _med([p["cpu_us_per_request"]["gateway"] / e["cpu_us_per_request"]["gateway"]
                                   for e, p in pairs]),
                "rps_ratio_range": [min(e["rps"] / p["rps"] for e, p in pairs),
                                    max(e["rps"] / p["rps"] for e, p in pairs)],
            }
    return rows


def _f(v: float | None, digits: int = 2) -> str:
    if v is None or v != v:
        return ""
    return f"{v:,.{digits}f}" if abs(v) < 100 else f"{v:,.0f}"


def print_tables(result: dict[str, Any]) -> None:
    print(f"\n{'load':<6} {'subject':<36} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'+p99 ms':>8} "
          f"{'CPU µs/req':>11} {'RSS MB':>7} {'errors':>6}")
    for conns, rows in result["tables"].items():
        for name in SUBJECTS:
            if name not in rows:
                continue
            row = rows[name]
            print(f"c={conns:<4} {LABELS[name]:<36} {_f(row['rps'], 0):>8} {_f(row['p50_ms']):>8} "
                  f"{_f(row['p99_ms']):>8} {_f(row.get('added_p99_ms')):>8} {_f(row['cpu_us_per_request'], 0):>11} "
                  f"{_f(row['rss_after_mb'], 1):>7} {row['errors']:>6}")
        for peer in ("litellm", "portkey"):
            ratio = rows.get(f"edge/{peer}")
            if ratio:
                lo, hi = ratio["rps_ratio_range"]
                print(f"c={conns:<4} {'edge / ' + LABELS[peer]:<36} {ratio['rps_ratio']:>7.1f}x  (rounds "
                      f"{lo:.1f}-{hi:.1f}x); CPU per request {ratio['cpu_ratio']:.1f}x less")
    others = [r["others_cpu_percent"] for by in result["runs"].values() for rs in by.values() for r in rs]
    if others:
        print(f"\nthe rest of the machine used {min(others):.0f}-{max(others):.0f}% of a core during the wrk runs "
              f"(median {_med(others):.0f}%)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="~2 min: fewer, shorter rounds")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--seconds", type=int)
    parser.add_argument("--without", nargs="*", choices=["litellm", "portkey"], default=[], help="leave a peer out")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    args.rounds = args.rounds or (2 if args.quick else 4)
    args.seconds = args.seconds or (3 if args.quick else 5)
    out = args.out or HERE / "results" / ("peers-quick.json" if args.quick else "peers.json")
    if os.nice(0) < 10:  # leave the other engineers' work its share of the two cores
        os.nice(10 - os.nice(0))
    result = measure(args)
    print_tables(result)
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out} in {result['meta']['wall_s']:.0f} s")


if __name__ == "__main__":
    main()
