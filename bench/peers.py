"""The edge beside the gateways users would otherwise pick: LiteLLM's proxy and Portkey's gateway, one run.

    nice -n 10 .venv/bin/python -m bench peers [--quick]   -> results/peers.json (~4.5 min; --quick ~2.5 min,
                                                              results/peers-quick.json)

Installs, outside the work tree under ~/.cache/ingress/peers/ (each into a temporary directory renamed into
place when it is complete, then reused): LiteLLM's proxy (PyPI `litellm[proxy]`, LITELLM below) in its own
virtualenv, and Portkey's gateway (npm `@portkey-ai/gateway`, PORTKEY below), run with the machine's `node`.
A peer that cannot be installed or started is reported with the reason, and the run goes on without it.

Six subjects, one process each, side by side with rounds interleaved (a different one first each round):

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
- `floor`: `bench/floor.py --serve` in front of the FlatBuffers mock: an aiohttp handler that reads the JSON
  body, POSTs a FlatBuffers body encoded once at start-up through `ingress.upstream.http1`, and answers a
  fixed JSON body; no decoding, counting, keys, limits, encoding, verification, metrics or logging. The most
  a gateway made of the edge's parts can do here: its ratios to the peers bound the edge's.

The same 16 KB, 11-message request (bench/lib/payloads.py, max_tokens 64) to every subject, `wrk -t1` at 1 and 32
connections: requests/s, p50/p99, the added p99 against the direct mock of the same round (the peers against
the OpenAI mock, the edge against ours), the CPU seconds per request of the gateway's whole process tree
(user + system, /proc), and its RSS after the load. The ratios (edge over peer) are medians of per-round
ratios.

Then paced streams, as public gateway benchmarks run them: 64 content deltas 20 ms apart, from this file's
`--serve-paced` mock (OpenAI SSE, chunked: the role delta at once, each content delta 20 ms after the one
before, then finish, usage and [DONE]) for the peers (LiteLLM through a second model, `ingress-paced`;
Portkey through the same config header naming it), and from `ingress demo-upstream --delay-ms 20` (the same
pacing in our frames) for a second edge, configured as the first. Levels of 1, 8, 32, 64, 128, 256 and 512
concurrent streams (--quick: up to 128); at each, every client opens its connections with one uncounted
stream, then runs the one counted (at 1 stream, four in a row). A level is held when no stream failed or
lost a delta and the p99 gap between consecutive deltas is within 5 ms of the direct mock's at the same
level (a level missed is run once more: it counts as a stall when it misses twice); a gateway is not tried
above the first level it did not hold. Reported: the gaps, the time to first
content delta and its addition over the direct mock, and the gateway's CPU per delivered delta (its whole
CPU over every stream of the level, counted or not, divided by their deltas: each stream's own request is
in the figure).

Every process shares the machine's two cores with wrk and this client, and the run renices itself to 10:
compare subjects within one run, not across runs.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

from bench.lib.results import niced, result_path, write_result  # noqa: E402
from bench.lib.rounds import Rounds, Spread, median  # noqa: E402
from bench.lib.servers import NotReady, Server, stop_all  # noqa: E402
from bench.lib.tables import figure  # noqa: E402

PY = sys.executable
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ingress" / "peers"
LITELLM = "1.106.12"  # newer ones need `litellm-proxy` or -extras releases this registry does not serve
PORTKEY = "1.15.2"
JSON_TYPE = "application/json"
CHAT = "/v1/chat/completions"
CONNECTIONS = (1, 32)
SUBJECTS = ("mock_oai", "mock_fb", "litellm", "portkey", "edge", "floor")
LABELS = {"mock_oai": "mock (OpenAI JSON), direct", "mock_fb": "mock (CompletionResponse), direct",
          "litellm": f"LiteLLM {LITELLM}", "portkey": f"Portkey {PORTKEY}", "edge": "edge (ingress)",
          "floor": "floor: bare aiohttp proxy, no work"}
BASELINE = {"litellm": "mock_oai", "portkey": "mock_oai", "edge": "mock_fb", "floor": "mock_fb"}
GATEWAYS = ("litellm", "portkey", "edge", "floor")
OURS = ("edge", "floor")  # each with its ratios to the peers
MASTER_KEY = "sk-bench-litellm-master"
FAR = {"rpm": 10**9, "tpm": 10**12}  # never reached: nothing is refused
STREAM_DELTAS = 64
PACING_MS = 20.0
MIN_STREAMS = 4  # counted streams at a level, at least
STALL_MS = 5.0  # a level is held when its inter-chunk p99 is within this of the direct mock's at that level
LEVELS = (1, 8, 32, 64, 128, 256, 512)
QUICK_LEVELS = (1, 8, 32, 64, 128)
PACED_MODEL = "ingress-paced"  # LiteLLM's second model: the paced mock
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


# --- the paced mock engine ------------------------------------------------------------------------


def serve_paced(port: int, pacing_ms: float) -> None:
    """An OpenAI-compatible engine streaming bridge.py's fixed answer paced: the role delta at once, then each
    of the 64 content deltas `pacing_ms` after the one before (as the demo service paces its frames), then
    the finish and usage chunks and `data: [DONE]`, chunked. A POST without `"stream":true` gets the whole
    chat.completion at once."""
    from bench.bridge import _mock_bodies
    from bench.lib.mockhttp import Requests, response, serve

    whole, stream = _mock_bodies()
    events = [e + b"\n\n" for e in stream.split(b"\n\n") if e]
    role, content, tail = events[0], events[1:1 + STREAM_DELTAS], b"".join(events[1 + STREAM_DELTAS:])
    assert len(content) == STREAM_DELTAS, len(events)
    answer = response(b"application/json", whole)
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    pacing = pacing_ms / 1000

    def chunk(data: bytes) -> bytes:
        return b"%x\r\n%s\r\n" % (len(data), data)

    class Paced(Requests):
        def answer(self, head_: bytes, start: int, end: int) -> None:
            if self.streamed(start, end):
                self.transport.write(head + chunk(role))
                self.loop.call_later(pacing, self.next, 0)
            else:
                self.transport.write(answer)

        def next(self, k: int) -> None:
            if self.transport.is_closing():
                return
            if k < STREAM_DELTAS - 1:
                self.transport.write(chunk(content[k]))
                self.loop.call_later(pacing, self.next, k + 1)
            else:
                self.transport.write(chunk(content[k] + tail) + b"0\r\n\r\n")

    serve(Paced, port, backlog=4096)


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


def install_peers(without: list[str]) -> tuple[Path | None, Path | None, dict[str, str]]:
    """LiteLLM's python and Portkey's script, each None where left out (`without`) or not installable, and
    why: (litellm_py, node_script, unavailable)."""
    unavailable = {peer: "left out by --without" for peer in without}
    litellm_py = node_script = None
    try:
        litellm_py = None if "litellm" in without else install_litellm()
    except Unavailable as exc:
        unavailable["litellm"] = str(exc)
    try:
        node_script = None if "portkey" in without else install_portkey()
    except Unavailable as exc:
        unavailable["portkey"] = str(exc)
    return litellm_py, node_script, unavailable


# --- the subjects ----------------------------------------------------------------------------------


class Subject(Server):
    """A server wrk POSTs `body` (a file in the work directory) to, at `path`: its stdout and stderr both in
    its log, in a session of its own; a peer that does not answer in 90 s is Unavailable."""

    def __init__(self, name: str, argv: list[str], port: int, log: Path, path: str, body: str, ctype: str,
                 headers: dict[str, str] | None = None, health: str = "/healthz",
                 env: dict[str, str] | None = None) -> None:
        super().__init__(name, argv, port, log, env=env or {}, health=health, stdout=log, new_session=True,
                         stop_timeout=10.0)
        self.path, self.body, self.ctype, self.headers = path, body, ctype, headers or {}

    def wait_ready(self, timeout: float = 90.0, poll: float = 0.2) -> None:
        try:
            super().wait_ready(timeout, poll)
        except NotReady as exc:
            raise Unavailable(str(exc)) from None

    def post(self, work: Path) -> tuple[int, bytes]:
        req = urllib.request.Request(self.url + self.path, data=(work / self.body).read_bytes(),
                                     headers={"Content-Type": self.ctype, **self.headers})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, bytes(r.read())
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()


def litellm_config(path: Path, mock_url: str, paced_url: str) -> Path:
    from bench.lib.payloads import MODEL

    path.write_text(f"""model_list:
  - model_name: {MODEL}
    litellm_params:
      model: openai/{MODEL}
      api_base: {mock_url}/v1
      api_key: sk-mock
  - model_name: {PACED_MODEL}
    litellm_params:
      model: openai/{MODEL}
      api_base: {paced_url}/v1
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


