"""What the tenancy layer costs a request, and what a fleet of edges admits against one limit.

    nice -n 10 .venv/bin/python -m bench tenancy [--quick]   -> results/tenancy.json (~3 min; --quick ~1.5 min,
                                                                results/tenancy-quick.json)

The internal service is a zero-delay mock (`--serve-mock`, its own process): a raw asyncio Protocol on uvloop,
as bridge.py's engine mock, but speaking our contract: every POST gets one fixed CompletionResponse (64
words, usage), made once at start-up, so what is measured is the edge. (floor.py measures against the demo
service, which decodes every request and echoes it; bridge.py's mock answers OpenAI's JSON, for a bridge.)
A request whose buffer names the model `bench-slow` is answered `--hold` seconds later: the slow mock of
part 2, in the same process.

1. Added latency and CPU per request, three edges (`ingress serve --config ... --workers 1`) in front of
   that mock, side by side: (a) no [tenancy]; (b) backend "memory"; (c) backend "redis" against a real
   redis-server on loopback (started by tests/support/redis_servers.py). (b) and (c) have one key with rpm and tpm
   far above what a run reaches, in a tenant with a tpm limit: 3 checks a request, nothing refused. wrk
   POSTs the 16 KB 11-message request (bench/lib/payloads.py) with the key in `Authorization` (to (a) too,
   which ignores it), at 1 and 32 connections; rounds interleave the edges (a different one first each
   round). Per edge: requests/s, p50/p99, the added p50/p99 against (a) in the same round, the CPU per
   request of the edge's process tree, of redis-server and of the mock from /proc, and each as a ratio to
   (a) (the median of per-round ratios). Then a Python client (one keep-alive connection, not wrk) sends a
   few hundred requests to each edge in turn and reads the `admit;dur=` entry of Server-Timing: the
   admission as the edge sees it (the plan and its store's round trip), p50/p99. With --baseline DIR, a
   fourth edge (d) serves (c)'s config with DIR's code (another checkout, e.g. main's), in the same rounds.

2. The fleet's overshoot: three edges sharing one Redis, and the same three with backend "memory" (each
   its own state). A key with rpm = L: clients send to all three at a fixed rate each (open loop) for T
   seconds; admitted against the limit's allowance, L + L*T/60 (a full bucket, then its refill). A key with
   tpm = L tokens, on the slow model (nothing settles, so nothing is refunded, during the burst):
   admissions and tokens reserved (each edge's ingress_admissions_total and ingress_tokens_reserved_total
   when the burst ends) against the same allowance in tokens.

(c) and the fleet use the product's default Redis deadline (50 ms; --deadline-ms, --fleet-deadline-ms): every
admission the store did not decide (a missed deadline, then the breaker open: the "local" fallback decides,
with this process's share of each limit) is counted from the edges' metrics and shown beside the figures.
Redis's commands per request come from INFO commandstats (the script's own redis.call()s included).

Every process shares the machine's two cores with wrk and this client, and the host's speed drifts between
runs: only ratios and differences measured in the same run are firm.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "support"))

from bench.lib.results import niced  # noqa: E402
from bench.lib.rounds import Rounds, median  # noqa: E402

PY = sys.executable
JSON_TYPE = "application/json"
CHAT = "/v1/chat/completions"
SLOW_MODEL = "bench-slow"
EDGES = ("off", "memory", "redis")
LABELS = {"off": "(a) no [tenancy]", "memory": "(b) memory", "redis": "(c) redis", "baseline": "(d) redis, DIR"}
# (d), with --baseline DIR: (c)'s config served by another checkout's code (DIR's ingress package), e.g. main's
BASELINE = ("import runpy, sys; sys.path.insert(0, sys.argv.pop(1)); "
            "runpy.run_module('ingress', run_name='__main__', alter_sys=True)")
CONNECTIONS = (1, 32)
FAR = {"rpm": 10**9, "tpm": 10**12}  # above anything a run reaches: nothing is refused
AUTH_SCRIPT = """
local auth = os.getenv("BENCH_AUTH")
if auth and auth ~= "" then wrk.headers["Authorization"] = auth end
"""


# --- the mock internal service ---------------------------------------------------------------------


def mock_answer() -> Any:
    """The mock's one answer (a wire.Response: 64 words, usage)."""
    from bench.lib.payloads import MODEL, words
    from ingress import wire

    usage = wire.Usage(prompt_tokens=4000, completion_tokens=64, total_tokens=4064)
    return wire.Response(id="chatcmpl-mock", model=MODEL, created=1, usage=usage,
                         choices=[wire.Choice(index=0, content=words(64, seed=3), finish_reason="stop")])


