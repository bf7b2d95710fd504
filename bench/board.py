"""The independent board's figures, one core a gateway: added latency, req/s within tail bounds, streams, memory.

    nice -n 10 .venv/bin/python -m bench board [--quick] [--without litellm portkey] [--no-streams] [--family open]
        -> results/board.json and results/board/COMMIT.json, results/board.svg (~12 min; --quick ~4 min);
           with --family open: board-open.json, board/COMMIT-open.json, board-open.svg
    nice -n 10 .venv/bin/python -m bench board --overload [--rounds 5]
        -> results/board-overload.json (+ board/COMMIT-overload.json, board-overload.svg): the edge with its
           in-flight limit ([overload]) off and on, side by side, from 16 to 256 in flight (~5 min)

The method of "On the Bench" (github.com/GetBusbar/benchmarking), on this 2-vCPU machine: each gateway pinned
to core 0 with `taskset`, and everything else (the mocks, wrk, this client) to core 1, so a gateway has one
core of its own and is measured by what it does with it. The same mock code for every subject
(`--serve-mock`: a raw asyncio Protocol on uvloop answering every POST with fixed bytes, made once: the
FlatBuffers CompletionResponse for the edge's internal hop, the OpenAI chat.completion JSON for everyone
else), at 0 ms for the latency and maximum-throughput figures and 20 ms for the tail-bound figures.

Subjects, each a process started once and measured in every round, the rounds interleaved (a different one
first each round), the other gateways stopped (SIGSTOP) while one is measured, each warmed for a second first:
the mock called directly (the baseline of the added figures), beside it a byte relay on the gateways' core
(bench/chunks.py's floor, c=1 and c=32 only: what this machine's hops between the cores add), the edge (`ingress serve
--workers 1` with the memory backend, one key with rpm and tpm limits and its tenant's tpm, far above what
a run reaches, as bench/peers.py sets it), the same edge with `[overload] enabled = true`, LiteLLM's proxy
and Portkey's gateway (installed and configured as bench/peers.py does; a peer that cannot be installed or
started is reported with the reason, and the run goes on without it). The request: peers.py's 11-message
chat request of 1 KB (`max_tokens` 64), a real model name per mock, of one family a run (`--family`): OpenAI's
(gpt-4o, gpt-4o-2024-08-06, gpt-4o-mini; by default), whose prompts the edge counts with o200k for the key's
tpm, or open-weights ones (Llama 3.1 8B, Qwen2.5 7B, Mistral 7B Instruct), which it counts by the estimate.

The figures, each round and subject:
1. added latency at c=1: wrk -c1 against the 0 ms mock, p50 and p99 minus the direct mock's in the same round;
2. maximum throughput: wrk -c32 against the 0 ms mock;
3. throughput against the 20 ms mock at 32, 64, 128 and 256 connections (wrk -t1, closed loop); a level with
   1 % or more errors ends a subject's sweep for the round. From them, at each tail bound (the board's p99 <
   1, 5, 10, 50, 100 ms on the added p99, the gateway's p99 minus the direct mock's at the same level; and
   the total p99 < 25, 50, 100 ms that docs/performance.md states), the most req/s of a level within it
   with no errors; and for the edge, each level's goodput over the round's peak (the most of any level);
4. streams: peers.py's paced streams (64 deltas 20 ms apart) at 1 to 512 concurrent, the gateway held at a
   level when no stream failed and the added gap p99 stays within 5 ms (`--no-streams`: not run);
5. memory: each gateway's RSS (its process tree) once ready, its peak during the 20 ms sweeps, and after them.

Figures are medians over rounds with their range; ratios (the edge over each peer) are per round, then the
median. The machine is shared: compare subjects within one run, never across runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import urllib.request
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

from bench.lib.results import RESULTS, niced, result_path, write_result  # noqa: E402
from bench.lib.rounds import Rounds, Spread, median  # noqa: E402

PY = sys.executable
GATEWAY_CORE, OTHER_CORE = 0, 1
CHAT = "/v1/chat/completions"
# The model a request names, per mock (0 ms, 20 ms, paced streams) and family: what the edge counts differs.
FAMILIES = {
    "openai": ("gpt-4o", "gpt-4o-2024-08-06", "gpt-4o-mini"),
    "open": ("meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-7B-Instruct", "mistralai/Mistral-7B-Instruct-v0.3"),
}
FAST, SLOW, PACED = "fast", "slow", "paced"  # the mocks, and the edge's group for each
DELAY_MS = 20.0
LEVELS = (32, 64, 128, 256)
OVERLOAD_LEVELS = (16, 32, 64, 96, 128, 192, 256)
ADDED_BOUNDS_MS = (1, 5, 10, 50, 100)
TOTAL_BOUNDS_MS = (25, 50, 100)
WARM_S = 1  # seconds of requests not counted before each subject's round
STOP_ERRORS = 0.01  # a level with this share of errors ends the subject's sweep for the round
LABELS = {"mock": "mock, direct", "edge": "edge (ingress)", "edge_limit": "edge, [overload] on",
          "edge_nopace": "edge, no start pacing", "edge_limit_nopace": "edge, [overload] on, no pacing",
          "litellm": "LiteLLM", "portkey": "Portkey"}
OURS = ("edge", "edge_limit")
PACING_OFF = ("edge_nopace", "edge_limit_nopace")  # --pacing-off: the same two with start_pacing_ms = 0
SIDE_BY_SIDE = (("edge_limit", "edge"), ("edge_limit_nopace", "edge_nopace"), ("edge_nopace", "edge"),
                ("edge_limit_nopace", "edge"))  # goodput ratios by level, per round
PEERS = ("litellm", "portkey")


# --- the mock -------------------------------------------------------------------------------------


def serve_delayed(port: int, delay_ms: float) -> None:
    """Answer every POST `delay_ms` after it arrived (0: at once): a FlatBuffers request (the edge's internal
    hop) with tenancy.py's fixed CompletionResponse, any other with bridge.py's fixed chat.completion JSON.
    One timer a request; nothing else is done."""
    from bench.bridge import _mock_bodies
    from bench.lib.mockhttp import Requests, response, serve
    from bench.tenancy import mock_answer
    from ingress import wire

    fb = response(wire.CONTENT_TYPE.encode(), bytes(wire.write_response(mock_answer())))
    oai = response(b"application/json", _mock_bodies()[0])
    marker = wire.CONTENT_TYPE.encode()
    delay = delay_ms / 1000

    class Delayed(Requests):
        def answer(self, head: bytes, start: int, end: int) -> None:
            body = fb if marker in head else oai
            if delay:
                self.loop.call_later(delay, self.late, body)
            else:
                self.transport.write(body)

        def late(self, body: bytes) -> None:
            if not self.transport.is_closing():
                self.transport.write(body)

    serve(Delayed, port, backlog=4096)


# --- the subjects ---------------------------------------------------------------------------------


def pinned(core: int, argv: list[str]) -> list[str]:
    return ["taskset", "-c", str(core), *argv]


def edge_toml(path: Path, port: int, urls: dict[str, str], models: dict[str, str], tenancy: str, limit: bool,
              pacing: bool, overload: str = "") -> Path:
    """The edge's config: a group per mock (`urls`, by mock) and a route to it for its model (`models`)."""
    text = f"port = {port}\nworkers = 1\n" + ("" if pacing else "start_pacing_ms = 0\n")
    for group, url in urls.items():
        text += f'\n[groups.{group}]\nendpoints = [{{ url = "{url}" }}]\n'
        text += f'\n[[routes]]\nmodel = "{models[group]}"\ngroup = "{group}"\n'
    text += tenancy
    if limit:
        text += "\n[overload]\nenabled = true\n" + overload
    path.write_text(text)
    return path