def _versions(litellm_py: Path | None, node_script: Path | None, wrk_bin: str) -> dict[str, str]:
    out = {"python": platform.python_version()}
    if litellm_py is not None:
        found = subprocess.run([str(litellm_py), "-c", "import importlib.metadata as m; print(*(m.version(p) for p in "
                                "('litellm', 'uvicorn', 'fastapi', 'openai', 'aiohttp')))"],
                               capture_output=True, text=True).stdout.split()
        out.update(zip(("litellm", "litellm's uvicorn", "fastapi", "openai", "aiohttp"), found, strict=False))
        out["litellm_python"] = subprocess.run([str(litellm_py), "-V"], capture_output=True, text=True).stdout.strip()
    if node_script is not None:
        pkg = json.loads((node_script.parent.parent / "package.json").read_text())
        out["portkey"] = pkg["version"]
        out["node"] = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    wrk = subprocess.run([wrk_bin, "-v"], capture_output=True, text=True).stdout
    out["wrk"] = wrk.split(" [")[0].removeprefix("wrk ")
    return out


# --- paced streams --------------------------------------------------------------------------------

CONTENT = re.compile(rb'"content":\s*"[^"]')  # an SSE event carrying a non-empty content delta


async def _one_stream(session: Any, url: str, body: bytes, headers: dict[str, str],
                      sse: bool) -> tuple[float, list[float], str | None]:
    """One stream: its start and the arrival time of each of its STREAM_DELTAS content deltas (SSE events
    with non-empty content; for frames, frames 1..64: frame 0 is the role)."""
    import aiohttp

    from ingress.wire import FrameDecoder

    t0 = time.perf_counter()
    times: list[float] = []
    try:
        async with session.post(url, data=body, headers=headers) as resp:
            if resp.status != 200:
                await resp.read()
                return t0, times, f"HTTP {resp.status}"
            if sse:
                pending = b""
                async for data in resp.content.iter_any():
                    now = time.perf_counter()
                    *events, pending = (pending + data).split(b"\n\n")
                    times += [now for e in events if CONTENT.search(e)]
            else:
                frames, seen = FrameDecoder(), 0
                async for data in resp.content.iter_any():
                    now = time.perf_counter()
                    for _ in frames.feed(data):
                        if 1 <= seen <= STREAM_DELTAS:
                            times.append(now)
                        seen += 1
    except (TimeoutError, aiohttp.ClientError) as exc:
        return t0, times, type(exc).__name__
    return t0, times, None if len(times) == STREAM_DELTAS else f"{len(times)} deltas"