def serve_mock(port: int, hold_s: float) -> None:
    """Answers every POST with one fixed CompletionResponse; a request for SLOW_MODEL `hold_s` later."""
    from bench.lib.mockhttp import Requests, response, serve
    from ingress import wire

    answer = response(wire.CONTENT_TYPE.encode(), bytes(wire.write_response(mock_answer())))
    slow = SLOW_MODEL.encode()

    class Mock(Requests):
        def answer(self, head: bytes, start: int, end: int) -> None:
            if hold_s and self.buffer.find(slow, start, end) >= 0:
                self.loop.call_later(hold_s, self.late)
            else:
                self.transport.write(answer)

        def late(self) -> None:
            if not self.transport.is_closing():
                self.transport.write(answer)

    serve(Mock, port)


# --- the rig ---------------------------------------------------------------------------------------


def edge_config(path: Path, port: int, mock_url: str, tenancy: str, model: str | None = None) -> Path:
    """One worker in front of the mock, routing `model` (payloads.MODEL by default) and SLOW_MODEL to it."""
    from bench.lib.payloads import MODEL

    path.write_text(f'port = {port}\nworkers = 1\nupstream = "{mock_url}"\n'
                    f'models = ["{model or MODEL}", "{SLOW_MODEL}"]\n' + tenancy)
    return path


def tenancy_section(backend: str, redis_url: str, prefix: str, keys: list[tuple[str, str, str, str]],
                    tenant_limits: dict[str, str], deadline_ms: int) -> str:
    """[tenancy] with `keys`: (key id, hash, tenant, limits as TOML)."""
    store = (f'redis = {{ url = "{redis_url}", prefix = "{prefix}", deadline_ms = {deadline_ms} }}\n'
             if backend == "redis" else "")
    text = f'\n[tenancy]\nbackend = "{backend}"\n{store}'
    for tenant, limits in tenant_limits.items():
        text += f"\n[tenancy.tenants.{tenant}]\nlimits = {limits}\n"
    for key_id, hash_, tenant, limits in keys:
        text += f'\n[[tenancy.keys]]\nid = "{key_id}"\ntenant = "{tenant}"\nhash = "{hash_}"\nlimits = {limits}\n'
    return text


def post(port: int, body: bytes, auth: str) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", CHAT, body, {"Content-Type": JSON_TYPE, "Authorization": auth})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


_TIMING = re.compile(r"([a-z]+);dur=([0-9.]+)")


def server_timing(header: str) -> dict[str, float]:
    return {name: float(ms) for name, ms in _TIMING.findall(header)}