def litellm_yaml(path: Path, urls: dict[str, str]) -> Path:
    """LiteLLM's config: each model (`urls`: model name to its mock) an OpenAI-compatible deployment."""
    from bench.peers import MASTER_KEY, litellm_config

    litellm_config(path, "", "")  # its settings; the model list is ours
    settings = path.read_text().split("litellm_settings:", 1)[1]
    models = "".join(f"  - model_name: {model}\n    litellm_params:\n      model: openai/{model}\n"
                     f"      api_base: {url}/v1\n      api_key: sk-mock\n" for model, url in urls.items())
    path.write_text(f"model_list:\n{models}litellm_settings:{settings}")
    assert MASTER_KEY in path.read_text()
    return path


class Gateway:
    """A subject: its server, and the headers its requests carry (per model, for Portkey's config header)."""

    def __init__(self, server: Any, headers: dict[str, dict[str, str]]) -> None:
        self.server, self.headers = server, headers


def start_subjects(args: argparse.Namespace, work: Path) -> tuple[dict[str, Gateway], dict[str, Any],
                                                                  dict[str, str], dict[str, Any]]:
    """The mocks and every gateway that starts: (gateways, mocks, unavailable: reasons, versions)."""
    from bench.lib.servers import free_port
    from bench.lib.wrk import ensure_wrk
    from bench.peers import (
        LITELLM_ENV,
        MASTER_KEY,
        PACING_MS,
        Subject,
        Unavailable,
        _versions,
        install_peers,
        key_section,
        portkey_config,
    )

    litellm_py: Path | None = None
    node_script: Path | None = None
    unavailable = {peer: "left out by --without" for peer in args.without}
    if not args.overload:
        litellm_py, node_script, unavailable = install_peers(args.without)
    versions = _versions(litellm_py, node_script, ensure_wrk())
    ports = {n: free_port() for n in ("fast", "slow", "paced", "paced_fb", "relay", *OURS, *PACING_OFF, "litellm",
                                      "portkey")}
    url = {n: f"http://127.0.0.1:{p}" for n, p in ports.items()}
    mocks = {
        "fast": Subject("fast", [PY, "-m", "bench.board", "--serve-mock", str(ports["fast"]), "0"], ports["fast"],
                        work / "fast.log", CHAT, "fast.json", "application/json"),
        "slow": Subject("slow", [PY, "-m", "bench.board", "--serve-mock", str(ports["slow"]), str(DELAY_MS)],
                        ports["slow"], work / "slow.log", CHAT, "slow.json", "application/json"),
        "paced": Subject("paced", [PY, "-m", "bench.peers", "--serve-paced", str(ports["paced"]), str(PACING_MS)],
                         ports["paced"], work / "paced.log", CHAT, "paced.json", "application/json"),
        "paced_fb": Subject("paced_fb", [PY, "-m", "ingress", "demo-upstream", "--port", str(ports["paced_fb"]),
                                         "--delay-ms", str(PACING_MS), "--log-level", "warning"],
                            ports["paced_fb"], work / "paced_fb.log", CHAT, "paced.json", "application/json"),
    }
    if not args.overload:  # the machine's own hops: a byte relay on the gateways' core in front of the 0 ms mock
        mocks["relay"] = Subject("relay", pinned(GATEWAY_CORE, [PY, "-m", "bench.chunks", "--serve-relay",
                                                                str(ports["relay"]), str(ports["fast"])]),
                                 ports["relay"], work / "relay.log", CHAT, "fast.json", "application/json")
    oai = {FAST: url["fast"], SLOW: url["slow"], PACED: url["paced"]}
    ours = {FAST: url["fast"], SLOW: url["slow"], PACED: url["paced_fb"]}
    models = dict(zip((FAST, SLOW, PACED), FAMILIES[args.family], strict=True))
    section, key, _ = key_section()
    bearer = {m: {"Authorization": f"Bearer {key}"} for m in oai}
    gateways: dict[str, Gateway] = {}
    for name in (*OURS, *(PACING_OFF if args.pacing_off else ())):
        toml = edge_toml(work / f"{name}.toml", ports[name], ours, models, section, "limit" in name,
                         "nopace" not in name,
                         "".join(f"{k} = {v}\n" for k, v in args.overload_setting))
        argv = pinned(GATEWAY_CORE, [PY, "-m", "ingress", "serve", "--config", str(toml), "--workers", "1"])
        gateways[name] = Gateway(Subject(name, argv, ports[name], work / f"{name}.log", CHAT, "fast.json",
                                         "application/json"), bearer)
    if litellm_py is not None:
        argv = pinned(GATEWAY_CORE, [str(litellm_py), "-m", "litellm.proxy.proxy_cli", "--config",
                                     str(litellm_yaml(work / "litellm.yaml", {models[m]: u for m, u in oai.items()})),
                                     "--host", "127.0.0.1",
                                     "--port", str(ports["litellm"]), "--num_workers", "1"])
        gateways["litellm"] = Gateway(Subject("litellm", argv, ports["litellm"], work / "litellm.log", CHAT,
                                              "fast.json", "application/json", health="/health/liveliness",
                                              env=LITELLM_ENV), {m: {"Authorization": f"Bearer {MASTER_KEY}"}
                                                                 for m in oai})
    if node_script is not None:
        argv = pinned(GATEWAY_CORE, ["node", str(node_script), f"--port={ports['portkey']}", "--headless"])
        gateways["portkey"] = Gateway(Subject("portkey", argv, ports["portkey"], work / "portkey.log", CHAT,
                                              "fast.json", "application/json", health="/",
                                              env={"NODE_ENV": "production"}),
                                      {m: {"x-portkey-config": portkey_config(u)} for m, u in oai.items()})
    for mock in mocks.values():
        mock.start()
    for mock in mocks.values():
        mock.wait_ready()
    for name, gateway in list(gateways.items()):
        try:
            gateway.server.start()
            gateway.server.wait_ready()
            status, said = post(gateway.server.url + CHAT, work / "fast.json", gateway.headers[FAST])
            if status != 200:
                raise Unavailable(f"{name} answered {status}: {said[:300]!r}")
        except Unavailable as exc:
            unavailable[name] = str(exc)
            gateway.server.stop()
            del gateways[name]
    return gateways, mocks, unavailable, versions