async def stream_level(url: str, body: bytes, headers: dict[str, str], sse: bool,
                       n: int) -> list[tuple[float, list[float], str | None]]:
    """`n` concurrent clients, their starts spread over one pacing interval; each runs one stream that opens
    its connections (not counted), then the counted ones: one each, or enough for MIN_STREAMS in all (a p99
    over a single stream's 63 gaps would be its worst gap)."""
    import asyncio

    import aiohttp

    repeat = -(-MIN_STREAMS // n)
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        async def client(i: int) -> list[tuple[float, list[float], str | None]]:
            await asyncio.sleep(i / n * PACING_MS / 1000)
            await _one_stream(session, url, body, headers, sse)
            return [await _one_stream(session, url, body, headers, sse) for _ in range(repeat)]

        return [r for rs in await asyncio.gather(*(client(i) for i in range(n))) for r in rs]


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def stream_stats(results: list[tuple[float, list[float], str | None]]) -> dict[str, Any]:
    ok = [(t0, ts) for t0, ts, err in results if err is None]
    gaps = [b - a for _, ts in ok for a, b in itertools.pairwise(ts)]
    ttft = [ts[0] - t0 for t0, ts in ok]
    kinds = Counter(err for _, _, err in results if err is not None)
    ms = 1000.0
    return {"streams": len(results), "errors": len(results) - len(ok), "error_kinds": dict(kinds),
            "gap_p50_ms": _pct(gaps, 50) * ms, "gap_p99_ms": _pct(gaps, 99) * ms,
            "gap_max_ms": max(gaps, default=float("nan")) * ms,
            "ttft_p50_ms": _pct(ttft, 50) * ms, "ttft_p99_ms": _pct(ttft, 99) * ms}


def run_streams(streamers: dict[str, tuple[str, bytes, dict[str, str], bool, int | None]],
                levels: tuple[int, ...],
                alone: Callable[[str], AbstractContextManager[None]] | None = None) -> dict[str, Any]:
    """Each level: both direct mocks, then every gateway that held every level below. Held: no error, every
    delta, and an inter-chunk p99 within STALL_MS of its direct mock's at the same level; a level a gateway
    did not hold is run again once (a burst of the other work on the machine can stall one run), and it
    stalls when it misses twice. `alone(name)`: what each run of `name` is run within (board.py stops the
    other gateways meanwhile)."""
    import uvloop

    from bench.lib.procs import Watch

    loop = uvloop.new_event_loop()
    out: dict[str, Any] = {name: {} for name in streamers}
    failed: set[str] = set()
    try:
        for n in levels:
            for name, (url, body, headers, sse, pid) in streamers.items():
                if name in failed:
                    continue
                earlier: list[dict[str, Any]] = []
                for _attempt in range(2 if name in BASELINE else 1):  # a gateway's failed level is run once more
                    watch = Watch({"gateway": pid} if pid else {})
                    with watch.during(), (alone(name) if alone is not None else nullcontext()):
                        results = loop.run_until_complete(stream_level(url, body, headers, sse, n))
                    stats = stream_stats(results)
                    if pid:
                        streamed = n + len(results)  # each client's uncounted first stream, and the counted ones
                        stats["cpu_us_per_chunk"] = watch.cpu["gateway"] / (streamed * STREAM_DELTAS) * 1e6
                    stats["others_cpu_percent"] = watch.summary()["others_cpu_percent"]
                    stats["client_cpu_percent"] = watch.summary()["bench_client_cpu_percent"]
                    if name not in BASELINE:
                        break
                    base = out[BASELINE[name]][n]
                    stats["added_gap_p99_ms"] = stats["gap_p99_ms"] - base["gap_p99_ms"]
                    stats["added_ttft_p50_ms"] = stats["ttft_p50_ms"] - base["ttft_p50_ms"]
                    stats["held"] = stats["errors"] == 0 and stats["added_gap_p99_ms"] <= STALL_MS
                    if stats["held"] or stats["errors"] == len(results):  # held, or nothing went through at all
                        break
                    earlier.append(stats)
                earlier = [e for e in earlier if e is not stats]  # the last attempt is the figure itself
                if earlier:
                    stats["failed_attempts"] = earlier
                if name in BASELINE and not stats["held"]:
                    failed.add(name)
                out[name][n] = stats
            said = [f"{name} {out[name][n]['gap_p99_ms']:.1f}" + ("" if out[name][n].get("held", True) else " (stall)")
                    for name in streamers if n in out[name]]
            print(f"  {n} streams, inter-chunk p99 ms: " + ", ".join(said), flush=True)
    finally:
        loop.close()
    held = {name: max([n for n, st in out[name].items() if st.get("held")], default=0) for name in BASELINE
            if name in streamers}
    return {"levels": out, "held": held}


def key_section() -> tuple[str, str, str]:
    """The edge's `[tenancy]` as these runs set it (memory backend): one key with an rpm and a tpm limit and
    its tenant's tpm, all far above anything a run reaches; the key, sent with every request; its hash."""
    from bench.tenancy import tenancy_section
    from ingress.tenancy.keys import new_key

    key, key_id, key_hash = new_key()
    keys = [(key_id, key_hash, "bench", f"{{ rpm = {FAR['rpm']}, tpm = {FAR['tpm']} }}")]
    return tenancy_section("memory", "", "bench", keys, {"bench": f"{{ tpm = {FAR['tpm']} }}"}, 50), key, key_hash


# --- the run ---------------------------------------------------------------------------------------


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from bench.e2e import fb_body
    from bench.lib.payloads import MODEL, chat_request, stream_request
    from bench.lib.procs import rss_kb
    from bench.lib.provenance import code_version, describe
    from bench.lib.servers import free_port
    from bench.lib.wrk import SCRIPT, Wrk, ensure_wrk
    from bench.tenancy import edge_config
    from ingress.wire import COMPLETE_PATH, CONTENT_TYPE

    started = time.perf_counter()
    load_before = os.getloadavg()
    litellm_py, node_script, unavailable = install_peers(args.without)
    wrk_bin = ensure_wrk()  # before its version is asked: a new machine has no wrk yet
    versions = _versions(litellm_py, node_script, wrk_bin)
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()), flush=True)

    work = Path(tempfile.mkdtemp(prefix="ingress-bench-peers-"))
    body = chat_request(16 * 1024, max_tokens=64)
    (work / "chat.json").write_bytes(body)
    (work / "chat.fb").write_bytes(bytes(fb_body(body)))
    stream_json = stream_request(STREAM_DELTAS)
    stream_bodies = {"sse": stream_json, "frames": bytes(fb_body(stream_json)),
                     "litellm": stream_json.replace(f'"model":"{MODEL}"'.encode(), f'"model":"{PACED_MODEL}"'.encode())}
    assert stream_bodies["litellm"] != stream_json
    ports = {name: free_port() for name in (*SUBJECTS, "paced_oai", "paced_fb", "edge_paced")}
    oai_url, fb_url, paced_oai, paced_fb = (f"http://127.0.0.1:{ports[n]}"
                                            for n in ("mock_oai", "mock_fb", "paced_oai", "paced_fb"))
    section, key, key_hash = key_section()
    edge_toml = edge_config(work / "edge.toml", ports["edge"], fb_url, section)
    paced_toml = edge_config(work / "edge_paced.toml", ports["edge_paced"], paced_fb, section)
    subjects = {
        "mock_oai": Subject("mock_oai", [PY, "-m", "bench.bridge", "--serve-mock", str(ports["mock_oai"])],
                            ports["mock_oai"], work / "mock_oai.log", CHAT, "chat.json", JSON_TYPE),
        "mock_fb": Subject("mock_fb", [PY, "-m", "bench.tenancy", "--serve-mock", str(ports["mock_fb"]), "0"],
                           ports["mock_fb"], work / "mock_fb.log", COMPLETE_PATH, "chat.fb", CONTENT_TYPE),
        "edge": Subject("edge", [PY, "-m", "ingress", "serve", "--config", str(edge_toml), "--workers", "1"],
                        ports["edge"], work / "edge.log", CHAT, "chat.json", JSON_TYPE,
                        {"Authorization": f"Bearer {key}"}),
        "paced_oai": Subject("paced_oai", [PY, "-m", "bench.peers", "--serve-paced", str(ports["paced_oai"]),
                                           str(PACING_MS)], ports["paced_oai"], work / "paced_oai.log", CHAT,
                             "chat.json", JSON_TYPE),
        "paced_fb": Subject("paced_fb", [PY, "-m", "ingress", "demo-upstream", "--port", str(ports["paced_fb"]),
                                         "--delay-ms", str(PACING_MS), "--log-level", "warning"],
                            ports["paced_fb"], work / "paced_fb.log", COMPLETE_PATH, "chat.fb", CONTENT_TYPE),
        "edge_paced": Subject("edge_paced", [PY, "-m", "ingress", "serve", "--config", str(paced_toml), "--workers",
                                             "1"], ports["edge_paced"], work / "edge_paced.log", CHAT, "chat.json",
                              JSON_TYPE, {"Authorization": f"Bearer {key}"}),
    }
    if litellm_py is not None:
        subjects["litellm"] = Subject(
            "litellm", [str(litellm_py), "-m", "litellm.proxy.proxy_cli", "--config",
                        str(litellm_config(work / "litellm.yaml", oai_url, paced_oai)), "--host", "127.0.0.1",
                        "--port", str(ports["litellm"]), "--num_workers", "1"],
            ports["litellm"], work / "litellm.log", CHAT, "chat.json", JSON_TYPE,
            {"Authorization": f"Bearer {MASTER_KEY}"}, "/health/liveliness", LITELLM_ENV)
    subjects["floor"] = Subject("floor", [PY, "-m", "bench.floor", "--serve", str(ports["floor"]), fb_url,
                                          str(work / "chat.fb")],
                                ports["floor"], work / "floor.log", CHAT, "chat.json", JSON_TYPE)
    if node_script is not None:
        subjects["portkey"] = Subject(
            "portkey", ["node", str(node_script), f"--port={ports['portkey']}", "--headless"],
            ports["portkey"], work / "portkey.log", CHAT, "chat.json", JSON_TYPE,
            {"x-portkey-config": portkey_config(oai_url)}, "/", {"NODE_ENV": "production"})
    wrk = Wrk(wrk_bin, work / "post.lua")
    wrk.script.write_text(SCRIPT + HEADERS_SCRIPT)
    rss_after: dict[str, float] = {}
    marker = b"chatcmpl-mock"
    try:
        for s in subjects.values():
            s.start()
        for name in list(subjects):
            try:
                try:
                    subjects[name].wait_ready()
                except Unavailable as exc:
                    # The port free_port() found was taken before the peer listened (Portkey listens on every
                    # address, and on ::): once more on another. (The edges and mocks bind their own at once.)
                    if name not in GATEWAYS[:2] or not any(w in str(exc) for w in ("EADDRINUSE", "already in use")):
                        raise
                    peer, old = subjects[name], subjects[name].port
                    peer.port = free_port()
                    peer.argv = [str(peer.port) if a == str(old) else a.replace(f"--port={old}", f"--port={peer.port}")
                                 for a in peer.argv]
                    peer.start()
                    peer.wait_ready()
                status, answer = subjects[name].post(work)
                unmarked = name in ("mock_fb", "paced_fb", "edge_paced", "floor")  # answers without the mock's id
                if status != 200 or (not unmarked and marker not in answer):
                    raise Unavailable(f"{name} answered {status}: {answer[:500]!r}")
            except Unavailable as exc:
                if name not in GATEWAYS[:2]:
                    raise
                unavailable[name] = str(exc)
                subjects.pop(name).stop()
        for name, why in unavailable.items():
            print(f"{LABELS[name]}: left out: {why}", flush=True)
        present = [s for s in SUBJECTS if s in subjects]
        measured = Rounds(present, args.rounds)  # rotated: each subject first in turn; cells: connections
        print(f"{describe(code_version())}; {len(present)} subjects up and checked in "
              f"{time.perf_counter() - started:.0f} s; {args.rounds} rounds, wrk -t1 {args.seconds} s a run at "
              f"c={' and c='.join(map(str, CONNECTIONS))}; load average {os.getloadavg()[0]:.2f}; nice {os.nice(0)}",
              flush=True)
        for r, order in measured:
            for conns in CONNECTIONS:
                for name in order:
                    s = subjects[name]
                    os.environ["BENCH_HEADERS"] = "\n".join(f"{k}: {v}" for k, v in s.headers.items())
                    url = s.url + s.path
                    if r == 0:
                        wrk.run(url, work / s.body, s.ctype, conns, 2)  # warm: connections, caches, JITs, lazy imports
                    watch = {"gateway": s.pid} if name in GATEWAYS else {}
                    watch["mock"] = subjects[BASELINE[name]].pid if name in BASELINE else s.pid
                    measured.add(name, wrk.run(url, work / s.body, s.ctype, conns, args.seconds, watch), conns)
            print(f"  round {r + 1}/{args.rounds} at {time.perf_counter() - started:.0f} s", flush=True)
        for name in present:
            rss_after[name] = rss_kb(subjects[name].pid) / 1024
        streams: dict[str, Any] = {}
        if not args.no_streams:
            sse_headers = {"Content-Type": JSON_TYPE}
            streamers: dict[str, tuple[str, bytes, dict[str, str], bool, int | None]] = {
                "mock_oai": (paced_oai + CHAT, stream_bodies["sse"], sse_headers, True, None),
                "mock_fb": (paced_fb + COMPLETE_PATH, stream_bodies["frames"], {"Content-Type": CONTENT_TYPE}, False,
                            None),
                "edge": (subjects["edge_paced"].url + CHAT, stream_bodies["sse"],
                         {**sse_headers, "Authorization": f"Bearer {key}"}, True, subjects["edge_paced"].pid),
            }
            if "litellm" in subjects:
                streamers["litellm"] = (subjects["litellm"].url + CHAT, stream_bodies["litellm"],
                                        {**sse_headers, **subjects["litellm"].headers}, True, subjects["litellm"].pid)
            if "portkey" in subjects:
                streamers["portkey"] = (subjects["portkey"].url + CHAT, stream_bodies["sse"],
                                        {**sse_headers, "x-portkey-config": portkey_config(paced_oai)}, True,
                                        subjects["portkey"].pid)
            levels = QUICK_LEVELS if args.quick else LEVELS
            print(f"paced streams ({STREAM_DELTAS} deltas {PACING_MS:.0f} ms apart), levels {levels}", flush=True)
            streams = run_streams(streamers, levels)
        commands = {n: " ".join(s.argv).replace(PY, "python") for n, s in subjects.items()}
    finally:
        stop_all(*subjects.values())
    result: dict[str, Any] = {
        "meta": {"code": code_version(), "versions": versions, "cpus": os.cpu_count(), "nice": os.nice(0),
                 "quick": args.quick, "rounds": args.rounds, "seconds": args.seconds,
                 "connections": list(CONNECTIONS), "request_bytes": len(body),
                 "request_fb_bytes": (work / "chat.fb").stat().st_size, "load_average_before": load_before,
                 "commands": commands, "unavailable": unavailable,
                 "edge_config": edge_toml.read_text().replace(key_hash, "<hash>"),
                 "litellm_config": (work / "litellm.yaml").read_text() if litellm_py else None,
                 "litellm_env": LITELLM_ENV, "portkey_headers": {"x-portkey-config": portkey_config("<mock>")}},
        "tables": {str(c): table(measured, c, rss_after) for c in CONNECTIONS},
        "runs": {str(c): {s: measured.runs(s, c) for s in SUBJECTS} for c in CONNECTIONS},
        "streams": streams,
    }
    shutil.rmtree(work, ignore_errors=True)  # after a failure it stays, with the servers' logs
    result["meta"]["load_average_after"] = os.getloadavg()
    result["meta"]["wall_s"] = round(time.perf_counter() - started, 1)
    return result