def sample_timing(port: int, body: bytes, auth: str, n: int) -> list[dict[str, float]]:
    """`n` requests one at a time on one keep-alive connection: each one's Server-Timing, and the client's
    own wall time (ms)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    out = []
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            conn.request("POST", CHAT, body, {"Content-Type": JSON_TYPE, "Authorization": auth})
            r = conn.getresponse()
            r.read()
            wall = time.perf_counter() - t0
            if r.status != 200:
                raise RuntimeError(f"port {port}: {r.status}")
            out.append({**server_timing(r.getheader("Server-Timing") or ""), "client": wall * 1000})
    finally:
        conn.close()
    return out


def commandstats(port: int) -> dict[str, tuple[int, int]]:
    """redis-server's INFO commandstats: {command: (calls, usec)}."""
    import redis

    client = redis.Redis(port=port)
    try:
        return {name.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"]))
                for name, v in client.info("commandstats").items()}
    finally:
        client.close()


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def scrape(port: int) -> list[tuple[str, dict[str, str], float]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    samples = []
    for line in text.splitlines():
        if line and not line.startswith("#") and (m := _SAMPLE.match(line)):
            samples.append((m[1], dict(_LABEL.findall(m[2] or "")), float(m[3])))
    return samples


def total(samples: list[tuple[str, dict[str, str], float]], name: str, **labels: str) -> float:
    return sum(v for n, lab, v in samples if n == name and all(lab.get(k) == x for k, x in labels.items()))


def outcomes(samples: list[tuple[str, dict[str, str], float]], tenant: str) -> dict[str, float]:
    found: Counter[str] = Counter()
    for n, lab, v in samples:
        if n == "ingress_admissions_total" and lab.get("tenant") == tenant:
            found[lab.get("outcome", "?")] += v
    return dict(found)


def store_errors(samples: list[tuple[str, dict[str, str], float]]) -> dict[str, float]:
    """ingress_limit_store_errors_total as {"call/reason": count}."""
    return {f"{lab.get('call')}/{lab.get('reason')}": v for n, lab, v in samples
            if n == "ingress_limit_store_errors_total"}


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(len(s) * q))] if s else float("nan")


# --- part 1: what the layer costs ------------------------------------------------------------------