def post(url: str, body: Path, headers: dict[str, str]) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body.read_bytes(), headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, bytes(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


# --- measuring ------------------------------------------------------------------------------------


def run_wrk(wrk: Any, url: str, body: Path, headers: dict[str, str], connections: int, seconds: int,
            pid: int | None) -> dict[str, Any]:
    os.environ["BENCH_HEADERS"] = "\n".join(f"{k}: {v}" for k, v in headers.items())
    out: dict[str, Any] = wrk.run(url, body, "application/json", connections, seconds,
                                  {"gateway": pid} if pid else None)
    errors = sum(out["errors"].values())
    out["error_share"] = errors / max(out["requests"], 1)
    out["goodput"] = out["rps"] * (1 - min(out["error_share"], 1.0))
    return out


def measure_subject(name: str, target: str, slow_target: str, headers: dict[str, dict[str, str]], pid: int | None,
                    wrk: Any, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One round of one subject: c=1 and c=32 at the 0 ms mock, then the 20 ms mock's levels (for a gateway
    both targets are the gateway: the model names the mock). First a second at c=1 not counted: a gateway
    just continued (`alone`) catches up on its timers there, not in the figures."""
    run: dict[str, Any] = {"levels": {}}
    run_wrk(wrk, target, work / "fast.json", headers[FAST], 1, WARM_S, pid)
    if not args.overload:
        run["c1"] = run_wrk(wrk, target, work / "fast.json", headers[FAST], 1, args.seconds, pid)
        run["c32"] = run_wrk(wrk, target, work / "fast.json", headers[FAST], 32, args.seconds, pid)
    for level in args.levels:
        found = run_wrk(wrk, slow_target, work / "slow.json", headers[SLOW], level, args.seconds, pid)
        run["levels"][level] = found
        if found["error_share"] >= STOP_ERRORS:
            break
    said = ", ".join(f"{n} {r['goodput']:,.0f}/s p99 {r['p99_ms']:.0f}" for n, r in run["levels"].items())
    c1 = f"c=1 p99 {run['c1']['p99_ms']:.2f} ms, c=32 {run['c32']['rps']:,.0f}/s; " if "c1" in run else ""
    print(f"  {LABELS[name]}: {c1}20 ms mock: {said}", flush=True)
    return run


def measure_relay(relay: Any, wrk: Any, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """A byte relay on the gateways' core in front of the 0 ms mock (bench/chunks.py's floor: no parsing, no
    work): c=1 and c=32, as a gateway's. Its added latency is what the machine's hops cost any gateway here
    (two loopback connections, each crossing between the cores), which the direct mock's does not include."""
    url = relay.url + CHAT
    run_wrk(wrk, url, work / "fast.json", {}, 1, WARM_S, relay.pid)
    run = {"c1": run_wrk(wrk, url, work / "fast.json", {}, 1, args.seconds, relay.pid),
           "c32": run_wrk(wrk, url, work / "fast.json", {}, 32, args.seconds, relay.pid)}
    print(f"  byte relay: c=1 p99 {run['c1']['p99_ms']:.2f} ms, c=32 {run['c32']['rps']:,.0f}/s", flush=True)
    return run