def table(measured: Rounds[str], conns: int, rss_after: dict[str, float]) -> dict[str, Any]:
    """Per subject, medians over rounds; added p99 against its own round's direct mock; edge/peer ratios as
    medians of per-round ratios."""
    rows: dict[str, Any] = {}
    for name in SUBJECTS:
        rs = measured.runs(name, conns)
        if not rs:
            continue
        row: dict[str, Any] = {
            "rps": measured.median(name, "rps", conns), "p50_ms": measured.median(name, "p50_ms", conns),
            "p99_ms": measured.median(name, "p99_ms", conns),
            "errors": sum(sum(r["errors"].values()) for r in rs), "requests": sum(r["requests"] for r in rs),
            "others_cpu_percent": measured.median(name, "others_cpu_percent", conns),
            "rss_after_mb": rss_after.get(name),
        }
        if name in GATEWAYS:
            row["added_p50_ms"] = measured.added(name, "p50_ms", baseline=BASELINE[name], cell=conns).median
            row["added_p99_ms"] = measured.added(name, "p99_ms", baseline=BASELINE[name], cell=conns).median
            row["cpu_us_per_request"] = measured.median(name, ("cpu_us_per_request", "gateway"), conns)
            row["cpu_percent"] = measured.median(name, ("cpu_percent", "gateway"), conns)
            row["peak_rss_mb"] = max(r["peak_rss_kb"]["gateway"] for r in rs) / 1024
        else:
            row["cpu_us_per_request"] = measured.median(name, ("cpu_us_per_request", "mock"), conns)
        rows[name] = row
    for who in OURS:
        ours = measured.runs(who, conns)
        for peer in ("litellm", "portkey"):
            if measured.runs(peer, conns) and ours:
                # a round in which the peer answered nothing has no ratio
                pairs = [(e, p) for e, p in zip(ours, measured.runs(peer, conns), strict=True) if p["requests"]]
                rps = Spread.of(e["rps"] / p["rps"] for e, p in pairs)
                rows[f"{who}/{peer}"] = {
                    "rps_ratio": rps.median,
                    "cpu_ratio": median([p["cpu_us_per_request"]["gateway"] / e["cpu_us_per_request"]["gateway"]
                                         for e, p in pairs]),
                    "rps_ratio_range": [rps.low, rps.high],
                    "rounds_without_a_peer_answer": len(ours) - len(pairs),
                }
    return rows