def part_costs(args: argparse.Namespace, work: Path, mock: Any, redis: Any) -> dict[str, Any]:
    from bench.lib.payloads import chat_request
    from bench.lib.servers import Server, free_port, start_all, stop_all
    from bench.lib.wrk import SCRIPT, Wrk, ensure_wrk
    from ingress.tenancy.keys import new_key

    key, key_id, key_hash = new_key()
    keys = [(key_id, key_hash, "bench", f"{{ rpm = {FAR['rpm']}, tpm = {FAR['tpm']} }}")]
    tenants = {"bench": f"{{ tpm = {FAR['tpm']} }}"}
    sections = {"off": "", **{b: tenancy_section(b, redis.url, "benchten", keys, tenants, args.deadline_ms)
                              for b in ("memory", "redis")}}
    names = (*EDGES, "baseline") if args.baseline else EDGES
    sections["baseline"] = sections["redis"]
    code = {name: [PY, "-m", "ingress"] for name in names}
    if args.baseline:
        code["baseline"] = [PY, "-c", BASELINE, str(args.baseline.resolve())]
    body = chat_request(16 * 1024, max_tokens=64)
    (work / "chat.json").write_bytes(body)
    ports = {name: free_port() for name in names}
    edges = {name: Server(name, [*code[name], "serve", "--config",
                                 str(edge_config(work / f"{name}.toml", ports[name], mock.url, sections[name])),
                                 "--workers", "1"], ports[name], work / f"{name}.log") for name in names}
    wrk = Wrk(ensure_wrk(), work / "post.lua")
    wrk.script.write_text(SCRIPT + AUTH_SCRIPT)
    os.environ["BENCH_AUTH"] = f"Bearer {key}"
    measured = Rounds(names, args.rounds, baseline="off")  # rotated: each edge first in turn; cells: connections
    timings: dict[str, list[dict[str, float]]] = {e: [] for e in names}
    per_round = max(1, args.samples // args.rounds)
    try:
        start_all(*edges.values())
        for name in names:  # the key works, and nothing is refused
            status, headers, _ = post(ports[name], body, f"Bearer {key}")
            if status != 200 or (name != "off") != ("x-ratelimit-limit-requests" in headers):
                raise RuntimeError(f"{name}: {status} {headers}")
        metrics0 = scrape(ports["redis"])
        started = time.perf_counter()
        for r, order in measured:
            for conns in CONNECTIONS:
                for name in order:
                    url = f"{edges[name].url}{CHAT}"
                    if r == 0:
                        wrk.run(url, work / "chat.json", JSON_TYPE, conns, 1)  # warm: connections, caches
                    watch = {"edge": edges[name].pid, "redis": redis.pid, "mock": mock.pid}
                    calls0, seen0 = commandstats(redis.port), scrape(ports[name])
                    run = wrk.run(url, work / "chat.json", JSON_TYPE, conns, args.seconds, watch)
                    calls1, seen1 = commandstats(redis.port), scrape(ports[name])
                    run["outcomes"] = delta(outcomes(seen0, "bench"), outcomes(seen1, "bench"))
                    run["store_errors"] = delta(store_errors(seen0), store_errors(seen1))
                    run["redis_calls_per_request"] = {
                        cmd: (calls1[cmd][0] - calls0.get(cmd, (0, 0))[0]) / max(1, run["requests"]) for cmd in calls1
                        if calls1[cmd][0] > calls0.get(cmd, (0, 0))[0] and cmd not in ("info", "client")}
                    run["redis_usec_per_request"] = sum(
                        calls1[cmd][1] - calls0.get(cmd, (0, 0))[1] for cmd in calls1
                        if cmd not in ("info", "client")) / max(1, run["requests"])
                    measured.add(name, run, conns)
            for name in order:
                if r == 0:
                    sample_timing(ports[name], body, f"Bearer {key}", 20)
                timings[name] += sample_timing(ports[name], body, f"Bearer {key}", per_round)
            print(f"  round {r + 1}/{args.rounds} at {time.perf_counter() - started:.0f} s", flush=True)
        metrics1 = scrape(ports["redis"])
    finally:
        stop_all(*edges.values())
    redis_outcomes = delta(outcomes(metrics0, "bench"), outcomes(metrics1, "bench"))
    errors = delta(store_errors(metrics0), store_errors(metrics1))
    return {"runs": {c: measured.by_variant(c) for c in CONNECTIONS}, "timings": timings,
            "redis_edge_outcomes": redis_outcomes, "redis_edge_store_errors": errors, "table": cost_table(measured),
            "admit": admit_table(timings)}


def cost_table(measured: Rounds[str]) -> dict[str, dict[str, dict[str, float]]]:
    """Per load and edge: medians over rounds; against (a), the median of the rounds' differences and ratios."""
    edge_cpu = ("cpu_us_per_request", "edge")
    table: dict[str, dict[str, dict[str, float]]] = {}
    for conns in CONNECTIONS:
        rows: dict[str, dict[str, float]] = {}
        for name in measured.variants:
            rs = measured.runs(name, conns)

            p99 = measured.spread(name, "p99_ms", conns)
            row = {"rps": measured.median(name, "rps", conns), "p50_ms": measured.median(name, "p50_ms", conns),
                   "p99_ms": p99.median, "p99_min_ms": p99.low, "p99_max_ms": p99.high,
                   "edge_cpu_us": measured.median(name, edge_cpu, conns),
                   "redis_cpu_us": measured.median(name, ("cpu_us_per_request", "redis"), conns),
                   "mock_cpu_us": measured.median(name, ("cpu_us_per_request", "mock"), conns),
                   "redis_calls_per_request": {c: median([r["redis_calls_per_request"].get(c, 0.0) for r in rs])
                                               for c in sorted({c for r in rs for c in r["redis_calls_per_request"]})},
                   "redis_usec_per_request": measured.median(name, "redis_usec_per_request", conns),
                   "errors": float(sum(sum(r["errors"].values()) for r in rs)),
                   "degraded": float(sum(v for r in rs for k, v in r.get("outcomes", {}).items() if k != "admitted")),
                   "others_cpu_percent": measured.median(name, "others_cpu_percent", conns)}
            if name != "off":
                row["added_p50_ms"] = measured.added(name, "p50_ms", cell=conns).median
                row["added_p99_ms"] = measured.added(name, "p99_ms", cell=conns).median
                row["rps_ratio"] = measured.ratio(name, "rps", cell=conns).median
                row["p50_ratio"] = measured.ratio(name, "p50_ms", cell=conns).median
                row["p99_ratio"] = measured.ratio(name, "p99_ms", cell=conns).median
                cpu_ratio = measured.ratio(name, edge_cpu, cell=conns)
                row["edge_cpu_ratio"] = cpu_ratio.median
                row["edge_cpu_ratio_min"], row["edge_cpu_ratio_max"] = cpu_ratio.low, cpu_ratio.high
                row["added_edge_cpu_us"] = measured.added(name, edge_cpu, cell=conns).median
            rows[name] = row
        table[f"c={conns}"] = rows
    return table


def admit_table(timings: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, float]]:
    out = {}
    for name, samples in timings.items():
        row: dict[str, float] = {"n": float(len(samples))}
        for stage in ("admit", "upstream", "total", "client"):
            values = [s[stage] for s in samples if stage in s]
            if values:
                row[f"{stage}_p50_ms"] = median(values)
                row[f"{stage}_p99_ms"] = _pct(values, 0.99)
        out[name] = row
    return out