def relay_summary(runs: list[dict[str, Any]], mocks: list[dict[str, Any]]) -> dict[str, Any]:
    """The relay's added latency at c=1 (over the same round's direct mock) and its c=32 req/s."""
    if not runs:
        return {}
    spread = _spread
    pairs = list(zip(runs, mocks, strict=True))
    return {"added_p50_us": spread([(r["c1"]["p50_ms"] - m["c1"]["p50_ms"]) * 1000 for r, m in pairs]),
            "added_p99_us": spread([(r["c1"]["p99_ms"] - m["c1"]["p99_ms"]) * 1000 for r, m in pairs]),
            "c32_rps": spread([r["c32"]["rps"] for r in runs])}


def within(run: dict[str, Any], base: dict[str, Any] | None, bound_ms: float, added: bool) -> float:
    """The most req/s of a level whose p99 (added over the direct mock's, or total) is under `bound_ms`,
    with no errors; 0 if none."""
    best = 0.0
    for level, r in run["levels"].items():
        if r["error_share"] > 0:
            continue
        p99 = r["p99_ms"]
        if added:
            if base is None or level not in base["levels"]:
                continue
            p99 -= base["levels"][level]["p99_ms"]
        if p99 < bound_ms:
            best = max(best, r["rps"])
    return best