def _f(v: float | None, digits: int = 2) -> str:
    return figure(v, digits, missing="")  # a blank cell where a subject has no such figure


def print_tables(result: dict[str, Any]) -> None:
    from bench.lib.payloads import MODEL

    print(f"\nevery subject is sent model {MODEL} (the edge counts its prompts by the estimate; bench/model_names.py "
          "compares real names)")
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
        for who in OURS:
            for peer in ("litellm", "portkey"):
                ratio = rows.get(f"{who}/{peer}")
                if ratio:
                    lo, hi = ratio["rps_ratio_range"]
                    print(f"c={conns:<4} {who + ' / ' + LABELS[peer]:<36} {ratio['rps_ratio']:>7.1f}x  (rounds "
                          f"{lo:.1f}-{hi:.1f}x); CPU per request {ratio['cpu_ratio']:.1f}x less")
    streams = result.get("streams")
    if streams:
        print(f"\npaced streams: {STREAM_DELTAS} deltas {PACING_MS:.0f} ms apart; a level is held with no error and an "
              f"inter-chunk p99 within {STALL_MS:.0f} ms of the direct mock's at that level")
        print(f"{'subject':<36} {'streams':>7} {'errors':>6} {'gap p50':>8} {'gap p99':>8} {'+gap p99':>8} "
              f"{'TTFT p50':>8} {'+TTFT':>7} {'CPU µs/chunk':>12}  held")
        for name in SUBJECTS:
            for n, st in streams["levels"].get(name, {}).items():
                held = "" if "held" not in st else ("yes" if st["held"] else "STALL")
                print(f"{LABELS[name]:<36} {n:>7} {st['errors']:>6} {_f(st['gap_p50_ms'], 1):>8} "
                      f"{_f(st['gap_p99_ms'], 1):>8} {_f(st.get('added_gap_p99_ms'), 1):>8} "
                      f"{_f(st['ttft_p50_ms']):>8} {_f(st.get('added_ttft_p50_ms')):>7} "
                      f"{_f(st.get('cpu_us_per_chunk'), 0):>12}  {held} {st['error_kinds'] or ''}")
        print("concurrent paced streams held without a stall: " + ", ".join(
            f"{LABELS[name]} {n}" for name, n in streams["held"].items()))
    others = [r["others_cpu_percent"] for by in result["runs"].values() for rs in by.values() for r in rs]
    if others:
        print(f"\nthe rest of the machine used {min(others):.0f}-{max(others):.0f}% of a core during the wrk runs "
              f"(median {median(others):.0f}%)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="~2.5 min: fewer, shorter rounds, streams up to 128")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--seconds", type=int)
    parser.add_argument("--without", nargs="*", choices=["litellm", "portkey"], default=[], help="leave a peer out")
    parser.add_argument("--no-streams", action="store_true", help="leave the paced streams out")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--serve-paced", nargs=2, metavar=("PORT", "PACING_MS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_paced:
        return serve_paced(int(args.serve_paced[0]), float(args.serve_paced[1]))
    args.rounds = args.rounds or (2 if args.quick else 3)
    args.seconds = args.seconds or (2 if args.quick else 4)
    out = result_path("peers", args.quick, args.out)
    niced()
    result = measure(args)
    print_tables(result)
    write_result(result, out)


if __name__ == "__main__":
    main()