# --- part 2: the fleet's overshoot -----------------------------------------------------------------


async def hammer(ports: list[int], auth: str, body: bytes, rate: float, seconds: float, hold: bool
                 ) -> tuple[Counter[str], float, list[list[tuple[str, dict[str, str], float]]]]:
    """`rate` requests a second to each edge for `seconds`, open loop: the statuses, how long the sending
    took, and each edge's metrics once the last admissions are decided (before any held answer comes)."""
    import aiohttp

    statuses: Counter[str] = Counter()
    headers = {"Content-Type": JSON_TYPE, "Authorization": auth}
    loop = asyncio.get_running_loop()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as client:

        async def one(port: int) -> None:
            try:
                async with client.post(f"http://127.0.0.1:{port}{CHAT}", data=body, headers=headers) as r:
                    await r.read()
                    statuses[str(r.status)] += 1
            except aiohttp.ClientError as exc:
                statuses[type(exc).__name__] += 1

        tasks = []
        start = loop.time()
        for i in range(int(rate * seconds)):
            delay = start + i / rate - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks += [asyncio.create_task(one(port)) for port in ports]
        sent_for = loop.time() - start
        if hold:  # the admitted wait for their held answers; the last ones sent are decided within moments
            await asyncio.sleep(1.0)
        else:
            await asyncio.wait(tasks, timeout=15)
        metrics = [await loop.run_in_executor(None, scrape, port) for port in ports]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return statuses, sent_for, metrics