def peak_ratios(run: dict[str, Any]) -> dict[str, float]:
    """Goodput at each level over the round's peak; and within p99 < 50 ms over the peak."""
    levels = run["levels"]
    peak = max((r["goodput"] for r in levels.values()), default=0.0) or float("nan")
    out = {f"at_{level}": r["goodput"] / peak for level, r in levels.items()}
    out["p99_under_50"] = within(run, None, 50, added=False) / peak
    out["peak"] = peak
    return out


def _spread(values: list[float]) -> dict[str, float]:
    s = Spread.of(values)
    return {"median": s.median, "low": s.low, "high": s.high}


def summarise(rounds: Rounds[str], names: list[str], levels: tuple[int, ...], overload: bool) -> dict[str, Any]:
    spread = _spread
    out: dict[str, Any] = {}
    mocks = rounds.runs("mock") if "mock" in names else []
    for name in names:
        runs = rounds.runs(name)
        bases = mocks or [None] * len(runs)
        entry: dict[str, Any] = {
            "levels": {level: {k: spread([r["levels"][level][k] for r in runs if level in r["levels"]])
                               for k in ("rps", "goodput", "p50_ms", "p99_ms", "error_share")}
                       for level in levels},
            "within_total_p99_ms": {b: spread([within(r, None, b, False) for r in runs]) for b in TOTAL_BOUNDS_MS},
        }
        if not overload:
            entry["c1_p50_ms"] = spread([r["c1"]["p50_ms"] for r in runs])
            entry["c1_p99_ms"] = spread([r["c1"]["p99_ms"] for r in runs])
            entry["c32_rps"] = spread([r["c32"]["rps"] for r in runs])
            if name != "mock":
                entry["added_p50_us"] = spread([(r["c1"]["p50_ms"] - b["c1"]["p50_ms"]) * 1000
                                                for r, b in zip(runs, mocks, strict=True)])
                entry["added_p99_us"] = spread([(r["c1"]["p99_ms"] - b["c1"]["p99_ms"]) * 1000
                                                for r, b in zip(runs, mocks, strict=True)])
                entry["within_added_p99_ms"] = {b: spread([within(r, m, b, True) for r, m in zip(runs, bases,
                                                                                                  strict=True)])
                                                for b in ADDED_BOUNDS_MS}
        if name in OURS + PACING_OFF:
            ratios = [peak_ratios(r) for r in runs]
            keys = ratios[0] if ratios else {}
            entry["of_peak"] = {k: spread([x.get(k, float("nan")) for x in ratios]) for k in keys}
        out[name] = entry
    for top, base in SIDE_BY_SIDE:
        if top not in names or base not in names:
            continue
        on, off = rounds.runs(top), rounds.runs(base)
        out[f"{top}_over_{base}"] = {level: spread([a["levels"][level]["goodput"] / b["levels"][level]["goodput"]
                                                   for a, b in zip(on, off, strict=True)
                                                   if level in a["levels"] and level in b["levels"]])
                                    for level in levels}
    if not overload:
        for ours in OURS:
            for peer in PEERS:
                if ours in names and peer in names:
                    a, b = rounds.runs(ours), rounds.runs(peer)
                    def added(run: dict[str, Any], mock: dict[str, Any]) -> float:
                        return float(run["c1"]["p99_ms"] - mock["c1"]["p99_ms"])

                    out[f"{ours}_over_{peer}"] = {
                        "added_p99": spread([added(x, m) / added(y, m) for x, y, m in zip(a, b, mocks, strict=True)]),
                        "c32_rps": spread([x["c32"]["rps"] / y["c32"]["rps"] for x, y in zip(a, b, strict=True)]),
                        "within_total_p99_100": spread([within(x, None, 100, False) / (within(y, None, 100, False) or
                                                                                       float("nan"))
                                                        for x, y in zip(a, b, strict=True)]),
                    }
    return out


# --- the plot -------------------------------------------------------------------------------------


