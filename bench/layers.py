"""Where the edge's CPU per request goes where it runs: the edge cut short after each layer, side by side.

    nice -n 10 .venv/bin/python -m bench layers [--rounds 8] [--connections 32]   -> results/layers.json

stages.py times each stage alone in a hot loop; this measures what each layer adds in the running edge, with
the kernel's, aiohttp's and the other requests' work around it. Each subject is a copy of this working tree
whose chat handler stops after a layer and answers a fixed body (the whole edge's answer to the request):

- `aiohttp`: the middleware hands the request straight on; the handler reads the body and answers;
- `middleware`: the edge's middleware around it (request id, exchange, key authentication, metrics, the
  access line, Server-Timing);
- `prepare`: and the request's stages (decode, route, count, passport, encode, hop headers);
- `admit`: and the tenancy's admission (plan, admit; settled when the request ends);
- `send`: and the pipeline's send (endpoint choice, lease, retry bookkeeping) with an attempt that returns
  at once;
- `exchange`: and the upstream exchange itself (our HTTP client, the mock's answer read whole, not decoded);
- `edge`: the whole edge (the answer read, translated and written as JSON).

Each in front of tenancy.py's fixed-answer mock with a key and limits on, as peers.py runs the edge; wrk
sends the 16 KB, 11-message chat request at `--connections`. Every round starts a fresh process for each
subject in turn (a process's memory layout alone moves its CPU per request by several per cent), edges pinned
to CPU 1, the mock and wrk to CPU 0. Figures: CPU per request (user + system, /proc) medians over rounds, and
each layer's cost: the median over rounds of its subject's CPU per request minus the one before it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

from bench.lib.payloads import MODEL, chat_request  # noqa: E402
from bench.lib.rounds import Rounds  # noqa: E402
from bench.lib.servers import ROOT, Server, free_port, python_in  # noqa: E402
from bench.lib.tables import Table  # noqa: E402
from bench.lib.wrk import SCRIPT, Wrk, ensure_wrk  # noqa: E402

RESULTS = HERE / "results" / "layers.json"
HANDLER = "ingress/edge/endpoints.py"
MIDDLEWARE = "ingress/edge/middleware.py"
HEAD = ("async def chat_completions(request: web.Request) -> web.StreamResponse:\n"
        "    gateway, exchange = request.app[GATEWAY], request[EXCHANGE]\n"
        "    exchange.api = \"chat\"  # a FlatBuffers request's too: relayed, it is a chat request\n"
        "    body = await read_body(request, gateway.settings.max_body_bytes)\n")
FIXED = "_FIXED = (Path(__file__).parent / 'fixed.json').read_bytes()\n\n\n"
ANSWER = "    return web.Response(body=_FIXED, content_type='application/json')\n"
PREPARE = "    prepared = pipeline.prepare(gateway, body, request_meta(request), exchange)\n"
ADMIT = "    await pipeline.admit(gateway, prepared, exchange)\n"
SEND = ("    from ingress.pipeline.send import send\n\n"
        "    async def attempt(lease, ready):\n"
        "        {}\n\n"
        "    await send(gateway, prepared, exchange, attempt)\n"
        "    exchange.answer.upstream_ok = True\n")
STOPS = {
    "aiohttp": ANSWER,
    "middleware": ANSWER,
    "prepare": PREPARE + ANSWER,
    "admit": PREPARE + ADMIT + ANSWER,
    "send": PREPARE + ADMIT + SEND.format("return None") + ANSWER,
    "exchange": PREPARE + ADMIT + SEND.format(
        "return await lease.client.complete(ready.encoded, ready.headers, ready.timeouts)") + ANSWER,
}
PASS_THROUGH = ("async def edge_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:\n",
                "    if request.path == '/v1/chat/completions':\n"
                "        request[EXCHANGE] = None\n"
                "        return await handler(request)\n")
SUBJECTS = [*STOPS, "edge"]


def _replace(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    if text.count(old) != 1:
        raise SystemExit(f"{path}: the code this benchmark cuts short has changed; update bench/layers.py")
    path.write_text(text.replace(old, new))


def make_subjects(work: Path, fixed: bytes) -> dict[str, Path]:
    """A copy of the working tree per subject, its handler cut short as the subject says."""
    files = subprocess.run(["git", "ls-files", "ingress"], capture_output=True, text=True, cwd=ROOT,
                           check=True).stdout.split()
    trees = {}
    for name in SUBJECTS:
        tree = work / name
        for f in files:
            (tree / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ROOT / f, tree / f)
        if name in STOPS:
            (tree / "ingress/edge/fixed.json").write_bytes(fixed)
            _replace(tree / HANDLER, HEAD, "from pathlib import Path\n\n" + FIXED + HEAD + STOPS[name])
        if name == "aiohttp":
            _replace(tree / MIDDLEWARE, PASS_THROUGH[0], PASS_THROUGH[0] + PASS_THROUGH[1])
        trees[name] = tree
    return trees


def _answer_json() -> bytes:
    """The whole edge's answer to the benchmark's request: the mock's answer read and translated."""
    import msgspec

    from bench.tenancy import mock_answer
    from ingress import wire
    from ingress.translate.completion import translate_response
    from ingress.wire.answer import decode_answer

    return msgspec.json.encode(translate_response(decode_answer(bytes(wire.write_response(mock_answer())))))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--seconds", type=int, default=4)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    from bench.lib.provenance import code_version
    from bench.peers import key_section
    from bench.tenancy import edge_config

    work = Path(tempfile.mkdtemp(prefix="ingress-layers-"))
    trees = make_subjects(work, _answer_json())
    body = work / "16KB.json"
    body.write_bytes(chat_request(16 * 1024))
    pin0, pin1 = ["taskset", "-c", "0"], ["taskset", "-c", "1"]
    os.sched_setaffinity(0, {0})  # wrk, started from here, with the mock
    mock_port = free_port()
    mock = Server("mock", [*pin0, sys.executable, "-m", "bench.tenancy", "--serve-mock", str(mock_port), "0"],
                  mock_port, work / "mock.log")
    section, key, _ = key_section()
    wrk = Wrk(ensure_wrk(), work / "bench.lua")
    wrk.script.write_text(SCRIPT + f'\nwrk.headers["Authorization"] = "Bearer {key}"\n')
    ports = {name: free_port() for name in SUBJECTS}
    rounds = Rounds(SUBJECTS, args.rounds)  # rotated: each subject first in turn
    print(f"{code_version()}; {args.rounds} rounds, c={args.connections}, {args.seconds} s each", flush=True)
    try:
        mock.start()
        mock.wait_ready()
        for r, order in rounds:
            for name in order:
                config = edge_config(work / f"{name}.toml", ports[name], mock.url, section)
                edge = Server(name, [*pin1, *python_in(trees[name]), "-m", "ingress", "serve", "--workers",
                                     "1", "--config", str(config)], ports[name],
                              work / f"{name}.log")
                edge.start()
                try:
                    edge.wait_ready()
                    url = f"{edge.url}/v1/chat/completions"
                    wrk.run(url, body, "application/json", args.connections, 1, watch={name: edge.pid})  # warm
                    result = wrk.run(url, body, "application/json", args.connections, args.seconds,
                                     watch={name: edge.pid})
                finally:
                    edge.kill()
                if result["errors"]:
                    raise SystemExit(f"{name}: errors {result['errors']}")
                rounds.add(name, {"rps": result["rps"], "cpu_us": result["cpu_us_per_request"][name],
                                  "sys_us": result["system_cpu_us_per_request"][name]})
            print(f"round {r + 1}/{args.rounds}: "
                  + "  ".join(f"{n} {rounds.runs(n)[-1]['cpu_us']:.0f}" for n in SUBJECTS), flush=True)
    finally:
        mock.kill()
        shutil.rmtree(work, ignore_errors=True)

    table = []
    for previous, name in zip((None, *SUBJECTS), SUBJECTS, strict=False):
        row: dict[str, Any] = {"subject": name, **{m: rounds.median(name, m) for m in ("rps", "cpu_us", "sys_us")}}
        if previous is not None:  # a layer: its subject's CPU per request minus the one before, round by round
            layer = rounds.added(name, "cpu_us", baseline=previous)
            row |= {"layer_us": layer.median, "layer_low": layer.low, "layer_high": layer.high}
        table.append(row)
    print(f"\nc={args.connections}; model {MODEL}; medians over {args.rounds} rounds (fresh processes, the edge pinned "
          "to a core)")
    printed = Table(("subject", "<12"), ("req/s", ">8.0f"), ("CPU µs/req", ">12.0f"), ("sys", ">7.0f"),
                    ("its layer µs", ">14.0f"), ("   rounds", ""))
    print(printed.header())
    for row in table:
        layer = (row["layer_us"], f"   {row['layer_low']:.0f} .. {row['layer_high']:.0f}") if "layer_us" in row else ()
        print(printed.row(row["subject"], row["rps"], row["cpu_us"], row["sys_us"], *layer))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"code": code_version(), "rounds": args.rounds, "connections": args.connections,
                                    "seconds": args.seconds, "table": table, "runs": rounds.by_variant()},
                                   indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