def part_fleet(args: argparse.Namespace, work: Path, mock: Any, redis: Any) -> dict[str, Any]:
    import msgspec

    from bench.lib.payloads import MODEL
    from bench.lib.servers import Server, free_port, start_all, stop_all
    from ingress.tenancy.keys import new_key

    rpm_key, rpm_id, rpm_hash = new_key()
    tpm_key, tpm_id, tpm_hash = new_key()
    keys = [(rpm_id, rpm_hash, "rpm", f"{{ rpm = {args.rpm} }}"), (tpm_id, tpm_hash, "tpm", f"{{ tpm = {args.tpm} }}")]
    small = {"messages": [{"role": "user", "content": "How far is the river from the mountain?"}]}
    bodies = {"rpm": msgspec.json.encode({"model": MODEL, **small, "max_tokens": 64}),
              "tpm": msgspec.json.encode({"model": SLOW_MODEL, **small, "max_tokens": args.tpm_max_tokens})}
    results: dict[str, Any] = {}
    for backend in ("redis", "memory"):
        section = tenancy_section(backend, redis.url, f"fleet{os.getpid()}", keys, {"rpm": "{}", "tpm": "{}"},
                                  args.fleet_deadline_ms)
        ports = [free_port() for _ in range(3)]
        edges = [Server(f"{backend}{i}", [PY, "-m", "ingress", "serve", "--config",
                                          str(edge_config(work / f"fleet-{backend}{i}.toml", port, mock.url, section)),
                                          "--workers", "1"], port, work / f"fleet-{backend}{i}.log")
                 for i, port in enumerate(ports)]
        try:
            start_all(*edges)
            for kind, key in (("rpm", rpm_key), ("tpm", tpm_key)):
                before = [scrape(p) for p in ports]
                statuses, sent_for, after = asyncio.run(
                    hammer(ports, f"Bearer {key}", bodies[kind], args.rate, args.burst_seconds, kind == "tpm"))
                counts: Counter[str] = Counter()
                errors: Counter[str] = Counter()
                reserved = 0.0
                for b, a in zip(before, after, strict=True):
                    for what, v in store_errors(a).items():
                        errors[what] += v - store_errors(b).get(what, 0)
                    for outcome, v in outcomes(a, kind).items():
                        counts[outcome] += v - outcomes(b, kind).get(outcome, 0)
                    reserved += (total(a, "ingress_tokens_reserved_total", tenant=kind)
                                 - total(b, "ingress_tokens_reserved_total", tenant=kind))
                limit = args.rpm if kind == "rpm" else args.tpm
                allowance = limit + limit * sent_for / 60
                admitted = sum(counts.get(k, 0) for k in ("admitted", "degraded_local", "degraded_allow"))
                row = {"limit": limit, "seconds": sent_for, "sent": int(args.rate * args.burst_seconds) * 3,
                       "statuses": dict(statuses), "outcomes": dict(counts), "admitted": admitted,
                       "store_errors": {k: v for k, v in errors.items() if v},
                       "tokens_reserved": reserved, "allowance": allowance}
                if kind == "rpm":
                    row["admitted_over_allowance"] = admitted / allowance
                else:
                    row["reservation_per_request"] = reserved / admitted if admitted else float("nan")
                    row["allowance_requests"] = allowance / row["reservation_per_request"] if admitted else 0.0
                    row["admitted_over_allowance"] = reserved / allowance
                results[f"{kind}|{backend}"] = row
                print(f"  {backend} fleet, {kind}: {admitted:.0f} admitted of {row['sent']} sent "
                      f"(allowance {allowance:,.0f} {'requests' if kind == 'rpm' else 'tokens'})", flush=True)
        finally:
            stop_all(*edges)
    return results


# --- tables ----------------------------------------------------------------------------------------


def print_tables(found: dict[str, Any]) -> None:
    if "costs" in found:
        print_costs(found["costs"])
    if "fleet" in found:
        print_fleet(found["fleet"])