def frontier_svg(summary: dict[str, Any], names: list[str], levels: tuple[int, ...], path: Path, title: str) -> None:
    """Req/s against p99 (log scale) through the concurrency levels, a line a subject: the throughput
    frontier. Written by hand (no plotting library is needed)."""
    import math

    colours = {"mock": "#999999", "edge": "#1f77b4", "edge_limit": "#2ca02c", "edge_nopace": "#17becf",
               "edge_limit_nopace": "#bcbd22", "litellm": "#d62728",
               "portkey": "#9467bd"}
    w, h, left, bottom, top, right = 780, 420, 70, 50, 40, 210
    points = {n: [(s["p99_ms"]["median"], s["goodput"]["median"], lv)
                  for lv in levels if (s := summary[n]["levels"][lv])["p99_ms"]["median"] == s["p99_ms"]["median"]]
              for n in names}  # NaN (a level not reached) left out
    ymax = max([y for ps in points.values() for _, y, _ in ps] + [1.0]) * 1.1
    x0, x1 = math.log10(10), math.log10(max([x for ps in points.values() for x, _, _ in ps] + [1000.0]) * 1.2)

    def sx(x: float) -> float:
        return left + (math.log10(max(x, 10)) - x0) / (x1 - x0) * (w - left - right)

    def sy(y: float) -> float:
        return h - bottom - y / ymax * (h - bottom - top)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{left}" y="20" font-size="13">{title}</text>',
           f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" stroke="black"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" stroke="black"/>',
           f'<text x="{(left + w - right) / 2}" y="{h - 12}" text-anchor="middle">p99 latency, ms (log)</text>',
           f'<text x="15" y="{(top + h - bottom) / 2}" transform="rotate(-90 15 {(top + h - bottom) / 2})" '
           f'text-anchor="middle">req/s (no errors)</text>']
    for x in (10, 20, 50, 100, 200, 500, 1000, 2000, 5000):
        if math.log10(x) <= x1:
            out.append(f'<line x1="{sx(x):.1f}" y1="{top}" x2="{sx(x):.1f}" y2="{h - bottom}" stroke="#eee"/>'
                       f'<text x="{sx(x):.1f}" y="{h - bottom + 15}" text-anchor="middle">{x}</text>')
    for k in range(6):
        y = ymax / 1.1 * k / 5
        out.append(f'<text x="{left - 5}" y="{sy(y) + 4:.1f}" text-anchor="end">{y:,.0f}</text>')
    for i, (name, ps) in enumerate(points.items()):
        colour = colours.get(name, "black")
        if ps:
            out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="'
                       + " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y, _ in ps) + '"/>')
            out += [f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{colour}"/>'
                    f'<text x="{sx(x) + 4:.1f}" y="{sy(y) - 4:.1f}" fill="{colour}" font-size="9">{lv}</text>'
                    for x, y, lv in ps]
        out.append(f'<rect x="{w - right + 15}" y="{top + 18 * i}" width="12" height="3" fill="{colour}"/>'
                   f'<text x="{w - right + 32}" y="{top + 18 * i + 5}">{LABELS[name]}</text>')
    out.append("</svg>")
    path.write_text("\n".join(out) + "\n")


# --- tables ---------------------------------------------------------------------------------------


def _f(spread: dict[str, float], digits: int = 0, scale: float = 1.0) -> str:
    from bench.lib.tables import figure

    m, lo, hi = (spread[k] * scale for k in ("median", "low", "high"))
    return f"{figure(m, digits)} ({figure(lo, digits)}-{figure(hi, digits)})"


def print_tables(result: dict[str, Any]) -> None:
    summary, names, levels = result["summary"], result["subjects"], tuple(result["levels"])
    print(f"\n{result['meta']['code']}; {result['meta']['rounds']} rounds of {result['meta']['seconds']} s; "
          f"gateway on core {GATEWAY_CORE}, the rest on core {OTHER_CORE}; medians (range over rounds)")
    if not result["meta"]["overload"]:
        print("\n== added latency at c=1 (0 ms mock), max req/s at c=32 ==")
        for name in names:
            s = summary[name]
            added = (f"added p50 {_f(s['added_p50_us'])} µs, p99 {_f(s['added_p99_us'])} µs; "
                     if "added_p50_us" in s else f"p50 {_f(s['c1_p50_ms'], 2)} ms, p99 {_f(s['c1_p99_ms'], 2)} ms; ")
            print(f"{LABELS[name]:<31} {added}c=32 {_f(s['c32_rps'])} req/s")
        if relay := result.get("relay"):
            print(f"{'a byte relay (no work)':<31} added p50 {_f(relay['added_p50_us'])} µs, p99 "
                  f"{_f(relay['added_p99_us'])} µs; c=32 {_f(relay['c32_rps'])} req/s  (the machine's own hops)")
    print(f"\n== against the {DELAY_MS:g} ms mock: req/s without errors (p99 ms) by connections ==")
    for name in names:
        s = summary[name]["levels"]
        print(f"{LABELS[name]:<31} " + "  ".join(
            f"{lv}: {_f(s[lv]['goodput'])} ({_f(s[lv]['p99_ms'])})" for lv in levels))
    print("\n== req/s within a tail bound (most of any level, no errors) ==")
    for name in names:
        s = summary[name]
        total = ", ".join(f"p99<{b}: {_f(s['within_total_p99_ms'][b])}" for b in TOTAL_BOUNDS_MS)
        added = ", ".join(f"added<{b}: {_f(s['within_added_p99_ms'][b])}" for b in ADDED_BOUNDS_MS) \
            if "within_added_p99_ms" in s else ""
        print(f"{LABELS[name]:<31} {total}" + (f"\n{'':<31} {added}" if added else ""))
    print("\n== the edge's goodput over its peak (per round) ==")
    for name in OURS + PACING_OFF:
        if name in names:
            s = summary[name]["of_peak"]
            print(f"{LABELS[name]:<31} peak {_f(s['peak'])}; p99<50 ms {_f(s['p99_under_50'], 2)}; "
                  + ", ".join(f"{lv}: {_f(s[f'at_{lv}'], 2)}" for lv in levels if f"at_{lv}" in s))
    for key, ratios in summary.items():
        if "_over_" in key:
            print(f"{key}: " + ", ".join(f"{k} {_f(v, 2)}" for k, v in ratios.items()))
    if result.get("memory"):
        print("\n== RSS, MB: idle / peak under the 20 ms sweeps / after ==")
        for name, m in result["memory"].items():
            print(f"{LABELS[name]:<31} {m['idle_mb']:.1f} / {m['load_mb']:.1f} / {m['after_mb']:.1f}")
    if result.get("streams"):
        print("\n== paced streams held (64 deltas, 20 ms) ==")
        print(", ".join(f"{k} {v}" for k, v in result["streams"]["held"].items()))
    print(f"\nthe rest of the machine: {result['meta']['others_cpu_percent']} % of a core during the wrk runs "
          f"(min / median / max)")
    for name, why in result["unavailable"].items():
        print(f"{name}: not measured: {why[:300]}")