def print_costs(costs: dict[str, Any]) -> None:
    head = (f"{'edge':<18}{'req/s':>8}{'p50 ms':>8}{'p99 ms':>8}{'+p50 ms':>9}{'+p99 ms':>9}{'edge µs/req':>13}"
            f"{'+edge µs':>10}{'redis µs':>10}{'mock µs':>9}{'rps x(a)':>10}{'p50 x(a)':>10}{'cpu x(a)':>10}"
            f"{'rounds':>12}")
    for conc, rows in costs["table"].items():
        print(f"\n{conc}: medians over rounds; + and x(a): against (a) in the same round, the median of rounds; "
              f"rounds: the range of cpu x(a)")
        print(head + "\n" + "-" * len(head))
        for name, r in rows.items():
            line = (f"{LABELS[name]:<18}{r['rps']:>8,.0f}{r['p50_ms']:>8.3f}{r['p99_ms']:>8.3f}")
            if name == "off":
                line += " " * 18 + f"{r['edge_cpu_us']:>13,.0f}" + " " * 10
            else:
                line += (f"{r['added_p50_ms']:>9.3f}{r['added_p99_ms']:>9.3f}{r['edge_cpu_us']:>13,.0f}"
                         f"{r['added_edge_cpu_us']:>10,.0f}")
            line += f"{r['redis_cpu_us']:>10,.1f}{r['mock_cpu_us']:>9,.0f}"
            if name != "off":
                spread = f"{r['edge_cpu_ratio_min']:.2f}-{r['edge_cpu_ratio_max']:.2f}"
                line += f"{r['rps_ratio']:>10.3f}{r['p50_ratio']:>10.3f}{r['edge_cpu_ratio']:>10.3f}{spread:>12}"
            print(line + (f"   errors {r['errors']:.0f}" if r["errors"] else "")
                  + (f"   not admitted by the store: {r['degraded']:.0f}" if r["degraded"] else ""))
    for conc, rows in costs["table"].items():
        for name in ("redis", "baseline"):
            if name not in rows:
                continue
            r = rows[name]
            calls = ", ".join(f"{c} {n:.2f}" for c, n in r["redis_calls_per_request"].items())
            print(f"{LABELS[name][:3]} at {conc}: Redis commands a request: {calls}; "
                  f"their server time {r['redis_usec_per_request']:.1f} µs")
    print("\nServer-Timing, one request at a time from a Python client (ms); upstream: the hop to the zero-delay "
          "mock, a loopback round trip to a process doing next to nothing, beside the admission's to Redis")
    head = (f"{'edge':<18}{'n':>6}{'admit p50':>11}{'admit p99':>11}{'upstream p50':>14}{'upstream p99':>14}"
            f"{'total p50':>11}{'total p99':>11}{'client p50':>12}")
    print(head + "\n" + "-" * len(head))
    for name, r in costs["admit"].items():
        admit = f"{r['admit_p50_ms']:>11.3f}{r['admit_p99_ms']:>11.3f}" if "admit_p50_ms" in r else f"{'-':>11}" * 2
        print(f"{LABELS[name]:<18}{r['n']:>6.0f}{admit}{r['upstream_p50_ms']:>14.3f}{r['upstream_p99_ms']:>14.3f}"
              f"{r['total_p50_ms']:>11.3f}{r['total_p99_ms']:>11.3f}{r['client_p50_ms']:>12.3f}")
    print(f"(c)'s admissions: {costs['redis_edge_outcomes']}; store errors: {costs['redis_edge_store_errors'] or 0}")


def print_fleet(fleet: dict[str, Any]) -> None:
    print("\nThe fleet: three edges, clients sending to each at a fixed rate; allowance = L + L*T/60")
    head = (f"{'limit':<14}{'edges share':<14}{'T s':>6}{'sent':>7}{'admitted':>10}{'allowance':>11}"
            f"{'admitted/allowance':>20}  outcomes")
    print(head + "\n" + "-" * len(head))
    for key, r in fleet.items():
        kind, backend = key.split("|")
        share = "one Redis" if backend == "redis" else "nothing"
        if kind == "rpm":
            name, allowance = f"rpm = {r['limit']}", f"{r['allowance']:,.0f}"
        else:
            name = f"tpm = {r['limit']:,}"
            allowance = f"{r['allowance_requests']:,.1f}"
        print(f"{name:<14}{share:<14}{r['seconds']:>6.1f}{r['sent']:>7,}{r['admitted']:>10,.0f}{allowance:>11}"
              f"{r['admitted_over_allowance']:>20.3f}  {r['outcomes']}"
              + (f"; store errors {r['store_errors']}" if r["store_errors"] else ""))
        if kind == "tpm":
            print(f"{'':<28}tokens reserved {r['tokens_reserved']:,.0f} of {r['allowance']:,.0f} allowed "
                  f"({r['reservation_per_request']:.0f} a request; allowance in requests above)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="~80 s: 2 rounds of 1 s runs, 4 s bursts")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--seconds", type=int, help="per wrk run")
    parser.add_argument("--samples", type=int, help="Server-Timing samples per edge")
    parser.add_argument("--rpm", type=int, default=300, help="the fleet's request limit L")
    parser.add_argument("--tpm", type=int, default=6000, help="the fleet's token limit L")
    parser.add_argument("--tpm-max-tokens", type=int, default=100, help="max_tokens of the token-limit requests")
    parser.add_argument("--rate", type=float, default=100.0, help="requests a second to each edge in the burst")
    parser.add_argument("--burst-seconds", type=float, help="T")
    parser.add_argument("--deadline-ms", type=int, default=50, help="(c)'s Redis deadline (the default: 50)")
    parser.add_argument("--fleet-deadline-ms", type=int, default=50, help="the fleet's Redis deadline")
    parser.add_argument("--only", choices=["costs", "fleet"], help="run one part")
    parser.add_argument("--baseline", type=Path, metavar="DIR",
                        help="part 1: also (d), (c)'s config served by DIR's code, in the same rounds")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--serve-mock", nargs=2, metavar=("PORT", "HOLD"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_mock:
        return serve_mock(int(args.serve_mock[0]), float(args.serve_mock[1]))
    quick = args.quick
    args.rounds = args.rounds or (2 if quick else 5)
    args.seconds = args.seconds or (1 if quick else 2)
    args.samples = args.samples or (120 if quick else 300)
    args.burst_seconds = args.burst_seconds or (4.0 if quick else 10.0)
    out = args.out or HERE / "results" / ("tenancy-quick.json" if quick else "tenancy.json")
    niced()

    from redis_servers import running

    from bench.lib.provenance import code_version, describe
    from bench.lib.servers import Server, free_port

    started = time.perf_counter()
    load_before = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="ingress-bench-tenancy-"))
    mock_port = free_port()
    hold = args.burst_seconds + 10
    mock = Server("mock", [PY, "-m", "bench.tenancy", "--serve-mock", str(mock_port), str(hold)], mock_port,
                  work / "mock.log")
    found: dict[str, Any] = {}
    with running("redis", work) as redis:
        redis.pid = redis.proc.pid
        version = subprocess.run([str(redis.exe), "--version"], capture_output=True, text=True).stdout.strip()
        mock.start()
        try:
            mock.wait_ready()
            print(f"{describe(code_version())}; load average {load_before[0]:.2f}; 2 shared vCPUs, run under nice "
                  f"{os.nice(0)}; only ratios and differences within this run are firm", flush=True)
            if args.only != "fleet":
                edges = 4 if args.baseline else 3
                print(f"part 1: {edges} edges, {args.rounds} rounds, wrk -t1 {args.seconds} s a run at c=1 and c=32",
                      flush=True)
                found["costs"] = part_costs(args, work, mock, redis)
            if args.only != "costs":
                print(f"part 2: the fleet, {args.burst_seconds:.0f} s bursts at {args.rate:.0f} req/s an edge",
                      flush=True)
                found["fleet"] = part_fleet(args, work, mock, redis)
        finally:
            mock.stop()
    seconds = time.perf_counter() - started
    print_tables(found)
    load_after = os.getloadavg()
    if "costs" in found:
        others = [r["others_cpu_percent"] for by in found["costs"]["runs"].values() for rs in by.values() for r in rs]
        print(f"\nthe rest of the machine used {min(others):.0f}-{max(others):.0f}% of a core during the wrk runs "
              f"(median {median(others):.0f}%)")
    print(f"{seconds:.0f} s in all; load average before {load_before[0]:.2f}, after {load_after[0]:.2f}")
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"code": code_version(), "quick": quick, "args": {
        k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "serve_mock"},
        "redis": version, "load_before": load_before, "load_after": load_after, "seconds": seconds,
        "python": sys.version.split()[0], **found}, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    random.seed(1)
    main()