# --- the run --------------------------------------------------------------------------------------


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from bench.e2e import fb_body
    from bench.lib.payloads import chat_request, stream_request
    from bench.lib.procs import paused, rss_kb
    from bench.lib.provenance import code_version, describe
    from bench.lib.servers import stop_all
    from bench.lib.wrk import SCRIPT, Wrk, ensure_wrk
    from bench.peers import HEADERS_SCRIPT, STREAM_DELTAS, run_streams

    started = time.perf_counter()
    os.sched_setaffinity(0, {OTHER_CORE})  # this client, wrk and the mocks: core 1; each gateway is pinned to 0
    work = Path(tempfile.mkdtemp(prefix="ingress-bench-board-"))
    models = dict(zip((FAST, SLOW, PACED), FAMILIES[args.family], strict=True))
    for mock in (FAST, SLOW):
        (work / f"{mock}.json").write_bytes(chat_request(1024, max_tokens=64, model=models[mock]))
    stream_json = stream_request(STREAM_DELTAS, model=models[PACED])
    (work / "paced.json").write_bytes(stream_json)
    wrk = Wrk(ensure_wrk(), work / "post.lua")
    wrk.script.write_text(SCRIPT + HEADERS_SCRIPT)
    gateways, mocks, unavailable, versions = start_subjects(args, work)
    names = [n for n in ("edge", "edge_limit", "litellm", "portkey") if n in gateways]
    if args.overload:
        names = [n for n in (*OURS, *PACING_OFF) if n in gateways]
    memory: dict[str, dict[str, float]] = {}
    streams: dict[str, Any] = {}
    relay: list[dict[str, Any]] = []  # each round's, beside the round's direct mock
    rounds: Rounds[str] = Rounds(["mock", *names] if not args.overload else names, args.rounds, order="rotate")

    def alone(name: str) -> AbstractContextManager[None]:
        """The other gateways stopped while `name` is measured: all are pinned to one core, where an idle
        one's own timers and collector (LiteLLM's, Portkey's, the other edge's) would take turns from it."""
        return paused([g.server.pid for n, g in gateways.items() if n != name])
    try:
        idle = {n: rss_kb(gateways[n].server.pid) / 1024 for n in names}
        print(f"{describe(code_version())}; gateways: {', '.join(LABELS[n] for n in names)}; load average "
              f"{os.getloadavg()[0]:.2f}", flush=True)
        for r, order in rounds:
            print(f"round {r + 1}/{args.rounds}", flush=True)
            for name in order:
                if name == "mock":
                    run = measure_subject(name, mocks["fast"].url + CHAT, mocks["slow"].url + CHAT,
                                          {FAST: {}, SLOW: {}}, None, wrk, work, args)
                    if "relay" in mocks:
                        with alone("relay"):
                            relay.append(measure_relay(mocks["relay"], wrk, work, args))
                else:
                    gw = gateways[name]
                    url = gw.server.url + CHAT
                    with alone(name):
                        run = measure_subject(name, url, url, gw.headers, gw.server.pid, wrk, work, args)
                rounds.add(name, run)
        time.sleep(2)
        for n in names:
            peak = max((lv["peak_rss_kb"].get("gateway", 0) for run in rounds.runs(n) for lv in run["levels"].values()),
                       default=0)
            memory[n] = {"idle_mb": idle[n], "load_mb": peak / 1024, "after_mb": rss_kb(gateways[n].server.pid) / 1024}
        if not args.overload and not args.no_streams:
            print("paced streams", flush=True)
            fb_stream = bytes(fb_body(stream_json.replace(models[PACED].encode(), b"ingress-demo")))
            streamers: dict[str, tuple[str, bytes, dict[str, str], bool, int | None]] = {
                "mock_oai": (mocks["paced"].url + CHAT, stream_json, {}, True, None),
                "mock_fb": (mocks["paced_fb"].url + "/v1/complete", fb_stream, {"Content-Type":
                                                                                 "application/x-flatbuffers"},
                            False, None)}
            for name in ("edge", "litellm", "portkey"):
                if name in gateways:
                    gw = gateways[name]
                    streamers[name] = (gw.server.url + CHAT, stream_json,
                                       {"Content-Type": "application/json", **gw.headers[PACED]}, True, gw.server.pid)
            streams = run_streams(streamers, args.stream_levels, alone)
    finally:
        stop_all(*[g.server for g in gateways.values()], *mocks.values())
        shutil.rmtree(work, ignore_errors=True)
    others = sorted(lv["others_cpu_percent"] for n in rounds.variants for run in rounds.runs(n)
                    for lv in run["levels"].values())
    return {
        "meta": {"code": describe(code_version()), "commit": code_version()["commit"], "rounds": args.rounds,
                 "family": args.family, "models": dict(zip((FAST, SLOW, PACED), FAMILIES[args.family], strict=True)),
                 "overload_settings": dict(args.overload_setting),
                 "seconds": args.seconds, "overload": args.overload, "versions": versions,
                 "wall_s": time.perf_counter() - started, "load_average": os.getloadavg(),
                 "others_cpu_percent": [others[0], median(others), others[-1]] if others else []},
        "subjects": (["mock"] if not args.overload else []) + names, "levels": list(args.levels),
        "unavailable": unavailable,
        "summary": summarise(rounds, (["mock"] if not args.overload else []) + names, args.levels, args.overload),
        "relay": relay_summary(relay, rounds.runs("mock") if not args.overload else []), "relay_runs": relay,
        "memory": memory, "streams": streams,
        "runs": {n: rounds.runs(n) for n in rounds.variants},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 rounds of 2 s, streams up to 128")
    parser.add_argument("--overload", action="store_true",
                        help="the edge alone, [overload] off and on, 16-256 in flight against the 20 ms mock")
    parser.add_argument("--pacing-off", action="store_true",
                        help="with --overload: also both edges with start_pacing_ms = 0")
    parser.add_argument("--set", nargs=2, action="append", default=[], dest="overload_setting",
                        metavar=("KEY", "VALUE"), help="an [overload] setting for the edges with it on")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--seconds", type=int)
    parser.add_argument("--without", nargs="*", choices=list(PEERS), default=[], help="leave a peer out")
    parser.add_argument("--no-streams", action="store_true", help="leave the paced streams out")
    parser.add_argument("--family", choices=list(FAMILIES), default="openai",
                        help="the model names requests send: OpenAI's (o200k counted for the tpm) or open-weights")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--serve-mock", nargs=2, metavar=("PORT", "DELAY_MS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_mock:
        return serve_delayed(int(args.serve_mock[0]), float(args.serve_mock[1]))
    args.rounds = args.rounds or (2 if args.quick else 5 if args.overload else 3)
    args.seconds = args.seconds or (2 if args.quick else 4)
    args.levels = OVERLOAD_LEVELS if args.overload else LEVELS
    args.stream_levels = (1, 8, 32, 64, 128) if args.quick else (1, 8, 32, 64, 128, 256, 512)
    name = ("board-overload" if args.overload else "board") + ("" if args.family == "openai" else f"-{args.family}")
    out = result_path(name, args.quick, args.out)
    niced()
    result = measure(args)
    print_tables(result)
    write_result(result, out)
    if args.out is None and not args.quick:
        commit = result["meta"]["commit"] + name.removeprefix("board")
        (RESULTS / "board").mkdir(exist_ok=True)
        (RESULTS / "board" / f"{commit}.json").write_text(json.dumps(result, indent=1) + "\n")
    frontier_svg(result["summary"], result["subjects"], tuple(result["levels"]), out.with_suffix(".svg"),
                 f"Throughput frontier against a {DELAY_MS:g} ms mock, one core a gateway ({result['meta']['commit']})")
    print(f"wrote {out.with_suffix('.svg')}")


if __name__ == "__main__":
    main()
